//! A held inline run: the gate right a submitter that runs records inline (a mesh I/O thread,
//! `docs/RUNTIME.md`, "Inline delivery") keeps from one inline record to the next record of
//! the same lane within one receive pass, so consecutive records of one lane pay one core step
//! each (the previous record's end and the next one's start, [`LaneHandle::continue_inline`])
//! instead of a start and a finish with the gate's word taken and given back around each.
//!
//! What is kept is an inline record that reached its terminal: its terminal work ran
//! (post-processing, barriers, held replies), its claim and reservation stand in the core, and
//! the gate's right is held. Work admitted meanwhile by anyone finds the right held and the
//! lane claimed, so it waits; the next step (the continuation, which is refused then, or the
//! release) ends the record and hands what waits a drain, as a finish does. The submitter must
//! release it whenever it does not go on with the next record of that lane: at a record for
//! another lane (done here), when its pass's inline budget is spent, at the end of its pass, and
//! when it stops (dropping a `HeldRun` releases it).

use std::cell::Cell;
use std::sync::Arc;

use super::driver::InlineTurn;
use super::lane::LaneHandle;

/// The right a submitter keeps between two inline records of one lane (see the module doc).
/// Owned by one submitter (a mesh I/O thread's sink) and used from its thread only (`!Sync`).
#[derive(Default)]
pub(crate) struct HeldRun {
    held: Cell<Option<(Arc<LaneHandle>, InlineTurn)>>,
    /// The address of the lane of the last record started inline afresh (identity only, never
    /// dereferenced): a right is kept only from the second record of a streak of one lane on,
    /// so records that alternate between lanes (many sessions or actors) pay nothing for
    /// keeping one (a reference count taken and dropped, the kept record ended apart).
    last: Cell<usize>,
}

impl std::fmt::Debug for HeldRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldRun").finish_non_exhaustive()
    }
}

impl HeldRun {
    /// Nothing held.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Gives the kept right back, if any: the kept record ends in the core, the right is
    /// released and the ready set re-checked, senders waiting for space are told and work that
    /// waits gets a new drain ([`LaneHandle::release_inline`]).
    #[inline]
    pub(crate) fn release(&self) {
        if let Some((lane, turn)) = self.held.take() {
            lane.release_inline(turn);
        }
    }

    /// A record of `lane` starts inline afresh (not continuing a run): whether to keep its right
    /// at its terminal — only if the previous record started afresh was of the same lane.
    #[inline]
    pub(super) fn streak(&self, lane: &Arc<LaneHandle>) -> bool {
        let at = Arc::as_ptr(lane) as usize;
        self.last.replace(at) == at
    }

    /// Takes the kept record out (the caller continues or releases it).
    #[inline]
    pub(super) fn take(&self) -> Option<(Arc<LaneHandle>, InlineTurn)> {
        self.held.take()
    }

    /// Keeps `turn`'s right (an inline record of `lane` at its terminal).
    #[inline]
    pub(super) fn keep(&self, lane: Arc<LaneHandle>, turn: InlineTurn) {
        let old = self.held.replace(Some((lane, turn)));
        debug_assert!(old.is_none(), "one held right at a time");
        if let Some((lane, turn)) = old {
            lane.release_inline(turn);
        }
    }

    /// Whether a right is kept (the pending-turn unit tests; they are not loom models).
    #[cfg(all(test, not(feature = "loom"), not(miri)))]
    pub(crate) fn is_held(&self) -> bool {
        let h = self.held.take();
        let held = h.is_some();
        self.held.set(h);
        held
    }
}

impl Drop for HeldRun {
    fn drop(&mut self) {
        self.release();
    }
}
