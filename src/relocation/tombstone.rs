//! Where a 38 unbind or disconnect is applied when its actor may be moving (SB-6.6, SB-7.3,
//! SB-7.4, SB-8, SB-5.12): a sans-IO plan the actor owner's driver asks at each step.
//!
//! A relocation reads the binding it seals under the actors lock and carries it to the target
//! in the Restore; from then until the commit or the abort the binding has two homes, and a
//! tombstone applied to the source's slot alone would leave the target holding a binding whose
//! session is gone — and a disconnect's `OnDisconnectActor` queued on a sealed Spot's lane is
//! dropped with the Spot when it moves. So a tombstone that finds its incarnation sealed by a
//! relocation is **held** until the relocation ends, then decided again: the incarnation is
//! here (the relocation aborted) → applied here; it moved (committed) → forwarded once by
//! Message Follow to the new owner, which holds the binding now. A disconnect's hook runs
//! exactly once: here if its turn ran here, else on the new owner (the forwarded record is a
//! disconnect when the hook never ran, an unbind when it ran here).

use zlink_wire::BindOperation;

/// Where the tombstone's incarnation is, as the actor owner sees it under its actors lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whereabouts {
    /// Live here, and no relocation holds its binding.
    Here,
    /// Live here, sealed by a relocation that has neither committed nor aborted: its binding
    /// travels (or travelled) in the Restore.
    Sealed,
    /// Not live here: moved away (Message Follow decides whether and where it goes), or ended.
    Away,
}

/// The Spot callback of a disconnect, as far as this node ran it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookRun {
    /// Not started here.
    NotStarted,
    /// Its turn ran here (succeeded, failed or passed its deadline: it is never run again,
    /// SB-7.2, SB-7.3).
    Ran,
    /// Its turn was dropped before it started: the Spot's lane ended under it (the Spot moved
    /// away sealed) or refused it.
    Dropped,
}

/// The next step of a tombstone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TombstoneStep {
    /// Wait until the relocation holding the incarnation ends, then ask again.
    Hold,
    /// Begin the disconnect here (the binding stays current while the hook runs, SB-7.4), run
    /// the Spot's `OnDisconnectActor`, report with [`TombstonePlan::hook_ended`].
    RunHook,
    /// Remove exactly this binding identity here.
    TombstoneHere,
    /// Forward this 38 operation once to the new owner by Message Follow (SB-5.12).
    Forward(BindOperation),
}

/// One 38 unbind or disconnect at the actor owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TombstonePlan {
    operation: BindOperation,
    hook: HookRun,
}

impl TombstonePlan {
    /// A plan for `operation` (an unbind or a disconnect; a bind is never a tombstone).
    #[must_use]
    pub fn new(operation: BindOperation) -> Self {
        Self {
            operation,
            hook: HookRun::NotStarted,
        }
    }

    /// The Spot callback's turn here ended (`ran`) or was dropped before it started.
    pub fn hook_ended(&mut self, ran: bool) {
        self.hook = if ran { HookRun::Ran } else { HookRun::Dropped };
    }

    /// The next step with the incarnation `at`.
    #[must_use]
    pub fn step(&self, at: Whereabouts) -> TombstoneStep {
        let disconnect = self.operation == BindOperation::Disconnect;
        match (at, self.hook) {
            (Whereabouts::Sealed, _) => TombstoneStep::Hold,
            (Whereabouts::Here, HookRun::NotStarted) if disconnect => TombstoneStep::RunHook,
            // An unbind, or the hook's turn is over (or its Spot lane is gone while the
            // incarnation stays: it cannot run here, it is not run twice).
            (Whereabouts::Here, _) => TombstoneStep::TombstoneHere,
            // The new owner holds the binding: it runs the hook unless it ran here.
            (Whereabouts::Away, HookRun::Ran) => TombstoneStep::Forward(BindOperation::Unbind),
            (Whereabouts::Away, HookRun::Dropped) => {
                TombstoneStep::Forward(BindOperation::Disconnect)
            }
            (Whereabouts::Away, HookRun::NotStarted) => TombstoneStep::Forward(self.operation),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: BindOperation = BindOperation::Disconnect;
    const U: BindOperation = BindOperation::Unbind;

    // spec: SB-8.4, SB-5.12
    // A tombstone that finds its incarnation sealed by a relocation is held, whatever its
    // hook did: the binding travels in the Restore, so neither home may drop it alone.
    #[test]
    fn a_sealed_incarnation_holds_every_tombstone() {
        for op in [D, U] {
            let mut p = TombstonePlan::new(op);
            assert_eq!(p.step(Whereabouts::Sealed), TombstoneStep::Hold);
            p.hook_ended(true);
            assert_eq!(p.step(Whereabouts::Sealed), TombstoneStep::Hold);
            p.hook_ended(false);
            assert_eq!(p.step(Whereabouts::Sealed), TombstoneStep::Hold);
        }
    }

    // spec: SB-7.3, SB-7.4, SB-8.5
    // Held through a relocation that aborted: the disconnect runs its hook here, then
    // tombstones here; an unbind tombstones at once (SB-6.6).
    #[test]
    fn after_an_abort_the_source_runs_the_hook_then_tombstones() {
        let mut p = TombstonePlan::new(D);
        assert_eq!(p.step(Whereabouts::Sealed), TombstoneStep::Hold);
        assert_eq!(p.step(Whereabouts::Here), TombstoneStep::RunHook);
        p.hook_ended(true);
        assert_eq!(p.step(Whereabouts::Here), TombstoneStep::TombstoneHere);
        assert_eq!(
            TombstonePlan::new(U).step(Whereabouts::Here),
            TombstoneStep::TombstoneHere
        );
    }

    // spec: SB-7.3, SB-5.12, SB-14.3
    // Held through a relocation that committed: the disconnect is forwarded as a disconnect,
    // so the target — which holds the moved binding — runs the hook exactly once.
    #[test]
    fn after_a_commit_the_disconnect_goes_to_the_target_whole() {
        let p = TombstonePlan::new(D);
        assert_eq!(p.step(Whereabouts::Sealed), TombstoneStep::Hold);
        assert_eq!(p.step(Whereabouts::Away), TombstoneStep::Forward(D));
        assert_eq!(
            TombstonePlan::new(U).step(Whereabouts::Away),
            TombstoneStep::Forward(U)
        );
    }

    // spec: SB-7.3
    // The hook's turn was queued behind a Spot's relocation seal and dropped when the Spot
    // moved: it never ran, so the target runs it (forwarded as a disconnect). A hook that ran
    // here before the incarnation moved is not run again: only the target's copy of the
    // binding is removed (forwarded as an unbind).
    #[test]
    fn the_hook_runs_once_whichever_side_its_turn_ran_on() {
        let mut dropped = TombstonePlan::new(D);
        assert_eq!(dropped.step(Whereabouts::Here), TombstoneStep::RunHook);
        dropped.hook_ended(false);
        assert_eq!(dropped.step(Whereabouts::Sealed), TombstoneStep::Hold);
        assert_eq!(dropped.step(Whereabouts::Away), TombstoneStep::Forward(D));

        let mut ran = TombstonePlan::new(D);
        ran.hook_ended(true);
        assert_eq!(ran.step(Whereabouts::Away), TombstoneStep::Forward(U));
        // Still here after a dropped turn (its Spot lane refused it): tombstoned, not retried.
        let mut refused = TombstonePlan::new(D);
        refused.hook_ended(false);
        assert_eq!(
            refused.step(Whereabouts::Here),
            TombstoneStep::TombstoneHere
        );
    }
}
