//! Who may do what on the client port (issue 26 item 5, `docs/CLIENT-PROTOCOL.md` 7.1), tried
//! from outside against real `zlink-node` processes: with the default policy a stranger's
//! CREATE / GET / CALL / send / DESTROY / NODE_INFO / LIST_* / COUNTERS are refused and counted
//! while the operator (who presented the credential) succeeds and the stranger's session
//! packets still work; wrong credentials are refused, counted and end the session after a few;
//! `zlink-node ctl` works only with the credential; under `own_actors` a session uses and
//! destroys only what it created; an unknown policy does not start. (In process:
//! `tests/client_access.rs` of zlink.)

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zlink::actor::ErrorKind;
use zlink::node::access::MAX_CREDENTIAL_FAILURES;
use zlink::node::client::{ClientError, NodeClient, Placement};
use zlink::node::protocol::{ListActors, ListSessions};
use zlink_apps::chat;
use zlink_apps::demo::{Add, Get};
use zlink_wire::DisconnectReason;

#[path = "../../mesh/tests/common/ports.rs"]
mod ports;
use ports::free_port;

const TIMEOUT: Duration = Duration::from_secs(20);
const BIN: &str = env!("CARGO_BIN_EXE_zlink-node");
const OPERATOR: &[u8] = b"client-access-operator-credential";

/// A `zlink-node` process (killed on drop) with a client endpoint, a metrics endpoint and the
/// operator credential `OPERATOR`; `policy`: the TOML `client_policy` line, if any.
struct Proc {
    dir: tempfile::TempDir,
    client: String,
    metrics: String,
    child: tokio::process::Child,
}

impl Proc {
    async fn start(policy: Option<&str>) -> Proc {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("secret"), "access-test-secret-0123456789abcdef\n").unwrap();
        std::fs::write(d.join("operator"), OPERATOR).unwrap();
        let client = format!("tcp://127.0.0.1:{}", free_port());
        let ready = d.join("node1.ready");
        let policy = policy.map_or_else(String::new, |p| format!("client_policy = \"{p}\"\n"));
        let config = d.join("node1.toml");
        std::fs::write(
            &config,
            format!(
                "name = \"node1\"\nrelay = \"tcp://127.0.0.1:{}\"\n\
                 completion = \"tcp://127.0.0.1:{}\"\nclient = \"{client}\"\n\
                 secret_file = \"{}\"\nstore = \"sqlite://{}\"\nready_file = \"{}\"\n\
                 operator_credential_file = \"{}\"\nmetrics = \"127.0.0.1:0\"\n\
                 drain_timeout_ms = 2000\n{policy}",
                free_port(),
                free_port(),
                d.join("secret").display(),
                d.join("store.db").display(),
                ready.display(),
                d.join("operator").display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(d.join("node1.log")).unwrap();
        let mut child = tokio::process::Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + TIMEOUT;
        let metrics = loop {
            if let Ok(s) = std::fs::read_to_string(&ready) {
                break s
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix("metrics="))
                    .unwrap()
                    .to_owned();
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("exited during startup: {status}\n{}", log_of(d));
            }
            assert!(Instant::now() < deadline, "not ready\n{}", log_of(d));
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        Proc {
            dir,
            client,
            metrics,
            child,
        }
    }

    fn connect(&self) -> NodeClient {
        NodeClient::connect(&self.client, TIMEOUT).unwrap()
    }

    async fn operator(&self) -> NodeClient {
        let c = self.connect();
        c.authenticate(OPERATOR).await.unwrap();
        c
    }

    fn operator_file(&self) -> PathBuf {
        self.dir.path().join("operator")
    }

    /// `zlink-node ctl -e CLIENT ARGS…` with the given environment; (success, stdout, stderr).
    async fn ctl(&self, env: &[(&str, &Path)], args: &[&str]) -> (bool, String, String) {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.args(["ctl", "-e", &self.client])
            .args(args)
            .env_remove("ZLINK_OPERATOR_CREDENTIAL")
            .env_remove("ZLINK_OPERATOR_CREDENTIAL_FILE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(TIMEOUT, cmd.output())
            .await
            .expect("ctl in time")
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("node1.log")).unwrap_or_default()
}

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

async fn scrape(addr: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = String::new();
    tokio::time::timeout(TIMEOUT, s.read_to_string(&mut buf))
        .await
        .expect("scrape in time")
        .unwrap();
    buf
}

// spec: issue 26 item 5 — the default client policy refuses a stranger every framework
// operation (and counts each refusal) while the operator succeeds and the stranger's session
// packets (the application's path) still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_refused_and_counted_while_the_operator_succeeds() {
    let p = Proc::start(None).await;
    let operator = p.operator().await;
    let victim = operator
        .create("counter", "victim", Placement::default())
        .await
        .unwrap();
    assert_eq!(operator.request(&victim, &Add(1)).await.unwrap(), 1);

    let stranger = p.connect();
    assert_refused(
        "create",
        stranger
            .create("counter", "mine", Placement::default())
            .await,
    );
    assert_refused(
        "get_or_create",
        stranger
            .get_or_create("counter", "victim", Placement::default())
            .await,
    );
    assert_refused("get", stranger.get("victim").await);
    assert_refused("call", stranger.request(&victim, &Add(100)).await);
    stranger.send(&victim, &Add(1_000)).await.unwrap(); // one-way: dropped, counted
    assert_refused("destroy", stranger.destroy(&victim).await);
    assert_refused("node_info", stranger.info().await);
    assert_refused(
        "list_actors",
        stranger.list_actors(&ListActors::default()).await,
    );
    assert_refused(
        "list_sessions",
        stranger.list_sessions(&ListSessions::default()).await,
    );
    assert_refused("counters", stranger.counters().await);

    // The session packets stay the normal path: the stranger logs into the chat.
    let logged = stranger
        .packet(&chat::Login {
            player: "p1".into(),
            room: "r1".into(),
        })
        .await
        .unwrap();
    assert_eq!(logged.player, "p1");

    // Every refusal is counted, by operation and reason (the send once it was read).
    let deadline = Instant::now() + TIMEOUT;
    let c = loop {
        let c = operator.counters().await.unwrap();
        if c.client_refusals["send/denied"] == 1 || Instant::now() > deadline {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for op in [
        "create",
        "get_or_create",
        "get",
        "call",
        "send",
        "destroy",
        "node_info",
        "list_actors",
        "list_sessions",
        "counters",
    ] {
        assert_eq!(c.client_refusals[&format!("{op}/denied")], 1, "{op}");
    }
    // Nothing the stranger asked for happened; the operator's actor is whole.
    assert_eq!(operator.request(&victim, &Get).await.unwrap(), 1);
    assert_eq!(operator.get("victim").await.unwrap(), victim);
    let info = operator.info().await.unwrap();
    assert_eq!(info.client_refusals["destroy/denied"], 1);
    assert_eq!(
        operator
            .list_actors(&ListActors::default())
            .await
            .unwrap()
            .actors
            .iter()
            .filter(|a| a.actor_id == "victim")
            .count(),
        1
    );
    // The operator's view on the metrics endpoint too.
    let m = scrape(&p.metrics).await;
    assert!(
        m.contains("\nzlink_client_refusals_total{operation=\"destroy\",reason=\"denied\"} 1\n"),
        "{m}"
    );
    // The operator destroys it.
    operator.destroy(&victim).await.unwrap();
    assert_eq!(
        operator.get("victim").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

// spec: issue 26 item 5 — a wrong credential is refused and counted, and after
// MAX_CREDENTIAL_FAILURES wrong ones the next ends the session (Disconnect Refused); the
// operator's credential is compared in constant time (`OperatorCredential::verify`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_refused_counted_and_end_the_session() {
    let p = Proc::start(None).await;
    let guesser = p.connect();
    // A prefix and an extension of the credential are wrong too.
    let prefix = &OPERATOR[..OPERATOR.len() - 1];
    let longer = [OPERATOR, b"x"].concat();
    for guess in [prefix, &longer[..], b"wrong"] {
        assert_refused("authenticate", guesser.authenticate(guess).await);
    }
    assert_eq!(MAX_CREDENTIAL_FAILURES, 3);
    assert_refused("authenticate", guesser.authenticate(b"again").await);
    let reason = tokio::time::timeout(TIMEOUT, guesser.closed())
        .await
        .expect("the session was closed");
    assert_eq!(reason, DisconnectReason::Refused);
    // Still a stranger on a new connection; then the right credential makes an operator.
    let other = p.connect();
    assert_refused("node_info", other.info().await);
    other.authenticate(OPERATOR).await.unwrap();
    let c = other.counters().await.unwrap();
    assert_eq!(c.client_operations["authenticate"], 5);
    assert_eq!(c.client_refusals["authenticate/bad_credential"], 4);
    assert_eq!(c.client_refusals["node_info/denied"], 1);
}

// spec: issue 26 item 5 — `zlink-node ctl` sends the operator credential: refused without it,
// served with it (file flag or environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_works_with_the_operator_credential_only() {
    let p = Proc::start(None).await;
    let (ok, _, err) = p.ctl(&[], &["nodes"]).await;
    assert!(!ok, "ctl without a credential succeeded");
    assert!(err.contains("not authorized"), "{err}");
    let file = p.operator_file();
    let (ok, out, err) = p
        .ctl(&[], &["--credential-file", file.to_str().unwrap(), "nodes"])
        .await;
    assert!(ok, "{err}");
    assert!(out.contains("node1"), "{out}");
    let (ok, out, err) = p
        .ctl(
            &[("ZLINK_OPERATOR_CREDENTIAL_FILE", &file)],
            &["counters", "--all"],
        )
        .await;
    assert!(ok, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("client_refusals.node_info/denied"))
        .unwrap_or_else(|| panic!("no refusal row in\n{out}"));
    assert_eq!(row.split_whitespace().nth(1), Some("1"), "{out}");
    let wrong = p.dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-credential").unwrap();
    let (ok, _, err) = p
        .ctl(
            &[],
            &["--credential-file", wrong.to_str().unwrap(), "nodes"],
        )
        .await;
    assert!(!ok);
    assert!(err.contains("operator credential"), "{err}");
}

// spec: issue 26 item 5 — `client_policy = "own_actors"`: a session creates actors and
// uses and destroys only its own incarnations; a stranger can neither find, call nor destroy
// them, nor list anything; the operator can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_actors_lets_a_session_use_and_destroy_only_what_it_created() {
    let p = Proc::start(Some("own_actors")).await;
    let owner = p.connect();
    let mine = owner
        .create("counter", "mine", Placement::default())
        .await
        .unwrap();
    assert_eq!(owner.request(&mine, &Add(2)).await.unwrap(), 2);
    assert_eq!(owner.get("mine").await.unwrap(), mine);

    let stranger = p.connect();
    assert_refused("get", stranger.get("mine").await);
    assert_refused("call", stranger.request(&mine, &Add(1)).await);
    assert_refused("destroy", stranger.destroy(&mine).await);
    assert_refused(
        "list_actors",
        stranger.list_actors(&ListActors::default()).await,
    );
    assert_refused(
        "get_or_create",
        stranger
            .get_or_create("counter", "mine", Placement::default())
            .await,
    );
    // The stranger may create its own, and use it.
    let theirs = stranger
        .create("counter", "theirs", Placement::default())
        .await
        .unwrap();
    assert_eq!(stranger.request(&theirs, &Add(5)).await.unwrap(), 5);
    assert_refused("owner calls theirs", owner.request(&theirs, &Get).await);

    assert_eq!(owner.request(&mine, &Get).await.unwrap(), 2);
    owner.destroy(&mine).await.unwrap();
    // Destroyed: no longer the owner's either.
    assert_refused("call after destroy", owner.request(&mine, &Get).await);

    let operator = p.operator().await;
    let listed = operator.list_actors(&ListActors::default()).await.unwrap();
    assert_eq!(
        listed
            .actors
            .iter()
            .map(|a| a.actor_id.as_str())
            .collect::<Vec<_>>(),
        ["theirs"]
    );
    operator.destroy(&theirs).await.unwrap();
    let c = operator.counters().await.unwrap();
    assert_eq!(c.client_refusals["get/denied"], 1);
    assert_eq!(c.client_refusals["call/denied"], 3);
    assert_eq!(c.client_refusals["destroy/denied"], 1);
}

// The client policy is a closed set: a node with an unknown one does not start, naming it.
#[tokio::test]
async fn an_unknown_client_policy_is_a_configuration_error() {
    let out = tokio::time::timeout(
        TIMEOUT,
        tokio::process::Command::new(BIN)
            .args([
                "--name",
                "n",
                "--insecure-dev-mode",
                "--store",
                "memory:",
                "--client-policy",
                "everyone",
            ])
            .output(),
    )
    .await
    .expect("exits in time")
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("client_policy \"everyone\""), "{err}");
}
