//! Location Store latency: [`TimedStore`] wraps the node's store and records each call's
//! duration per [`StoreOp`] in [`StoreLatency`] (histograms for `/metrics`, totals for
//! `COUNTERS`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::node::protocol::StoreOpStats;
use crate::store::{
    ActivationRequest, ActorId, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder,
    LocationStore, NodeGeneration, NodeRid, OwnerFence, OwnerLease, Reservation, StoreFuture,
    StoreOp,
};
use crate::sync::atomic::{AtomicU64, Ordering};

type OpLabel = [(&'static str, &'static str); 1];

/// Bucket bounds of the store latency histogram, in seconds (100 µs .. 10 s).
const STORE_BUCKETS: [f64; 16] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

fn store_histogram() -> Histogram {
    Histogram::new(STORE_BUCKETS)
}

/// Latency of Location Store calls per [`StoreOp`] (a histogram each, for `/metrics`; count
/// and summed nanoseconds, for `COUNTERS`), filled by [`TimedStore`].
#[derive(Clone, Debug)]
pub(crate) struct StoreLatency {
    pub(super) family: Family<OpLabel, Histogram, fn() -> Histogram>,
    totals: std::sync::Arc<[(AtomicU64, AtomicU64); StoreOp::ALL.len()]>,
}

impl Default for StoreLatency {
    fn default() -> Self {
        let family: Family<OpLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(store_histogram);
        // Every operation is a series from the start (zeros included).
        for op in StoreOp::ALL {
            drop(family.get_or_create(&[("op", op.as_str())]));
        }
        Self {
            family,
            totals: std::sync::Arc::new(std::array::from_fn(|_| {
                (AtomicU64::new(0), AtomicU64::new(0))
            })),
        }
    }
}

fn op_index(op: StoreOp) -> usize {
    StoreOp::ALL.iter().position(|o| *o == op).unwrap_or(0)
}

impl StoreLatency {
    fn observe(&self, op: StoreOp, took: Duration) {
        self.family
            .get_or_create(&[("op", op.as_str())])
            .observe(took.as_secs_f64());
        let (count, nanos) = &self.totals[op_index(op)];
        count.fetch_add(1, Ordering::Relaxed);
        nanos.fetch_add(
            u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub(super) fn snapshot(&self) -> BTreeMap<String, StoreOpStats> {
        StoreOp::ALL
            .iter()
            .map(|op| {
                let (count, nanos) = &self.totals[op_index(*op)];
                let stats = StoreOpStats {
                    count: count.load(Ordering::Relaxed),
                    seconds: Duration::from_nanos(nanos.load(Ordering::Relaxed)).as_secs_f64(),
                };
                (op.as_str().to_owned(), stats)
            })
            .collect()
    }
}

/// Wraps the node's Location Store and records how long each call took until its future
/// completed (success or error; a future dropped before it completed records nothing).
#[derive(Debug)]
pub(crate) struct TimedStore {
    inner: std::sync::Arc<dyn LocationStore>,
    latency: StoreLatency,
}

impl TimedStore {
    pub(crate) fn new(inner: std::sync::Arc<dyn LocationStore>, latency: StoreLatency) -> Self {
        Self { inner, latency }
    }

    fn timed<'a, T: Send + 'a>(&'a self, op: StoreOp, f: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        Box::pin(async move {
            let start = Instant::now();
            let out = f.await;
            self.latency.observe(op, start.elapsed());
            out
        })
    }
}

impl LocationStore for TimedStore {
    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease> {
        self.timed(
            StoreOp::RegisterOwner,
            self.inner.register_owner(node, node_generation, ttl),
        )
    }

    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
        self.timed(StoreOp::RenewOwner, self.inner.renew_owner(holder, ttl))
    }

    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
        self.timed(StoreOp::ReleaseOwner, self.inner.release_owner(holder))
    }

    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
        self.timed(
            StoreOp::ReserveActivation,
            self.inner.reserve_activation(request),
        )
    }

    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.timed(StoreOp::MarkReady, self.inner.mark_ready(actor_id, fence))
    }

    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
        self.timed(StoreOp::Lookup, self.inner.lookup(actor_id))
    }

    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation> {
        self.timed(
            StoreOp::CasOwner,
            self.inner.cas_owner(actor_id, expected, new_owner),
        )
    }

    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation> {
        self.timed(
            StoreOp::RelocationFence,
            self.inner.relocation_fence(actor_id, expected, owner),
        )
    }

    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation> {
        self.timed(
            StoreOp::Reincarnate,
            self.inner.reincarnate(actor_id, owner),
        )
    }

    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        self.timed(StoreOp::Destroy, self.inner.destroy(actor_id, fence))
    }

    fn write_wait_limit(&self) -> Option<Duration> {
        self.inner.write_wait_limit()
    }
}
