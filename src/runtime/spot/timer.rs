//! [`TimerRef`]: the handle to a timer and its lane (fire, periodic start, stats); the lane
//! ends with its last handle.

use std::sync::Arc;
use std::time::Duration;

use crate::runtime::core::{LaneClass, LaneStats};
use crate::runtime::domain::spawn_infrastructure;
use crate::runtime::driver::TurnEnv;
use crate::runtime::error::RuntimeError;
use crate::runtime::handled::Handled;
use crate::runtime::job::Job;
use crate::runtime::lane::LaneHandle;

use super::*;

/// A handle to a timer. The timer's lane is removed (its memory released, queued runs dropped)
/// when the last clone is dropped (a running [`TimerRef::start`] task holds one).
#[derive(Clone)]
pub struct TimerRef {
    pub(super) inner: Arc<TimerInner>,
}

pub(super) struct TimerInner {
    pub(super) lane: Arc<LaneHandle>,
    /// Captured by each queued run (never the `TimerInner`: a queued run must not keep the lane).
    pub(super) callback: Arc<dyn Fn(TurnEnv) -> Handled<()> + Send + Sync>,
}

impl Drop for TimerInner {
    fn drop(&mut self) {
        self.lane.remove();
    }
}

impl TimerRef {
    /// Queue one callback run (an application record of the timer's lane).
    pub fn fire(&self) -> Result<(), RuntimeError> {
        let cb = self.inner.callback.clone();
        self.inner
            .lane
            .submit(LaneClass::Application, 0, Job::new(move |env| cb(env)))
    }

    /// Fire every `period`, scheduled by the infrastructure domain, until the timer's gate ends.
    pub fn start(&self, period: Duration) -> tokio::task::JoinHandle<()> {
        let t = self.clone();
        let rt = self.inner.lane.rt().clone();
        spawn_infrastructure(&rt, async move {
            let mut iv = tokio::time::interval(period);
            iv.tick().await;
            loop {
                iv.tick().await;
                match t.fire() {
                    Ok(()) | Err(RuntimeError::ApplicationLaneFull(_)) => {}
                    Err(_) => return,
                }
            }
        })
    }

    /// Counters of the timer's lane.
    pub fn stats(&self) -> LaneStats {
        lane_stats(&self.inner.lane)
    }
}
