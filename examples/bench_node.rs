//! Cross-node actor benchmark through the full stack, with the raw libzmq baseline measured in
//! the same run. Prints JSON lines `{"bench","metric","value","baseline","ratio"}`.
//!
//! - `actor_request_node`: node a's `Node::request` to an `echo` actor on node b (typed encode →
//!   160 ActorCall on the relay connection → fence check → actor lane on the lane runtime →
//!   handler → 145 reply on the completion connection), 64-byte payload; baseline: a libzmq
//!   DEALER→ROUTER echo round trip of 64 bytes.
//! - `actor_request_client`: a ClientServer client → node a → actor on node b and back (two
//!   hops each way); baseline: the raw libzmq two-hop echo of the same shape (DEALER →
//!   forwarder → ROUTER echo and back, `bench_mesh --only raw_2hop_echo`, run as a child
//!   process: `cargo build --release -p zlink-mesh --example bench_mesh`; `BENCH_MESH_BIN`
//!   overrides its path); its
//!   figures are the line's `baseline`).
//! - `actor_send`: one-way `Add` sends from node a to a `counter` on node b, counted by the
//!   actor; baseline: libzmq DEALER→ROUTER one-way throughput of 64-byte messages.
//!
//! The process runs on mimalloc, the allocator `zlink-node` links (as `bench_session` does).
//!
//! `BENCH_QUICK=1` shortens every run; `BENCH_NODE_ONLY=send` runs only `actor_send`
//! (`BENCH_SENDS=N` sends: callgrind's per-send cost is the difference of two runs;
//! `BENCH_SPIN=<yields>` sets the I/O threads' spin, 0 under valgrind).
//! `BENCH_SAMPLES=FILE` appends the request round trips
//! (and the libzmq baseline's) to FILE for `bench_plot`'s histograms. Progress on stderr.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use zlink::actor::ActorId;
use zlink::node::client::{NodeClient, Placement};
use zlink::node::{Create, Node, NodeOptions};
use zlink::store::MemoryStore;
use zlink_apps::demo::{self, Add, Echo, Get};
use zlink_mesh::{MeshConfig, MeshName, MeshSecret, NodeRid};

#[path = "support/progress.rs"]
mod progress;
#[path = "support/samples.rs"]
mod samples;
/// The allocator `zlink-node` links, so the cross-node path is measured as it ships.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PAYLOAD: usize = 64;

fn quick() -> bool {
    std::env::var_os("BENCH_QUICK").is_some()
}

fn line(bench: &str, metric: &str, value: f64, baseline: f64) {
    let ratio = if baseline > 0.0 {
        value / baseline
    } else {
        0.0
    };
    progress::out(format_args!(
        "{{\"bench\":{},\"metric\":{},\"value\":{:.1},\"baseline\":{:.1},\"ratio\":{:.3}}}",
        serde_json::Value::from(bench),
        serde_json::Value::from(metric),
        value,
        baseline,
        ratio
    ));
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000, 3).expect("bounds")
}

/// libzmq DEALER → ROUTER echo round trips (two threads, tcp loopback): p50/p99 in µs.
fn zmq_round_trip(n: usize) -> (f64, f64, Vec<f64>) {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER).unwrap();
    router.bind("tcp://127.0.0.1:*").unwrap();
    let ep = router.get_last_endpoint().unwrap().unwrap();
    let total = n + 1000;
    let echo = std::thread::spawn(move || {
        for _ in 0..total {
            let parts = router.recv_multipart(0).unwrap();
            router.send_multipart(parts, 0).unwrap();
        }
    });
    let dealer = ctx.socket(zmq::DEALER).unwrap();
    dealer.connect(&ep).unwrap();
    let payload = [7u8; PAYLOAD];
    let mut h = hist();
    for i in 0..total {
        let t = Instant::now();
        dealer.send(&payload[..], 0).unwrap();
        let _ = dealer.recv_bytes(0).unwrap();
        if i >= 1000 {
            let _ = h.record(t.elapsed().as_micros().max(1) as u64);
        }
    }
    echo.join().unwrap();
    (
        h.value_at_quantile(0.5) as f64,
        h.value_at_quantile(0.99) as f64,
        samples::of_histogram(&h),
    )
}

/// The raw libzmq two-hop echo (p50, p99 µs) from `bench_mesh --only raw_2hop_echo`, run as
/// a child process; its round trips go to `BENCH_SAMPLES` as `actor_request_client`'s
/// baseline.
fn raw_2hop_echo(n: usize) -> (f64, f64) {
    let bin = std::env::var_os("BENCH_MESH_BIN").map_or_else(
        || {
            std::env::current_exe()
                .unwrap()
                .with_file_name("bench_mesh")
        },
        std::path::PathBuf::from,
    );
    let out = std::process::Command::new(&bin)
        .args(["--only", "raw_2hop_echo", "1", &n.to_string()])
        .env("BENCH_SAMPLES_BENCH", "actor_request_client")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (build it: cargo build --release -p zlink-mesh --example bench_mesh)",
                bin.display()
            )
        });
    assert!(
        out.status.success(),
        "raw child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut p = (0.0, 0.0);
    for v in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        match (v["metric"].as_str(), v["value"].as_f64()) {
            (Some("p50_us"), Some(x)) => p.0 = x,
            (Some("p99_us"), Some(x)) => p.1 = x,
            _ => {}
        }
    }
    assert!(p.0 > 0.0, "raw child printed no raw_2hop_echo line");
    p
}

/// libzmq DEALER → ROUTER one-way throughput (messages/s, counted by the receiver).
fn zmq_one_way(n: usize) -> f64 {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER).unwrap();
    router.set_rcvhwm(1000).unwrap();
    router.bind("tcp://127.0.0.1:*").unwrap();
    let ep = router.get_last_endpoint().unwrap().unwrap();
    let sink = std::thread::spawn(move || {
        let _ = router.recv_multipart(0).unwrap();
        let t = Instant::now();
        for _ in 1..n {
            let _ = router.recv_multipart(0).unwrap();
        }
        t.elapsed()
    });
    let dealer = ctx.socket(zmq::DEALER).unwrap();
    dealer.set_sndhwm(1000).unwrap();
    dealer.connect(&ep).unwrap();
    let payload = [7u8; PAYLOAD];
    for _ in 0..n {
        dealer.send(&payload[..], 0).unwrap();
    }
    let took = sink.join().unwrap();
    (n - 1) as f64 / took.as_secs_f64()
}

async fn start(
    name: &str,
    peers: Vec<zlink_mesh::PeerAddress>,
    store: std::sync::Arc<MemoryStore>,
) -> Node {
    let mut mc = MeshConfig::new(MeshName::new("bench").unwrap(), NodeRid::new(name).unwrap());
    mc.secret = Some(MeshSecret::new(b"zlink-bench-secret-0123456789abcdef".to_vec()).unwrap());
    mc.client_endpoint = Some("tcp://127.0.0.1:*".into());
    if let Some(spin) = std::env::var("BENCH_SPIN")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        mc.io_spin_yields = spin;
    }
    let mut o = NodeOptions::new(mc, store, demo::registry().unwrap())
        .with_client_access(zlink::node::access::ClientAccess::open());
    o.peers = peers;
    Node::start(o).await.unwrap()
}

#[tokio::main]
async fn main() {
    let (rt_n, send_n) = if quick() {
        (2_000, 20_000)
    } else {
        (10_000, 200_000)
    };
    let send_n = std::env::var("BENCH_SENDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(send_n);
    let only_send = std::env::var_os("BENCH_NODE_ONLY").is_some_and(|v| v == "send");
    progress::start("bench_node", 6);
    let store = std::sync::Arc::new(MemoryStore::new());
    let b = start("b", vec![], store.clone()).await;
    let a = start("a", vec![b.address()], store).await;
    assert!(
        a.wait_peers(Duration::from_secs(5)).await.is_empty(),
        "peer b down"
    );
    let echo = a
        .create(Create::new("echo", ActorId::new("bench-echo").unwrap()).on(b.node_rid().clone()))
        .await
        .unwrap();
    let counter = a
        .create(
            Create::new("counter", ActorId::new("bench-counter").unwrap()).on(b.node_rid().clone()),
        )
        .await
        .unwrap();
    let timeout = Duration::from_secs(5);
    let msg = Echo(vec![7u8; PAYLOAD]);

    if !only_send {
        progress::step(format!("libzmq round trip baseline ({rt_n})"));
        let zmq_rt = tokio::task::spawn_blocking(move || zmq_round_trip(rt_n))
            .await
            .unwrap();

        progress::step(format!("libzmq two-hop echo baseline ({rt_n})"));
        let zmq_rt2 = tokio::task::spawn_blocking(move || raw_2hop_echo(rt_n))
            .await
            .unwrap();

        // Node API request/reply.
        progress::step(format!("actor requests via the node API ({rt_n})"));
        let mut h = hist();
        for i in 0..rt_n + 1000 {
            let t = Instant::now();
            a.request(&echo, &msg, timeout).await.unwrap();
            if i >= 1000 {
                let _ = h.record(t.elapsed().as_micros().max(1) as u64);
            }
        }
        line(
            "actor_request_node",
            "p50_us",
            h.value_at_quantile(0.5) as f64,
            zmq_rt.0,
        );
        line(
            "actor_request_node",
            "p99_us",
            h.value_at_quantile(0.99) as f64,
            zmq_rt.1,
        );
        samples::write(
            "actor_request_node",
            samples::ZLINK,
            &samples::of_histogram(&h),
        );
        samples::write("actor_request_node", samples::BASELINE, &zmq_rt.2);

        // ClientServer client → node a → actor on node b.
        progress::step(format!("actor requests via a client ({rt_n})"));
        let client =
            NodeClient::connect(a.endpoints().client.as_deref().unwrap(), timeout).unwrap();
        let via = client
            .get_or_create("echo", "bench-echo", Placement::default())
            .await
            .unwrap();
        assert_eq!(via, echo);
        let mut h = hist();
        for i in 0..rt_n + 1000 {
            let t = Instant::now();
            client.request(&echo, &msg).await.unwrap();
            if i >= 1000 {
                let _ = h.record(t.elapsed().as_micros().max(1) as u64);
            }
        }
        // Two hops each way: against the raw two-hop echo (its samples are this line's baseline,
        // written by the child).
        line(
            "actor_request_client",
            "p50_us",
            h.value_at_quantile(0.5) as f64,
            zmq_rt2.0,
        );
        line(
            "actor_request_client",
            "p99_us",
            h.value_at_quantile(0.99) as f64,
            zmq_rt2.1,
        );
        samples::write(
            "actor_request_client",
            samples::ZLINK,
            &samples::of_histogram(&h),
        );

        client.close().await;
    }

    // One-way sends, counted by the actor.
    progress::step(format!(
        "one-way sends, libzmq baseline then actor ({send_n})"
    ));
    let zmq_tput = tokio::task::spawn_blocking(move || zmq_one_way(send_n))
        .await
        .unwrap();
    let t = Instant::now();
    for _ in 0..send_n {
        a.send(&counter, &Add(1)).await.unwrap();
    }
    let total = a
        .request(&counter, &Get, Duration::from_secs(60))
        .await
        .unwrap();
    let took = t.elapsed();
    assert_eq!(total, send_n as u64, "sends lost");
    line(
        "actor_send",
        "msgs_per_s",
        send_n as f64 / took.as_secs_f64(),
        zmq_tput,
    );

    progress::step("shutdown");
    a.shutdown(Duration::from_secs(1)).await;
    b.shutdown(Duration::from_secs(1)).await;
    progress::finish();
}
