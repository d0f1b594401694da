//! `defer()` barriers (EG-5): a record's registered joins, activated or discarded at its end.

use std::sync::Arc;

use super::error::{RuntimeError, Unavailable};
use super::{handled::*, lane::*};

/// The yield signal word of a [`Slot`]: the invocation that asked to yield, 0 for none. Tagged,
/// so a stale signal can never act on another record of the lane.
pub(super) const SIGNAL_NONE: u64 = 0;

/// The Join operation of a barrier.
pub(crate) type JoinOp = Box<dyn FnOnce() -> BoxFuture<Result<(), RuntimeError>> + Send>;

/// A barrier registered by `defer()` (EG-5), inactive until the handler ends normally.
///
/// Once registered, the moving object's core counts it as inactive; it is activated by
/// [`Barrier::activate`] (handler ended normally, EG-5.2) or discarded when dropped otherwise
/// (error, cancellation, refused resume, stale scope: EG-5.3).
pub(crate) struct Barrier {
    pub(super) moving: Arc<LaneHandle>,
    pub(super) op: Option<JoinOp>,
    pub(super) registered: bool,
}

impl Barrier {
    pub fn new(moving: Arc<LaneHandle>, op: JoinOp) -> Barrier {
        Barrier {
            moving,
            op: Some(op),
            registered: false,
        }
    }

    /// Count the inactive barrier in the moving object's core. Called under the registering
    /// slot's `ext` lock (lock order: slot `ext`, then a gate core; never the reverse).
    pub(super) fn register(&mut self) -> Result<(), RuntimeError> {
        if !self
            .moving
            .gate
            .gate
            .lock()
            .handle_barrier_register(self.moving.lane)
        {
            return Err(Unavailable::Ended.into());
        }
        self.registered = true;
        Ok(())
    }

    /// The handler ended normally: the barrier now blocks the moving object's queue (EG-5.2).
    pub(super) fn activate(mut self) -> (Arc<LaneHandle>, JoinOp) {
        self.registered = false;
        self.moving
            .gate
            .gate
            .lock()
            .handle_barrier_activate(self.moving.lane);
        (self.moving.clone(), self.op.take().expect("activated once"))
    }
}

impl Drop for Barrier {
    fn drop(&mut self) {
        if self.registered {
            // EG-5.3: discarded, the Join never runs
            self.moving
                .gate
                .gate
                .lock()
                .handle_barrier_discard(self.moving.lane);
        }
    }
}

/// Delivers an active barrier's Join result to the moving object exactly once; if the Join task
/// is dropped or its operation panics, the result is `Unavailable::Dropped`, so a barrier never
/// blocks the moving object's queue forever.
pub(super) struct JoinDelivery {
    pub(super) moving: Option<Arc<LaneHandle>>,
}

impl JoinDelivery {
    pub(super) fn deliver(&mut self, result: Result<(), RuntimeError>) {
        let Some(moving) = self.moving.take() else {
            return;
        };
        let job: Option<Job> = match moving.completion.get().cloned() {
            Some(cb) => Some(Job::new(move |env| cb(env, CompletionEvent::Join(result)))),
            None => {
                tracing::warn!(
                    object = moving.object,
                    "join result without a completion callback"
                );
                None
            }
        };
        let r = moving.gate.gate.lock().handle_join_result(moving.lane, job);
        match r {
            Ok(()) => {
                if let Some(f) = moving.gate.gate.word.try_acquire() {
                    moving.gate.kick(f);
                }
            }
            Err(_) => {
                tracing::warn!(object = moving.object, "join completion not delivered");
            }
        }
    }
}

impl Drop for JoinDelivery {
    fn drop(&mut self) {
        self.deliver(Err(Unavailable::Dropped.into()));
    }
}
