//! A submission prepared but not yet admitted: the caller tries it without waiting and, when
//! its lane is full, gets it back instead of losing it, to keep (in order, with whatever else
//! it holds for that lane) and retry or wait for later. This lets a submitter that must never
//! block (a mesh I/O thread) still lose nothing.

use std::sync::Arc;

use super::core::LaneClass;
use super::driver::{Job, LaneHandle};
use super::error::RuntimeError;

/// A record for one lane that has not been admitted: it has not run and holds no reservation.
/// Dropping it drops the record unrun (as a refused submission does).
pub struct PendingSubmit {
    lane: Arc<LaneHandle>,
    class: LaneClass,
    payload_len: usize,
    job: Job,
}

impl std::fmt::Debug for PendingSubmit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingSubmit")
            .field("payload_len", &self.payload_len)
            .finish_non_exhaustive()
    }
}

/// Why a non-blocking submission did not enter its lane.
#[derive(Debug)]
pub enum TrySubmitError {
    /// The lane is full: the record comes back to be retried or waited for.
    Full(PendingSubmit),
    /// Refused for good (the lane ended, the runtime shut down); the record was dropped.
    Refused(RuntimeError),
}

impl PendingSubmit {
    pub(crate) fn new(
        lane: &Arc<LaneHandle>,
        class: LaneClass,
        payload_len: usize,
        job: Job,
    ) -> Self {
        PendingSubmit {
            lane: lane.clone(),
            class,
            payload_len,
            job,
        }
    }

    /// Submits without waiting: a full lane hands the record back.
    pub fn retry(self) -> Result<(), TrySubmitError> {
        let PendingSubmit {
            lane,
            class,
            payload_len,
            job,
        } = self;
        match lane.try_submit(class, payload_len, job) {
            Ok(()) => Ok(()),
            Err((
                RuntimeError::ApplicationLaneFull(_) | RuntimeError::LifecycleLaneFull(_),
                job,
            )) => Err(TrySubmitError::Full(PendingSubmit {
                lane,
                class,
                payload_len,
                job,
            })),
            Err((e, _)) => Err(TrySubmitError::Refused(e)),
        }
    }

    /// Waits for lane space and submits (backpressure; the record never runs inline).
    pub async fn wait(self) -> Result<(), RuntimeError> {
        self.lane
            .submit_wait(self.class, self.payload_len, self.job)
            .await
    }
}
