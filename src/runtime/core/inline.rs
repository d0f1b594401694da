//! Inline requests of the scheduling core: whether an application record may run at once in
//! the caller's task, and its admission and start in one step (also the next record of a held
//! inline run).

use super::*;

impl<W, L: Clone> GateCore<W, L> {
    /// Whether an application record of `lane` with `payload_len` bytes may run at once in the
    /// caller's task instead of being queued (an *inline request*, see `docs/RUNTIME.md`, "Inline
    /// ask"): only when it overtakes and delays nothing — the gate is neither sealed nor ended, no
    /// batch is outstanding, the ready set is empty (no lane and no resume record waits for the
    /// right), and the lane is idle (no record in flight or yielded, both FIFOs and the Join
    /// results empty, no active barrier) — and when the record fits the application lane's
    /// limits (EG-7.1). The right itself is the caller's to take ([`GateCore::handle_inline_start`]).
    pub fn inline_admissible(&self, lane: LaneId, payload_len: usize) -> bool {
        if !self.inline_gate_quiet() {
            return false;
        }
        self.lane_ref(lane)
            .is_some_and(|state| state.inline_idle(&self.limits, payload_len))
    }

    /// The gate-wide half of [`GateCore::inline_admissible`]: not sealed, not ended, no batch
    /// outstanding, nothing in the ready set.
    fn inline_gate_quiet(&self) -> bool {
        !self.sealed && !self.ended && self.batch.is_none() && self.ready.is_empty()
    }

    /// Admit and start, in one step, an application record of `lane` that runs in the caller's
    /// task ([`GateCore::inline_admissible`] must hold, and the caller must hold the gate's
    /// right): the same state as [`GateCore::handle_submit`] followed by the
    /// [`GateCore::poll_turn`] that would pick it — the reservation taken (EG-7.1/7.2), the lane
    /// decision recorded (an application turn, EG-7.3–7.5), the lane claimed with a new
    /// invocation number, which is returned. The record ends with
    /// [`GateCore::handle_turn_finished`] (or [`GateCore::handle_yield`]) like any other turn.
    /// `None` if the record is not admissible.
    pub fn handle_inline_start(&mut self, lane: LaneId, payload_len: usize) -> Option<u64> {
        self.handle_inline_start_with(lane, payload_len, || Some(()))
            .map(|((), invocation)| invocation)
    }

    /// [`GateCore::handle_inline_start`] with the right taken in between: checks
    /// [`GateCore::inline_admissible`] (once), then calls `take_right` (the caller's acquisition
    /// of the gate's right, `None` if it is held), and only if it succeeded admits and starts the
    /// record. Returns what `take_right` gave and the record's invocation. One lane lookup and
    /// one check for the whole step (the driver's [`crate::runtime::gate::GateShared::try_start_inline`]
    /// runs it under the core lock).
    pub fn handle_inline_start_with<R>(
        &mut self,
        lane: LaneId,
        payload_len: usize,
        take_right: impl FnOnce() -> Option<R>,
    ) -> Option<(R, u64)> {
        if !self.inline_gate_quiet() {
            return None;
        }
        let cap = self.limits.lifecycle_turn_cap;
        let bytes = payload_len as u64 + self.limits.per_work_overhead;
        let invocation = self.next_invocation;
        let state = lane_in(&mut self.lanes, lane)?;
        if !state.inline_idle(&self.limits, payload_len) {
            return None;
        }
        let right = take_right()?;
        state.application_reserved.items += 1;
        state.application_reserved.bytes += bytes;
        debug_assert_eq!(
            state.decision.choose(false, true),
            Some(LaneClass::Application)
        );
        state.decision.record(LaneClass::Application, cap);
        state.claim = Some(Claim::inline(invocation, bytes));
        self.next_invocation += 1;
        Some((right, invocation))
    }

    /// A *held inline run* (`docs/RUNTIME.md`, "Inline delivery"): the caller holds the gate's
    /// right after the inline record `finished` of `lane` reached its terminal (its claim and
    /// reservation still stand) and offers the next application record of the same lane, of
    /// `payload_len` bytes. In one step: the finished record ends as with
    /// [`GateCore::handle_turn_finished`] (reservation returned, claim dropped, the lane put in
    /// the ready set if work entered it meanwhile), then the new record starts exactly as
    /// [`GateCore::handle_inline_start`] would start it — only if nothing waits (the ready set
    /// empty: no record entered the lane meanwhile, no other lane or resume record waits for the
    /// right, EG-6.3, EG-6.4), the gate is neither sealed nor ended, and the record fits the
    /// lane's limits. [`Continued::Refused`]: the caller releases the right (and re-checks the
    /// ready set, as at any release) and submits the record behind what waits.
    pub fn handle_inline_continue(
        &mut self,
        lane: LaneId,
        finished: u64,
        payload_len: usize,
    ) -> Continued {
        // The common case in one lane lookup: nothing entered the lane and nothing waits, so the
        // finished record's end leaves the lane idle (no requeue) and the new record's start
        // is an inline start's. The idle lane's buffers are trimmed when the run ends instead.
        let quiet = self.inline_gate_quiet();
        let limits = &self.limits;
        let invocation = self.next_invocation;
        if quiet
            && let Some(state) = lane_in(&mut self.lanes, lane)
            && let Some(c) = state.claim
            && c.invocation == finished
            && c.state == ClaimState::Running
            && c.class == LaneClass::Application
            && !c.lifts_barrier
            && !state.in_ready
            && !state.has_work()
            && state.join_results.is_empty()
            && state.barriers_active == 0
        {
            let r = state.application_reserved;
            // the finished record's reservation returned (EG-7.2), then the new one's taken
            let items = r.items - 1;
            let held = r.bytes - c.bytes;
            let bytes = payload_len as u64 + limits.per_work_overhead;
            if items < limits.application_items && held + bytes <= limits.application_bytes {
                let room = items <= limits.application_items / 2
                    && state.lifecycle_reserved.items <= limits.lifecycle_items / 2;
                state.application_reserved.bytes = held + bytes;
                state
                    .decision
                    .record(LaneClass::Application, limits.lifecycle_turn_cap);
                state.claim = Some(Claim::inline(invocation, bytes));
                self.next_invocation += 1;
                return Continued::Started { invocation, room };
            }
        }
        let room = match self.handle_turn_finished(lane, finished) {
            Ok(room) => room,
            Err(StaleCompletion) => return Continued::Refused { room: false },
        };
        match self.handle_inline_start(lane, payload_len) {
            Some(invocation) => Continued::Started { invocation, room },
            None => Continued::Refused { room },
        }
    }
}
