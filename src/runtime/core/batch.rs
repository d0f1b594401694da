//! Batches of the scheduling core: one lane's application records taken at once under one
//! right, and how a batch ends (the records not started back where they were).

use super::*;

impl<W, L: Clone> GateCore<W, L> {
    /// [`GateCore::poll_turn`], then, if the turn is an application record of a lane that the
    /// lane rules would pick again and again, take up to `max_extra` more of its application
    /// records (in FIFO order) into `extra`, so the holder runs them one by one without taking
    /// the core again: a *batch* (EG-9: several items per right, the budget still checked after
    /// each). A batch is formed only when the result is exactly the sequence of turns the one-by-one
    /// protocol would take if no input arrived meanwhile: nothing else is in the ready set, the
    /// lane's lifecycle FIFO and Join results are empty, no barrier is active, the gate is not
    /// sealed. Every input that could change that sequence ends the batch first (the driver's
    /// quiesced lock, or [`GateCore::batch_preempted`] after an application submission), which
    /// puts the records not started back at the front of the lane's application FIFO, where they
    /// were ([`GateCore::handle_batch_end`]): so the next turn boundary sees the input (EG-7.3),
    /// and seal, `return_pending` and end see every record not started (EG-4.1, EG-7.5).
    ///
    /// The extra records keep their reservations (EG-7.2) and are numbered `invocation + 1 ..`;
    /// while the batch is outstanding the lane's claim stands for the record running now.
    pub fn poll_turn_batch(
        &mut self,
        max_extra: usize,
        extra: &mut VecDeque<Queued<W>>,
    ) -> Option<Turn<W, L>> {
        debug_assert!(self.batch.is_none(), "a batch is still outstanding");
        let turn = self.poll_turn()?;
        if let Turn::Run {
            lane,
            class: LaneClass::Application,
            invocation,
            ..
        } = &turn
        {
            let (lane, first) = (*lane, *invocation);
            let quiet = self.ready.is_empty() && !self.sealed && !self.ended;
            if let Some(state) = self.lane_mut(lane).filter(|_| quiet && max_extra > 0) {
                let n = max_extra.min(state.application.len());
                if n > 0
                    && state.lifecycle.is_empty()
                    && state.join_results.is_empty()
                    && state.barriers_active == 0
                {
                    let first_bytes = state.claim.map_or(0, |c| c.bytes);
                    if n == state.application.len() && extra.is_empty() {
                        // the whole FIFO: hand the buffers over instead of moving each record
                        std::mem::swap(&mut state.application, extra);
                    } else {
                        extra.extend(state.application.drain(..n));
                    }
                    self.next_invocation += n as u64;
                    self.batch = Some(BatchInfo {
                        lane,
                        first,
                        first_bytes,
                        extra: n,
                    });
                    self.preempt = false;
                }
            }
        }
        Some(turn)
    }

    /// Whether a batch is outstanding.
    pub fn batch_active(&self) -> bool {
        self.batch.is_some()
    }

    /// The lane and the reservation bytes of the first record of the outstanding batch.
    pub fn batch_first(&self) -> Option<(LaneId, u64)> {
        self.batch.map(|b| (b.lane, b.first_bytes))
    }

    /// Whether an application or lifecycle submission since the batch was taken requires ending
    /// it now (another lane became ready, or a lifecycle record arrived for the batch's lane).
    pub fn batch_preempted(&self) -> bool {
        self.batch.is_some() && self.preempt
    }

    /// Records of the outstanding batch reached their terminal: release their reservations now
    /// (EG-7.2; `items` records, `bytes` reserved bytes), the batch goes on.
    pub fn handle_batch_released(&mut self, items: usize, bytes: u64) {
        let Some(b) = self.batch else { return };
        if let Some(state) = self.lane_mut(b.lane) {
            state.application_reserved.items -= items;
            state.application_reserved.bytes -= bytes;
        }
    }

    /// End the outstanding batch. `started` extra records were started (the last of them, or the
    /// first record if `started == 0`, may still run: it keeps the lane's claim, with reservation
    /// `current_bytes`); `released` = (count, bytes) of the records that reached their terminal
    /// and were not yet released; `untaken` = the records not started, in FIFO order: they go back
    /// to the front of the lane's application FIFO, where they were, and the invocation numbers
    /// they had are handed out again (so the numbering is the one-by-one protocol's).
    pub fn handle_batch_end(
        &mut self,
        started: usize,
        current_bytes: u64,
        released: (usize, u64),
        untaken: impl DoubleEndedIterator<Item = Queued<W>>,
    ) {
        let Some(b) = self.batch.take() else { return };
        self.preempt = false;
        let Some(state) = self.lane_mut(b.lane) else {
            return;
        };
        let mut back = 0;
        for q in untaken.rev() {
            state.application.push_front(q);
            back += 1;
        }
        debug_assert_eq!(back + started, b.extra, "batch records lost");
        state.application_reserved.items -= released.0;
        state.application_reserved.bytes -= released.1;
        let current = b.first + started as u64;
        if let Some(c) = &mut state.claim {
            if started > 0 {
                c.invocation = current;
                c.bytes = current_bytes;
            }
        }
        self.next_invocation = current + 1;
    }
}
