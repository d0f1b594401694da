//! The Prometheus collector: the node's counters read at each scrape and encoded as metric
//! families (text format 0.0.4).

use std::collections::BTreeMap;
use std::sync::Weak;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::node::protocol::LaneDepthStats;
use crate::node::{Inner, Node};

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
            "Relocations this node coordinated, by outcome (started, committed, aborted, failed; actors recovered after a failure) and as target",
            MetricType::Counter,
            [
                ("started", rc.started),
                ("committed", rc.committed),
                ("aborted", rc.aborted),
                ("failed", rc.failed),
                ("recovered", rc.recovered),
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
                ("too_many_timers", rc.refused_too_many_timers),
            ]
            .into_iter()
            .map(|(k, v)| (vec![("reason", k)], v)),
        )?;
        family(
            e,
            "zlink_relocation_fallback_events",
            "Target side of the cutover timeout's fallback: cutover_timeout, source_wait_expired, relayed_after_source_wait (records appended behind); and cas_answer_lost (an owner CAS unanswered: the record read back decided)",
            MetricType::Counter,
            [
                ("cutover_timeout", rc.cutover_timeouts),
                ("source_wait_expired", rc.source_waits_expired),
                ("relayed_after_source_wait", rc.relayed_after_source_wait),
                ("cas_answer_lost", rc.cas_answers_lost),
            ]
            .into_iter()
            .map(|(k, v)| (vec![("event", k)], v)),
        )?;
        family(
            e,
            "zlink_relocation_recovery_events",
            "Source side after the hand-off (SB-8.6): result_wait_expired (no result from the target within the result timeout: the store decided), retried (a recovery attempt repeated, the store out of reach), unrecovered (the actor not activated here again)",
            MetricType::Counter,
            [
                ("result_wait_expired", rc.result_waits_expired),
                ("retried", rc.recovery_retries),
                ("unrecovered", rc.unrecovered),
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
                let r = if k == "forwarded" || k == "held" {
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
            "Records for moved actors at their old owner: forwarded once, refused by reason, or (38 tombstones) held for a relocation",
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

pub(super) fn registry(node: Weak<Inner>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(NodeCollector { node }));
    r
}
