//! Lane depth snapshots: how many records wait in lanes now, read from the lanes' own FIFOs when
//! asked (a scrape), with no counter on the submission or drain path.
//!
//! [`Runtime::lane_depths`](super::Runtime::lane_depths) covers every live gate of the runtime,
//! by [`LaneKind`]; [`SpotRef::lane_depths`](super::SpotRef::lane_depths) covers the gates of one
//! Spot (its own, its actors' and its timers'). Each gate's core is locked briefly, one at a time,
//! without ending a drain's batch: records a drain has already taken into its current batch count
//! as running, not queued.

use std::sync::Arc;

use super::lane::{GateInner, LaneKind};

/// Queue lengths of a set of lanes at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneDepths {
    /// Lanes counted.
    pub lanes: u64,
    /// Records waiting in the lanes' application FIFOs.
    pub application_queued: u64,
    /// Records waiting in the lanes' lifecycle FIFOs.
    pub lifecycle_queued: u64,
    /// The deepest lane's length (both FIFOs).
    pub deepest: u64,
}

impl LaneDepths {
    /// Count one lane with `application` and `lifecycle` records queued.
    pub fn add_lane(&mut self, application: usize, lifecycle: usize) {
        let (a, l) = (application as u64, lifecycle as u64);
        self.lanes += 1;
        self.application_queued += a;
        self.lifecycle_queued += l;
        self.deepest = self.deepest.max(a + l);
    }

    /// Fold `other` into this one.
    pub fn merge(&mut self, other: &LaneDepths) {
        self.lanes += other.lanes;
        self.application_queued += other.application_queued;
        self.lifecycle_queued += other.lifecycle_queued;
        self.deepest = self.deepest.max(other.deepest);
    }

    /// Records queued in both FIFOs.
    #[must_use]
    pub fn queued(&self) -> u64 {
        self.application_queued + self.lifecycle_queued
    }
}

/// [`LaneDepths`] per [`LaneKind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneDepthsByKind {
    kinds: [LaneDepths; LaneKind::ALL.len()],
}

impl LaneDepthsByKind {
    /// The depths of lanes of `kind`.
    #[must_use]
    pub fn get(&self, kind: LaneKind) -> LaneDepths {
        self.kinds[kind as usize]
    }

    /// Every kind with its depths.
    pub fn iter(&self) -> impl Iterator<Item = (LaneKind, LaneDepths)> + '_ {
        LaneKind::ALL.iter().map(|k| (*k, self.kinds[*k as usize]))
    }

    /// All kinds together.
    #[must_use]
    pub fn total(&self) -> LaneDepths {
        let mut t = LaneDepths::default();
        for d in &self.kinds {
            t.merge(d);
        }
        t
    }

    /// Add the lanes of `gates`.
    pub(crate) fn add_gates(&mut self, gates: &[Arc<GateInner>]) {
        for g in gates {
            // read-only: an outstanding batch is left alone (`lock` would end it)
            let core = g.gate.lock_unquiesced();
            for (lane, application, lifecycle) in core.queue_lengths() {
                self.kinds[lane.kind as usize].add_lane(application, lifecycle);
            }
        }
    }
}

/// One lane's depths (a lane already removed counts as none).
pub(crate) fn of_lane(lane: &super::lane::LaneHandle) -> LaneDepths {
    let mut d = LaneDepths::default();
    // read-only: an outstanding batch is left alone (`lock` would end it)
    if let Some((application, lifecycle)) = lane.gate.gate.lock_unquiesced().queue_length(lane.lane)
    {
        d.add_lane(application, lifecycle);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depths_sum_lanes_and_keep_the_deepest() {
        let mut d = LaneDepths::default();
        d.add_lane(3, 1);
        d.add_lane(0, 0);
        d.add_lane(2, 0);
        assert_eq!(
            d,
            LaneDepths {
                lanes: 3,
                application_queued: 5,
                lifecycle_queued: 1,
                deepest: 4,
            }
        );
        let mut e = LaneDepths::default();
        e.add_lane(7, 0);
        e.merge(&d);
        assert_eq!((e.lanes, e.queued(), e.deepest), (4, 13, 7));
    }
}
