//! Live relocation between two `zlink-node` processes, from outside: `zlink-node ctl relocate
//! ACTOR --to NODE` moves the demo `counter` (its total travels by the migration contract) from
//! node1 to node2 and back while a client sends to it; `ctl relocations` shows each relocation
//! on both nodes; `ctl relocate-spot SPOT --to NODE` moves a SpotWide Spot of counters as one
//! unit. The nodes keep the default client policy with an operator credential.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use zlink::node::client::{NodeClient, Placement};
use zlink_apps::demo;

#[path = "../../mesh/tests/common/ports.rs"]
mod ports;
use ports::free_port;

const TIMEOUT: Duration = Duration::from_secs(20);
const BIN: &str = env!("CARGO_BIN_EXE_zlink-node");

/// A `zlink-node` process, killed on drop.
struct Proc {
    config: PathBuf,
    ready: PathBuf,
    client: String,
    child: tokio::process::Child,
}

impl Proc {
    fn start(config: PathBuf, ready: PathBuf, client: String, args: &[&str]) -> Proc {
        let log = std::fs::File::create(config.with_extension("log")).unwrap();
        let child = tokio::process::Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Proc {
            config,
            ready,
            client,
            child,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.config.with_extension("log")).unwrap_or_default()
    }

    /// Waits for the ready file (the node serves and its peers are up); its `key=value` fields.
    async fn wait_ready(&mut self) -> std::collections::HashMap<String, String> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.ready) {
                return s
                    .split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect();
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("exited during startup: {status}\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "not ready\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn setup(dir: &Path) -> Vec<(PathBuf, PathBuf, String)> {
    std::fs::write(
        dir.join("secret"),
        "reloc-test-secret-0123456789abcdef-xyz\n",
    )
    .unwrap();
    std::fs::write(dir.join("operator"), "ctl-test-operator\n").unwrap();
    let ports: Vec<[u16; 3]> = (0..2)
        .map(|_| [free_port(), free_port(), free_port()])
        .collect();
    let mut peers = String::new();
    for (i, p) in ports.iter().enumerate() {
        peers += &format!(
            "[[peers]]\nname = \"node{}\"\nrelay = \"tcp://127.0.0.1:{}\"\ncompletion = \"tcp://127.0.0.1:{}\"\n",
            i + 1,
            p[0],
            p[1]
        );
    }
    (0..2)
        .map(|i| {
            let name = format!("node{}", i + 1);
            let config = dir.join(format!("{name}.toml"));
            let ready = dir.join(format!("{name}.ready"));
            let p = ports[i];
            // node1 names its metrics address in the file; node2 gets the flag.
            let metrics = if i == 0 {
                "metrics = \"127.0.0.1:0\"\n"
            } else {
                ""
            };
            std::fs::write(
                &config,
                format!(
                    "name = \"{name}\"\nrelay = \"tcp://127.0.0.1:{}\"\n\
                     completion = \"tcp://127.0.0.1:{}\"\nclient = \"tcp://127.0.0.1:{}\"\n\
                     secret_file = \"{}\"\nstore = \"sqlite://{}\"\nready_file = \"{}\"\n\
                     operator_credential_file = \"{}\"\n\
                     drain_timeout_ms = 2000\n{metrics}\n{peers}",
                    p[0],
                    p[1],
                    p[2],
                    dir.join("secret").display(),
                    dir.join("store.db").display(),
                    ready.display(),
                    dir.join("operator").display()
                ),
            )
            .unwrap();
            (config, ready, format!("tcp://127.0.0.1:{}", p[2]))
        })
        .collect()
}

/// Runs `zlink-node ctl -e EP1 -e EP2 ARGS…` with the nodes' operator credential
/// (`OPERATOR_FILE` in the environment, set by each test to its own directory's file); its
/// stdout (it must succeed).
async fn ctl(endpoints: &[&str], args: &[&str]) -> String {
    ctl_as(operator_file(), endpoints, args).await
}

/// [`ctl`] with the operator credential file `operator`.
async fn ctl_as(operator: &Path, endpoints: &[&str], args: &[&str]) -> String {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("ctl");
    cmd.env("ZLINK_OPERATOR_CREDENTIAL_FILE", operator);
    for e in endpoints {
        cmd.args(["-e", e]);
    }
    let out = tokio::time::timeout(TIMEOUT, cmd.args(args).output())
        .await
        .expect("ctl in time")
        .unwrap();
    assert!(
        out.status.success(),
        "ctl {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

static OPERATOR_FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn set_operator_file(path: PathBuf) {
    OPERATOR_FILE.set(path).expect("one ctl test per process");
}

fn operator_file() -> &'static Path {
    OPERATOR_FILE.get().expect("operator file set")
}

// spec: SB-8.9, SB-14.21, SB-1.3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_relocates_a_counter_between_processes_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut specs = setup(dir.path()).into_iter();
    let (c1, r1, e1) = specs.next().unwrap();
    let (c2, r2, e2) = specs.next().unwrap();
    let mut p1 = Proc::start(c1, r1, e1, &[]);
    let mut p2 = Proc::start(c2, r2, e2, &[]);
    p1.wait_ready().await;
    p2.wait_ready().await;
    let eps = [p1.client.as_str(), p2.client.as_str()];
    set_operator_file(dir.path().join("operator"));
    let client = NodeClient::connect(&p1.client, TIMEOUT).unwrap();
    client.authenticate(b"ctl-test-operator").await.unwrap();
    let counter = client
        .create("counter", "moving-counter", Placement::default())
        .await
        .unwrap();
    let mut total = 0u64;
    for n in 1..=10u64 {
        total += n;
        assert_eq!(
            client.request(&counter, &demo::Add(n)).await.unwrap(),
            total
        );
    }
    // There and back, the client sending between the moves.
    for (to, n) in [("node2", 11u64), ("node1", 12), ("node2", 13)] {
        let out = ctl(&eps, &["relocate", "moving-counter", "--to", to]).await;
        assert!(out.contains(&format!("to {to}")), "{out}");
        let here = client.get("moving-counter").await.unwrap();
        assert_eq!(here.node().as_str(), to);
        assert_eq!(here.object_generation(), counter.object_generation());
        total += n;
        assert_eq!(client.request(&here, &demo::Add(n)).await.unwrap(), total);
    }
    let t = ctl(&eps, &["relocations"]).await;
    assert_eq!(
        t.lines()
            .filter(|l| l.contains("source") && l.ends_with("moved"))
            .count(),
        3,
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.contains("target") && l.contains("committed")),
        "{t}"
    );
    // A node that does not own the actor is not the one that moves it; an unknown actor fails.
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("ctl")
        .env("ZLINK_OPERATOR_CREDENTIAL_FILE", operator_file())
        .args(["-e", eps[0], "relocate", "nobody", "--to", "node2"]);
    let out = cmd.output().await.unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no node asked owns nobody"));
}

// spec: SB-8.9, SB-14.21, SB-1.3
// `ctl relocate-spot` moves a SpotWide Spot of three demo counters from node1 to node2 as one
// unit while another Spot of node1 stays: every member's total travels, identities are kept,
// the moved members serve on node2 and the one left behind on node1; `ctl relocations` shows
// the Spot's relocation on both nodes. A Spot the asked nodes do not host fails by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_relocates_a_spot_between_processes() {
    use zlink::actor::{SpotKind, SpotSpec, UserMode};
    let dir = tempfile::tempdir().unwrap();
    let operator = dir.path().join("operator");
    let mut specs = setup(dir.path()).into_iter();
    let (c1, r1, e1) = specs.next().unwrap();
    let (c2, r2, e2) = specs.next().unwrap();
    let mut p1 = Proc::start(c1, r1, e1, &[]);
    let mut p2 = Proc::start(c2, r2, e2, &[]);
    p1.wait_ready().await;
    p2.wait_ready().await;
    let eps = [p1.client.as_str(), p2.client.as_str()];
    let client = NodeClient::connect(&p1.client, TIMEOUT).unwrap();
    client.authenticate(b"ctl-test-operator").await.unwrap();
    let in_spot = |name: &str| Placement {
        spot: Some(SpotSpec {
            name: name.to_owned(),
            kind: SpotKind::User(UserMode::SpotWide),
        }),
        ..Placement::default()
    };
    let mut members = Vec::new();
    for (k, id) in ["arena-1", "arena-2", "arena-3"].into_iter().enumerate() {
        let a = client
            .create("counter", id, in_spot("arena"))
            .await
            .unwrap();
        assert_eq!(
            client.request(&a, &demo::Add(k as u64 + 1)).await.unwrap(),
            k as u64 + 1
        );
        members.push(a);
    }
    let stay = client
        .create("counter", "lobby-1", in_spot("lobby"))
        .await
        .unwrap();
    assert_eq!(client.request(&stay, &demo::Add(5)).await.unwrap(), 5);
    // The target is asked first: it does not host the Spot (NotFound), so `ctl` goes on.
    let target_first = [p2.client.as_str(), p1.client.as_str()];
    let out = ctl_as(
        &operator,
        &target_first,
        &["relocate-spot", "arena", "--to", "node2"],
    )
    .await;
    assert!(
        out.contains("moved spot arena (3 actors") && out.contains("to node2"),
        "{out}"
    );
    for (k, m) in members.iter().enumerate() {
        let here = client.get(m.id().as_str()).await.unwrap();
        assert_eq!(here.node().as_str(), "node2");
        assert_eq!(here.object_generation(), m.object_generation());
        // the total travelled: k + 1 before, 10 more now
        assert_eq!(
            client.request(&here, &demo::Add(10)).await.unwrap(),
            k as u64 + 11
        );
    }
    let here = client.get("lobby-1").await.unwrap();
    assert_eq!(here.node().as_str(), "node1");
    assert_eq!(client.request(&here, &demo::Add(1)).await.unwrap(), 6);
    let t = ctl_as(&operator, &eps, &["relocations"]).await;
    assert!(
        t.lines()
            .any(|l| l.contains("spot arena") && l.contains("source") && l.ends_with("moved")),
        "{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.contains("target") && l.contains("committed")),
        "{t}"
    );
    let out = tokio::process::Command::new(BIN)
        .arg("ctl")
        .env("ZLINK_OPERATOR_CREDENTIAL_FILE", &operator)
        .args(["-e", eps[0], "relocate-spot", "nowhere", "--to", "node2"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no node asked hosts spot nowhere"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
