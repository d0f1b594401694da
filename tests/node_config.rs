//! Configuration honesty: every `[lanes]` and `[timeouts]` key of a node's TOML reaches
//! [`NodeOptions`], and the lane limit takes effect in a running node.

mod node_common;

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use node_common::*;
use serde::{Deserialize, Serialize};
use zlink::actor::{ActorId, ActorRegistry, ActorTypeBuilder, DispatchKey, Handled, Message};
use zlink::config::{ConfigError, NodeConfig};
use zlink::node::{Create, Node, NodeError, NodeOptions};
use zlink::runtime::LaneLimits;
use zlink::session::SessionHandlers;
use zlink_apps::demo;

const BASE: &str = r#"
node = "n1"
store = "memory:"
actor_dispatch = true
mesh_secret = "zlink-test-secret-0123456789abcdef"

[roles]
object_client = true
object_server = true

[[mesh]]
name = "main"
relay = "tcp://127.0.0.1:*"
completion = "tcp://127.0.0.1:*"
"#;

fn config(extra: &str) -> NodeConfig {
    NodeConfig::from_toml_str(&format!("{BASE}\n{extra}")).unwrap()
}

fn options(c: &NodeConfig, registry: ActorRegistry) -> NodeOptions {
    NodeOptions::from_config(c, registry, SessionHandlers::new()).unwrap()
}

// Every lanes.* and timeouts.* key, each away from its default, arrives in the options.
#[test]
fn from_config_carries_every_lane_limit_and_timeout() {
    let c = config(
        "[lanes]
application_items = 7
application_bytes = 70000
lifecycle_items = 9
lifecycle_bytes = 90000

[timeouts]
session_replacement_callback_ms = 1234
session_relocation_seal_ms = 1567
send_ms = 2500
request_ms = 777
heartbeat_interval_ms = 400
heartbeat_timeout_ms = 1600
owner_lease_ttl_ms = 4321
",
    );
    let o = options(&c, demo::registry().unwrap());
    assert_eq!(
        o.lanes,
        LaneLimits {
            application_items: 7,
            application_bytes: 70_000,
            lifecycle_items: 9,
            lifecycle_bytes: 90_000,
            ..LaneLimits::default()
        }
    );
    let ms = Duration::from_millis;
    assert_eq!(o.session_replacement_callback_timeout, ms(1234));
    // spec: SB-8.3 — it reaches the coordinator's relocation timings
    assert_eq!(o.relocation.seal_timeout, ms(1_567));
    assert_eq!(o.relocation.cutover_timeout, ms(1_000));
    assert_eq!(o.request_timeout, ms(777));
    assert_eq!(o.lease_ttl, ms(4321));
    assert_eq!(o.mesh.send_timeout, ms(2500));
    assert_eq!(o.mesh.liveness.heartbeat_interval, ms(400));
    assert_eq!(o.mesh.liveness.heartbeat_timeout, ms(1600));
}

// Issue 26: every client-port bound of `[client]` (those that were settable only from Rust,
// `max_clients_per_source` among them), each away from its default, arrives in the options; a
// zero is a configuration error; unset, the mesh's defaults hold.
#[test]
fn from_config_carries_every_client_port_bound() {
    let c = config(
        "[client]
endpoint = \"tcp://127.0.0.1:*\"
max_clients = 11
max_clients_per_source = 3
window_records = 12
window_bytes = 13000
outbound_messages = 14
outbound_bytes = 15000
slow_consumer_grace_ms = 1600
send_hwm = 17
batch_records = 24
max_strangers = 18
max_strangers_per_source = 19
stranger_window_records = 20
stranger_window_bytes = 21000
max_operations_per_session = 22
max_bindings_per_session = 23
",
    );
    let o = options(&c, demo::registry().unwrap());
    let m = &o.mesh;
    assert_eq!(m.client_endpoint.as_deref(), Some("tcp://127.0.0.1:*"));
    assert_eq!((m.max_clients, m.max_clients_per_source), (11, 3));
    assert_eq!(
        (m.client_window.messages, m.client_window.bytes),
        (12, 13_000)
    );
    assert_eq!(
        (m.client_budget.messages, m.client_budget.bytes),
        (14, 15_000)
    );
    assert_eq!(m.client_outbound.grace, Duration::from_millis(1600));
    assert_eq!(m.client_outbound.send_hwm, 17);
    assert_eq!(m.client_outbound.batch_records, 24);
    let zlink_mesh::ClientAdmission::OnAccept(s) = m.client_admission else {
        panic!("strangers are admitted on accept: {:?}", m.client_admission);
    };
    assert_eq!((s.max, s.max_per_source), (18, 19));
    assert_eq!((s.window.messages, s.window.bytes), (20, 21_000));
    assert_eq!(o.client_access.max_operations_per_session, 22);
    assert_eq!(o.max_bindings_per_session, 23);

    let zero = NodeConfig::from_toml_str(&format!(
        "{BASE}\n[client]\nendpoint = \"tcp://127.0.0.1:*\"\nmax_clients_per_source = 0\n"
    ))
    .unwrap();
    assert!(matches!(
        zero.validate(),
        Err(ConfigError::InvalidValue {
            field: "client.max_clients_per_source",
            ..
        })
    ));

    let defaults = options(
        &config("[client]\nendpoint = \"tcp://127.0.0.1:*\"\n"),
        demo::registry().unwrap(),
    );
    let d = zlink_mesh::MeshConfig::new(o.mesh.mesh.clone(), o.mesh.node.clone());
    let m = &defaults.mesh;
    assert_eq!(
        (m.max_clients, m.max_clients_per_source),
        (d.max_clients, d.max_clients_per_source)
    );
    assert_eq!(m.client_budget, zlink_mesh::ClientOutbound::BUDGET);
    assert_eq!(m.client_budget.bytes, 1024 * 1024, "docs/MESH.md's default");
    assert_eq!(m.client_outbound, d.client_outbound);
    assert_eq!(m.client_admission, d.client_admission);
}

// `NodeOptions::new` and a configuration that sets nothing agree on every default.
#[test]
fn node_options_defaults_equal_the_config_defaults() {
    let from_config = options(&config(""), demo::registry().unwrap());
    let new = NodeOptions::new(mesh_config("n1"), memory_store(), demo::registry().unwrap());
    assert_eq!(new.lanes, from_config.lanes);
    assert_eq!(new.lanes, LaneLimits::default());
    assert_eq!(new.request_timeout, from_config.request_timeout);
    assert_eq!(new.request_timeout, Duration::from_millis(5_000));
    assert_eq!(new.lease_ttl, from_config.lease_ttl);
    assert_eq!(
        new.session_replacement_callback_timeout,
        from_config.session_replacement_callback_timeout
    );
    assert_eq!(new.relocation, from_config.relocation);
    assert_eq!(
        (
            new.session_replacement_callback_timeout,
            new.relocation.seal_timeout
        ),
        (Duration::from_millis(30_000), Duration::from_millis(3_000))
    );
}

#[test]
fn a_zero_request_timeout_is_refused() {
    let c = config("[timeouts]\nrequest_ms = 0");
    assert!(matches!(
        NodeOptions::from_config(&c, demo::registry().unwrap(), SessionHandlers::new()),
        Err(NodeError::Config(ConfigError::InvalidValue {
            field: "timeouts.request_ms",
            ..
        }))
    ));
}

#[derive(Serialize, Deserialize)]
struct Hold(u32);
impl Message for Hold {
    const KEY: DispatchKey = DispatchKey::new(1);
    type Reply = ();
}

// spec: EG-7.1 — `lanes.application_items = 2` from the TOML bounds an actor's application lane
// in the running node: with one record running (its handler blocked) and one queued, a third
// send waits for space, and is admitted once the first record ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_application_item_limit_bounds_the_actor_lane() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let mut registry = ActorRegistry::new();
    let handler_gate = gate.clone();
    registry
        .register(
            ActorTypeBuilder::new("holder", |_i, _b| Ok(()))
                .handle(move |_: &mut (), _ctx, Hold(n)| {
                    let (gate, entered) = (handler_gate.clone(), entered_tx.clone());
                    Handled::later(async move {
                        let _ = entered.send(n);
                        gate.acquire().await.unwrap().forget();
                        Ok(())
                    })
                })
                .build()
                .unwrap(),
        )
        .unwrap();
    let o = options(&config("[lanes]\napplication_items = 2"), registry);
    assert_eq!(o.lanes.application_items, 2);
    let node = Node::start(o).await.unwrap();
    let a = node
        .create(Create::new("holder", ActorId::new("h").unwrap()))
        .await
        .unwrap();

    // Record 1 runs and blocks in its handler; it keeps its reservation until it ends.
    node.send(&a, &Hold(1)).await.unwrap();
    assert_eq!(entered.recv().await, Some(1));
    // Record 2 fills the lane (2 items: one running, one queued): admitted at its first poll.
    {
        let mut second = std::pin::pin!(node.send(&a, &Hold(2)));
        let first_poll = std::future::poll_fn(|cx| Poll::Ready(second.as_mut().poll(cx))).await;
        assert!(
            matches!(first_poll, Poll::Ready(Ok(()))),
            "second record not admitted at once"
        );
    }
    // Record 3 finds the lane full: the send waits (the default limit, 1,024, would admit it).
    {
        let mut third = std::pin::pin!(node.send(&a, &Hold(3)));
        let first_poll = std::future::poll_fn(|cx| Poll::Ready(third.as_mut().poll(cx))).await;
        assert!(
            first_poll.is_pending(),
            "third record admitted past a full lane"
        );

        // Record 1 ends: its item frees, so the waiting send is admitted, behind record 2.
        gate.add_permits(1);
        tokio::time::timeout(TIMEOUT, third)
            .await
            .expect("third send admitted once record 1 ended")
            .unwrap();
    }
    gate.add_permits(2);
    assert_eq!(entered.recv().await, Some(2));
    assert_eq!(entered.recv().await, Some(3));
    node.shutdown(TIMEOUT).await;
}

// spec: SB-8.3, SB-8.9 — every `[relocation]` key, each away from its default, reaches the
// relocation timings and bounds of the options (the coordinator's, the target's and the session
// owner's seal); the seal's other key, `timeouts.session_relocation_seal_ms`, works alone.
#[test]
fn from_config_carries_every_relocation_key() {
    let c = config(
        "[relocation]
seal_ms = 4500
cutover_timeout_ms = 1500
restore_timeout_ms = 2500
result_timeout_ms = 7500
source_wait_ms = 3500
max_restore_timers = 7
target_queue_records = 99
target_queue_bytes = 123456
",
    );
    let o = options(&c, demo::registry().unwrap());
    let ms = Duration::from_millis;
    let r = o.relocation;
    assert_eq!(r.seal_timeout, ms(4_500));
    assert_eq!(r.cutover_timeout, ms(1_500));
    assert_eq!(r.restore_timeout, ms(2_500));
    assert_eq!(r.result_timeout, ms(7_500));
    assert_eq!(r.source_wait, ms(3_500));
    assert_eq!(r.max_restore_timers, 7);
    assert_eq!(
        (r.target_queue_records, r.target_queue_bytes),
        (99, 123_456)
    );

    let d = options(&config(""), demo::registry().unwrap()).relocation;
    assert_eq!(d, zlink::relocation::RelocationConfig::default());
    assert_eq!(
        (d.seal_timeout, d.cutover_timeout, d.source_wait),
        (ms(3_000), ms(1_000), ms(3_000))
    );
    assert_eq!(
        (d.target_queue_records, d.target_queue_bytes),
        (65_536, 256 << 20)
    );

    let old = options(
        &config("[timeouts]\nsession_relocation_seal_ms = 2222"),
        demo::registry().unwrap(),
    );
    assert_eq!(old.relocation.seal_timeout, ms(2_222));
}

// A bad `[relocation]` value is refused at startup with the key that is wrong.
#[test]
fn bad_relocation_values_are_refused() {
    let refused = |extra: &str| match NodeOptions::from_config(
        &config(extra),
        demo::registry().unwrap(),
        SessionHandlers::new(),
    ) {
        Err(NodeError::Config(ConfigError::InvalidValue { field, .. })) => field,
        other => panic!("{extra:?} was not refused: {:?}", other.map(|_| ())),
    };
    for (extra, field) in [
        ("[relocation]\nseal_ms = 0", "relocation.seal_ms"),
        (
            "[relocation]\ncutover_timeout_ms = 0",
            "relocation.cutover_timeout_ms",
        ),
        (
            "[relocation]\nrestore_timeout_ms = 0",
            "relocation.restore_timeout_ms",
        ),
        (
            "[relocation]\nresult_timeout_ms = 0",
            "relocation.result_timeout_ms",
        ),
        (
            "[relocation]\nsource_wait_ms = 0",
            "relocation.source_wait_ms",
        ),
        (
            "[relocation]\nmax_restore_timers = 0",
            "relocation.max_restore_timers",
        ),
        (
            "[relocation]\ntarget_queue_records = 0",
            "relocation.target_queue_records",
        ),
        (
            "[relocation]\ntarget_queue_bytes = 0",
            "relocation.target_queue_bytes",
        ),
        // A cutover timeout as long as the seal: every fallback would find its sessions closed.
        (
            "[relocation]\nseal_ms = 2000\ncutover_timeout_ms = 2000",
            "relocation.cutover_timeout_ms",
        ),
        (
            "[timeouts]\nsession_relocation_seal_ms = 900",
            "relocation.cutover_timeout_ms",
        ),
        // The seal set twice.
        (
            "[timeouts]\nsession_relocation_seal_ms = 4000\n[relocation]\nseal_ms = 4000",
            "relocation.seal_ms",
        ),
        (
            "[timeouts]\nsession_relocation_seal_ms = 0",
            "timeouts.session_relocation_seal_ms",
        ),
    ] {
        assert_eq!(refused(extra), field, "{extra:?}");
    }
    // Unknown keys and wrong types do not parse.
    for extra in [
        "[relocation]\ncutover_ms = 10",
        "[relocation]\nsource_wait_ms = -1",
        "[relocation]\ntarget_queue_bytes = \"big\"",
    ] {
        assert!(
            matches!(
                NodeConfig::from_toml_str(&format!("{BASE}\n{extra}")),
                Err(ConfigError::Parse(_))
            ),
            "{extra:?}"
        );
    }
}
