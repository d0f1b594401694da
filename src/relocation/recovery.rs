//! SB-8.6's recovery of one actor at the source after a failed relocation, sans-IO: when its
//! attempts run and when they stop.
//!
//! After a failure past relay-ready the source never reopens the sealed incarnation; it
//! activates the actor again from the state it dehydrated for the move, as a new incarnation.
//! One attempt is one atomic store write, `LocationStore::reincarnate` with the source's owner
//! fence (the record is replaced, never removed, so no other node can activate a blank actor in
//! between), then the rehydration and the `Ready` commit. The store is often out of reach at
//! that moment — it is the usual reason the target's CAS failed — so an attempt that could not
//! reach it is repeated after a backoff (100 ms, doubling, at most 2 s by default) until one of:
//! - the actor is back ([`RecoveryOutcome::Recovered`]);
//! - the store shows the record moved on ([`RecoveryOutcome::Superseded`]: the target's CAS
//!   won, or the record is another incarnation's), so the state is not used;
//! - this node may no longer act as owner ([`RecoveryOutcome::LeaseLost`]: its lease ended, or
//!   it is closing), so whoever reserves the actor next activates it;
//! - the actor type cannot rehydrate the state ([`RecoveryOutcome::Failed`]).
//!
//! The retry is therefore bounded by the owner lease: a store out of reach also stops the
//! lease's renewals, and past the local lease deadline the next attempt ends `LeaseLost`.
//!
//! Call order of the driver: [`Recovery::new`]; whenever [`Recovery::poll_attempt`] is `true`
//! run one attempt and feed its answer to [`Recovery::handle_attempt`]; otherwise sleep until
//! [`Recovery::poll_timeout`]; stop once [`Recovery::outcome`] is set.

use std::time::{Duration, Instant};

/// The wait before the first repeated attempt.
pub const DEFAULT_RECOVERY_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
pub const DEFAULT_RECOVERY_BACKOFF_MAX: Duration = Duration::from_millis(2_000);

/// What one attempt came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    /// The record was replaced and the new incarnation is `Ready` here.
    Recovered,
    /// The store could not be reached (or answered unavailable): repeat after the backoff.
    Unreachable,
    /// The store refused the write because the record moved on (another owner, another
    /// incarnation, no record).
    Superseded,
    /// This node may no longer act as owner (its lease ended, or it is closing).
    LeaseLost,
    /// The actor type could not rehydrate the state.
    Failed,
}

/// How a recovery ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryOutcome {
    /// The actor is back on the source as a new incarnation, after `attempts` attempts.
    Recovered {
        /// Attempts made, the successful one included.
        attempts: u32,
    },
    /// The record moved on: the target's CAS won or another incarnation owns it.
    Superseded,
    /// The source may no longer act as owner; the actor is left to the next reservation.
    LeaseLost,
    /// The state could not be rehydrated.
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// An attempt is due at this instant.
    Due(Instant),
    /// An attempt runs.
    Running,
    Done(RecoveryOutcome),
}

/// The recovery schedule of one actor (see the module docs).
#[derive(Clone, Debug)]
pub struct Recovery {
    phase: Phase,
    attempts: u32,
    backoff: Duration,
    max: Duration,
}

impl Recovery {
    /// A recovery whose first attempt is due at `now`; repeated attempts wait `backoff`,
    /// doubling up to `max`.
    #[must_use]
    pub fn new(now: Instant, backoff: Duration, max: Duration) -> Self {
        Self {
            phase: Phase::Due(now),
            attempts: 0,
            backoff,
            max: max.max(backoff),
        }
    }

    /// `true` when an attempt is due at `now`: the driver runs it and answers with
    /// [`Recovery::handle_attempt`] (no second attempt is due meanwhile).
    pub fn poll_attempt(&mut self, now: Instant) -> bool {
        match self.phase {
            Phase::Due(at) if now >= at => {
                self.phase = Phase::Running;
                self.attempts += 1;
                true
            }
            _ => false,
        }
    }

    /// When the next attempt is due, while none runs.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Due(at) => Some(at),
            _ => None,
        }
    }

    /// The answer of the attempt that ran.
    pub fn handle_attempt(&mut self, now: Instant, result: AttemptResult) {
        if self.phase != Phase::Running {
            return;
        }
        self.phase = match result {
            AttemptResult::Recovered => Phase::Done(RecoveryOutcome::Recovered {
                attempts: self.attempts,
            }),
            AttemptResult::Superseded => Phase::Done(RecoveryOutcome::Superseded),
            AttemptResult::LeaseLost => Phase::Done(RecoveryOutcome::LeaseLost),
            AttemptResult::Failed => Phase::Done(RecoveryOutcome::Failed),
            AttemptResult::Unreachable => {
                let wait = self.backoff;
                self.backoff = self.backoff.saturating_mul(2).min(self.max);
                Phase::Due(now + wait)
            }
        };
    }

    /// Attempts started so far.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How the recovery ended, once it did.
    #[must_use]
    pub fn outcome(&self) -> Option<RecoveryOutcome> {
        match self.phase {
            Phase::Done(o) => Some(o),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    // spec: SB-8.6 — a recovery whose store is out of reach is repeated with a doubling backoff,
    // capped, until an attempt gets through; each attempt is due only after the previous
    // answered.
    #[test]
    fn unreachable_attempts_repeat_with_a_capped_doubling_backoff() {
        let t0 = Instant::now();
        let mut r = Recovery::new(t0, ms(100), ms(1_000));
        assert_eq!(r.poll_timeout(), Some(t0));
        assert!(r.poll_attempt(t0));
        assert!(!r.poll_attempt(t0), "one attempt at a time");
        assert_eq!(r.poll_timeout(), None);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..6 {
            r.handle_attempt(now, AttemptResult::Unreachable);
            let due = r.poll_timeout().expect("another attempt is due");
            waits.push(due - now);
            assert!(!r.poll_attempt(due - ms(1)), "not before the backoff");
            now = due;
            assert!(r.poll_attempt(now));
        }
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1_000), ms(1_000)]
        );
        assert_eq!(r.outcome(), None);
        r.handle_attempt(now, AttemptResult::Recovered);
        assert_eq!(
            r.outcome(),
            Some(RecoveryOutcome::Recovered { attempts: 7 })
        );
        assert_eq!(r.poll_timeout(), None);
        assert!(!r.poll_attempt(now + ms(10_000)));
    }

    // spec: SB-8.6 — the retry stops for good when the store shows the record moved on, when
    // this node may no longer own, or when the state cannot be rehydrated.
    #[test]
    fn a_definite_answer_ends_the_recovery() {
        let t0 = Instant::now();
        for (result, outcome) in [
            (AttemptResult::Superseded, RecoveryOutcome::Superseded),
            (AttemptResult::LeaseLost, RecoveryOutcome::LeaseLost),
            (AttemptResult::Failed, RecoveryOutcome::Failed),
        ] {
            let mut r = Recovery::new(t0, DEFAULT_RECOVERY_BACKOFF, DEFAULT_RECOVERY_BACKOFF_MAX);
            assert!(r.poll_attempt(t0));
            r.handle_attempt(t0, AttemptResult::Unreachable);
            let due = r.poll_timeout().unwrap();
            assert!(r.poll_attempt(due));
            r.handle_attempt(due, result);
            assert_eq!(r.outcome(), Some(outcome));
            assert_eq!(r.attempts(), 2);
            assert_eq!(r.poll_timeout(), None);
            // an answer with no attempt running changes nothing
            r.handle_attempt(due, AttemptResult::Recovered);
            assert_eq!(r.outcome(), Some(outcome));
        }
    }
}
