//! Cold activation order (EG-14): the first record, Ready, the first record at the head of the
//! new actor's queue, then the activation barrier opens for the records that arrived meanwhile.

mod node_common;

use std::sync::Arc;
use std::time::Duration;

use node_common::*;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};
use zlink::actor::{ActorId, ActorRegistry, ActorTypeBuilder, DispatchKey, Handled, Message};
use zlink::node::Create;
use zlink::store::{
    ActivationRequest, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder, LocationStore,
    MemoryStore, NodeGeneration, NodeRid, OwnerFence, OwnerLease, Reservation, StoreFuture,
};

#[derive(Serialize, Deserialize)]
struct Note(u64);
impl Message for Note {
    const KEY: DispatchKey = DispatchKey::new(1);
    type Reply = ();
}

#[derive(Serialize, Deserialize)]
struct Seen;
impl Message for Seen {
    const KEY: DispatchKey = DispatchKey::new(2);
    type Reply = Vec<u64>;
}

fn registry() -> ActorRegistry {
    let mut r = ActorRegistry::new();
    r.register(
        ActorTypeBuilder::new("log", |_info, _init| Ok(Vec::<u64>::new()))
            .handle(|log: &mut Vec<u64>, _ctx, Note(n)| {
                log.push(n);
                Handled::ok(())
            })
            .handle(|log: &mut Vec<u64>, _ctx, Seen| Handled::ok(log.clone()))
            .build()
            .unwrap(),
    )
    .unwrap();
    r
}

/// A store that stops every activation right after its Ready commit until the test releases
/// it: the window in which a caller can already see the Ready ref but the barrier is closed.
#[derive(Debug)]
struct PausedAfterReady {
    inner: MemoryStore,
    committed: mpsc::UnboundedSender<ActorLocation>,
    release: Semaphore,
}

impl LocationStore for PausedAfterReady {
    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        self.inner.register_owner(node, node_generation, ttl)
    }
    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        self.inner.renew_owner(holder, ttl)
    }
    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        self.inner.release_owner(holder)
    }
    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        self.inner.reserve_activation(request)
    }
    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        Box::pin(async move {
            let ready = self.inner.mark_ready(actor_id, fence).await?;
            let _ = self.committed.send(ready.clone());
            self.release.acquire().await.unwrap().forget();
            Ok(ready)
        })
    }
    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        self.inner.lookup(actor_id)
    }
    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        self.inner.cas_owner(actor_id, expected, new_owner)
    }
    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.inner.relocation_fence(actor_id, expected, owner)
    }
    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation> {
        self.inner.reincarnate(actor_id, owner)
    }
    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        self.inner.destroy(actor_id, fence)
    }
}

// spec: EG-14 (cold activation: (1) the triggering record is captured first, (2) Ready is
// committed, (3) that record runs first, (4) the barrier then opens for the records that arrived
// during the activation, in arrival order)
#[tokio::test]
async fn the_first_record_runs_first_and_records_held_by_the_barrier_follow_in_order() {
    let (tx, mut committed) = mpsc::unbounded_channel();
    let store = Arc::new(PausedAfterReady {
        inner: MemoryStore::new(),
        committed: tx,
        release: Semaphore::new(0),
    });
    let node = start_node("solo", store.clone(), vec![], None, Some(registry())).await;
    let actor = ActorId::new("log-1").unwrap();

    let activating = tokio::spawn({
        let node = node.clone();
        let actor = actor.clone();
        async move {
            node.get_or_create(Create::new("log", actor).first_send(&Note(1)).unwrap())
                .await
        }
    });
    // Ready is committed: the store hands out the ref, the barrier is still closed.
    let ready = committed.recv().await.unwrap();
    let r = node.get(&actor).await.unwrap();
    assert_eq!(r.object_generation(), ready.object_generation);
    // Records arriving now are admitted by the fence and held, in arrival order.
    node.send(&r, &Note(2)).await.unwrap();
    node.send(&r, &Note(3)).await.unwrap();
    let early_request = tokio::spawn({
        let node = node.clone();
        let r = r.clone();
        async move { node.request(&r, &Seen, TIMEOUT).await }
    });
    // Another caller of get-or-create during the activation waits for the activator: its
    // first record is an ordinary send once the ref is Ready and queues after the held ones.
    let second = tokio::spawn({
        let node = node.clone();
        let actor = actor.clone();
        async move {
            node.get_or_create(Create::new("log", actor).first_send(&Note(4)).unwrap())
                .await
        }
    });
    assert!(!activating.is_finished());
    store.release.add_permits(1);
    let activated = activating.await.unwrap().unwrap();
    assert_eq!(activated, r);
    // The request held by the barrier ran after the first record and the held sends.
    assert_eq!(early_request.await.unwrap().unwrap(), vec![1, 2, 3]);
    assert_eq!(second.await.unwrap().unwrap(), r);
    node.send(&r, &Note(5)).await.unwrap();
    assert_eq!(
        node.request(&r, &Seen, TIMEOUT).await.unwrap(),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(node.counters().activations, 1);
    assert_eq!(node.counters().sends_dropped, 0);
}

// spec: EG-14 (get-or-create of an existing actor: the first record is an ordinary send; a
// refused create does not send it)
#[tokio::test]
async fn a_first_record_without_activation_is_an_ordinary_send() {
    let node = start_node("solo", memory_store(), vec![], None, Some(registry())).await;
    let actor = ActorId::new("log-2").unwrap();
    let r = node
        .create(
            Create::new("log", actor.clone())
                .first_send(&Note(1))
                .unwrap(),
        )
        .await
        .unwrap();
    let again = node
        .get_or_create(
            Create::new("log", actor.clone())
                .first_send(&Note(2))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(again, r);
    let refused = node
        .create(Create::new("log", actor).first_send(&Note(3)).unwrap())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), zlink::actor::ErrorKind::InvalidOperation);
    assert_eq!(node.request(&r, &Seen, TIMEOUT).await.unwrap(), vec![1, 2]);
}
