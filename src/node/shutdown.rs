//! [`Node::shutdown`] (SB-10): refuse new work, drain, release the owner lease, end every actor,
//! stop the lane runtime and close the mesh.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::local::LocalActor;
use super::{Node, lock};

impl Node {
    /// Graceful shutdown (SB-10): refuse new client work and activations, wait until accepted
    /// work has its terminal or `drain` passes, release the owner lease, end every actor and
    /// close the mesh (peers get Disconnect).
    pub async fn shutdown(self, drain: Duration) {
        let inner = &self.inner;
        inner.accepting.store(false, Ordering::Release);
        inner.sessions.stop_accepting();
        tracing::info!(inflight = inner.inflight.current(), "shutdown: draining");
        if tokio::time::timeout(drain, inner.inflight.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                inflight = inner.inflight.current(),
                "shutdown: drain deadline passed"
            );
        }
        let holder = lock(&inner.lease).lease().holder.clone();
        if let Err(e) = inner.store.release_owner(holder).await {
            tracing::warn!(error = %e, "shutdown: releasing the owner lease failed");
        }
        let mut live: Vec<LocalActor> = lock(&inner.actors).live.drain().map(|(_, a)| a).collect();
        for a in &mut live {
            a.end();
        }
        drop(live);
        for t in lock(&inner.tasks).drain(..) {
            t.abort();
        }
        lock(&inner.spots).clear();
        let report = inner.runtime.shutdown().await;
        tracing::debug!(gates = report.gates_ended, "shutdown: lane runtime stopped");
        // Wait (bounded) until every other handle is gone, then join the mesh I/O thread.
        let mut inner = self.inner;
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match Arc::try_unwrap(inner) {
                Ok(i) => {
                    i.mesh.shutdown().await;
                    break;
                }
                Err(again) => {
                    if Instant::now() >= deadline {
                        // Dropping the last handle later still closes the mesh.
                        tracing::warn!("shutdown: node handles still alive; closing without join");
                        break;
                    }
                    inner = again;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        tracing::info!("shutdown: closed");
    }
}
