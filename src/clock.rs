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
    /// Whether [`Clock::now`] is the process' monotonic clock ([`Instant::now`]), which the CPU
    /// cycle counter can bound from above ([`crate::runtime::config::CycleDeadline`]): a
    /// deadline on it is then checked without a clock read while far enough ahead. Default
    /// `false` (an injected clock): every check reads [`Clock::now`].
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
