//! The Location Store contract (`zlink::store::contract`) run check by check against every
//! backend, plus the counting wrapper used to observe the provider's lookups (SB-14).

use std::sync::Arc;

use zlink::store::{
    self, ActivationState, CountingStore, LocationStore, ManualClock, MemoryStore, SqliteOptions,
    SqliteStore, StoreOp, StoreUrl, contract,
};

fn memory(clock: &ManualClock) -> MemoryStore {
    MemoryStore::with_clock(Arc::new(clock.clone()))
}

fn sqlite(dir: &tempfile::TempDir, clock: &ManualClock) -> SqliteStore {
    SqliteStore::open_with(
        dir.path().join("store.db"),
        SqliteOptions::default(),
        Arc::new(clock.clone()),
    )
    .expect("open sqlite store")
}

macro_rules! contract_tests {
    ($($(#[$doc:meta])* $name:ident => $check:ident;)*) => {
        mod memory_backend {
            use super::*;
            $(
                $(#[$doc])*
                #[tokio::test]
                async fn $name() {
                    let clock = ManualClock::at_wall(contract::START);
                    contract::$check(&memory(&clock), &clock).await;
                }
            )*
        }
        mod sqlite_backend {
            use super::*;
            $(
                $(#[$doc])*
                #[tokio::test]
                async fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    let clock = ManualClock::at_wall(contract::START);
                    contract::$check(&sqlite(&dir, &clock), &clock).await;
                }
            )*
        }
        mod dyn_backend {
            use super::*;
            $(
                $(#[$doc])*
                #[tokio::test]
                async fn $name() {
                    // The trait is object safe: the runtime holds `Arc<dyn LocationStore>`.
                    let dir = tempfile::tempdir().unwrap();
                    let clock = ManualClock::at_wall(contract::START);
                    let url = StoreUrl::Sqlite(dir.path().join("dyn.db"), Default::default());
                    let store: Arc<dyn LocationStore> =
                        store::open_with_clock(&url, Arc::new(clock.clone())).unwrap();
                    contract::$check(&store, &clock).await;
                }
            )*
        }
    };
}

contract_tests! {
    /// Owner leases: renew, expiry, restart supersedes, stale generation refused.
    owner_leases => check_owner_leases;
    // spec: EG-14 — only the reservation winner runs the factory; Ready commit; lookup.
    reserve_ready_lookup => check_reserve_ready_lookup;
    // spec: SB-12 — a stale owner fence (dead lease) never reserves.
    reservation_needs_live_lease => check_reservation_needs_live_lease;
    // spec: EG-14, SB-12 — the Ready commit is fenced.
    mark_ready_fences => check_mark_ready_fences;
    // spec: SB-8.9, SB-1.3, SB-12 — owner CAS with the source fence.
    cas_owner_fences => check_cas_owner_fences;
    // spec: SB-8.5, SB-8.9 — the relocation fence: the only fence a target's CAS wins with;
    // retiring it is a durable abort.
    relocation_fence => check_relocation_fence;
    // spec: SB-8.6, SB-4.1 — the owner replaces its incarnation in one write: a new
    // ObjectGeneration, no moment without a record, no CAS with the old fences afterwards.
    reincarnate => check_reincarnate;
    // spec: SB-4.1 — destroy + re-create gives a new ObjectGeneration.
    destroy_and_recreate => check_destroy_and_recreate;
    // spec: EG-14 — a dead owner's actor is re-reservable after lease expiry or restart.
    dead_owner_takeover => check_dead_owner_takeover;
    // spec: EG-14 — reservations in flight together on one handle: exactly one winner.
    concurrent_reservations => check_concurrent_reservations;
    // spec: SB-12, EG-14 — a stale owner's destroy after a takeover leaves the new owner's
    // record intact.
    stale_destroy_after_takeover => check_stale_destroy_after_takeover;
}

// spec: EG-14 — reservations racing from independent handles (one SQLite connection and thread
// each, as separate processes hold them) on threads: exactly one winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_reservations_racing_from_independent_handles_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at_wall(contract::START);
    let handles: Vec<Arc<SqliteStore>> = (0..6).map(|_| Arc::new(sqlite(&dir, &clock))).collect();
    contract::check_racing_reservations(handles, 8).await;
}

// spec: EG-14 — the same race on the in-memory backend, from threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_reservations_racing_from_threads_have_one_winner() {
    let clock = ManualClock::at_wall(contract::START);
    let store = Arc::new(memory(&clock));
    contract::check_racing_reservations(vec![store; 6], 8).await;
}

// The counting wrapper observes every provider call, so a test can assert that no lookup
// happened (here: create + Ready + CAS issue no lookup; one explicit lookup counts 1). It is the
// instrument of SB-14.6, which the session tests exercise.
#[tokio::test]
async fn counting_store_counts_every_call_per_operation() {
    let clock = ManualClock::at_wall(contract::START);
    let counting = CountingStore::new(memory(&clock));
    let before = counting.counts();
    let a = contract::register(&counting, "node-a", 1).await;
    let b = contract::register(&counting, "node-b", 1).await;
    let ready = contract::create_ready(&counting, "c1", "T", &a).await;
    counting
        .cas_owner(contract::actor("c1"), ready.fence(), contract::owner(&b))
        .await
        .unwrap();
    let during = counting.counts().since(&before);
    assert_eq!(during.get(StoreOp::Lookup), 0, "no lookup happened");
    assert_eq!(during.get(StoreOp::RegisterOwner), 2);
    assert_eq!(during.get(StoreOp::ReserveActivation), 1);
    assert_eq!(during.get(StoreOp::MarkReady), 1);
    assert_eq!(during.get(StoreOp::CasOwner), 1);
    assert_eq!(during.total(), 5);

    let found = counting
        .lookup(contract::actor("c1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.state, ActivationState::Ready);
    assert_eq!(counting.count(StoreOp::Lookup), 1);

    // Counted at call time: a future dropped unpolled still counts.
    drop(counting.lookup(contract::actor("c1")));
    assert_eq!(counting.count(StoreOp::Lookup), 2);

    counting.reset();
    assert_eq!(counting.counts().total(), 0);
    for op in StoreOp::ALL {
        assert_eq!(counting.count(op), 0);
    }
}

// The wrapper composes with the object-safe form the runtime holds.
#[tokio::test]
async fn counting_store_wraps_a_dyn_store_and_passes_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    contract::run_all(|clock| {
        n += 1;
        let url = StoreUrl::Sqlite(dir.path().join(format!("c{n}.db")), Default::default());
        let inner: Arc<dyn LocationStore> = store::open_with_clock(&url, Arc::new(clock)).unwrap();
        CountingStore::new(inner)
    })
    .await;
    let counting = CountingStore::new(Arc::new(MemoryStore::new()) as Arc<dyn LocationStore>);
    let shared: Arc<dyn LocationStore> = Arc::new(counting);
    assert_eq!(shared.lookup(contract::actor("none")).await.unwrap(), None);
}

// spec: SB-4.1 — `memory:` through `store::open` is a working backend too.
#[tokio::test]
async fn memory_url_opens_a_working_store() {
    let store = store::open(&"memory:".parse().unwrap()).unwrap();
    let lease = contract::register(&store, "node-a", 1).await;
    let ready = contract::create_ready(&store, "u", "T", &lease).await;
    assert_eq!(ready.state, ActivationState::Ready);
}

// --- Redis backend (a real server: ZLINK_TEST_REDIS_URL, started by .ci/run) ---

// spec: EG-14, SB-4.1, SB-12 — the whole contract on the Redis backend, opened from its URL as
// the runtime does (`Arc<dyn LocationStore>`), each check under its own key prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_meets_the_contract() {
    let Some(url) = contract::redis_test_url("redis_store_meets_the_contract") else {
        return;
    };
    contract::run_all(|clock| {
        let url: StoreUrl = contract::with_unique_prefix(&url, "contract")
            .parse()
            .unwrap();
        store::open_with_clock(&url, Arc::new(clock)).unwrap()
    })
    .await;
}

// spec: SB-14.6 — the counting wrapper composes with the Redis backend too.
#[tokio::test]
async fn redis_store_meets_the_contract_through_the_counting_wrapper() {
    let Some(url) =
        contract::redis_test_url("redis_store_meets_the_contract_through_the_counting_wrapper")
    else {
        return;
    };
    contract::run_all(|clock| {
        let url: StoreUrl = contract::with_unique_prefix(&url, "counting")
            .parse()
            .unwrap();
        CountingStore::new(store::open_with_clock(&url, Arc::new(clock)).unwrap())
    })
    .await;
}
