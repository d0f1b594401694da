//! The one clock of the crate: every reading of time goes through an injected [`Clock`] — the
//! spec's session timings (the 100 ms replacement close, the SessionReplacementCallbackTimeout,
//! the relocation seal timeout), the lane runtime's occupancy budget (EG-9), the owner lease's
//! local deadline and the actors' fences on its monotonic readings ([`Clock::now`]), the
//! Location Store's lease expiry on its wall readings ([`Clock::wall`]) — so tests drive all of
//! them deterministically with a [`ManualClock`]. Implementations: [`SystemClock`] (the
//! process' clocks), [`BootClock`] (owner lease deadlines, counting suspended time) and
//! [`ManualClock`]. The lowest room but `sync`: every room may read it.
//!
//! Every deadline is monotonic ([`Instant`]); the wall clock is read only as the store's time,
//! which every process sharing a store must agree on.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

mod cycles;

pub use cycles::{BudgetStart, CycleDeadline, CycleStamp, DeadlineReading};

/// A boxed future that completes at a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A clock: monotonic readings with timers, occupancy budgets on them, and wall readings.
///
/// The lane runtime's scheduling core never reads a clock itself; its driver reads this one at
/// handler boundaries (EG-9).
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;

    /// A future that completes once [`Clock::now`] has reached `deadline`.
    fn sleep_until(&self, deadline: Instant) -> Sleep;

    /// The current wall time: the Location Store's time, against which lease expiry is judged
    /// (one store reads one clock, so every node agrees whether a lease is live). May step.
    fn wall(&self) -> SystemTime;

    /// Whether [`Clock::now`] advances at the rate of the process' monotonic clock
    /// ([`Instant::now`]) while the process runs (the system clock, the boot clock), so the CPU
    /// cycle counter can bound it from above ([`CycleDeadline`]): a deadline on it is then
    /// checked without a clock read while far enough ahead (at most
    /// [`CycleDeadline::HORIZON`]). Default `false` (an injected clock): every check reads
    /// [`Clock::now`].
    fn is_system(&self) -> bool {
        false
    }

    /// Start an occupancy budget (EG-7.4, EG-9) now. Default: one [`Clock::now`].
    fn budget_start(&self) -> BudgetStart {
        BudgetStart::at(self.now())
    }

    /// Whether `budget` has passed since `start` (taken with [`Clock::budget_start`] of this
    /// clock), asked after each handler (EG-9). Must be exact: `true` iff
    /// `now() - start.instant() >= budget`. Default: one [`Clock::now`].
    fn budget_spent(&self, start: &BudgetStart, budget: Duration) -> bool {
        self.now().saturating_duration_since(start.instant()) >= budget
    }

    /// A reading of the CPU cycle counter taken now, for [`Clock::budget_spent_at`] and
    /// [`CycleDeadline::certainly_before_at`]: one reading can answer both a budget check and a
    /// lease check asked at the same handler boundary. Default: [`CycleStamp::NONE`] (no
    /// counter: the checks read the clock).
    fn stamp(&self) -> CycleStamp {
        CycleStamp::NONE
    }

    /// [`Clock::budget_spent`] asked at the instant `at` was read ([`Clock::stamp`] of this
    /// clock, taken by the caller just before; [`CycleStamp::NONE`] is always allowed). Exact
    /// as [`Clock::budget_spent`]: `true` iff the budget has passed, at `at`'s instant or at
    /// the clock reading this takes when the counter cannot decide. Default: ignores `at`.
    fn budget_spent_at(&self, start: &BudgetStart, budget: Duration, at: CycleStamp) -> bool {
        let _ = at;
        self.budget_spent(start, budget)
    }
}

/// The process' clocks: the monotonic clock (tokio timers) and the wall clock ([`SystemTime`],
/// shared by every process of a machine).
///
/// Budget checks (EG-9) are asked after every handler, and reading the monotonic clock costs
/// about 25 ns on these VMs (a quarter of a tell's whole cost). On x86-64 Linux with an
/// invariant TSC (`constant_tsc` and `nonstop_tsc`), its budget check first reads the cycle
/// counter (about 10 ns) and answers `false` without reading the clock when an *upper bound* of
/// the elapsed time is still below the budget; otherwise it reads the clock, so the answer is
/// the same as the plain comparison. The bound uses a rate (nanoseconds per cycle) learned from
/// this clock's own readings over at least 1 ms, each reading bracketed by cycle reads so that a
/// pause between two reads can only make the rate larger (more conservative), plus a 1/64
/// margin; until a rate is learned every check reads the clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline.into()))
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn is_system(&self) -> bool {
        true
    }

    fn budget_start(&self) -> BudgetStart {
        BudgetStart::system()
    }

    fn budget_spent(&self, start: &BudgetStart, budget: Duration) -> bool {
        start.system_spent_at(budget, CycleStamp::now())
    }

    #[inline]
    fn stamp(&self) -> CycleStamp {
        CycleStamp::now()
    }

    fn budget_spent_at(&self, start: &BudgetStart, budget: Duration, at: CycleStamp) -> bool {
        start.system_spent_at(budget, at)
    }
}

/// The owner lease's clock: `CLOCK_BOOTTIME`, which keeps counting while the machine is
/// suspended, where [`Instant`] (`CLOCK_MONOTONIC`) stops. A lease deadline on it has passed
/// after a resume if the lease's time ran out during the suspend, so the node stops acting as
/// owner at once instead of serving until its next renewal (SB-5.11, docs/STORE.md).
///
/// Its readings are [`Instant`]s for the [`Clock`] trait: the instant of its creation plus the
/// boot-time elapsed since; comparable with each other, not with [`Instant::now`] after a
/// suspend. Its timers sleep in steps of at most [`BootClock::STEP`] on the monotonic clock
/// and re-read it, so a timer is at most one step late after a resume. Where `CLOCK_BOOTTIME`
/// cannot be read (not Linux) it reads `CLOCK_MONOTONIC`. It runs at the monotonic clock's rate
/// while the process runs, so the owner gate's cycle-counter shortcut applies to it
/// ([`Clock::is_system`], within `CycleDeadline::HORIZON` of a reading).
#[derive(Clone, Copy)]
pub struct BootClock {
    base: Instant,
    base_boot: Duration,
    read: fn() -> Duration,
    /// `CLOCK_BOOTTIME` itself (not an injected source): the cycle counter may bound it.
    system: bool,
}

impl fmt::Debug for BootClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BootClock")
    }
}

impl Default for BootClock {
    fn default() -> Self {
        Self::new()
    }
}

/// `CLOCK_BOOTTIME` since boot (`CLOCK_MONOTONIC` where it cannot be read).
fn boot_time() -> Duration {
    let read = |id| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
        let rc = unsafe { libc::clock_gettime(id, &raw mut ts) };
        (rc == 0).then(|| {
            Duration::new(
                u64::try_from(ts.tv_sec).unwrap_or(0),
                u32::try_from(ts.tv_nsec).unwrap_or(0),
            )
        })
    };
    #[cfg(target_os = "linux")]
    if let Some(d) = read(libc::CLOCK_BOOTTIME) {
        return d;
    }
    read(libc::CLOCK_MONOTONIC).unwrap_or_default()
}

impl BootClock {
    /// The longest a timer sleeps on the monotonic clock before it reads this clock again.
    pub const STEP: Duration = Duration::from_secs(1);

    /// The clock, anchored at the process' current instant.
    #[must_use]
    pub fn new() -> Self {
        Self {
            system: true,
            ..Self::with_source(boot_time)
        }
    }

    /// The clock on another source of boot-time readings (tests simulate a suspend with it).
    #[must_use]
    pub fn with_source(read: fn() -> Duration) -> Self {
        Self {
            base_boot: read(),
            base: Instant::now(),
            read,
            system: false,
        }
    }

    /// The instant of a boot-time reading: the base instant plus the boot-time since the base
    /// (a reading before the base, which a monotonic source never gives, is the base).
    fn at(&self, boot: Duration) -> Instant {
        self.base + boot.saturating_sub(self.base_boot)
    }
}

impl Clock for BootClock {
    fn now(&self) -> Instant {
        self.at((self.read)())
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let clock = *self;
        Box::pin(async move {
            loop {
                let left = deadline.saturating_duration_since(clock.now());
                if left.is_zero() {
                    return;
                }
                tokio::time::sleep(left.min(Self::STEP)).await;
            }
        })
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn is_system(&self) -> bool {
        self.system
    }
}

/// A clock that moves only when a test calls [`ManualClock::advance`] (both readings move
/// together) or [`ManualClock::set_wall`] (the wall reading alone, a step). Timers waiting on it
/// complete when the clock reaches their deadline, never earlier. Clones share the same time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug)]
struct ManualInner {
    now: Mutex<Readings>,
    moved: Notify,
}

/// A [`ManualClock`]'s two readings.
#[derive(Clone, Copy, Debug)]
struct Readings {
    mono: Instant,
    wall: SystemTime,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock standing at the process' current instant and wall time.
    #[must_use]
    pub fn new() -> Self {
        Self::at_wall(SystemTime::now())
    }

    /// A clock standing at the process' current instant and at the wall time `wall`.
    #[must_use]
    pub fn at_wall(wall: impl Into<SystemTime>) -> Self {
        Self {
            inner: Arc::new(ManualInner {
                now: Mutex::new(Readings {
                    mono: Instant::now(),
                    wall: wall.into(),
                }),
                moved: Notify::new(),
            }),
        }
    }

    fn readings(&self) -> std::sync::MutexGuard<'_, Readings> {
        self.inner.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the clock (both readings) forward by `by` and wakes the timers that are due.
    pub fn advance(&self, by: Duration) {
        {
            let mut now = self.readings();
            now.mono += by;
            now.wall += by;
        }
        self.inner.moved.notify_waiters();
    }

    /// Sets the wall reading to `wall` (forward or back: a wall clock's step); the monotonic
    /// reading stays.
    pub fn set_wall(&self, wall: impl Into<SystemTime>) {
        self.readings().wall = wall.into();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.readings().mono
    }

    fn wall(&self) -> SystemTime {
        self.readings().wall
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let clock = self.clone();
        Box::pin(async move {
            loop {
                let moved = clock.inner.moved.notified();
                if clock.now() >= deadline {
                    return;
                }
                moved.await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_with_the_monotonic_clock_while_running() {
        let clock = BootClock::new();
        let (a, m) = (clock.now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (b, n) = (clock.now(), Instant::now());
        let boot = b - a;
        let mono = n - m;
        assert!(
            boot + Duration::from_millis(5) >= mono,
            "{boot:?} vs {mono:?}"
        );
    }

    #[tokio::test]
    async fn a_boot_clock_timer_fires_at_its_deadline() {
        let clock = BootClock::new();
        let deadline = clock.now() + Duration::from_millis(30);
        clock.sleep_until(deadline).await;
        assert!(clock.now() >= deadline);
    }

    #[tokio::test]
    async fn manual_timer_fires_at_its_deadline_and_not_before() {
        let clock = ManualClock::new();
        let deadline = clock.now() + Duration::from_millis(100);
        let fired = Arc::new(crate::sync::atomic::AtomicBool::new(false));
        let f = fired.clone();
        let timer = clock.sleep_until(deadline);
        let task = tokio::spawn(async move {
            timer.await;
            f.store(true, crate::sync::atomic::Ordering::SeqCst);
        });
        clock.advance(Duration::from_millis(99));
        tokio::task::yield_now().await;
        assert!(!fired.load(crate::sync::atomic::Ordering::SeqCst));
        clock.advance(Duration::from_millis(1));
        task.await.unwrap();
        assert!(fired.load(crate::sync::atomic::Ordering::SeqCst));
    }
}
