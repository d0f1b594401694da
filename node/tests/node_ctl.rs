//! The operator's view of running `zlink-node` processes: two nodes (one with the TOML key
//! `metrics`, one with the `--metrics` flag) sharing a SQLite Location Store; known actors and
//! a bound session; `zlink-node ctl` lists nodes, actors, sessions and counters as a table and
//! as JSON, and a node's metrics endpoint is scraped over HTTP. The nodes keep the default
//! client policy with an operator credential (`operator_credential_file`): the test's client
//! and `ctl` (`--credential-file`) present it.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zlink::node::client::{NodeClient, Placement};
use zlink_apps::demo;

mod procs;
use procs::{BIN, OPERATOR, Proc, TIMEOUT, free_port, setup_each};

/// Runs `zlink-node ctl -e EP1 -e EP2 ARGS…` with the nodes' operator credential
/// (`OPERATOR_FILE`, set by each test to its own directory's file); its stdout (it must
/// succeed).
async fn ctl(endpoints: &[&str], args: &[&str]) -> String {
    procs::ctl(operator_file(), endpoints, args).await
}

static OPERATOR_FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn set_operator_file(path: PathBuf) {
    OPERATOR_FILE.set(path).expect("one ctl test per process");
}

fn operator_file() -> &'static Path {
    OPERATOR_FILE.get().expect("operator file set")
}

async fn ctl_json(endpoints: &[&str], args: &[&str]) -> Vec<Value> {
    let mut a = args.to_vec();
    a.push("--json");
    let out = ctl(endpoints, &a).await;
    serde_json::from_str::<Vec<Value>>(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The table row whose first cells are `first` (cells split on runs of spaces).
fn row<'a>(table: &'a str, first: &[&str]) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.starts_with(first))
        .unwrap_or_else(|| panic!("no row {first:?} in\n{table}"))
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
    assert!(buf.starts_with("HTTP/1.1 200"), "{buf}");
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_lists_nodes_actors_sessions_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    // node1 names its metrics address in the file; node2 gets the flag.
    let specs = setup_each(dir.path(), 2, |i| {
        if i == 0 {
            "metrics = \"127.0.0.1:0\"\n".to_owned()
        } else {
            String::new()
        }
    });
    let mut p1 = Proc::start(&specs[0]);
    let mut p2 = Proc::start_with(&specs[1], &["--metrics", "127.0.0.1:0"]);
    let ready1 = p1.wait_ready().await;
    let ready2 = p2.wait_ready().await;
    let eps = [specs[0].client.as_str(), specs[1].client.as_str()];
    set_operator_file(dir.path().join("operator"));

    // Known state: a counter on node1, an echo on node2 bound to a session on node1.
    let client = NodeClient::connect(&specs[0].client, TIMEOUT).unwrap();
    client.authenticate(OPERATOR).await.unwrap();
    client
        .create("counter", "ctl-counter", Placement::default())
        .await
        .unwrap();
    let echo = client
        .create("echo", "ctl-echo", Placement::on("node2"))
        .await
        .unwrap();
    client
        .packet(&demo::session::Bind { actor: echo })
        .await
        .unwrap();

    // nodes: a row per node, peers up, generations as in the ready files.
    let t = ctl(&eps, &["nodes"]).await;
    assert!(t.starts_with("NODE "), "{t}");
    let n1 = row(&t, &["node1"]);
    assert_eq!(n1[1], ready1["generation"]);
    assert_eq!(n1[4], "1/1", "{t}");
    assert_eq!(n1[5], "-", "{t}");
    assert_eq!(row(&t, &["node2"])[1], ready2["generation"]);
    let j = ctl_json(&eps, &["nodes"]).await;
    assert_eq!(j.len(), 2);
    assert_eq!(j[0]["node"], "node1");
    assert_eq!(j[0]["endpoint"], specs[0].client.as_str());
    assert_eq!(j[0]["peers_up"], serde_json::json!(["node2"]));
    assert_eq!(j[1]["generation"].to_string(), ready2["generation"]);

    // actors: each node lists its own.
    let t = ctl(&eps, &["actors"]).await;
    let a = row(&t, &["node1", "ctl-counter"]);
    assert_eq!(&a[2..], ["counter", "1", "entry", "entry", "no"], "{t}");
    let a = row(&t, &["node2", "ctl-echo"]);
    assert_eq!(&a[2..], ["echo", "1", "entry", "entry", "yes"], "{t}");
    let j = ctl_json(&eps, &["actors"]).await;
    assert_eq!(j.len(), 2, "{j:?}");
    assert_eq!(j[1]["node"], "node2");
    assert_eq!(j[1]["actor_id"], "ctl-echo");
    assert_eq!(j[1]["bound"], true);

    // sessions: the client's session on node1, bound to the echo.
    let t = ctl(&eps, &["sessions"]).await;
    assert!(t.starts_with("NODE "), "{t}");
    let s: Vec<&str> = t
        .lines()
        .find(|l| l.ends_with("ctl-echo"))
        .unwrap_or_else(|| panic!("no bound session in\n{t}"))
        .split_whitespace()
        .collect();
    assert_eq!(s[0], "node1");
    assert_eq!(&s[2..], ["open", "1", "0", "ctl-echo"], "{t}");
    let j = ctl_json(&eps, &["sessions"]).await;
    // ctl's own connections are sessions too while it asks: find the bound one.
    let bound: Vec<&Value> = j
        .iter()
        .filter(|s| s["bound"] == serde_json::json!(["ctl-echo"]))
        .collect();
    assert_eq!(bound.len(), 1, "{j:?}");
    assert_eq!(bound[0]["node"], "node1");
    assert_eq!(bound[0]["phase"], "open");

    // counters: a column per node; JSON is the COUNTERS snapshot of each.
    let t = ctl(&eps, &["counters"]).await;
    assert_eq!(row(&t, &["COUNTER"]), ["COUNTER", "node1", "node2"]);
    assert_eq!(row(&t, &["client_operations.create"])[1..], ["2", "0"]);
    assert_eq!(row(&t, &["actors.entry"])[1..], ["1", "1"]);
    assert_eq!(row(&t, &["bindings"])[1..], ["1", "0"]);
    assert!(
        !t.contains("mesh_drops.malformed"),
        "zeros are left out\n{t}"
    );
    let all = ctl(&eps, &["counters", "--all"]).await;
    assert_eq!(row(&all, &["mesh_drops.malformed"])[1..], ["0", "0"]);
    // lane depths: each node's Entry Spot has its own lane and its actor's, none queued now
    for lanes in &row(&all, &["lanes.entry.lanes"])[1..] {
        assert!(lanes.parse::<u64>().unwrap() >= 2, "{all}");
    }
    assert_eq!(row(&all, &["lanes.entry.deepest"])[1..], ["0", "0"]);
    let j = ctl_json(&eps, &["counters"]).await;
    assert_eq!(j[0]["client_operations"]["create"], 2);
    assert_eq!(j[1]["actors"]["entry"], 1);
    assert_eq!(j[1]["activations"], 1);
    assert_eq!(j[0]["relocations"], 0);
    assert_eq!(j[0]["lanes"]["entry"]["application_queued"], 0);

    // The metrics endpoints (TOML key on node1, flag on node2) serve the same counters.
    let m1 = scrape(&ready1["metrics"]).await;
    assert!(
        m1.contains("\nzlink_actors{spot_kind=\"entry\"} 1\n"),
        "{m1}"
    );
    assert!(m1.contains("\nzlink_session_bindings 1\n"), "{m1}");
    assert!(
        m1.contains("\nzlink_lane_queued{spot_kind=\"entry\",lane=\"application\"} 0\n"),
        "{m1}"
    );
    let m2 = scrape(&ready2["metrics"]).await;
    assert!(m2.contains("\nzlink_activations_total 1\n"), "{m2}");

    // A node that does not answer fails ctl, naming its endpoint.
    let dead = format!("tcp://127.0.0.1:{}", free_port());
    let out = tokio::process::Command::new(BIN)
        .args(["ctl", "-e", &dead, "--timeout-ms", "300", "nodes"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&dead),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    client.close().await;
}

// Issue 26: `ctl` run with a credential variable that is set but empty (or an empty credential
// file) fails with a message naming it, not with clap's usage error about a flag it was never
// given (seen before the fix: "a value is required for '--operator-credential-file <FILE>'",
// and an empty ZLINK_OPERATOR_CREDENTIAL was presented to the node). No node is needed: the
// check comes before any request.
#[test]
fn ctl_names_a_credential_that_is_set_but_empty() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-credential");
    std::fs::write(&empty, "  \n").unwrap();
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["ctl", "-e", "tcp://127.0.0.1:9"])
            .args(extra)
            .arg("nodes")
            .env_remove("ZLINK_OPERATOR_CREDENTIAL_FILE")
            .env_remove("ZLINK_OPERATOR_CREDENTIAL")
            .env("RUST_BACKTRACE", "0");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "ctl succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for var in [
        "ZLINK_OPERATOR_CREDENTIAL_FILE",
        "ZLINK_OPERATOR_CREDENTIAL",
    ] {
        let err = run(&[(var, "")], &[]);
        assert!(err.contains(&format!("{var} is set but empty")), "{err}");
        assert!(!err.contains("a value is required"), "{err}");
    }
    let err = run(&[], &["--credential-file", empty.to_str().unwrap()]);
    assert!(err.contains("is empty"), "{err}");
}
