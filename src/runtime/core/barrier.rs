//! `defer()` barriers and Join results in the scheduling core: a barrier's registration,
//! activation and discard, and the Join result that ends it.

use super::*;

impl<W, L: Clone> GateCore<W, L> {
    /// A handler registered a `defer()` barrier for the moving object `lane` (EG-5.1): inactive,
    /// it blocks nothing yet. `false` if the lane or the gate is gone.
    pub fn handle_barrier_register(&mut self, lane: LaneId) -> bool {
        if self.ended {
            return false;
        }
        match self.lane_mut(lane) {
            Some(s) => {
                s.barriers_inactive += 1;
                true
            }
            None => false,
        }
    }

    /// The registering handler ended normally (EG-5.2): the barrier activates, and no further
    /// record of `lane` starts until its Join result arrives ([`GateCore::handle_join_result`]).
    /// The record in flight, if any, finishes.
    pub fn handle_barrier_activate(&mut self, lane: LaneId) {
        debug_assert!(self.batch.is_none(), "end the batch first");
        if let Some(s) = self.lane_mut(lane) {
            s.barriers_inactive = s.barriers_inactive.saturating_sub(1);
            s.barriers_active += 1;
        }
    }

    /// The registering handler failed or was cancelled (EG-5.3): the inactive barrier is dropped.
    pub fn handle_barrier_discard(&mut self, lane: LaneId) {
        if let Some(s) = self.lane_mut(lane) {
            s.barriers_inactive = s.barriers_inactive.saturating_sub(1);
        }
    }

    /// The Join of an active barrier of `lane` completed (EG-5.4). With `Some(item)` (the moving
    /// object's completion callback) the item is queued as a Join result, which runs before any
    /// further record of the object and lifts the barrier at its terminal; it is never refused
    /// for capacity (at most one per active barrier) but is counted as a lifecycle reservation.
    /// With `None` the barrier lifts now. The item is handed back if no barrier is active (stale)
    /// or the lane is gone.
    pub fn handle_join_result(&mut self, lane: LaneId, item: Option<W>) -> Result<(), Option<W>> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        if self.ended {
            return Err(item);
        }
        let overhead = self.limits.per_work_overhead;
        let sealed = self.sealed;
        let Some(state) = self.lane_mut(lane) else {
            return Err(item);
        };
        let pending = state.join_results.len() as u32;
        if state.barriers_active <= pending {
            return Err(item);
        }
        match item {
            Some(item) => {
                state.lifecycle_reserved.items += 1;
                state.lifecycle_reserved.bytes += overhead;
                state.join_results.push_back(Queued {
                    bytes: overhead,
                    item,
                });
            }
            None => state.barriers_active -= 1,
        }
        if state.runnable() && state.claim.is_none() && !state.in_ready && !sealed {
            state.in_ready = true;
            push_back_small(&mut self.ready, ReadyEntry::Lane(lane));
        }
        Ok(())
    }
}
