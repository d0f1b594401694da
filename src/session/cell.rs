//! A session's aggregate behind its lock, with a lock-free copy of whether it accepts packets.
//!
//! A packet's admission (on the mesh I/O thread) asks whether the session is open without
//! taking the lock the session's turns take. The copy is written only under the aggregate's
//! lock, as each [`AggGuard`] is released, and only when it changed. Invariants (loom-modelled
//! below, `scripts/loom`):
//! - once a lock holder saw the aggregate refuse packets, every later read of the copy (by any
//!   thread that took the lock after it) refuses too: the copy never runs behind a phase
//!   change that someone already observed through the lock;
//! - a refused copy means the aggregate refuses (the phase never goes back to open);
//! - when no guard is held, the copy equals the aggregate's answer.

use super::aggregate::SessionBindingAggregate;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Mutex, MutexGuard};

/// A session's [`SessionBindingAggregate`] and the copy of its [`accepts_packets`].
///
/// [`accepts_packets`]: SessionBindingAggregate::accepts_packets
pub(crate) struct AggCell {
    agg: Mutex<SessionBindingAggregate>,
    open: AtomicBool,
}

impl AggCell {
    /// A cell around `agg`, its copy taken now.
    pub(crate) fn new(agg: SessionBindingAggregate) -> Self {
        AggCell {
            open: AtomicBool::new(agg.accepts_packets()),
            agg: Mutex::new(agg),
        }
    }

    /// The aggregate's lock (a poisoned lock is taken over: the aggregate's steps leave it
    /// consistent).
    pub(crate) fn lock(&self) -> AggGuard<'_> {
        AggGuard {
            agg: self.agg.lock().unwrap_or_else(|e| e.into_inner()),
            open: &self.open,
        }
    }

    /// Whether the session accepts packets now, read without the aggregate's lock.
    pub(crate) fn accepts_packets(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

/// The aggregate's lock; as it is released, the cell's copy of whether the session accepts
/// packets is brought up to date (written only when it changed, so the line stays shared while
/// it does not).
pub(crate) struct AggGuard<'a> {
    agg: MutexGuard<'a, SessionBindingAggregate>,
    open: &'a AtomicBool,
}

impl std::ops::Deref for AggGuard<'_> {
    type Target = SessionBindingAggregate;
    fn deref(&self) -> &SessionBindingAggregate {
        &self.agg
    }
}

impl std::ops::DerefMut for AggGuard<'_> {
    fn deref_mut(&mut self) -> &mut SessionBindingAggregate {
        &mut self.agg
    }
}

impl Drop for AggGuard<'_> {
    fn drop(&mut self) {
        // Still under the lock (the guard's fields drop after this).
        let open = self.agg.accepts_packets();
        if self.open.load(Ordering::Relaxed) != open {
            self.open.store(open, Ordering::Release);
        }
    }
}

#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    //! `cargo test -p zlink --lib --features loom loom` (see `scripts/loom`).
    use super::*;
    use crate::session::aggregate::SessionIdentity;
    use loom::thread;
    use std::sync::Arc;
    use std::time::Duration;
    use zlink_wire::{NodeRid, OwnerId, SessionLifecycleGeneration, SessionRid};

    fn cell() -> Arc<AggCell> {
        let id = SessionIdentity {
            owner: NodeRid::new("a").unwrap(),
            lifecycle: SessionLifecycleGeneration::new(1),
            session: SessionRid::new(1),
        };
        Arc::new(AggCell::new(SessionBindingAggregate::new(
            id,
            OwnerId::new(1),
            Duration::from_secs(30),
        )))
    }

    // The session ends (its aggregate disconnects) while the I/O thread admits a packet: a
    // reader that saw the end through the lock never reads an open copy afterwards, and a
    // closed copy is never ahead of the aggregate.
    #[test]
    fn loom_session_end_against_packet_admission() {
        loom::model(|| {
            let c = cell();
            let ender = {
                let c = c.clone();
                thread::spawn(move || {
                    let _ = c.lock().disconnect();
                })
            };
            // The admission side: the copy first, then (as the packet's turn does) the lock.
            let copy = c.accepts_packets();
            let locked = c.lock().accepts_packets();
            assert!(copy || !locked, "a closed copy ran ahead of the aggregate");
            if !locked {
                assert!(
                    !c.accepts_packets(),
                    "the copy read open after the lock showed the session ended"
                );
            }
            ender.join().unwrap();
            assert!(!c.accepts_packets() && !c.lock().accepts_packets());
        });
    }

    // Two lock holders, one ending the session, one only reading it (its guard's release also
    // compares the copy): whatever the order, the copy ends equal to the aggregate.
    #[test]
    fn loom_concurrent_guards_leave_the_copy_true() {
        loom::model(|| {
            let c = cell();
            let ender = {
                let c = c.clone();
                thread::spawn(move || {
                    let _ = c.lock().disconnect();
                })
            };
            let reader = {
                let c = c.clone();
                thread::spawn(move || {
                    let g = c.lock();
                    let _ = g.pending_binds();
                })
            };
            ender.join().unwrap();
            reader.join().unwrap();
            assert_eq!(c.accepts_packets(), c.lock().accepts_packets());
            assert!(!c.accepts_packets());
        });
    }
}
