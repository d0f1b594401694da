//! The CPU cycle counter as an upper bound of the system clock: occupancy budgets
//! ([`BudgetStart`], [`super::Clock::budget_spent_at`]) and deadlines ([`CycleDeadline`], the
//! owner lease check) answered without a clock read while the counter proves the answer, and
//! by the clock otherwise, so the answer is always the plain comparison's.

use std::time::{Duration, Instant};

use crate::sync::Mutex;

/// A reading of the CPU cycle counter ([`Clock::stamp`](crate::clock::Clock::stamp)): an
/// instant that budget and lease checks compare against bounds they computed from clock
/// readings, without reading the clock. [`CycleStamp::NONE`] where no usable counter exists (or
/// none was read): checks then read the clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleStamp(u64);

impl CycleStamp {
    /// No reading.
    pub const NONE: CycleStamp = CycleStamp(0);

    /// The cycle counter now ([`CycleStamp::NONE`] where it must not be used).
    #[inline]
    #[must_use]
    pub fn now() -> CycleStamp {
        CycleStamp(counter::read())
    }

    /// Whether this is a reading.
    #[inline]
    #[must_use]
    pub fn is_some(self) -> bool {
        self.0 != 0
    }
}

/// The start of an occupancy budget: an instant of the clock that took it, and (for
/// [`super::SystemClock`]) the CPU cycle counter read just before and just after that instant.
#[derive(Clone, Copy, Debug)]
pub struct BudgetStart {
    instant: Instant,
    cycles: (u64, u64),
}

impl BudgetStart {
    /// The instant the budget started.
    pub fn instant(&self) -> Instant {
        self.instant
    }

    /// A budget started at `instant`, with no cycle reading: its checks read the clock.
    pub(super) fn at(instant: Instant) -> Self {
        BudgetStart {
            instant,
            cycles: (0, 0),
        }
    }

    /// A budget started now on the system clock, the instant bracketed by cycle reads.
    pub(super) fn system() -> Self {
        let before = counter::read();
        let instant = Instant::now();
        let after = counter::read();
        BudgetStart {
            instant,
            cycles: (before, after),
        }
    }

    /// [`super::Clock::budget_spent_at`] of the system clock: the counter's upper bound of the
    /// elapsed time answers `false` while below the budget, else the clock decides.
    #[inline]
    pub(super) fn system_spent_at(&self, budget: Duration, at: CycleStamp) -> bool {
        // The common answer without a clock read: a leaf that saves no registers.
        if let Some(upper) = counter::upper_ns(self.cycles.0, at.0) {
            if upper < budget.as_nanos() {
                return false;
            }
        }
        spent_by_clock(self, budget, at)
    }
}

/// [`super::SystemClock`]'s budget check when the cycle counter could not answer: the clock decides
/// (and teaches the counter's rate). Out of line, so the counter's answer stays a leaf.
#[cold]
#[inline(never)]
fn spent_by_clock(start: &BudgetStart, budget: Duration, at: CycleStamp) -> bool {
    let elapsed = Instant::now().saturating_duration_since(start.instant);
    counter::learn(start.cycles.1, at.0, elapsed.as_nanos());
    elapsed >= budget
}

/// The cycle counter behind [`super::SystemClock`]'s budget check (x86-64 Linux, invariant TSC only).
#[cfg(all(
    target_arch = "x86_64",
    target_os = "linux",
    not(feature = "loom"),
    not(miri)
))]
mod counter {
    use std::sync::OnceLock;

    use crate::sync::atomic::{AtomicU64, Ordering};

    /// Upper bound of nanoseconds per cycle, fixed point × 2^32 (0: not learned yet). Only ever
    /// raised (`fetch_max`), so it stays an upper bound of every rate observed.
    static NS_PER_CYCLE_Q32: AtomicU64 = AtomicU64::new(0);
    /// Intervals shorter than this teach nothing.
    const LEARN_MIN_NS: u128 = 1_000_000;

    fn invariant_tsc() -> bool {
        static INVARIANT: OnceLock<bool> = OnceLock::new();
        *INVARIANT.get_or_init(|| {
            let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
            let has = |f: &str| flags.split_whitespace().any(|x| x == f);
            // The flags say the counter could serve; the kernel's current clocksource says it
            // does: a TSC the kernel found unstable (watchdog, failed sync between cores) is
            // no longer `Instant::now`'s source, and must not bound it either.
            let source = std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .unwrap_or_default();
            has("constant_tsc") && has("nonstop_tsc") && source.trim() == "tsc"
        })
    }

    /// The cycle counter, or 0 where it must not be used.
    pub fn read() -> u64 {
        if invariant_tsc() {
            // SAFETY: `lfence` and `rdtsc` have no preconditions on x86-64 (SSE2 is part of
            // the x86-64 baseline); they only order loads and read the counter. The fence keeps
            // the read from running ahead of the code before it (a clock reading taken just
            // before must not be later than this one), as the kernel's own ordered read does.
            unsafe {
                core::arch::x86_64::_mm_lfence();
                core::arch::x86_64::_rdtsc()
            }
        } else {
            0
        }
    }

    /// An upper bound of the nanoseconds elapsed since the cycle reading `from` (taken before
    /// the budget's instant) until `to`, if a rate is known and the readings are usable.
    pub fn upper_ns(from: u64, to: u64) -> Option<u128> {
        let q = NS_PER_CYCLE_Q32.load(Ordering::Relaxed);
        if q == 0 || from == 0 || to < from {
            return None;
        }
        let ns = ((to - from) as u128 * q as u128) >> 32;
        Some(ns + (ns >> 6))
    }

    /// The first cycle reading at which [`upper_ns`]`(from, reading)` may reach `ns_left`: every
    /// reading below it bounds the time since `from` under `ns_left` (`None`: no rate known yet).
    pub fn limit(from: u64, ns_left: u128) -> Option<u64> {
        let q = NS_PER_CYCLE_Q32.load(Ordering::Relaxed);
        if q == 0 || from == 0 {
            return None;
        }
        // ns + ns / 64 < ns_left holds for every ns <= ns_left * 64 / 65 - 1.
        let ns_max = (ns_left * 64 / 65).checked_sub(1)?;
        let span = (ns_max << 32) / q as u128;
        let span = u64::try_from(span).unwrap_or(u64::MAX);
        let limit = from.saturating_add(span);
        // Checked against the bound itself, so the two can never disagree.
        match upper_ns(from, limit.saturating_sub(1)) {
            Some(upper) if upper < ns_left => Some(limit),
            _ => None,
        }
    }

    /// Learn from a clock reading: `ns` elapsed between the budget's instant and a clock read
    /// taken after the cycle reading `to`; `from` was read after the budget's instant, so
    /// `to - from` is at most the cycles of that interval and `ns / (to - from)` at least the rate.
    pub fn learn(from: u64, to: u64, ns: u128) {
        if from == 0 || to <= from || ns < LEARN_MIN_NS {
            return;
        }
        let q = (ns << 32) / (to - from) as u128;
        if let Ok(q) = u64::try_from(q) {
            NS_PER_CYCLE_Q32.fetch_max(q, Ordering::Relaxed);
        }
    }
}

/// No cycle counter: every budget check reads the clock.
#[cfg(not(all(
    target_arch = "x86_64",
    target_os = "linux",
    not(feature = "loom"),
    not(miri)
)))]
mod counter {
    pub fn read() -> u64 {
        0
    }
    pub fn upper_ns(_from: u64, _to: u64) -> Option<u128> {
        None
    }
    pub fn learn(_from: u64, _to: u64, _ns: u128) {}
    pub fn limit(_from: u64, _ns_left: u128) -> Option<u64> {
        None
    }
}

/// An exact test of "the system monotonic clock ([`Instant::now`]) is still before a deadline"
/// that usually reads only the CPU cycle counter: the owner lease check (SB-5.11) asked on every
/// admission and turn start. Where [`super::SystemClock`]'s budget check bounds the time elapsed since a
/// budget's start from above, this bounds *now* from above: after a clock reading taken before
/// the deadline it arms a cycle *limit*, the first cycle reading at which that reading plus the
/// upper bound of the time since it (the learned rate, plus its 1/64 margin) may reach the
/// deadline. A check whose cycle reading is below the limit is certainly before the deadline and
/// reads no clock; any other check reads the clock (and arms again from that reading), so the
/// answer is always the plain comparison's — a deadline that passes between two checks is seen
/// by the first check after it. Moving the deadline ([`CycleDeadline::disarm`], under the same
/// lock as arming) withdraws the limit before the new deadline is used.
///
/// Only where the cycle counter is usable (x86-64 Linux with an invariant TSC that is the
/// kernel's current clocksource; a reading below the one the limit was armed from never counts):
/// [`CycleDeadline::new`] is `None` elsewhere, and then every check reads the clock.
#[derive(Debug)]
pub struct CycleDeadline {
    /// Cycle readings below it are before the deadline (0: not armed).
    limit: crate::sync::atomic::AtomicU64,
    /// The cycle reading the limit was armed from: a reading below it (a counter that went
    /// back: reset, restored, or another core's lagging one) proves nothing.
    anchor: crate::sync::atomic::AtomicU64,
    /// Serialises arming against a deadline change; holds the last clock reading (the cycle
    /// counter just after it, the instant), from which a later reading learns the rate.
    arming: Mutex<Option<(u64, Instant)>>,
}

/// A clock reading taken by [`CycleDeadline::read_before`].
#[derive(Clone, Copy, Debug)]
pub struct DeadlineReading {
    /// The system clock's instant.
    pub now: Instant,
    /// Whether it is before the deadline.
    pub before: bool,
}

impl CycleDeadline {
    /// A disarmed guard, or `None` where the cycle counter cannot be used.
    #[must_use]
    pub fn new() -> Option<Self> {
        (counter::read() != 0).then(|| CycleDeadline {
            limit: crate::sync::atomic::AtomicU64::new(0),
            anchor: crate::sync::atomic::AtomicU64::new(0),
            arming: Mutex::new(None),
        })
    }

    /// `true`: the system clock is certainly before the armed deadline now (one cycle counter
    /// read). `false`: unknown; ask [`CycleDeadline::read_before`].
    #[inline]
    pub fn certainly_before(&self) -> bool {
        let limit = self.limit.load(crate::sync::atomic::Ordering::Acquire);
        limit != 0 && {
            // Stored before the limit (Release above): at least this limit's anchor, or a
            // later one (a later arming's anchor is larger: only stricter).
            let anchor = self.anchor.load(crate::sync::atomic::Ordering::Relaxed);
            let c = counter::read();
            c != 0 && anchor <= c && c < limit
        }
    }

    /// [`CycleDeadline::certainly_before`] at the instant `at` was read: `true` when the system
    /// clock was certainly before the armed deadline then. `at` taken before the limit is read
    /// proves at most what a fresh reading would (a limit armed after `at` has an anchor above
    /// it and proves nothing; one withdrawn after `at` was read was the deadline in force then).
    #[inline]
    pub fn certainly_before_at(&self, at: CycleStamp) -> bool {
        let limit = self.limit.load(crate::sync::atomic::Ordering::Acquire);
        limit != 0 && {
            let anchor = self.anchor.load(crate::sync::atomic::Ordering::Relaxed);
            let c = at.0;
            c != 0 && anchor <= c && c < limit
        }
    }

    /// How far ahead of a clock reading a limit is armed at most: past it the clock is read
    /// again even when the deadline is further. It bounds what a clock step the counter does
    /// not see (a suspend that stops the counter without resetting it, on a clock that counts
    /// suspended time) can hide: at most this much of the counter's time after the resume.
    pub const HORIZON: Duration = Duration::from_millis(10);

    /// Reads the clock (`now`: the system clock, or another at its rate while the process runs)
    /// and compares it with `deadline()` (read under the arming lock, so a concurrent
    /// [`CycleDeadline::disarm`] is either before or after both); before it, arms the limit from
    /// this reading, at most [`CycleDeadline::HORIZON`] ahead. When another thread is arming,
    /// only reads and compares.
    pub fn read_before(
        &self,
        now: impl Fn() -> Instant,
        deadline: impl FnOnce() -> Instant,
    ) -> DeadlineReading {
        let Ok(mut last) = self.arming.try_lock() else {
            let now = now();
            return DeadlineReading {
                now,
                before: now < deadline(),
            };
        };
        let before_read = counter::read();
        let now = now();
        let after_read = counter::read();
        let deadline = deadline();
        if let Some((from, then)) = *last {
            counter::learn(
                from,
                before_read,
                now.saturating_duration_since(then).as_nanos(),
            );
        }
        let before = now < deadline;
        if before {
            let left = deadline
                .saturating_duration_since(now)
                .min(Self::HORIZON)
                .as_nanos();
            if let Some(limit) = counter::limit(before_read, left) {
                self.anchor
                    .store(before_read, crate::sync::atomic::Ordering::Relaxed);
                self.limit
                    .store(limit, crate::sync::atomic::Ordering::Release);
            }
        }
        // The first reading stays the anchor until it taught a rate: readings 1 ms apart teach.
        match *last {
            Some((_, then)) if now.saturating_duration_since(then) < Duration::from_millis(1) => {}
            _ => *last = Some((after_read, now)),
        }
        DeadlineReading { now, before }
    }

    /// The deadline is about to change: call with `change` publishing the new deadline; no check
    /// uses a limit armed for the old one after this returns.
    pub fn disarm(&self, change: impl FnOnce()) {
        let _arming = self.arming.lock().unwrap_or_else(|e| e.into_inner());
        self.limit.store(0, crate::sync::atomic::Ordering::Release);
        change();
    }

    /// Whether a limit is armed (tests).
    #[cfg(test)]
    pub(crate) fn armed(&self) -> bool {
        self.limit.load(crate::sync::atomic::Ordering::Acquire) != 0
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::super::{Clock, SystemClock};
    use super::*;

    // spec: EG-9, EG-7.4 — the cycle-counter guard of `SystemClock` never changes the answer of
    // the budget check: whenever the clock says the budget has passed, the check says so too,
    // and it never says so before. Budgets are placed just below and just above the elapsed
    // time, where the guard has to fall back to the clock; the first 2 ms teach it a rate.
    #[test]
    fn system_clock_budget_check_is_exact() {
        let c = SystemClock;
        let start = c.budget_start();
        let mut checks = 0u32;
        while start.instant().elapsed() < Duration::from_millis(20) {
            let near = start.instant().elapsed();
            for delta in [0u64, 1, 5, 20, 100] {
                let d = Duration::from_micros(delta);
                for b in [near.saturating_sub(d), near + d, Duration::from_secs(3600)] {
                    let before = start.instant().elapsed();
                    let spent = c.budget_spent(&start, b);
                    let after = start.instant().elapsed();
                    if before >= b {
                        assert!(spent, "budget {b:?} passed ({before:?}) but not reported");
                    }
                    if after < b {
                        assert!(!spent, "budget {b:?} reported spent at {after:?}");
                    }
                    checks += 1;
                }
            }
        }
        assert!(checks > 0);
    }
}
