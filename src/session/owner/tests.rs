//! Unit tests of the session owner's driver.

use super::*;
use crate::runtime::{Runtime, RuntimeConfig};

/// A host that accepts sessions and refuses everything else (the cache needs no more).
struct Host;

impl SessionHost for Host {
    fn send_bind(
        &self,
        _: &NodeRid,
        _: BoundSessionBind,
        _: Duration,
    ) -> BoxFuture<(Result<BindSnapshot, Refusal>, Option<AfterBind>)> {
        Box::pin(async { (Err((ErrorKind::Unavailable, "test".into())), None) })
    }
    fn send_relay(
        &self,
        _: RelayTicket,
        _: DispatchKey,
        _: Bytes,
        _: Option<Duration>,
        _: Option<oneshot::Sender<()>>,
    ) -> RelaySent {
        RelaySent::Now(Err((ErrorKind::Unavailable, "test".into())))
    }
    fn try_push(
        &self,
        _: SessionRid,
        _: DispatchKey,
        _: Bytes,
    ) -> Result<(), zlink_mesh::TryPushError> {
        Ok(())
    }
    fn push(&self, _: SessionRid, _: DispatchKey, _: Bytes) -> BoxFuture<Result<(), SendError>> {
        Box::pin(async { Ok(()) })
    }
    fn close(&self, _: SessionRid, _: DisconnectReason) {}
    fn accept(&self, _: SessionRid) {}
    fn owner_lease(&self) -> OwnerLeaseGeneration {
        OwnerLeaseGeneration::new(1)
    }
    fn get_actor(&self, _: ActorId) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
        Box::pin(async { Err(crate::actor::ActorError::ShuttingDown) })
    }
    fn create_actor(
        &self,
        _: crate::actor::Create,
        _: bool,
    ) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
        Box::pin(async { Err(crate::actor::ActorError::ShuttingDown) })
    }
    fn enter_work(&self) -> Option<InflightGuard> {
        None
    }

    fn credit_return(&self) -> std::sync::Weak<dyn CreditReturn> {
        std::sync::Weak::<Nowhere>::new()
    }
}

/// Credit returned nowhere (this host's packets hold none).
struct Nowhere;

impl CreditReturn for Nowhere {
    fn return_credit(&self, _: zlink_mesh::Origin, _: u32, _: u64) {}
}

/// What the actor owner's after-terminal work (its 51) saw of the bind's session: whether
/// the binding was published when it ran.
type Seen = Arc<Mutex<Vec<bool>>>;

/// A host whose actor owner (this node) registers every bind and returns an after-terminal
/// step that records whether the session owner had stored the route by then.
struct BindingHost {
    owner: Arc<std::sync::OnceLock<(std::sync::Weak<SessionOwner>, SessionRid)>>,
    seen: Seen,
}

impl SessionHost for BindingHost {
    fn send_bind(
        &self,
        _: &NodeRid,
        req: BoundSessionBind,
        _: Duration,
    ) -> BoxFuture<(Result<BindSnapshot, Refusal>, Option<AfterBind>)> {
        let (owner, seen) = (self.owner.clone(), self.seen.clone());
        let snap = BindSnapshot {
            actor: req.actor.clone(),
            object_generation: req.object_generation,
            location: zlink_wire::ActorLocation {
                mesh: zlink_wire::MeshName::new("m").unwrap(),
                node: NodeRid::new("a").unwrap(),
                node_generation: req.target_node_generation,
                authority_owner_generation: req.authority_owner_generation,
                owner_lease_generation: req.owner_lease_generation,
            },
            binding_generation: req.binding_generation,
        };
        let actor = req.actor;
        let after: AfterBind = Box::pin(async move {
            let (o, rid) = owner.get().expect("set").clone();
            let o = o.upgrade().expect("owner");
            let published = o.entry(rid).is_some_and(|e| e.find(&actor).is_some());
            seen.lock().unwrap().push(published);
        });
        Box::pin(async move { (Ok(snap), Some(after)) })
    }
    fn send_relay(
        &self,
        _: RelayTicket,
        _: DispatchKey,
        _: Bytes,
        _: Option<Duration>,
        _: Option<oneshot::Sender<()>>,
    ) -> RelaySent {
        RelaySent::Now(Err((ErrorKind::Unavailable, "test".into())))
    }
    fn try_push(
        &self,
        _: SessionRid,
        _: DispatchKey,
        _: Bytes,
    ) -> Result<(), zlink_mesh::TryPushError> {
        Ok(())
    }
    fn push(&self, _: SessionRid, _: DispatchKey, _: Bytes) -> BoxFuture<Result<(), SendError>> {
        Box::pin(async { Ok(()) })
    }
    fn close(&self, _: SessionRid, _: DisconnectReason) {}
    fn accept(&self, _: SessionRid) {}
    fn owner_lease(&self) -> OwnerLeaseGeneration {
        OwnerLeaseGeneration::new(1)
    }
    fn get_actor(&self, _: ActorId) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
        Box::pin(async { Err(crate::actor::ActorError::ShuttingDown) })
    }
    fn create_actor(
        &self,
        _: crate::actor::Create,
        _: bool,
    ) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
        Box::pin(async { Err(crate::actor::ActorError::ShuttingDown) })
    }
    fn enter_work(&self) -> Option<InflightGuard> {
        None
    }
    fn credit_return(&self) -> std::sync::Weak<dyn CreditReturn> {
        std::sync::Weak::<Nowhere>::new()
    }
}

// spec: SB-6.1
// The actor owner's 51 after a same-node bind runs only once the terminal is applied: the
// session owner has stored the route (the bind is published) when it runs.
#[test]
fn a_same_node_replacement_51_runs_after_the_route_is_stored() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let cell = Arc::new(std::sync::OnceLock::new());
    let seen = Seen::default();
    let owner = Arc::new(SessionOwner::new(
        SessionOwnerConfig {
            node: NodeRid::new("a").unwrap(),
            lifecycle: SessionLifecycleGeneration::new(1),
            callback_timeout: Duration::from_secs(1),
            binding_limit: 32,
            request_timeout: Duration::from_secs(1),
            clock: Arc::new(super::super::clock::SystemClock),
            seal_timeout: Duration::from_secs(3),
            held_limit: (1024, 1 << 20),
        },
        Box::new(BindingHost {
            owner: cell.clone(),
            seen: seen.clone(),
        }),
        runtime.clone(),
        HandlerRegistry::default(),
        Callbacks::default(),
        tokio.handle().clone(),
    ));
    let rid = SessionRid::new(5);
    let entered = tokio.enter();
    let entry = owner.connected(rid).unwrap();
    cell.set((Arc::downgrade(&owner), rid)).unwrap();
    let actor = |i: u32| {
        ActorRef::from_parts(
            ActorId::new(format!("x{i}")).unwrap(),
            "t".into(),
            zlink_wire::ObjectGeneration::new(1),
            zlink_wire::ActorLocation {
                mesh: zlink_wire::MeshName::new("m").unwrap(),
                node: NodeRid::new("a").unwrap(),
                node_generation: NodeGeneration::new(1),
                authority_owner_generation: zlink_wire::AuthorityOwnerGeneration::new(1),
                owner_lease_generation: OwnerLeaseGeneration::new(1),
            },
        )
    };
    for i in 0..20 {
        tokio.block_on(owner.bind(&entry, &actor(i))).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < 20 {
        assert!(std::time::Instant::now() < deadline, "the 51s never ran");
        std::thread::yield_now();
    }
    assert!(
        seen.lock().unwrap().iter().all(|p| *p),
        "a 51 ran before the route was stored: {:?}",
        seen.lock().unwrap()
    );
    drop((entry, entered));
    tokio.block_on(runtime.shutdown());
}

/// A session owner of node "a" with no handlers or callbacks, on `runtime`.
fn owner_on(tokio: &tokio::runtime::Runtime, runtime: &Runtime) -> Arc<SessionOwner> {
    Arc::new(SessionOwner::new(
        SessionOwnerConfig {
            node: NodeRid::new("a").unwrap(),
            lifecycle: SessionLifecycleGeneration::new(1),
            callback_timeout: Duration::from_secs(1),
            binding_limit: 4,
            request_timeout: Duration::from_secs(1),
            clock: Arc::new(super::super::clock::SystemClock),
            seal_timeout: Duration::from_secs(3),
            held_limit: (1024, 1 << 20),
        },
        Box::new(Host),
        runtime.clone(),
        HandlerRegistry::default(),
        Callbacks::default(),
        tokio.handle().clone(),
    ))
}

// A packet's admission reads the entry's copy of whether the aggregate accepts packets
// (no lock): it follows every change made under the aggregate's lock, and the session that
// ended refuses packets.
#[test]
fn a_sessions_copy_of_accepting_packets_follows_its_aggregate() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let owner = owner_on(&tokio, &runtime);
    let entered = tokio.enter();
    let e = owner.connected(SessionRid::new(3)).unwrap();
    assert!(e.accepts_packets() && e.agg().accepts_packets());
    let _ = e.agg().disconnect();
    assert!(!e.agg().accepts_packets());
    assert!(
        !e.accepts_packets(),
        "the copy did not follow the aggregate"
    );
    // refused at admission: no handler is looked up, no turn submitted
    let admitted = owner.packet(
        SessionRid::new(3),
        DispatchKey::new(1),
        Bytes::new(),
        None,
        Done::nothing,
        Inline::No,
    );
    assert_eq!(admitted, Admitted::Now);
    assert_eq!(
        owner
            .flow()
            .get(FlowRecord::Packet, FlowReject::SessionClosing),
        1,
        "{:?}",
        owner.flow().snapshot()
    );
    drop((e, entered));
    tokio.block_on(runtime.shutdown());
}

/// A session cache hands out exactly the map's entry for its SessionRid: an entry that
/// left the map (disconnected) is not handed out again, even while something still holds
/// it, and the session opened again for that SessionRid is found instead.
#[test]
fn a_session_cache_never_hands_out_an_entry_that_left_the_map() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let owner = owner_on(&tokio, &runtime);
    let entered = tokio.enter();
    let rid = SessionRid::new(9);
    let mut cache = SessionCache::default();
    assert!(
        owner.entry_cached(&mut cache, rid).is_none(),
        "no session yet"
    );
    let first = owner.connected(rid).unwrap();
    let got = owner.entry_cached(&mut cache, rid).unwrap().clone();
    assert!(Arc::ptr_eq(&got, &first));
    assert!(Arc::ptr_eq(
        owner.entry_cached(&mut cache, rid).unwrap(),
        &first
    ));
    // Held within a pass, only remembered (weakly) after it: found again without the map.
    cache.end_pass();
    assert!(cache.held.is_none());
    assert!(Arc::ptr_eq(
        owner.entry_cached(&mut cache, rid).unwrap(),
        &first
    ));
    owner.disconnected(rid);
    assert!(
        owner.entry_cached(&mut cache, rid).is_none(),
        "the disconnected entry is still alive (held here) but not handed out"
    );
    let second = owner.connected(rid).unwrap();
    assert!(!Arc::ptr_eq(&second, &first));
    assert!(Arc::ptr_eq(
        owner.entry_cached(&mut cache, rid).unwrap(),
        &second
    ));
    // Another session: looked up, and cached in its place.
    let other = owner.connected(SessionRid::new(10)).unwrap();
    assert!(Arc::ptr_eq(
        owner.entry_cached(&mut cache, SessionRid::new(10)).unwrap(),
        &other
    ));
    // A pass's end lets go of the entry: the cache keeps nothing alive between passes.
    let held = Arc::strong_count(&other);
    cache.end_pass();
    assert_eq!(
        Arc::strong_count(&other),
        held - 1,
        "still held by the cache"
    );
    drop((got, first, entered));
    tokio.block_on(runtime.shutdown());
}

/// What [`PushHost`]'s client budget does: room for `room` pushes at once; a waiting push
/// (`push`) waits for `credit`, then goes (or, with `time_out`, fails as a push whose credit
/// never came). `sent` lists the keys of the pushes that went, in the order they went.
#[derive(Default)]
struct PushBudget {
    room: std::sync::atomic::AtomicUsize,
    credit: Notify,
    time_out: AtomicBool,
    sent: Mutex<Vec<u32>>,
}

/// A host whose client budget is a [`PushBudget`] (everything else as [`Host`]).
struct PushHost(Arc<PushBudget>);

impl SessionHost for PushHost {
    fn send_bind(
        &self,
        n: &NodeRid,
        b: BoundSessionBind,
        t: Duration,
    ) -> BoxFuture<(Result<BindSnapshot, Refusal>, Option<AfterBind>)> {
        Host.send_bind(n, b, t)
    }
    fn send_relay(
        &self,
        t: RelayTicket,
        k: DispatchKey,
        p: Bytes,
        d: Option<Duration>,
        a: Option<oneshot::Sender<()>>,
    ) -> RelaySent {
        Host.send_relay(t, k, p, d, a)
    }
    fn try_push(
        &self,
        _: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), zlink_mesh::TryPushError> {
        let room = &self.0.room;
        if room
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1))
            .is_err()
        {
            return Err(zlink_mesh::TryPushError::Full(payload));
        }
        lock(&self.0.sent).push(key.get());
        Ok(())
    }
    fn push(&self, _: SessionRid, key: DispatchKey, _: Bytes) -> BoxFuture<Result<(), SendError>> {
        let budget = self.0.clone();
        Box::pin(async move {
            budget.credit.notified().await;
            if budget.time_out.load(Ordering::Acquire) {
                return Err(SendError::DeadlineExceeded(Duration::from_secs(1)));
            }
            lock(&budget.sent).push(key.get());
            Ok(())
        })
    }
    fn close(&self, _: SessionRid, _: DisconnectReason) {}
    fn accept(&self, _: SessionRid) {}
    fn owner_lease(&self) -> OwnerLeaseGeneration {
        OwnerLeaseGeneration::new(1)
    }
    fn get_actor(&self, a: ActorId) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
        Host.get_actor(a)
    }
    fn create_actor(
        &self,
        c: crate::actor::Create,
        o: bool,
    ) -> BoxFuture<Result<ActorRef, crate::actor::ActorError>> {
        Host.create_actor(c, o)
    }
    fn enter_work(&self) -> Option<InflightGuard> {
        None
    }
    fn credit_return(&self) -> std::sync::Weak<dyn CreditReturn> {
        std::sync::Weak::<Nowhere>::new()
    }
}

/// A session owner of node "a" whose client budget is `budget`.
fn push_owner(
    tokio: &tokio::runtime::Runtime,
    runtime: &Runtime,
    budget: &Arc<PushBudget>,
) -> Arc<SessionOwner> {
    Arc::new(SessionOwner::new(
        SessionOwnerConfig {
            node: NodeRid::new("a").unwrap(),
            lifecycle: SessionLifecycleGeneration::new(1),
            callback_timeout: Duration::from_secs(1),
            binding_limit: 4,
            request_timeout: Duration::from_secs(1),
            clock: Arc::new(super::super::clock::SystemClock),
            seal_timeout: Duration::from_secs(3),
            held_limit: (1024, 1 << 20),
        },
        Box::new(PushHost(budget.clone())),
        runtime.clone(),
        HandlerRegistry::default(),
        Callbacks::default(),
        tokio.handle().clone(),
    ))
}

/// A checked 36 of session `rid` with handler key `key` (what `send_accepted` is given).
fn push_of(rid: SessionRid, key: u32) -> BoundSessionSend {
    BoundSessionSend {
        actor: ActorId::new("p").unwrap(),
        object_generation: zlink_wire::ObjectGeneration::new(1),
        source_node_generation: NodeGeneration::new(1),
        authority_owner_generation: zlink_wire::AuthorityOwnerGeneration::new(1),
        session_lifecycle: SessionLifecycleGeneration::new(1),
        session: rid,
        binding_generation: BindingGeneration::new(1),
        key: DispatchKey::new(key),
    }
}

/// Waits (20 s guard) until `done` holds.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

// spec: SB-5.5 (a push waits for its client's credit without holding up anything but that
// session's later pushes, which keep their order)
// A push that finds the client's budget full opens the session's queue and waits for credit;
// later pushes queue behind it as data; once it went, those go in order in the same step while
// the budget has room, the queue closes, and the session's next pushes go at once.
#[test]
fn pushes_behind_one_waiting_for_credit_follow_it_in_order_then_go_at_once() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let budget = Arc::new(PushBudget::default());
    let owner = push_owner(&tokio, &runtime, &budget);
    let entered = tokio.enter();
    let rid = SessionRid::new(4);
    let entry = owner.connected(rid).unwrap();
    let push = |k: u32| {
        owner.send_accepted(
            entry.clone(),
            &push_of(rid, k),
            Bytes::new(),
            None::<fn() -> Done>,
        )
    };
    assert_eq!(push(1), Admitted::Queued, "the budget is full: it waits");
    for k in 2..=50 {
        assert_eq!(push(k), Admitted::Queued, "behind the waiting push");
    }
    let stats = owner.push_backlog_stats();
    assert_eq!((stats.opened, stats.waited, stats.waiting_now), (1, 50, 50));
    assert!(
        lock(&budget.sent).is_empty(),
        "nothing overtook the waiting push"
    );
    // The budget has room again, but the first push still waits for its credit: a later
    // push queues behind it all the same.
    budget.room.store(1000, Ordering::Release);
    assert_eq!(push(51), Admitted::Queued, "behind the waiting push");
    assert!(
        lock(&budget.sent).is_empty(),
        "a push overtook the waiting one"
    );
    // Its credit comes: it goes, then the 50 behind it.
    budget.credit.notify_one();
    wait_for("the queue to empty", || {
        owner.push_backlog_stats().waiting_now == 0
    });
    assert_eq!(*lock(&budget.sent), (1..=51).collect::<Vec<_>>());
    wait_for("the queue to close", || {
        owner.pushes.open.load(Ordering::Acquire) == 0
    });
    for k in 52..=60 {
        assert_eq!(push(k), Admitted::Now, "the queue closed: sent at once");
    }
    assert_eq!(*lock(&budget.sent), (1..=60).collect::<Vec<_>>());
    let stats = owner.push_backlog_stats();
    assert_eq!((stats.opened, stats.waited, stats.refused), (1, 51, 0));
    assert_eq!(owner.flow().total(FlowRecord::Push), 0, "none refused");
    drop((entry, entered));
    tokio.block_on(runtime.shutdown());
}

// spec: SB-5.9 (a push not delivered is counted with its reason)
// A push whose credit never came stalls the session: what queued behind it goes only if the
// budget has room at once, else it is refused and counted (`ClientBacklogFull`), and the queue
// closes (nothing stays held for a client that does not read); a push that goes again ends
// the stall.
#[test]
fn a_stalled_sessions_queued_pushes_are_refused_without_room_and_the_queue_closes() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let budget = Arc::new(PushBudget::default());
    let owner = push_owner(&tokio, &runtime, &budget);
    let entered = tokio.enter();
    let rid = SessionRid::new(6);
    let entry = owner.connected(rid).unwrap();
    let push = |k: u32| {
        owner.send_accepted(
            entry.clone(),
            &push_of(rid, k),
            Bytes::new(),
            None::<fn() -> Done>,
        )
    };
    for k in 1..=10 {
        assert_eq!(push(k), Admitted::Queued);
    }
    // The waiting push times out, and the budget stays full.
    budget.time_out.store(true, Ordering::Release);
    budget.credit.notify_one();
    wait_for("the queue to close", || {
        owner.pushes.open.load(Ordering::Acquire) == 0
    });
    assert!(lock(&budget.sent).is_empty());
    assert_eq!(owner.push_backlog_stats().waiting_now, 0);
    assert_eq!(
        owner
            .flow()
            .get(FlowRecord::Push, FlowReject::ClientBacklogFull),
        9,
        "{:?}",
        owner.flow().snapshot()
    );
    assert_eq!(
        owner
            .flow()
            .get(FlowRecord::Push, FlowReject::SessionClosed),
        1,
        "the push that timed out"
    );
    // With room again the next push goes at once.
    budget.room.store(1, Ordering::Release);
    assert_eq!(push(11), Admitted::Now);
    assert_eq!(*lock(&budget.sent), vec![11]);
    drop((entry, entered));
    tokio.block_on(runtime.shutdown());
}
