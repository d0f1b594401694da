//! A session owner that dies leaves no binding behind (issue 25 item 3; SB-6.5, SB-7.4, SB-9):
//! a real `zlink-node` process is the session owner of a client's binding to an actor of the
//! test's own node `zb` (the actor owner, with a counting `OnDisconnectActor`); the process is
//! killed (no shutdown at all), or killed and restarted with a new NodeGeneration. The actor
//! owner runs the callback once and tombstones the binding — observed through the actor's push
//! (refused `InvalidOperation`, counted), `NodeCounters` and the callback log.

#[path = "../../tests/node_common/mod.rs"]
mod node_common;

use std::sync::Arc;

use node_common::*;
use zlink::actor::ActorRef;
use zlink::node::Node;
use zlink::node::client::NodeClient;
use zlink::session::{FlowRecord, FlowReject};
use zlink_apps::demo::{self, Echo, EchoPush};

use node_common::hooks::*;

#[path = "../../mesh/tests/common/ports.rs"]
mod ports;

/// A `zlink-node` process `node1` (demo types and session application) that dials the test's
/// actor owner `zb`, on the SQLite Location Store file `dir/store.db` they share.
struct SessionOwnerProcess {
    config: std::path::PathBuf,
    ready: std::path::PathBuf,
    client: String,
    child: Option<std::process::Child>,
}

impl SessionOwnerProcess {
    fn new(dir: &std::path::Path, owner: &Node) -> Self {
        let secret = dir.join("secret");
        std::fs::write(&secret, "zlink-test-secret-0123456789abcdef").unwrap();
        let [relay, completion, client] =
            [ports::free_port(), ports::free_port(), ports::free_port()];
        let config = dir.join("node1.toml");
        let ready = dir.join("node1.ready");
        let zb = owner.address();
        std::fs::write(
            &config,
            format!(
                "name = \"node1\"\nmesh = \"test\"\nrelay = \"tcp://127.0.0.1:{relay}\"\n\
                 completion = \"tcp://127.0.0.1:{completion}\"\nclient = \"tcp://127.0.0.1:{client}\"\n\
                 secret_file = \"{}\"\nstore = \"sqlite://{}\"\nready_file = \"{}\"\n\n\
                 [[peers]]\nname = \"zb\"\nrelay = \"{}\"\ncompletion = \"{}\"\n",
                secret.display(),
                dir.join("store.db").display(),
                ready.display(),
                zb.relay,
                zb.completion,
            ),
        )
        .unwrap();
        Self {
            config,
            ready,
            client: format!("tcp://127.0.0.1:{client}"),
            child: None,
        }
    }

    /// Starts the process and waits for its ready file (it serves, `zb` is up); its
    /// NodeGeneration.
    async fn start(&mut self) -> u64 {
        let _ = std::fs::remove_file(&self.ready);
        let log = std::fs::File::create(self.config.with_extension("log")).unwrap();
        self.child = Some(
            std::process::Command::new(env!("CARGO_BIN_EXE_zlink-node"))
                .arg("--config")
                .arg(&self.config)
                .env("RUST_LOG", "info")
                .stdout(std::process::Stdio::from(log.try_clone().unwrap()))
                .stderr(std::process::Stdio::from(log))
                .spawn()
                .unwrap(),
        );
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.ready) {
                return s
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix("generation="))
                    .unwrap()
                    .parse()
                    .unwrap();
            }
            let exited = self.child.as_mut().unwrap().try_wait().unwrap();
            assert!(exited.is_none(), "node1 exited: {exited:?}\n{}", self.log());
            assert!(
                tokio::time::Instant::now() < deadline,
                "node1 not ready\n{}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// SIGKILL: no shutdown at all.
    fn kill(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.config.with_extension("log")).unwrap_or_default()
    }
}

impl Drop for SessionOwnerProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The actor owner `zb`: demo types with a counting `OnDisconnectActor` on Spot "watched", the
/// demo session application, peers declared down after `peer_timeout` of silence.
async fn actor_owner(
    dir: &std::path::Path,
    log: &HookLog,
    peer_timeout: std::time::Duration,
) -> Node {
    let mut mc = mesh_config("zb");
    mc.client_endpoint = Some("tcp://127.0.0.1:*".to_owned());
    mc.liveness.peer_timeout = peer_timeout;
    let store = Arc::new(zlink::store::SqliteStore::open(dir.join("store.db")).unwrap());
    let options = zlink::node::NodeOptions::new(
        mc,
        store,
        registry_with(vec![("watched", counting_hook(log, false))]),
    )
    // The observer's framework CALLs (EchoPush probes) run on an open client port.
    .with_client_access(zlink::node::access::ClientAccess::open())
    .with_sessions(demo::sessions())
    .unwrap();
    Node::start(options).await.unwrap()
}

/// `zb`'s echo actor `id`, bound to a session of the process `node1`; the observer client of
/// `zb` sees the binding (the actor's push is accepted).
async fn bound_from_process(
    zb: &Node,
    node1: &SessionOwnerProcess,
    id: &str,
) -> (ActorRef, NodeClient, NodeClient) {
    let actor = echo_in(zb, "zb", id, per_actor("watched")).await;
    let c = NodeClient::connect(&node1.client, TIMEOUT).unwrap();
    bind(&c, &actor).await;
    let observer = client_of(zb);
    assert!(bound_at_owner(&observer, &actor).await);
    (actor, c, observer)
}

// A killed session owner: the actor owner declares it down past its peer timeout, runs
// OnDisconnectActor once and tombstones the binding.
// spec: SB-7.4
// spec: SB-7.6
// spec: SB-6.5 (a session owner that is never reached is left to liveness)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_owners_binding_ends_at_the_actor_owner_after_its_peer_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let log = HookLog::default();
    // The peer timeout: it must not fire while node1 lives (so at least 3 s on a loaded
    // machine), and fires after the kill; short, so the test ends quickly.
    let zb = actor_owner(dir.path(), &log, std::time::Duration::from_secs(3)).await;
    let mut node1 = SessionOwnerProcess::new(dir.path(), &zb);
    node1.start().await;
    let (actor, _c, observer) = bound_from_process(&zb, &node1, "ghost").await;
    assert_eq!(zb.counters().bindings_owner_lost, 0);
    assert_eq!(log.total(), 0);

    node1.kill();

    wait_until("OnDisconnectActor ran", || {
        log.count("watched", "ghost") >= 1
    })
    .await;
    wait_unbound_at_owner(&observer, &actor).await;
    assert_eq!(zb.counters().bindings_owner_lost, 1);
    // The operator sees it (COUNTERS, the metrics endpoint).
    assert_eq!(zb.counters().bindings_owner_lost, 1);
    assert_eq!(log.count("watched", "ghost"), 1);
    // The tombstoned binding refuses the actor's push, counted; the actor lives on.
    let refused = zb
        .session_flow()
        .get(FlowRecord::Push, FlowReject::NotBound);
    let e = observer
        .request(&actor, &EchoPush(b"late".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), zlink::actor::ErrorKind::InvalidOperation, "{e}");
    assert_eq!(
        zb.session_flow()
            .get(FlowRecord::Push, FlowReject::NotBound),
        refused + 1
    );
    assert_eq!(
        observer
            .request(&actor, &Echo(b"on".to_vec()))
            .await
            .unwrap()
            .0,
        b"on"
    );
    // A new session binds it without replacing a ghost: no 51 to the dead owner.
    let c2 = client_of(&zb);
    bind(&c2, &actor).await;
    assert!(bound_at_owner(&observer, &actor).await);
    assert_eq!(log.total(), 1);
}

// A session owner restarted with a new NodeGeneration before its peer timeout: the actor owner
// ends the old lifecycle's bindings as soon as it sees the new generation.
// spec: SB-7.4
// spec: SB-9 (if the session owner process exits, its connections close; never moved)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_owner_restarted_with_a_new_generation_ends_its_old_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let log = HookLog::default();
    // Far longer than the test: only the new generation can end the binding.
    let zb = actor_owner(dir.path(), &log, std::time::Duration::from_secs(120)).await;
    let mut node1 = SessionOwnerProcess::new(dir.path(), &zb);
    let first = node1.start().await;
    let (actor, _c, observer) = bound_from_process(&zb, &node1, "phoenix").await;

    node1.kill();
    let second = node1.start().await;
    assert_ne!(first, second);

    wait_until("OnDisconnectActor ran", || {
        log.count("watched", "phoenix") >= 1
    })
    .await;
    wait_unbound_at_owner(&observer, &actor).await;
    assert_eq!(zb.counters().bindings_owner_lost, 1);
    assert_eq!(log.count("watched", "phoenix"), 1);
    // A session of the new lifecycle binds it afresh.
    let c = NodeClient::connect(&node1.client, TIMEOUT).unwrap();
    bind(&c, &actor).await;
    assert!(bound_at_owner(&observer, &actor).await);
    assert_eq!(zb.counters().bindings_owner_lost, 1);
    assert_eq!(log.total(), 1);
}
