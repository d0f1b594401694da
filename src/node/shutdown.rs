//! [`Node::shutdown`] (SB-10): refuse new work of every origin, end every session (its
//! disconnect cleanup), drain, end every actor, wait for running turns, close the client
//! connections, and only then release the owner lease; stop the lane runtime and close the
//! mesh.
//!
//! The order is the safety argument: another node may take an actor over as soon as the lease
//! is released, so nothing of this node may still run a turn, accept a record or hold a
//! request by then. Every accepted request gets exactly one terminal: its reply, or
//! `Unavailable` (an actor ended by shutdown, a forwarded call still waiting at the deadline).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use zlink_wire::DisconnectReason;

use super::local::LocalActor;
use super::{Node, lock};
use crate::actor::exec::EndReason;

impl Node {
    /// Graceful shutdown (SB-10), in this order:
    /// 1. refuse new work of every origin: client records and activations, peer 160 calls, 24
    ///    relays and 38 binds (the owner gate is closed: `Unavailable`), timer ticks, new
    ///    sessions and bindings;
    /// 2. end every open session as a disconnect does (SB-7: a 38 Disconnect per binding, the
    ///    actor owner's `OnDisconnectActor` and tombstone, the disconnected-callback) and
    ///    drain: wait until accepted work and this cleanup have their terminal, at most
    ///    `drain`;
    /// 3. answer what still waits (`Unavailable`), end every actor (queued work `Unavailable`)
    ///    and wait for the turns already running to finish; then close the client connections
    ///    (Disconnect `Shutdown`, behind the answers queued for them);
    /// 4. release the owner lease — only now may another node take the actors over — stop the
    ///    lane runtime and close the mesh (peers get Disconnect).
    ///
    /// A turn still running when the deadline has passed keeps the lease: it is not released
    /// (it expires in the store after its TTL), so no second owner can start while it runs.
    pub async fn shutdown(self, drain: Duration) {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + drain;
        inner.accepting.store(false, Ordering::Release);
        inner.gate.close();
        inner.sessions.stop_accepting();
        // Session cleanup (SB-10, SB-7.1, SB-7.4): every open session ends as a physical
        // disconnect ends it — one 38 Disconnect per binding over its stored route (the actor
        // owner runs `OnDisconnectActor`, then tombstones), then the disconnected-callback —
        // as infrastructure work the drain below waits for. The connections stay open until
        // then and close afterwards with reason `Shutdown`.
        let sessions = inner.sessions.session_ids();
        for rid in &sessions {
            inner.sessions.disconnected(*rid);
        }
        tracing::info!(
            inflight = inner.inflight.current(),
            sessions = sessions.len(),
            "shutdown: draining"
        );
        if tokio::time::timeout_at(deadline, inner.inflight.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                inflight = inner.inflight.current(),
                "shutdown: drain deadline passed"
            );
        }
        inner.closing.send_replace(true);
        let mut live: Vec<LocalActor> = lock(&inner.actors).live.drain().map(|(_, a)| a).collect();
        for a in &mut live {
            a.end(EndReason::Fenced);
        }
        drop(live);
        // Turns already running finish on their own; the lease stays until they did.
        let grace = deadline.max(tokio::time::Instant::now() + Duration::from_millis(100));
        let turns_done = tokio::time::timeout_at(grace, inner.exec.running.wait_idle())
            .await
            .is_ok();
        // Answers sent on `closing` drop their guards at once.
        let _ = tokio::time::timeout_at(grace, inner.inflight.wait_idle()).await;
        // Every accepted request has its terminal queued: the sessions' connections close now
        // (behind what is queued for them), with reason `Shutdown`.
        for rid in sessions {
            self.close_client(rid, DisconnectReason::Shutdown);
        }
        let report = inner.runtime.shutdown().await;
        tracing::debug!(gates = report.gates_ended, "shutdown: lane runtime stopped");
        // No renewal may run after the release (a renewal answered LeaseNotLive would register
        // a new lease); the inbound loop keeps refusing records until the mesh closes.
        if let Some(t) = lock(&inner.lease_task).take() {
            t.abort();
        }
        if turns_done {
            let holder = lock(&inner.lease).lease().holder.clone();
            if let Err(e) = inner.store.release_owner(holder).await {
                tracing::warn!(error = %e, "shutdown: releasing the owner lease failed");
            }
        } else {
            tracing::warn!(
                running = inner.exec.running.current(),
                "shutdown: turns still running; the owner lease is left to expire"
            );
        }
        for t in lock(&inner.tasks).drain(..) {
            t.abort();
        }
        lock(&inner.spots).clear();
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
