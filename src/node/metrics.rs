//! The operator's view of a node: one counter snapshot ([`NodeCounters`], built by
//! [`Node::counters`] when asked) served two ways — the `COUNTERS` client operation
//! (`zlink-node ctl counters`) and, when configured, a Prometheus endpoint (`GET /metrics`,
//! text format 0.0.4) on its own HTTP port.
//!
//! Who owns the counters: each layer counts its own events where they happen — the mesh its
//! drops (`DropReason`) and terminal replies (`zlink_mesh::Counters`), the session owner its
//! refusals (`FlowCounters`) and backlogs, the node its calls, turns, activations and client
//! operations (`ClientOps`), the `TimedStore` wrapper the Location Store latency. This module
//! adds no counter to the per-message path: a scrape reads them all at once (gauges such as
//! sessions, bindings and actors per Spot kind are computed at that moment from the node's
//! tables).
//!
//! The HTTP server (hyper, HTTP/1.1) serves `GET /metrics` only, holds at most
//! [`MAX_CONNECTIONS`] connections (more are closed at once) and gives a client
//! [`HEADER_TIMEOUT`] to send its request head: what a stranger on that port can make the node
//! hold is bounded. The port has no authentication: bind it to a trusted network.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Weak;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use zlink_mesh::{DropReason, ReplyOrigin};
use zlink_wire::ErrorKind;

use super::access::ClientOperation;
use super::protocol::{LaneDepthStats, NodeCounters, StoreOpStats};
use super::{Inner, Node, lock};
use crate::actor::SpotKind;
use crate::actor::spot::UserMode;
use crate::session::{FlowRecord, FlowReject};
use crate::store::{
    ActivationRequest, ActorId, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder,
    LocationStore, NodeGeneration, NodeRid, OwnerFence, OwnerLease, Reservation, StoreFuture,
    StoreOp,
};
use crate::sync::atomic::{AtomicU64, Ordering};

/// Connections the metrics server holds at once; a connection beyond them is closed at once.
pub const MAX_CONNECTIONS: usize = 64;

/// Connections one source host (IP address) may hold at once: one host cannot take all of
/// [`MAX_CONNECTIONS`]; a connection beyond it is closed at once.
pub const MAX_CONNECTIONS_PER_HOST: usize = 8;

/// How long a metrics client has to send its request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The metrics endpoint's connection slots: in all and per source host, and the connections
/// refused for want of one (`metrics_refused`: `too_many`, `too_many_from_host`).
#[derive(Debug, Default)]
pub(crate) struct EndpointSlots {
    hosts: crate::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    open: crate::sync::atomic::AtomicUsize,
    refused_total: AtomicU64,
    refused_host: AtomicU64,
}

/// Why the metrics endpoint closed a connection at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotRefusal {
    /// [`MAX_CONNECTIONS`] are open.
    TooMany,
    /// [`MAX_CONNECTIONS_PER_HOST`] are open from that host.
    TooManyFromHost,
}

/// One open connection's slot: given back when dropped.
pub(crate) struct Slot {
    slots: std::sync::Arc<EndpointSlots>,
    host: std::net::IpAddr,
}

impl EndpointSlots {
    fn hosts(
        &self,
    ) -> crate::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, usize>> {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a connection from `host`, or why not (counted).
    pub(crate) fn take(
        self: &std::sync::Arc<Self>,
        host: std::net::IpAddr,
    ) -> Result<Slot, SlotRefusal> {
        let mut hosts = self.hosts();
        let refusal = if self.open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            Some((SlotRefusal::TooMany, &self.refused_total))
        } else if hosts.get(&host).copied().unwrap_or(0) >= MAX_CONNECTIONS_PER_HOST {
            Some((SlotRefusal::TooManyFromHost, &self.refused_host))
        } else {
            None
        };
        if let Some((why, counter)) = refusal {
            counter.fetch_add(1, Ordering::Relaxed);
            return Err(why);
        }
        *hosts.entry(host).or_default() += 1;
        self.open.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            slots: self.clone(),
            host,
        })
    }

    /// Connections refused, by reason (`too_many`, `too_many_from_host`).
    pub(crate) fn refused(&self) -> BTreeMap<String, u64> {
        [
            ("too_many", self.refused_total.load(Ordering::Relaxed)),
            (
                "too_many_from_host",
                self.refused_host.load(Ordering::Relaxed),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut hosts = self.slots.hosts();
        if let Some(n) = hosts.get_mut(&self.host) {
            *n -= 1;
            if *n == 0 {
                hosts.remove(&self.host);
            }
        }
        self.slots.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Client framework operations received, by [`ClientOperation`] and `unknown` (a request key
/// that names no operation, a one-way send that is not a `CALL`); the node's inbound loop counts
/// them; session packets go to the session lanes and are not counted here.
#[derive(Debug, Default)]
pub(crate) struct ClientOps {
    /// One counter per operation, in [`ClientOperation::ALL`] order, then `unknown`.
    counts: [AtomicU64; ClientOperation::ALL.len() + 1],
}

impl ClientOps {
    /// Counts one operation (`None`: unknown).
    pub(crate) fn count(&self, op: Option<ClientOperation>) {
        let i = op.map_or(ClientOperation::ALL.len(), |op| op as usize);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> BTreeMap<String, u64> {
        ClientOperation::ALL
            .iter()
            .map(|op| op.as_str())
            .chain(std::iter::once("unknown"))
            .zip(&self.counts)
            .map(|(name, n)| (name.to_owned(), n.load(Ordering::Relaxed)))
            .collect()
    }
}

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
    family: Family<OpLabel, Histogram, fn() -> Histogram>,
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

    fn snapshot(&self) -> BTreeMap<String, StoreOpStats> {
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

    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
        self.timed(StoreOp::Destroy, self.inner.destroy(actor_id, fence))
    }

    fn write_wait_limit(&self) -> Option<Duration> {
        self.inner.write_wait_limit()
    }
}

/// The node's own metric state: client operations and store latency.
#[derive(Debug, Default)]
pub(crate) struct NodeMetrics {
    pub(crate) client_ops: ClientOps,
    pub(crate) store: StoreLatency,
    /// The metrics endpoint's connection slots.
    pub(crate) endpoint: std::sync::Arc<EndpointSlots>,
}

/// The label of a Spot kind in `actors` (`entry`, `spot_wide`, `per_actor`, `instance`).
pub(crate) fn spot_kind_name(kind: SpotKind) -> &'static str {
    match kind {
        SpotKind::Entry => "entry",
        SpotKind::User(UserMode::SpotWide) => "spot_wide",
        SpotKind::User(UserMode::PerActor) => "per_actor",
        SpotKind::Instance => "instance",
    }
}

const SPOT_KINDS: [&str; 4] = ["entry", "spot_wide", "per_actor", "instance"];

/// The label of a reply result: `ok` or the error kind in snake_case.
fn result_name(error: Option<ErrorKind>) -> &'static str {
    match error {
        None => "ok",
        Some(ErrorKind::Unavailable) => "unavailable",
        Some(ErrorKind::InvalidOperation) => "invalid_operation",
        Some(ErrorKind::NotFound) => "not_found",
        Some(ErrorKind::DeadlineExceeded) => "deadline_exceeded",
        Some(ErrorKind::Internal) => "internal",
        Some(ErrorKind::Cancelled) => "cancelled",
        Some(_) => "other",
    }
}

impl Node {
    /// A snapshot of the node's counters (what `COUNTERS` answers and `/metrics` serves).
    #[must_use]
    pub fn counters(&self) -> NodeCounters {
        let i = &self.inner;
        let me = self.node_rid();
        let peers = i.peers.iter().filter(|p| p.node != *me);
        let peers_configured = peers.clone().count() as u64;
        let peers_up = peers
            .filter(|p| i.mesh.peer_generation(&p.node).is_some())
            .count() as u64;
        let mut actors: BTreeMap<String, u64> =
            SPOT_KINDS.iter().map(|k| ((*k).to_owned(), 0)).collect();
        for s in lock(&i.spots).values() {
            *actors.entry(spot_kind_name(s.kind).to_owned()).or_default() += s.members as u64;
        }
        let mesh_counters = i.mesh.counters();
        let mut replies = BTreeMap::new();
        for origin in ReplyOrigin::ALL {
            for error in std::iter::once(None).chain(ErrorKind::ALL.iter().copied().map(Some)) {
                replies.insert(
                    format!("{}/{}", origin.as_str(), result_name(error)),
                    mesh_counters.replies(origin, error),
                );
            }
        }
        let flow = i.sessions.flow();
        let mut session_rejects = BTreeMap::new();
        for record in FlowRecord::ALL {
            for reason in FlowReject::ALL {
                session_rejects.insert(
                    format!("{}/{}", record.as_str(), reason.as_str()),
                    flow.get(record, reason),
                );
            }
        }
        let b = self.inbound_backlogs();
        let lanes = self.lane_depths();
        NodeCounters {
            node: me.to_string(),
            generation: self.generation().get(),
            peers_configured,
            peers_up,
            sessions: i.sessions.session_count() as u64,
            bindings: i.sessions.binding_count() as u64,
            session_replacements: i.sessions.replacements(),
            session_seals: i.sessions.seal_gauges(),
            actors,
            activations: i.activations_done.load(Ordering::Relaxed),
            calls_in: i.calls_in.load(Ordering::Relaxed),
            calls_out: i.calls_out.load(Ordering::Relaxed),
            turns: i.exec.turns.load(Ordering::Relaxed),
            send_failures: i.exec.send_failures.load(Ordering::Relaxed),
            sends_dropped: i.sends_dropped.load(Ordering::Relaxed),
            timer_ticks_skipped: i.timer_ticks_skipped.load(Ordering::Relaxed),
            bindings_owner_lost: i.bindings_owner_lost.load(Ordering::Relaxed),
            client_operations: i.metrics.client_ops.snapshot(),
            replies,
            backlogs: [
                ("actors", b.actors),
                ("sessions", b.sessions),
                ("pushes", b.pushes),
                ("peer_sends", b.peer_sends),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
            lanes,
            mesh_drops: DropReason::ALL
                .iter()
                .map(|r| (r.as_str().to_owned(), mesh_counters.dropped(*r)))
                .collect(),
            session_rejects,
            client_refusals: i.access.refusals(),
            metrics_refused: i.metrics.endpoint.refused(),
            relocations: self.relocations().1.committed,
            message_follow: super::follow::counters_map(&self.follow_counters()),
            store: i.metrics.store.snapshot(),
        }
    }

    /// Lanes' own queue lengths now, by Spot kind plus `session` (see [`NodeCounters::lanes`]):
    /// read from the lane runtime's FIFOs, one short lock per gate of each Spot and per session.
    fn lane_depths(&self) -> BTreeMap<String, LaneDepthStats> {
        let mut out: BTreeMap<String, LaneDepthStats> = SPOT_KINDS
            .iter()
            .chain(&["session"])
            .map(|k| ((*k).to_owned(), LaneDepthStats::default()))
            .collect();
        let spots: Vec<_> = lock(&self.inner.spots)
            .values()
            .map(|s| (spot_kind_name(s.kind), s.spot.clone()))
            .collect();
        for (kind, spot) in spots {
            if let Some(row) = out.get_mut(kind) {
                row.add(spot.lane_depths().total());
            }
        }
        if let Some(row) = out.get_mut("session") {
            row.add(self.inner.sessions.lane_depths());
        }
        out
    }

    /// The address of the metrics endpoint, when the node serves one
    /// ([`super::NodeOptions::metrics`]).
    #[must_use]
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.inner.metrics_addr
    }
}

/// Reads the node's counters at each scrape.
#[derive(Debug)]
struct NodeCollector {
    node: Weak<Inner>,
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
    let m = enc.encode_descriptor(name, help, None, g.metric_type())?;
    g.encode(m)
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    let m = enc.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(m)
}

/// One metric with a value per label set.
fn family<'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    series: impl IntoIterator<Item = (Vec<(&'static str, &'a str)>, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in series {
        let e = m.encode_family(&labels)?;
        match kind {
            MetricType::Gauge => ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(e)?,
            _ => ConstCounter::new(v).encode(e)?,
        }
    }
    Ok(())
}

/// Splits `"<a>/<b>"` map keys into two labels.
fn pairs<'a>(
    map: &'a BTreeMap<String, u64>,
    first: &'static str,
    second: &'static str,
) -> impl Iterator<Item = (Vec<(&'static str, &'a str)>, u64)> + 'a {
    map.iter().map(move |(k, v)| {
        let (a, b) = k.split_once('/').unwrap_or((k.as_str(), ""));
        (vec![(first, a), (second, b)], *v)
    })
}

fn singles<'a>(
    map: &'a BTreeMap<String, u64>,
    label: &'static str,
) -> impl Iterator<Item = (Vec<(&'static str, &'a str)>, u64)> + 'a {
    map.iter()
        .map(move |(k, v)| (vec![(label, k.as_str())], *v))
}

impl Collector for NodeCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(inner) = self.node.upgrade() else {
            return Ok(());
        };
        let node = Node { inner };
        let c = node.counters();
        let e = &mut enc;
        gauge(
            e,
            "zlink_peers_up",
            "Configured peers that are up now",
            c.peers_up,
        )?;
        gauge(
            e,
            "zlink_peers_configured",
            "Peers in the node's configuration",
            c.peers_configured,
        )?;
        gauge(
            e,
            "zlink_client_sessions",
            "Client sessions open now",
            c.sessions,
        )?;
        gauge(
            e,
            "zlink_session_bindings",
            "Bindings of this node's client sessions now",
            c.bindings,
        )?;
        gauge(
            e,
            "zlink_session_relocation_seals",
            "Relocation seals this node's sessions hold now (SB-8)",
            c.session_seals.seals,
        )?;
        gauge(
            e,
            "zlink_session_relocation_held",
            "Relays held by those seals now",
            c.session_seals.held,
        )?;
        gauge(
            e,
            "zlink_session_relocation_held_bytes",
            "Payload bytes of the relays held by those seals now",
            c.session_seals.held_bytes,
        )?;
        counter(
            e,
            "zlink_session_replacements",
            "Bindings of this node's sessions replaced by another session's bind (51), each told to the replaced-callback",
            c.session_replacements,
        )?;
        family(
            e,
            "zlink_actors",
            "Actors this node owns now, by Spot kind",
            MetricType::Gauge,
            singles(&c.actors, "spot_kind"),
        )?;
        counter(
            e,
            "zlink_activations",
            "Actors activated here (factory runs that reached Ready)",
            c.activations,
        )?;
        family(
            e,
            "zlink_actor_calls",
            "Actor calls (160) sent to and received from peers",
            MetricType::Counter,
            [
                (vec![("direction", "in")], c.calls_in),
                (vec![("direction", "out")], c.calls_out),
            ],
        )?;
        counter(e, "zlink_handler_turns", "Actor handler turns run", c.turns)?;
        counter(
            e,
            "zlink_send_failures",
            "Send-handler failures (EG-15)",
            c.send_failures,
        )?;
        counter(
            e,
            "zlink_sends_dropped",
            "One-way sends refused and dropped",
            c.sends_dropped,
        )?;
        counter(
            e,
            "zlink_timer_ticks_skipped",
            "Timer ticks skipped (lane full or ended, owner not serving)",
            c.timer_ticks_skipped,
        )?;
        counter(
            e,
            "zlink_bindings_owner_lost",
            "Bindings of local actors ended because their session owner's lifecycle was gone",
            c.bindings_owner_lost,
        )?;
        family(
            e,
            "zlink_client_operations",
            "Client framework requests and sends, by operation",
            MetricType::Counter,
            singles(&c.client_operations, "operation"),
        )?;
        family(
            e,
            "zlink_replies",
            "Terminal answers to requests, by origin and result (ok or error kind)",
            MetricType::Counter,
            pairs(&c.replies, "origin", "result"),
        )?;
        let waiting: BTreeMap<String, u64> = c
            .backlogs
            .iter()
            .map(|(k, s)| (k.clone(), s.waiting_now))
            .collect();
        family(
            e,
            "zlink_backlog_depth",
            "Records waiting now for a full lane (or a client's credit, a peer), by target kind",
            MetricType::Gauge,
            singles(&waiting, "target"),
        )?;
        for (name, help, pick) in [
            (
                "zlink_backlog_waited",
                "Records that waited in a backlog, by target kind",
                (|s: &crate::backlog::BacklogStats| s.waited) as fn(&_) -> u64,
            ),
            (
                "zlink_backlog_refused",
                "Records refused by a full backlog, by target kind",
                |s| s.refused,
            ),
        ] {
            let m: BTreeMap<String, u64> = c
                .backlogs
                .iter()
                .map(|(k, s)| (k.clone(), pick(s)))
                .collect();
            family(e, name, help, MetricType::Counter, singles(&m, "target"))?;
        }
        for (name, help, pick) in [
            (
                "zlink_lanes",
                "Lanes now, by owner (Spot kind or session)",
                (|s: &LaneDepthStats| s.lanes) as fn(&_) -> u64,
            ),
            (
                "zlink_lane_depth_max",
                "The deepest lane's queued records now (both FIFOs), by owner",
                |s| s.deepest,
            ),
        ] {
            let m: BTreeMap<String, u64> =
                c.lanes.iter().map(|(k, s)| (k.clone(), pick(s))).collect();
            family(e, name, help, MetricType::Gauge, singles(&m, "spot_kind"))?;
        }
        family(
            e,
            "zlink_lane_queued",
            "Records queued in lanes now, by owner (Spot kind or session) and FIFO",
            MetricType::Gauge,
            c.lanes.iter().flat_map(|(k, s)| {
                [
                    (
                        vec![("spot_kind", k.as_str()), ("lane", "application")],
                        s.application_queued,
                    ),
                    (
                        vec![("spot_kind", k.as_str()), ("lane", "lifecycle")],
                        s.lifecycle_queued,
                    ),
                ]
            }),
        )?;
        family(
            e,
            "zlink_mesh_drops",
            "Records and connections the mesh dropped, by reason (closed vocabulary)",
            MetricType::Counter,
            singles(&c.mesh_drops, "reason"),
        )?;
        family(
            e,
            "zlink_session_rejects",
            "Refused session records, by record and reason (SB-5.9)",
            MetricType::Counter,
            pairs(&c.session_rejects, "record", "reason"),
        )?;
        family(
            e,
            "zlink_client_refusals",
            "Refused client framework operations, by operation and reason (closed vocabulary)",
            MetricType::Counter,
            pairs(&c.client_refusals, "operation", "reason"),
        )?;
        family(
            e,
            "zlink_metrics_connections_refused",
            "Metrics endpoint connections closed at once: too_many (in all) or too_many_from_host",
            MetricType::Counter,
            singles(&c.metrics_refused, "reason"),
        )?;
        counter(
            e,
            "zlink_relocations",
            "Actor relocations this node coordinated that moved the actor away",
            c.relocations,
        )?;
        let rc = node.relocations().1;
        family(
            e,
            "zlink_relocation_outcomes",
            "Relocations this node coordinated, by outcome (started, committed, aborted, failed) and as target",
            MetricType::Counter,
            [
                ("started", rc.started),
                ("committed", rc.committed),
                ("aborted", rc.aborted),
                ("failed", rc.failed),
                ("target", rc.target),
            ]
            .into_iter()
            .map(|(k, v)| (vec![("outcome", k)], v)),
        )?;
        family(
            e,
            "zlink_relocation_handoff_refused",
            "Relocation hand-off records refused, by reason (closed vocabulary)",
            MetricType::Counter,
            [
                ("malformed", rc.refused_malformed),
                ("unknown_relocation", rc.refused_unknown_relocation),
                ("wrong_peer", rc.refused_wrong_peer),
                ("unknown_actor", rc.refused_unknown_actor),
            ]
            .into_iter()
            .map(|(k, v)| (vec![("reason", k)], v)),
        )?;
        family(
            e,
            "zlink_relocation_fallback_events",
            "Target side of the cutover timeout's fallback: cutover_timeout, source_wait_expired, relayed_after_source_wait (records appended behind)",
            MetricType::Counter,
            [
                ("cutover_timeout", rc.cutover_timeouts),
                ("source_wait_expired", rc.source_waits_expired),
                ("relayed_after_source_wait", rc.relayed_after_source_wait),
            ]
            .into_iter()
            .map(|(k, v)| (vec![("event", k)], v)),
        )?;
        let durations = node.relocation_durations();
        let m = e.encode_descriptor(
            "zlink_relocation_duration_seconds",
            "Duration of the relocations this node coordinated that moved the actor",
            None,
            durations.metric_type(),
        )?;
        durations.encode(m)?;
        let follow = |k: &str| c.message_follow.get(k).copied().unwrap_or(0);
        gauge(
            e,
            "zlink_follow_entries",
            "Moved actors this node forwards for now (Message Follow)",
            follow("entries"),
        )?;
        let ended: BTreeMap<String, u64> = ["installed", "expired", "evicted"]
            .into_iter()
            .map(|k| (k.to_owned(), follow(k)))
            .collect();
        family(
            e,
            "zlink_follow_entry_events",
            "Message Follow entries installed at a commit, expired at their TTL, evicted at the bound",
            MetricType::Counter,
            singles(&ended, "event"),
        )?;
        let records: BTreeMap<String, u64> = c
            .message_follow
            .iter()
            .filter_map(|(k, v)| {
                let r = if k == "forwarded" {
                    k.as_str()
                } else {
                    k.strip_prefix("refused/")?
                };
                Some((r.to_owned(), *v))
            })
            .collect();
        family(
            e,
            "zlink_follow_records",
            "Records for moved actors at their old owner: forwarded once, or refused by reason",
            MetricType::Counter,
            singles(&records, "result"),
        )?;
        let latency = &node.inner.metrics.store.family;
        let m = e.encode_descriptor(
            "zlink_store_operation_duration_seconds",
            "Location Store call latency, by operation",
            None,
            latency.metric_type(),
        )?;
        latency.encode(m)
    }
}

fn registry(node: Weak<Inner>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(NodeCollector { node }));
    r
}

type Body = Full<Bytes>;

fn respond(
    registry: &Registry,
    req: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Body> {
    let status = |code: u16, text: &'static str| {
        let mut r = hyper::Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *r.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or_default();
        r
    };
    if req.uri().path() != "/metrics" {
        return status(404, "not found: the metrics are at /metrics\n");
    }
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return status(405, "method not allowed\n");
    }
    let mut text = String::new();
    if prometheus_client::encoding::prometheus_text::encode(&mut text, registry).is_err() {
        return status(500, "encoding failed\n");
    }
    let mut r = hyper::Response::new(Full::new(Bytes::from(text)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// Serves `GET /metrics` on `listener` until the task is aborted (node shutdown).
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    node: Weak<Inner>,
    slots: std::sync::Arc<EndpointSlots>,
) {
    let registry = std::sync::Arc::new(registry(node));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::debug!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match slots.take(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                tracing::debug!(%peer, ?why, "metrics connection refused");
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let out = respond(&registry, &req);
                async move { Ok::<_, Infallible>(out) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics connection ended");
            }
            drop(permit);
        });
    }
}
