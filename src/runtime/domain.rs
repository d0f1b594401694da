//! The two progress domains (EG-1.1, EG-13): which domain runs the current task, spawning into
//! each, and call deadlines kept by the infrastructure domain.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::sync::atomic::Ordering;

use super::error::{InvalidOperation, RuntimeError};
use super::{handled::*, lane::*};

/// The progress domain a task belongs to (EG-1.1, EG-13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Handlers, Spot/actor messages, timers, session callbacks, lifecycle callbacks.
    Application,
    /// Peer accept, completions, owner updates, relocation steps, shutdown.
    Infrastructure,
}

tokio::task_local! {
    // A marker only (EG-13): it records which domain runs the current task; no inter-work state
    // is kept here (EG-6.2).
    pub(super) static DOMAIN: Domain;
}

/// The domain of the running task, if it runs in one of the runtime's domains.
pub fn current_domain() -> Option<Domain> {
    DOMAIN.try_with(|d| *d).ok()
}

/// Fail immediately (never wait) unless the caller runs in `expected` or outside both domains
/// (EG-13: a cross-domain call fails rather than waiting).
pub fn require_domain(expected: Domain) -> Result<(), RuntimeError> {
    match current_domain() {
        Some(d) if d != expected => Err(InvalidOperation::CrossDomain.into()),
        _ => Ok(()),
    }
}

/// Await `fut`, failing with `DeadlineExceeded` when the deadline, kept by the infrastructure
/// domain, fires first (EG-16.21).
pub(crate) async fn with_deadline<T>(
    rt: &Arc<RtShared>,
    fut: BoxFuture<Result<T, RuntimeError>>,
    deadline: Option<std::time::Duration>,
) -> Result<T, RuntimeError> {
    let Some(d) = deadline else {
        return fut.await;
    };
    let (tx, rx) = oneshot::channel::<()>();
    let rt2 = rt.clone();
    rt.infra
        .spawn(DOMAIN.scope(Domain::Infrastructure, async move {
            let mut tx = tx;
            let fired = tokio::select! {
                _ = tokio::time::sleep(d) => true,
                _ = tx.closed() => false,
            };
            if fired {
                rt2.metrics.deadlines_fired.fetch_add(1, Ordering::Relaxed);
                rt2.status.publish("deadline", "fired");
                let _ = tx.send(());
            }
        }));
    tokio::select! {
        r = fut => r,
        _ = rx => Err(RuntimeError::DeadlineExceeded),
    }
}

/// Spawn `fut` as application work (a Yield's call, EG-3).
pub(crate) fn spawn_application<F>(rt: &RtShared, fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    rt.app.spawn(DOMAIN.scope(Domain::Application, fut))
}

pub(crate) fn spawn_infrastructure<F>(rt: &RtShared, fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    rt.infra.spawn(DOMAIN.scope(Domain::Infrastructure, fut))
}
