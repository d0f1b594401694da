//! Seals, returns and the end of a gate in the scheduling core: sealing and unsealing the gate
//! or one lane, `return_pending` (the records not started handed back), ending the gate.

use super::*;

impl<W, L: Clone> GateCore<W, L> {
    fn refuse_queued_resumes(&mut self) -> Vec<(LaneId, u64)> {
        let mut refused = Vec::new();
        let entries: Vec<ReadyEntry> = self.ready.drain(..).collect();
        for e in entries {
            match e {
                ReadyEntry::Resume(lane, inv) => {
                    if let Some(state) = self.lane_mut(lane) {
                        if let Some(c) = state.claim.filter(|c| c.invocation == inv) {
                            state.claim = None;
                            state.finish_claim(c);
                        }
                    }
                    refused.push((lane, inv));
                }
                ReadyEntry::Lane(lane) => {
                    if let Some(state) = self.lane_mut(lane) {
                        state.in_ready = false;
                    }
                }
            }
        }
        refused
    }

    /// Seal the unit for relocation (EG-4.1): no record starts any more (queued work stays for
    /// [`GateCore::handle_return_pending`]); queued resume records are refused and returned.
    pub fn handle_seal(&mut self) -> Vec<(LaneId, u64)> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        self.sealed = true;
        self.refuse_queued_resumes()
    }

    /// Lift a seal (relocation aborted): lanes with work become ready again.
    pub fn handle_unseal(&mut self) {
        debug_assert!(self.batch.is_none(), "end the batch first");
        if !self.sealed {
            return;
        }
        self.sealed = false;
        let mut ready = std::mem::take(&mut self.ready);
        for (id, state) in self.lanes_mut() {
            if state.runnable() && state.claim.is_none() && !state.in_ready {
                state.in_ready = true;
                push_back_small(&mut ready, ReadyEntry::Lane(id));
            }
        }
        self.ready = ready;
    }

    /// Whether the unit is sealed.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Seal one object for relocation (EG-4.1): none of its records starts any more (queued work
    /// stays for [`GateCore::handle_return_pending_lane`]), its queued resume record is refused
    /// and returned, and a resume of its yielded record is refused when it arrives; a record
    /// running now finishes. The gate's other lanes are untouched (relocating one actor holds
    /// only that actor's records, also under a shared SpotWide gate).
    pub fn handle_seal_lane(&mut self, lane: LaneId) -> Vec<(LaneId, u64)> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let Some(state) = self.lane_mut(lane) else {
            return Vec::new();
        };
        state.sealed = true;
        state.in_ready = false;
        let mut refused = Vec::new();
        let mut kept = VecDeque::with_capacity(self.ready.len());
        for e in std::mem::take(&mut self.ready) {
            match e {
                ReadyEntry::Lane(l) if l == lane => {}
                ReadyEntry::Resume(l, inv) if l == lane => refused.push((l, inv)),
                other => kept.push_back(other),
            }
        }
        self.ready = kept;
        if let Some(state) = self.lane_mut(lane) {
            for (_, inv) in &refused {
                if let Some(c) = state.claim.filter(|c| c.invocation == *inv) {
                    state.claim = None;
                    state.finish_claim(c);
                }
            }
        }
        refused
    }

    /// Lift one object's seal (relocation aborted): it becomes ready again if it has work (and
    /// the unit is not sealed).
    pub fn handle_unseal_lane(&mut self, lane: LaneId) {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let unit_sealed = self.sealed;
        let Some(state) = self.lane_mut(lane) else {
            return;
        };
        if !state.sealed {
            return;
        }
        state.sealed = false;
        if !unit_sealed && state.runnable() && state.claim.is_none() && !state.in_ready {
            state.in_ready = true;
            push_back_small(&mut self.ready, ReadyEntry::Lane(lane));
        }
    }

    /// Whether `lane` is sealed on its own.
    pub fn is_lane_sealed(&self, lane: LaneId) -> bool {
        self.lane_ref(lane).is_some_and(|s| s.sealed)
    }

    /// [`GateCore::handle_return_pending`] for one object: its queued records (lifecycle FIFO,
    /// then application FIFO, each in FIFO order) with their reservations released; its lane
    /// decision counters and debt are dropped (the object moves, EG-7.5). Other lanes keep
    /// theirs.
    pub fn handle_return_pending_lane(&mut self, lane: LaneId) -> Vec<Returned<W>> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let overhead = self.limits.per_work_overhead;
        let Some(state) = self.lane_mut(lane) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for class in [LaneClass::Lifecycle, LaneClass::Application] {
            loop {
                let q = match class {
                    LaneClass::Lifecycle => state.lifecycle.pop_front(),
                    LaneClass::Application => state.application.pop_front(),
                };
                let Some(q) = q else { break };
                state.release(class, q.bytes);
                out.push(Returned {
                    lane,
                    class,
                    payload_len: q.bytes.saturating_sub(overhead) as usize,
                    item: q.item,
                });
            }
        }
        state.decision = LaneDecision::default();
        state.trim();
        let was_ready = std::mem::replace(&mut state.in_ready, false);
        if was_ready {
            self.ready.retain(|e| *e != ReadyEntry::Lane(lane));
        }
        out
    }

    /// Whether the gate ended.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Hand back every queued (not yet started) record, per lane in lane order: the lifecycle FIFO
    /// then the application FIFO, each in FIFO order; their reservations are released
    /// (relocation "return pending"). The objects move: their lane decision counters and debt are
    /// dropped (EG-7.5); per-object queues are what lets the leftover work be split per object
    /// (EG-1.4). Records in flight, barriers and Join results stay.
    pub fn handle_return_pending(&mut self) -> Vec<Returned<W>> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let overhead = self.limits.per_work_overhead;
        let mut out = Vec::new();
        for (id, state) in self.lanes_mut() {
            for class in [LaneClass::Lifecycle, LaneClass::Application] {
                loop {
                    let q = match class {
                        LaneClass::Lifecycle => state.lifecycle.pop_front(),
                        LaneClass::Application => state.application.pop_front(),
                    };
                    let Some(q) = q else { break };
                    state.release(class, q.bytes);
                    out.push(Returned {
                        lane: id,
                        class,
                        payload_len: q.bytes.saturating_sub(overhead) as usize,
                        item: q.item,
                    });
                }
            }
            state.decision = LaneDecision::default();
            state.trim();
        }
        self.ready.retain(|e| matches!(e, ReadyEntry::Resume(..)));
        for state in self.states_mut() {
            state.in_ready = false;
        }
        out
    }

    /// End the gate (Spot ended, shutdown): refuse further work, refuse queued and future resumes,
    /// and remove every lane. Returns the queued work (to be failed by the driver), the refused
    /// resume records, and the removed lanes' ids and driver data (to be dropped by the driver
    /// outside its lock; a record in flight finds its lane gone and its terminal is stale).
    pub fn handle_end(&mut self) -> EndedGate<W, L> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        self.ended = true;
        let refused = self.refuse_queued_resumes();
        let mut items = Vec::new();
        let mut lanes = Vec::new();
        let slots = std::mem::take(&mut self.lanes);
        for (i, slot) in slots.into_iter().enumerate() {
            let Some(state) = slot.state else { continue };
            let id = LaneId {
                index: i as u32,
                generation: slot.generation,
            };
            items.extend(
                state
                    .join_results
                    .into_iter()
                    .chain(state.lifecycle)
                    .chain(state.application)
                    .map(|q| q.item),
            );
            lanes.push((id, state.data));
        }
        self.free = Vec::new();
        self.ready = VecDeque::new();
        self.live = 0;
        EndedGate {
            items,
            refused,
            lanes,
        }
    }
}
