//! Actor execution: each actor has its own bounded queue (EG-2.1) drained by one task at a
//! time, so its handler turns are serial; SpotWide Spots add one shared gate (EG-1.3, EG-2.2).
//!
//! This is the narrow seam between the node and the execution engine: the node only calls
//! [`spawn`], [`Mailbox::try_submit`] and [`Mailbox::end`]. It is written so that it can be
//! switched to the lane runtime (`crate::runtime`) without touching the node: a mailbox becomes
//! an actor lane, the Spot gate the runtime's Spot gate.
//!
//! Invariants: a turn starts only while the application domain is not PAUSED; a `Later`
//! handler keeps the turn (and the Spot gate) until it completes (EG-2.6); a full queue refuses
//! work instead of running it inline (EG-6.3); work queued when the actor ends is answered
//! `NotFound`, never run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{Mutex, Notify, mpsc, oneshot, watch};
use zlink_mesh::ReplyHandle;
use zlink_wire::{ActorId, DispatchKey};

use super::error::ActorError;
use super::message::ActorCtx;
use super::registry::{ActorInstance, Outcome, Step};

/// Where a request's terminal goes.
pub(crate) enum ReplyTo {
    /// A request that arrived over the mesh or ClientServer: answered on its connection.
    Wire(ReplyHandle),
    /// A request from this process.
    Local(oneshot::Sender<Outcome>),
}

impl ReplyTo {
    pub(crate) fn complete(self, out: Outcome) {
        match self {
            ReplyTo::Wire(h) => match out {
                Ok(b) => h.reply(b),
                Err(e) => h.error(e.kind(), e.to_string()),
            },
            ReplyTo::Local(tx) => {
                let _ = tx.send(out);
            }
        }
    }
}

/// Counts accepted work until its terminal; shutdown waits for zero (SB-10).
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    count: AtomicUsize,
    idle: Notify,
}

impl Inflight {
    pub(crate) fn enter(self: &Arc<Self>) -> InflightGuard {
        self.count.fetch_add(1, Ordering::AcqRel);
        InflightGuard(self.clone())
    }

    pub(crate) fn current(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Waits until no work is in flight.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.current() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Held by one accepted unit of work.
#[derive(Debug)]
pub(crate) struct InflightGuard(Arc<Inflight>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// One queued message.
pub(crate) struct Work {
    pub key: DispatchKey,
    pub payload: Bytes,
    pub reply: Option<ReplyTo>,
    pub deadline: Option<Instant>,
    pub guard: Option<InflightGuard>,
}

/// State shared by every actor of a node.
#[derive(Debug)]
pub(crate) struct ExecShared {
    /// `true` = the application domain is PAUSED: no new turn starts.
    pub paused: watch::Receiver<bool>,
    /// Send-handler failures (EG-15: logged and counted).
    pub send_failures: AtomicU64,
    /// Handler turns run.
    pub turns: AtomicU64,
}

/// The enqueue side of one actor's queue.
#[derive(Clone, Debug)]
pub(crate) struct Mailbox {
    actor_id: ActorId,
    tx: mpsc::Sender<Work>,
    ended: Arc<AtomicBool>,
}

impl Mailbox {
    /// Appends `work` to the actor's queue; a full queue refuses (never runs inline).
    pub(crate) fn try_submit(&self, work: Work) -> Result<(), Box<(ActorError, Work)>> {
        if self.ended.load(Ordering::Acquire) {
            let id = self.actor_id.clone();
            return Err(Box::new((ActorError::ActorNotFound { actor_id: id }, work)));
        }
        self.tx.try_send(work).map_err(|e| {
            let actor_id = self.actor_id.clone();
            Box::new(match e {
                mpsc::error::TrySendError::Full(w) => (ActorError::LaneFull { actor_id }, w),
                mpsc::error::TrySendError::Closed(w) => (ActorError::ActorNotFound { actor_id }, w),
            })
        })
    }

    /// Appends `work`, waiting for queue space while the lane is full (backpressure: the
    /// caller stops taking new work; nothing runs inline).
    pub(crate) async fn submit_wait(&self, work: Work) -> Result<(), Box<(ActorError, Work)>> {
        if self.ended.load(Ordering::Acquire) {
            let id = self.actor_id.clone();
            return Err(Box::new((ActorError::ActorNotFound { actor_id: id }, work)));
        }
        self.tx.send(work).await.map_err(|e| {
            let actor_id = self.actor_id.clone();
            Box::new((ActorError::ActorNotFound { actor_id }, e.0))
        })
    }

    /// Ends the actor: queued work is answered `NotFound`, the drain task stops.
    pub(crate) fn end(&self) {
        // The drain task stops when the last sender (the node's entry) is dropped; the flag
        // makes it answer the items still queued instead of running them.
        self.ended.store(true, Ordering::Release);
    }
}

/// Starts the drain task of one actor. `gate` is the Spot gate for SpotWide kinds.
pub(crate) fn spawn(
    actor_id: ActorId,
    mut instance: Box<dyn ActorInstance>,
    ctx: ActorCtx,
    gate: Option<Arc<Mutex<()>>>,
    capacity: usize,
    shared: Arc<ExecShared>,
) -> Mailbox {
    let (tx, mut rx) = mpsc::channel::<Work>(capacity.max(1));
    let ended = Arc::new(AtomicBool::new(false));
    let mailbox = Mailbox {
        actor_id: actor_id.clone(),
        tx,
        ended: ended.clone(),
    };
    tokio::spawn(async move {
        let mut paused = shared.paused.clone();
        while let Some(work) = rx.recv().await {
            if ended.load(Ordering::Acquire) {
                if let Some(r) = work.reply {
                    r.complete(Err(ActorError::ActorNotFound {
                        actor_id: actor_id.clone(),
                    }));
                }
                continue;
            }
            // PAUSED: no application turn starts (infrastructure keeps going elsewhere).
            while *paused.borrow_and_update() {
                if paused.changed().await.is_err() {
                    break;
                }
            }
            if work.deadline.is_some_and(|d| Instant::now() >= d) {
                if let Some(r) = work.reply {
                    r.complete(Err(ActorError::DeadlineExceeded));
                }
                continue;
            }
            let _gate = match &gate {
                Some(g) => Some(g.lock().await),
                None => None,
            };
            shared.turns.fetch_add(1, Ordering::Relaxed);
            let out = match instance.handle(&ctx, work.key, work.payload) {
                Step::Now(o) => o,
                Step::Later(f) => f.await,
            };
            match work.reply {
                Some(r) => r.complete(out),
                None => {
                    if let Err(e) = out {
                        shared.send_failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(actor = %actor_id, key = %work.key, error = %e, "send handler failed");
                    }
                }
            }
            drop(work.guard);
        }
    });
    mailbox
}
