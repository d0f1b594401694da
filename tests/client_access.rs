//! Who may do what on the client port (issue 26 item 5, `docs/CLIENT-PROTOCOL.md` 7.1), in
//! process: an application's authorization hook decides per operation and actor type; what
//! the node keeps per session goes when the session ends, and framework operations in flight
//! are bounded per session. (Against `zlink-node` processes: `node/tests/node_access.rs`.)

mod node_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use node_common::{client_of, memory_store, mesh_config, wait_until};
use zlink::actor::ErrorKind;
use zlink::node::access::{ClientAccess, ClientPolicy};
use zlink::node::client::{ClientError, Placement};
use zlink::node::{Node, NodeOptions};
use zlink::store::{
    ActivationRequest, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder, LocationStore,
    OwnerFence, OwnerLease, Reservation, StoreFuture,
};
use zlink_apps::demo;
use zlink_wire::{ActorId, NodeGeneration, NodeRid};

/// The error is the node's refusal: `InvalidOperation`, "not authorized".
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(what: &str, r: Result<T, ClientError>) {
    match r {
        Err(ClientError::Remote { kind, detail }) => {
            assert_eq!(kind, ErrorKind::InvalidOperation, "{what}: {detail}");
            assert!(detail.starts_with("not authorized"), "{what}: {detail}");
        }
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

/// A store whose `lookup` never answers (counting the calls), the rest the memory store's.
#[derive(Debug)]
struct HangingLookup {
    inner: Arc<dyn LocationStore>,
    lookups: Arc<AtomicUsize>,
}

impl LocationStore for HangingLookup {
    fn register_owner(
        &self,
        node: NodeRid,
        generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        self.inner.register_owner(node, generation, ttl)
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
        self.inner.mark_ready(actor_id, fence)
    }
    fn lookup(&self, _actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
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

// spec: issue 26 "also" — framework operations in flight are bounded per session: with the
// store hanging, one session's GETs beyond the bound are refused at once (`Unavailable`,
// counted `get/busy`) while another session is still served; the node keeps no state for a
// session after it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framework_operations_in_flight_are_bounded_per_session_and_freed_with_it() {
    const BOUND: usize = 8;
    let lookups = Arc::new(AtomicUsize::new(0));
    let store: Arc<dyn LocationStore> = Arc::new(HangingLookup {
        inner: memory_store(),
        lookups: lookups.clone(),
    });
    let mut mc = mesh_config("n");
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    let node = Node::start(
        NodeOptions::new(mc, store, demo::registry().unwrap()).with_client_access(ClientAccess {
            policy: ClientPolicy::Open,
            max_operations_per_session: BOUND,
            ..ClientAccess::new()
        }),
    )
    .await
    .unwrap();
    let greedy = Arc::new(client_of(&node));
    let mut waiting = Vec::new();
    for i in 0..BOUND {
        let c = greedy.clone();
        waiting.push(tokio::spawn(async move { c.get(&format!("g{i}")).await }));
    }
    wait_until("the store holds the greedy session's lookups", || {
        lookups.load(Ordering::SeqCst) == BOUND
    })
    .await;
    let e = greedy.get("one-more").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("too many operations"), "{e}");
    assert_eq!(
        lookups.load(Ordering::SeqCst),
        BOUND,
        "it never reached the store"
    );
    // Another session is served meanwhile (its GET reaches the store).
    let other = Arc::new(client_of(&node));
    assert!(other.info().await.is_ok());
    let other_get = {
        let other = other.clone();
        tokio::spawn(async move { other.get("other").await })
    };
    wait_until("the other session's lookup reached the store", || {
        lookups.load(Ordering::SeqCst) == BOUND + 1
    })
    .await;
    assert_eq!(node.counters().client_refusals["get/busy"], 1);

    // The sessions end: what the node kept for them goes.
    assert_eq!(node.access_sessions(), 2);
    other_get.abort();
    for w in waiting {
        w.abort();
        let _ = w.await;
    }
    let Ok(greedy) = Arc::try_unwrap(greedy) else {
        panic!("the only handle")
    };
    greedy.close().await;
    wait_until("the greedy session's access state is freed", || {
        node.access_sessions() == 1
    })
    .await;
    let _ = other_get.await;
    let Ok(other) = Arc::try_unwrap(other) else {
        panic!("the only handle")
    };
    other.close().await;
    wait_until("no access state is left", || node.access_sessions() == 0).await;
    node.shutdown(Duration::from_millis(100)).await;
}

// spec: issue 26 item 5 — the application's authorization hook decides per operation and
// actor type: here strangers may create and call `echo` actors only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_hook_decides_per_operation_and_actor_type() {
    use zlink::node::access::{AccessRequest, ClientOperation};
    let mut mc = mesh_config("n");
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    let hook = |r: &AccessRequest<'_>| {
        matches!(r.operation, ClientOperation::Create | ClientOperation::Call)
            && r.actor_type == Some("echo")
    };
    let node = Node::start(
        NodeOptions::new(mc, memory_store(), demo::registry().unwrap()).with_client_access(
            ClientAccess {
                policy: ClientPolicy::Custom(Arc::new(hook)),
                ..ClientAccess::new()
            },
        ),
    )
    .await
    .unwrap();
    let c = client_of(&node);
    let echo = c.create("echo", "e", Placement::default()).await.unwrap();
    let reply = c.request(&echo, &demo::Echo(b"hi".to_vec())).await.unwrap();
    assert_eq!(reply.0, b"hi");
    assert_refused(
        "create counter",
        c.create("counter", "k", Placement::default()).await,
    );
    assert_refused("destroy echo", c.destroy(&echo).await);
    assert_refused("get echo", c.get("e").await);
    let refusals = node.counters().client_refusals;
    assert_eq!(refusals["create/denied"], 1);
    assert_eq!(refusals["destroy/denied"], 1);
    assert_eq!(refusals["get/denied"], 1);
    c.close().await;
    node.shutdown(Duration::from_millis(100)).await;
}
