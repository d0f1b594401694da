//! The Redis backend's [`LocationStore`] operations: each a load → core → compare-and-set write
//! ([`super::Tx`]), retried on a changed row.

use super::*;

impl LocationStore for RedisStore {
    fn write_wait_limit(&self) -> Option<Duration> {
        Some(self.longest_wait())
    }

    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        Box::pin(self.retry_on(Lane::Lease, move |mut tx| {
            let node = node.clone();
            async move {
                let keys = [tx.keys().lease(&node), tx.keys().last_lease_generation()];
                tx.begin(&keys).await?;
                let row = tx.lease(&node).await?;
                let last = tx.last_lease_generation().await?;
                let outcome =
                    core::register(row.as_ref(), node, node_generation, ttl, tx.now, last)
                        .and_then(|r| {
                            let mut writes = vec![tx.lease_write(&r.lease)?];
                            if r.last_lease_generation != last {
                                writes.push(Write::Set(
                                    tx.keys().last_lease_generation(),
                                    r.last_lease_generation.to_string().into_bytes(),
                                ));
                            }
                            Ok((r.lease, writes))
                        });
                tx.finish(outcome).await
            }
        }))
    }

    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        Box::pin(self.retry_on(Lane::Lease, move |mut tx| {
            let holder = holder.clone();
            async move {
                tx.begin(&[tx.keys().lease(&holder.node)]).await?;
                let row = tx.lease(&holder.node).await?;
                let outcome = core::renew(row.as_ref(), &holder, ttl, tx.now)
                    .and_then(|lease| Ok((lease.clone(), vec![tx.lease_write(&lease)?])));
                tx.finish(outcome).await
            }
        }))
    }

    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        Box::pin(self.retry_on(Lane::Lease, move |mut tx| {
            let holder = holder.clone();
            async move {
                tx.begin(&[tx.keys().lease(&holder.node)]).await?;
                let row = tx.lease(&holder.node).await?;
                let writes = match core::release(row.as_ref(), &holder, tx.now) {
                    Some(lease) => vec![tx.lease_write(&lease)?],
                    None => Vec::new(),
                };
                tx.finish(Ok(((), writes))).await
            }
        }))
    }

    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        Box::pin(self.retry(move |mut tx| {
            let request = request.clone();
            async move {
                let id = &request.actor_id;
                let candidate_node = &request.owner.holder.node;
                let keys = [
                    tx.keys().actor(id),
                    tx.keys().counters(id),
                    tx.keys().lease(candidate_node),
                ];
                tx.begin(&keys).await?;
                let record = tx.actor(id).await?;
                let counters = tx.counters(id).await?;
                let candidate = tx.lease(candidate_node).await?;
                let owner = match &record {
                    Some(r) if r.owner_node == *candidate_node => candidate.clone(),
                    Some(r) => tx.lease(&r.owner_node).await?,
                    None => None,
                };
                let outcome = core::reserve(
                    record.as_ref(),
                    counters,
                    candidate.as_ref(),
                    owner.as_ref(),
                    &request,
                    tx.now,
                )
                .and_then(|decision| match decision {
                    ReserveDecision::Held(location) => Ok((Reservation::Held(location), vec![])),
                    ReserveDecision::Won(write) => {
                        let writes = tx.actor_writes(&write)?;
                        Ok((Reservation::Won(write.location), writes))
                    }
                });
                tx.finish(outcome).await
            }
        }))
    }

    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        Box::pin(self.retry(move |mut tx| {
            let actor_id = actor_id.clone();
            async move {
                let keys = [tx.keys().actor(&actor_id), tx.keys().counters(&actor_id)];
                tx.begin(&keys).await?;
                let record = tx.actor(&actor_id).await?;
                let counters = tx.counters(&actor_id).await?;
                let owner = match &record {
                    Some(r) => tx.lease(&r.owner_node).await?,
                    None => None,
                };
                let outcome = core::mark_ready(
                    record.as_ref(),
                    counters,
                    owner.as_ref(),
                    &actor_id,
                    fence,
                    tx.now,
                )
                .and_then(|decision| match decision {
                    Some(write) => Ok((write.location.clone(), tx.actor_writes(&write)?)),
                    None => record
                        .clone()
                        .map(|r| (r, vec![]))
                        .ok_or(StoreError::NotFound {
                            actor_id: actor_id.clone(),
                        }),
                });
                tx.finish(outcome).await
            }
        }))
    }

    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let keys = &self.shared.keys;
            let (instance, record): (Option<Vec<u8>>, Option<Vec<u8>>) = redis::cmd("MGET")
                .arg(keys.instance())
                .arg(keys.actor(&actor_id))
                .query_async(&mut conn.manager.clone())
                .await
                .map_err(redis_err)?;
            if instance.as_deref() != Some(conn.instance.as_slice()) {
                return Err(StoreError::backend(
                    BACKEND,
                    "the Redis store lost its data since this handle connected",
                ));
            }
            record.map(|raw| decode_actor(&actor_id, &raw)).transpose()
        })
    }

    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        let node = new_owner.holder.node.clone();
        self.owner_fenced_write(actor_id, node, move |record, counters, lease, id, now| {
            core::cas_owner(record, counters, lease, id, expected, &new_owner, now)
        })
    }

    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        let node = owner.holder.node.clone();
        self.owner_fenced_write(actor_id, node, move |record, counters, lease, id, now| {
            core::relocation_fence(record, counters, lease, id, expected, &owner, now)
        })
    }

    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation> {
        let node = owner.holder.node.clone();
        self.owner_fenced_write(actor_id, node, move |record, counters, lease, id, now| {
            core::reincarnate(record, counters, lease, id, &owner, now)
        })
    }

    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        Box::pin(self.retry(move |mut tx| {
            let (actor_id, fence) = (actor_id.clone(), fence.clone());
            async move {
                let keys = [
                    tx.keys().actor(&actor_id),
                    tx.keys().lease(&fence.holder.node),
                ];
                tx.begin(&keys).await?;
                let record = tx.actor(&actor_id).await?;
                let lease = tx.lease(&fence.holder.node).await?;
                let outcome =
                    core::destroy(record.as_ref(), lease.as_ref(), &actor_id, &fence, tx.now)
                        .map(|()| ((), vec![Write::Delete(tx.keys().actor(&actor_id))]));
                tx.finish(outcome).await
            }
        }))
    }
}
