//! `zlink-node` processes sharing one Location Store (the embedded SQLite file, or a Redis
//! server): two agree on owners, and a restarted node has a new NodeGeneration and refuses refs
//! from before the restart; three on Redis pass the demo workload and the chat driver of
//! `scripts/demo` (the examples' own code, included below).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zlink::actor::ErrorKind;
use zlink::node::client::{NodeClient, Placement};
use zlink_apps::demo::{Add, Get};

#[path = "../../mesh/tests/common/ports.rs"]
mod ports;
use ports::free_port;

// The drivers `scripts/demo` runs (their `main`s are unused here).
#[path = "../../examples/chat.rs"]
#[allow(dead_code)]
mod chat;
#[path = "../../examples/demo_workload.rs"]
#[allow(dead_code)]
mod demo_workload;

const TIMEOUT: Duration = Duration::from_secs(20);

/// The operator credential of the processes (`operator_credential_file`): they keep the
/// default client policy, so the tests' clients present it, as `scripts/demo` does.
const OPERATOR: &[u8] = b"process-test-operator";

/// A client of `endpoint` that presented the operator credential.
async fn operator_client(endpoint: &str) -> NodeClient {
    let c = NodeClient::connect(endpoint, TIMEOUT).unwrap();
    c.authenticate(OPERATOR).await.unwrap();
    c
}

/// One mesh of processes at a time in this file: four at once (ten node processes and their
/// clients on a loaded 2-core machine) starve each other past the 3 s heartbeat timeouts.
static ONE_MESH_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Proc {
    name: String,
    config: PathBuf,
    ready: PathBuf,
    client: String,
    child: Option<Child>,
}

impl Proc {
    fn start(&mut self) {
        let _ = std::fs::remove_file(&self.ready);
        let log = std::fs::File::create(self.config.with_extension("log")).unwrap();
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_zlink-node"))
                .arg("--config")
                .arg(&self.config)
                .env("RUST_LOG", "info")
                .stdout(Stdio::from(log.try_clone().unwrap()))
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap(),
        );
    }

    /// Waits for the ready file (the node serves and its peers are up).
    async fn wait_ready(&mut self) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.ready) {
                return s;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{} exited during startup: {status}\n{}",
                    self.name,
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The node's log, for failure messages.
    fn log(&self) -> String {
        std::fs::read_to_string(self.config.with_extension("log")).unwrap_or_default()
    }

    /// SIGTERM and wait: graceful shutdown exits 0.
    async fn stop(&mut self) {
        let mut child = self.child.take().unwrap();
        let ok = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
            .await
            .unwrap();
        assert!(
            status.success(),
            "{} exited with {status}\n{}",
            self.name,
            self.log()
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn setup(dir: &Path, n: usize) -> Vec<Proc> {
    std::fs::write(dir.join("secret"), "process-test-secret-0123456789abcdef\n").unwrap();
    std::fs::write(dir.join("operator"), OPERATOR).unwrap();
    let ports: Vec<[u16; 3]> = (0..n)
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
    let store = store_url(dir);
    (0..n)
        .map(|i| {
            let name = format!("node{}", i + 1);
            let config = dir.join(format!("{name}.toml"));
            let ready = dir.join(format!("{name}.ready"));
            let p = ports[i];
            std::fs::write(
                &config,
                format!(
                    "name = \"{name}\"\nmesh = \"local\"\nrelay = \"tcp://127.0.0.1:{}\"\n\
                     completion = \"tcp://127.0.0.1:{}\"\nclient = \"tcp://127.0.0.1:{}\"\n\
                     secret_file = \"{}\"\nstore = \"{store}\"\nready_file = \"{}\"\n\
                     operator_credential_file = \"{}\"\n\
                     drain_timeout_ms = 2000\n\n{peers}",
                    p[0],
                    p[1],
                    p[2],
                    dir.join("secret").display(),
                    ready.display(),
                    dir.join("operator").display()
                ),
            )
            .unwrap();
            Proc {
                name,
                config,
                ready,
                client: format!("tcp://127.0.0.1:{}", p[2]),
                child: None,
            }
        })
        .collect()
}

/// The Location Store of the processes set up in `dir`: the URL in `dir/store.url` when a test
/// wrote one (Redis), else a SQLite file in `dir`.
fn store_url(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("store.url"))
        .unwrap_or_else(|_| format!("sqlite://{}", dir.join("store.db").display()))
}

fn generation(ready: &str) -> u64 {
    ready
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("generation="))
        .unwrap()
        .parse()
        .unwrap()
}

// spec: EG-14 (the store reservation decides the owner, across processes), SB-12 (stale fence
// after a restart → Unavailable), glossary NodeGeneration (new on every process start)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_the_sqlite_store_and_a_restart_refuses_stale_refs() {
    let dir = tempfile::tempdir().unwrap();
    two_processes_share_a_store_and_a_restart_refuses_stale_refs(dir.path()).await;
}

// spec: EG-14, SB-12 — the same on a Redis Location Store (ZLINK_TEST_REDIS_URL; server TIME).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_a_redis_store_and_a_restart_refuses_stale_refs() {
    use zlink::store::contract;
    let Some(url) = contract::redis_test_url("two_processes_share_a_redis_store") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = contract::with_unique_prefix(&url, "process");
    std::fs::write(dir.path().join("store.url"), store).unwrap();
    two_processes_share_a_store_and_a_restart_refuses_stale_refs(dir.path()).await;
}

async fn two_processes_share_a_store_and_a_restart_refuses_stale_refs(dir: &Path) {
    let _one = ONE_MESH_AT_A_TIME.lock().await;
    let mut procs = setup(dir, 2);
    for p in procs.iter_mut() {
        p.start();
    }
    let mut gens = Vec::new();
    for p in procs.iter_mut() {
        gens.push(generation(&p.wait_ready().await));
    }
    let c1 = operator_client(&procs[0].client).await;
    let c2 = operator_client(&procs[1].client).await;

    // Owners agree: created through node1 on node2, every lookup names node2.
    let r = c1
        .create("counter", "shared", Placement::on("node2"))
        .await
        .unwrap();
    assert_eq!(r.node().as_str(), "node2");
    assert_eq!(r.location().node_generation.get(), gens[1]);
    assert_eq!(c2.get("shared").await.unwrap(), r);
    assert_eq!(c1.get("shared").await.unwrap(), r);
    // get-or-create on node1 finds node2's incarnation; create is refused.
    assert_eq!(
        c2.get_or_create("counter", "shared", Placement::on("node1"))
            .await
            .unwrap(),
        r
    );
    assert_eq!(
        c1.create("counter", "shared", Placement::default())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidOperation
    );
    assert_eq!(c1.request(&r, &Add(3)).await.unwrap(), 3);
    assert_eq!(c2.request(&r, &Get).await.unwrap(), 3);

    // Restart node2: a new NodeGeneration.
    procs[1].stop().await;
    procs[1].start();
    let new_gen = generation(&procs[1].wait_ready().await);
    assert_ne!(new_gen, gens[1]);
    let c2 = operator_client(&procs[1].client).await;
    assert_eq!(c2.info().await.unwrap().generation, new_gen);
    // node1 sees the new generation once its connections re-handshake.
    let deadline = Instant::now() + TIMEOUT;
    while !c1
        .info()
        .await
        .unwrap()
        .peers_up
        .contains(&"node2".to_owned())
    {
        assert!(Instant::now() < deadline, "node2 not up again at node1");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The ref from before the restart is refused (stale fence), from any node.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let e = c1.request(&r, &Get).await.unwrap_err();
        if e.kind() == ErrorKind::Unavailable && e.to_string().contains("stale") {
            break;
        }
        // The old peer lifecycle may still be ending: only Unavailable is acceptable meanwhile.
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(Instant::now() < deadline, "{e}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        c2.request(&r, &Get).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    // Re-activation on the restarted node: same incarnation, new authority and generation.
    let r2 = c1
        .get_or_create("counter", "shared", Placement::on("node2"))
        .await
        .unwrap();
    assert_eq!(r2.object_generation(), r.object_generation());
    assert_eq!(r2.location().node_generation.get(), new_gen);
    assert!(r2.location().authority_owner_generation > r.location().authority_owner_generation);
    assert_eq!(c1.request(&r2, &Get).await.unwrap(), 0);
    assert_eq!(
        c1.request(&r, &Get).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );

    c1.close().await;
    c2.close().await;
    for p in procs.iter_mut() {
        p.stop().await;
    }
}

/// Bound on the whole demo workload or chat run (each of their waits has its own, shorter one).
const DEMO_TIMEOUT: Duration = Duration::from_secs(120);

// spec: EG-14, SB-12, EG-15 (the demo workload's checks) — `scripts/demo` as a test: three
// processes on one SQLite Location Store file pass the demo workload and the chat driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_the_sqlite_store_pass_the_demo_workload_and_the_chat() {
    let dir = tempfile::tempdir().unwrap();
    three_processes_pass_the_demo_workload_and_the_chat(dir.path()).await;
}

// spec: EG-14, SB-12, EG-15 — `scripts/demo --store redis` as a test: the same on one Redis
// Location Store (ZLINK_TEST_REDIS_URL, a key prefix of this test's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_a_redis_store_pass_the_demo_workload_and_the_chat() {
    use zlink::store::contract;
    let Some(url) = contract::redis_test_url("three_processes_on_a_redis_store_pass_the_demo")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = contract::with_unique_prefix(&url, "demo");
    std::fs::write(dir.path().join("store.url"), store).unwrap();
    three_processes_pass_the_demo_workload_and_the_chat(dir.path()).await;
}

/// Three processes set up in `dir` run the demo workload, then the chat driver, and stop
/// gracefully (exit code 0 after SIGTERM, as `scripts/mesh-down` checks).
async fn three_processes_pass_the_demo_workload_and_the_chat(dir: &Path) {
    let _one = ONE_MESH_AT_A_TIME.lock().await;
    let mut procs = setup(dir, 3);
    for p in procs.iter_mut() {
        p.start();
    }
    for p in procs.iter_mut() {
        p.wait_ready().await;
    }
    let endpoints: Vec<String> = procs.iter().map(|p| p.client.clone()).collect();
    let logs = |procs: &[Proc]| {
        procs
            .iter()
            .map(|p| format!("--- {} ---\n{}", p.name, p.log()))
            .collect::<String>()
    };

    let eps: Vec<&str> = endpoints.iter().map(String::as_str).collect();
    match tokio::time::timeout(DEMO_TIMEOUT, demo_workload::run(&eps, Some(OPERATOR))).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("demo workload failed: {e:#}\n{}", logs(&procs)),
        Err(_) => panic!(
            "demo workload not done in {DEMO_TIMEOUT:?}\n{}",
            logs(&procs)
        ),
    }
    match tokio::time::timeout(DEMO_TIMEOUT, chat::run(&endpoints, Some(OPERATOR))).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("chat failed: {e:#}\n{}", logs(&procs)),
        Err(_) => panic!("chat not done in {DEMO_TIMEOUT:?}\n{}", logs(&procs)),
    }
    for p in procs.iter_mut() {
        p.stop().await;
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct LocMirror {
    mesh: String,
    node: String,
    node_generation: u64,
    authority_owner_generation: u64,
    owner_lease_generation: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RefMirror {
    actor_id: String,
    actor_type: String,
    object_generation: u64,
    location: LocMirror,
}

/// A copy of `r` naming another generation of its owner node (a stale snapshot).
fn stale_generation(r: &zlink::actor::ActorRef) -> zlink::actor::ActorRef {
    let mut m: RefMirror = rmp_serde::from_slice(&rmp_serde::to_vec_named(r).unwrap()).unwrap();
    m.location.node_generation -= 1;
    rmp_serde::from_slice(&rmp_serde::to_vec_named(&m).unwrap()).unwrap()
}

/// The process's resident set (`VmRSS`), in bytes.
fn rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// A raw ZMTP 3.0 peer (NULL, socket type DEALER) writes SUBSCRIBE command frames with MORE
/// set, 32 KiB each, to `port` until `total` bytes were written, reconnecting whenever the node
/// drops it; halfway through it samples `halfway()`. Returns (connections dropped, sample).
fn command_flood(port: u16, total: u64, halfway: impl Fn() -> u64) -> (u64, u64) {
    use std::io::{Read, Write};
    const PART: usize = 32 * 1024;
    let mut frame = vec![0x07u8];
    frame.extend_from_slice(&(PART as u64).to_be_bytes());
    frame.push(9);
    frame.extend_from_slice(b"SUBSCRIBE");
    frame.resize(9 + PART, b'x');
    let chunk = frame.repeat(4);
    let (mut written, mut dropped, mut sample) = (0u64, 0u64, None);
    while written < total {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut greet = vec![0xffu8, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0];
        greet.extend_from_slice(b"NULL");
        greet.resize(64, 0);
        let mut body = vec![5u8];
        body.extend_from_slice(b"READY");
        body.push(11);
        body.extend_from_slice(b"Socket-Type");
        body.extend_from_slice(&6u32.to_be_bytes());
        body.extend_from_slice(b"DEALER");
        let mut ready = vec![0x04u8, body.len() as u8];
        ready.extend_from_slice(&body);
        if s.write_all(&greet)
            .and_then(|()| s.write_all(&ready))
            .is_err()
        {
            continue;
        }
        let mut peer = [0u8; 64];
        if s.read_exact(&mut peer).is_err() {
            dropped += 1;
            continue;
        }
        loop {
            if sample.is_none() && written >= total / 2 {
                sample = Some(halfway());
            }
            match s.write_all(&chunk) {
                Ok(()) => written += chunk.len() as u64,
                Err(_) => {
                    dropped += 1;
                    break;
                }
            }
            if written >= total {
                break;
            }
        }
    }
    (dropped, sample.unwrap_or_else(&halfway))
}

// spec: SB-2.1, SB-12 — two attacks of issue 26 from outside, against real `zlink-node`
// processes, the pair serving after each: (item 2) a client's calls and sends with a ref naming
// a stale generation of the owner node, more than a whole receive window of them (4,096), are
// refused at the node the client talks to and never forwarded; (item 1) a raw TCP peer floods
// the owner's client and relay ports with SUBSCRIBE command frames with MORE set: the
// connections are dropped and the owner's memory stays bounded (without the libzmq patch it
// grew by the attacker's volume).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_generation_calls_and_command_frame_floods_leave_the_pair_serving() {
    const FLOOD: u64 = 128 * 1024 * 1024;
    const RSS_BOUND: u64 = 48 * 1024 * 1024;
    let _one = ONE_MESH_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut procs = setup(dir.path(), 2);
    for p in procs.iter_mut() {
        p.start();
    }
    for p in procs.iter_mut() {
        p.wait_ready().await;
    }
    let c1 = operator_client(&procs[0].client).await;
    let r = c1
        .create("counter", "target", Placement::on("node2"))
        .await
        .unwrap();
    let stale = stale_generation(&r);
    for _ in 0..4_500 {
        // One-way: refused at node1 (counted there), nothing to await.
        c1.send(&stale, &Add(1)).await.unwrap();
    }
    for _ in 0..200 {
        let e = c1.request(&stale, &Get).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    }
    assert_eq!(c1.request(&r, &Add(2)).await.unwrap(), 2, "the pair serves");

    let pid = procs[1].child.as_ref().unwrap().id();
    let config = std::fs::read_to_string(&procs[1].config).unwrap();
    let port_of = |key: &str| -> u16 {
        config
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = \"tcp://127.0.0.1:")))
            .and_then(|p| p.trim_end_matches('"').parse().ok())
            .unwrap()
    };
    let c2 = operator_client(&procs[1].client).await;
    for key in ["client", "relay"] {
        let port = port_of(key);
        let before = rss(pid);
        let (dropped, during) =
            tokio::task::spawn_blocking(move || command_flood(port, FLOOD, || rss(pid)))
                .await
                .unwrap();
        let growth = during.max(rss(pid)).saturating_sub(before);
        eprintln!(
            "{key} port: {FLOOD} bytes of SUBSCRIBE+MORE, {dropped} connections dropped, RSS +{} KiB",
            growth / 1024
        );
        assert!(dropped >= 1, "{key}: the node dropped the attacker");
        assert!(
            growth < RSS_BOUND,
            "{key}: node2 grew by {growth} bytes (bound {RSS_BOUND})\n{}",
            procs[1].log()
        );
        assert_eq!(c2.request(&r, &Get).await.unwrap(), 2, "node2 serves");
        assert_eq!(c1.request(&r, &Get).await.unwrap(), 2, "the pair serves");
    }
    c1.close().await;
    c2.close().await;
    for p in procs.iter_mut() {
        p.stop().await;
    }
}
