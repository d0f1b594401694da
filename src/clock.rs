//! The node's monotonic clock with timers: the spec's session timings (the 100 ms replacement
//! close, the SessionReplacementCallbackTimeout, the relocation seal timeout), the owner lease's
//! local deadline and the actors' fences read an injected [`Clock`], so tests drive them
//! deterministically with a [`ManualClock`]. The lowest room but `sync`: every room may read it.
//!
//! Every deadline is monotonic ([`Instant`]); the wall clock is never used.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// A boxed future that completes at a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A monotonic clock with timers.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
    /// A future that completes once [`Clock::now`] has reached `deadline`.
    fn sleep_until(&self, deadline: Instant) -> Sleep;
    /// Whether [`Clock::now`] advances at the rate of the process' monotonic clock
    /// ([`Instant::now`]) while the process runs (the system clock, the boot clock), so the CPU
    /// cycle counter can bound it from above ([`crate::runtime::config::CycleDeadline`]): a
    /// deadline on it is then checked without a clock read while far enough ahead (at most
    /// `CycleDeadline::HORIZON`). Default `false` (an injected clock): every check reads
    /// [`Clock::now`].
    fn is_system(&self) -> bool {
        false
    }
}

/// The process' monotonic clock (tokio timers).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline.into()))
    }

    fn is_system(&self) -> bool {
        true
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

    fn is_system(&self) -> bool {
        self.system
    }
}

/// A clock that moves only when a test calls [`ManualClock::advance`]. Timers waiting on it
/// complete when the clock reaches their deadline, never earlier.
#[derive(Clone, Debug)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug)]
struct ManualInner {
    now: Mutex<Instant>,
    moved: Notify,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock standing at the process' current instant.
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(ManualInner {
                now: Mutex::new(Instant::now()),
                moved: Notify::new(),
            }),
        }
    }

    /// Moves the clock forward by `by` and wakes the timers that are due.
    pub fn advance(&self, by: Duration) {
        {
            let mut now = self.inner.now.lock().unwrap_or_else(|e| e.into_inner());
            *now += by;
        }
        self.inner.moved.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.inner.now.lock().unwrap_or_else(|e| e.into_inner())
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
