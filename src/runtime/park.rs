//! The park word of a yield-capable lane: who appends the resume record of a parked (yielded)
//! record, exactly once per park (EG-3, EG-16.8), without losing a wake-up that races the park.
//!
//! One atomic word: bit 0 `WOKE` (a wake-up arrived since the last poll began), bits 1.. the
//! invocation of the parked record whose resume is not requested yet (0: none).
//! * The drain clears `WOKE` before each poll of a handler future ([`ParkWord::before_poll`]).
//! * A wake-up sets `WOKE` and, if a record is parked, takes it ([`ParkWord::wake`]).
//! * The drain, after the handler asked to yield and its claim is marked yielded, parks the
//!   record — or, if `WOKE` is set (a wake-up came after the poll began), keeps it and requests
//!   the resume itself ([`ParkWord::park`]).
//!
//! Every transition is one read-modify-write of the one word, so they are totally ordered: a
//! wake-up after the poll began either finds the record parked or is found by the park; the
//! resume is requested exactly once. (Two words with a store-then-load on each side would need
//! sequentially consistent ordering between different locations; loom found the lost wake-up of
//! that variant.) A wake-up during the poll only resumes the record early, where it asks to yield
//! again. Modelled in loom (`gate.rs`, `loom_park_requests_resume_once`).

use crate::sync::atomic::{AtomicU64, Ordering};

const WOKE: u64 = 1;

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct ParkWord(AtomicU64);

impl ParkWord {
    /// The drain is about to poll a handler future of the lane.
    pub fn before_poll(&self) {
        self.0.fetch_and(!WOKE, Ordering::AcqRel);
    }

    /// A wake-up of the lane's handler future: `Some(invocation)` if this call took a parked
    /// record (the caller requests its resume); `None` if nothing is parked (the wake-up is for
    /// the drain polling the record, or the resume is already requested).
    pub fn wake(&self) -> Option<u64> {
        let prev = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                // a parked record is taken (word: WOKE only); otherwise WOKE is set
                Some(WOKE | if w >> 1 != 0 { 0 } else { w })
            })
            .unwrap_or_else(|w| w);
        match prev >> 1 {
            0 => None,
            inv => Some(inv),
        }
    }

    /// The drain parked record `invocation` (its claim is yielded): `Some(invocation)` if a
    /// wake-up came in since the poll began (the caller requests the resume; nothing is parked).
    pub fn park(&self, invocation: u64) -> Option<u64> {
        debug_assert!(invocation != 0 && invocation >> 63 == 0);
        let prev = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(if w & WOKE != 0 { WOKE } else { invocation << 1 })
            })
            .unwrap_or_else(|w| w);
        (prev & WOKE != 0).then_some(invocation)
    }
}
