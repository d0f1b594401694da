//! The owner lease of this process: its renewal task (every third of the TTL) and what
//! happens when the lease is lost before it was renewed (EG-14 fencing).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::local::LocalActor;
use super::{Node, lock};
use crate::store::StoreError;

impl Node {
    /// Spawns the owner lease renewal task (every third of `ttl`).
    pub(super) fn spawn_lease_renewal(&self, ttl: Duration) -> JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let period = ttl / 3;
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                let holder = lock(&inner.lease).holder.clone();
                match inner.store.renew_owner(holder, ttl).await {
                    Ok(l) => *lock(&inner.lease) = l,
                    Err(StoreError::LeaseNotLive { .. }) => {
                        Node { inner }.handle_lease_lost(ttl).await;
                    }
                    Err(e) => tracing::error!(error = %e, "owner lease renewal failed"),
                }
            }
        })
    }

    /// The owner lease ended (expired or superseded) before it was renewed: other nodes may
    /// already own this node's actors. The lease fences the runtime (EG-14): every local
    /// incarnation ends at once (later calls with their refs are `Unavailable`), then a new
    /// lease — a new OwnerLeaseGeneration — is registered for future activations.
    async fn handle_lease_lost(&self, ttl: Duration) {
        let ended: Vec<LocalActor> = lock(&self.inner.actors)
            .live
            .drain()
            .map(|(_, a)| a)
            .collect();
        tracing::error!(
            actors = ended.len(),
            "owner lease lost: ending every local actor"
        );
        for mut a in ended {
            a.end();
            self.leave_spot(&a.spot);
        }
        match self
            .inner
            .store
            .register_owner(self.node_rid().clone(), self.generation(), ttl)
            .await
        {
            Ok(l) => {
                tracing::warn!(lease = %l.holder.lease_generation, "new owner lease registered");
                *lock(&self.inner.lease) = l;
            }
            Err(e) => tracing::error!(error = %e, "registering a new owner lease failed"),
        }
    }
}
