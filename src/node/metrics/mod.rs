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
use std::net::SocketAddr;

use zlink_mesh::{DropReason, ReplyOrigin};
use zlink_wire::ErrorKind;

use super::access::ClientOperation;
use super::protocol::{LaneDepthStats, NodeCounters};
use super::{Node, lock};
use crate::actor::SpotKind;
use crate::actor::spot::UserMode;
use crate::session::{FlowRecord, FlowReject};
use crate::sync::atomic::{AtomicU64, Ordering};

mod http;
mod prometheus;
mod store;

pub(crate) use http::EndpointSlots;
pub(in crate::node) use http::serve;
pub use http::{HEADER_TIMEOUT, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_HOST};
use prometheus::registry;
pub(crate) use store::{StoreLatency, TimedStore};

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
