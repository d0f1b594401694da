//! Mesh transport benchmark (not a timed test). Run with
//! `cargo run --release -p zlink-mesh --example bench_mesh` (build the `zlink-mesh-peer` bin
//! first: `cargo build --release -p zlink-mesh --bins`). Prints JSON lines:
//! `{"bench":…,"metric":…,"value":…,"baseline":…,"ratio":…}` where the baseline is raw
//! libzmq measured in the same run.
//!
//! Args: `[oneway_msgs] [rtt_samples]` (defaults 1,000,000 and 10,000, `BENCH_QUICK=1`: 100,000
//! and 2,000; `rtt_samples` 0 skips the latency and memory parts). Progress on stderr (a bar on
//! a terminal). Knobs for experiments: `BENCH_ONLY_MESH=1` (skip raw),
//! `BENCH_ONLY_RAW=1` (only the raw one-way runs: instruction counts of the baseline),
//! `BENCH_WINDOW=<msgs>` (receive window and budget), `BENCH_INBOUND=<records>`, `BENCH_SPIN=<yields>`,
//! `BENCH_BATCH=<records>` (most records per batch frame; 1 = batching off),
//! `BENCH_ONLY_CLIENT=1` (only the ClientServer benchmarks), `BENCH_NO_CLIENT=1` (skip them),
//! `BENCH_CLIENT_WINDOW=<records>` (the node's receive window per client),
//! `BENCH_CLIENT_SPIN=<yields>` (the client's `io_spin_yields`), `BENCH_CLIENT_BUDGET=<msgs>`
//! (the node's push budget per client), `BENCH_CLIENT_HWM=<msgs>` (the node's
//! `ClientOutbound::send_hwm`), `BENCH_CLIENT_BATCH=<records>` (its `batch_records`), `BENCH_PUSH_CAPACITY=<pushes>` (the client's), `BENCH_CLIENT_PARTS=<letters>`
//! (which ClientServer lines: `o` one-way, `p` push, `r` request/reply; default all),
//! `BENCH_MESH_PARTS=<letters>` (which RouteMesh lines: `o` one-way and batch64, `r`
//! request/reply, `s` the stalled peer; default all).
//! `BENCH_SAMPLES=FILE` appends the request/reply round trips (ZLink and raw) to FILE for
//! `bench_plot`'s histograms (`examples/bench_plot.rs`).
//!
//! ClientServer (`client_*` lines, one `MeshClient` against one node's client ROUTER, 64 B):
//! `client_oneway` (`MeshClient::send` → node inbound) against raw DEALER → ROUTER one-way,
//! `client_push` (`MeshNode::push` → `MeshClient::recv_push`) against raw ROUTER → DEALER,
//! both medians of 3 interleaved runs of `oneway_msgs`; `client_request_reply` p50/p99
//! (`MeshClient::request`, a task on the node answers from the `InboundReceiver`) against a
//! raw DEALER → ROUTER echo, `rtt_samples` round trips after 1,000 warm-up ones each.
//!
//! `--only raw_2hop` (before the numbers: `bench_mesh --only raw_2hop [oneway_msgs]
//! [rtt_samples]`) prints only the raw libzmq two-hop baselines of the session path (client →
//! session owner → actor owner; `scripts/bench` runs it, pairs in docs/PERFORMANCE.md), and a
//! longer prefix picks lines: `raw_2hop_pipeline` (DEALER → forwarder ROUTER, relayed over
//! ROUTER → ROUTER to a sink; 1 sender) and `raw_2hop_pipeline_100` (100 DEALERs), one-way
//! msgs/s at the sink; `raw_2hop_push` (ROUTER source → forwarder → DEALER), msgs/s at the
//! client; `raw_2hop_echo` p50/p99 µs (DEALER → forwarder → echo → forwarder → DEALER, one
//! request outstanding). These lines carry no baseline and no ratio: they are the baselines.

use std::time::{Duration, Instant};

use bytes::Bytes;
use zlink_mesh::{
    ClientConfig, DispatchKey, MeshClient, MeshConfig, MeshName, MeshNode, MeshSecret, NodeRid,
    PeerEvent, SessionRid,
};

const SIZE: usize = 64;
const SECRET: &[u8] = b"bench-mesh-secret-0123456789abcdef";

// The progress helper of the root package's examples (a bar on a terminal, lines otherwise).
#[path = "../../examples/support/progress.rs"]
mod progress;
// Latency samples for bench_plot's histograms (BENCH_SAMPLES=FILE).
#[path = "../../examples/support/samples.rs"]
mod samples;

fn json(bench: &str, metric: &str, value: f64, baseline: Option<f64>) {
    match baseline {
        Some(b) => progress::out(format_args!(
            "{{\"bench\":\"{bench}\",\"metric\":\"{metric}\",\"value\":{value:.1},\"baseline\":{b:.1},\"ratio\":{:.3}}}",
            value / b
        )),
        None => progress::out(format_args!(
            "{{\"bench\":\"{bench}\",\"metric\":\"{metric}\",\"value\":{value:.1}}}"
        )),
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

/// A ROUTER with `ROUTER_MANDATORY` (a send to an unknown peer fails instead of vanishing) and
/// routing id `id` (none if empty).
fn router(ctx: &zmq::Context, id: &[u8]) -> zmq::Socket {
    let s = ctx.socket(zmq::ROUTER).unwrap();
    if !id.is_empty() {
        s.set_identity(id).unwrap();
    }
    s.set_router_mandatory(true).unwrap();
    s
}

/// A DEALER with routing id `id` (none if empty) connected to `ep`.
fn dealer(ctx: &zmq::Context, ep: &str, id: &[u8]) -> zmq::Socket {
    let s = ctx.socket(zmq::DEALER).unwrap();
    if !id.is_empty() {
        s.set_identity(id).unwrap();
    }
    s.connect(ep).unwrap();
    s
}

/// Binds `s` to a free loopback TCP port; returns the endpoint.
fn bind_local(s: &zmq::Socket) -> String {
    s.bind("tcp://127.0.0.1:*").unwrap();
    s.get_last_endpoint().unwrap().unwrap()
}

/// A thread that receives `n` messages of `parts` parts on `socket` and returns the time from
/// the first message's arrival to the last's (the receiving side of the raw one-way baselines).
fn timed_receiver(
    socket: zmq::Socket,
    n: usize,
    parts: usize,
) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let mut msg = zmq::Message::new();
        for _ in 0..parts {
            socket.recv(&mut msg, 0).unwrap();
        }
        let t0 = Instant::now();
        for _ in 1..n {
            for _ in 0..parts {
                socket.recv(&mut msg, 0).unwrap();
            }
        }
        t0.elapsed()
    })
}

/// Sends `n` 64 B messages from ROUTER `s` along `route` (the routing id, then any further
/// frames before the payload; waiting until the route exists), then returns the receiver's rate
/// over messages 2..=n (the first one starts its clock).
fn router_stream(
    s: &zmq::Socket,
    route: &[&str],
    n: usize,
    recv: std::thread::JoinHandle<Duration>,
) -> f64 {
    let payload = [0x5au8; SIZE];
    while s.send(route[0], zmq::SNDMORE).is_err() {
        std::thread::sleep(Duration::from_millis(2));
    }
    for i in 0..n {
        if i > 0 {
            s.send(route[0], zmq::SNDMORE).unwrap();
        }
        for frame in &route[1..] {
            s.send(*frame, zmq::SNDMORE).unwrap();
        }
        s.send(&payload[..], 0).unwrap();
    }
    let el = recv.join().unwrap();
    (n - 1) as f64 / el.as_secs_f64()
}

/// A raw ROUTER echo thread: sends each of `count` messages back as received.
fn echo_server(r: zmq::Socket, count: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for _ in 0..count {
            let m = r.recv_multipart(0).unwrap();
            r.send_multipart(m, 0).unwrap();
        }
    })
}

/// Raw libzmq ROUTER → ROUTER, 64 B, one thread each side.
fn raw_oneway(n: usize) -> f64 {
    let r = router(&zmq::Context::new(), b"rcv");
    let ep = bind_local(&r);
    let recv = timed_receiver(r, n, 2);
    let s = router(&zmq::Context::new(), b"snd");
    s.connect(&ep).unwrap();
    router_stream(&s, &["rcv"], n, recv)
}

/// Raw libzmq request/reply: ROUTER client → ROUTER echo server, sequential.
fn raw_rtt(n: usize) -> Vec<f64> {
    let r = router(&zmq::Context::new(), b"srv");
    let ep = bind_local(&r);
    let warm = WARM_UP;
    let srv = echo_server(r, n + warm);
    let c = router(&zmq::Context::new(), b"cli");
    c.connect(&ep).unwrap();
    while c.send("srv", zmq::SNDMORE).is_err() {
        std::thread::sleep(Duration::from_millis(2));
    }
    let payload = [0x5au8; SIZE];
    c.send(&payload[..], 0).unwrap();
    let _ = c.recv_multipart(0).unwrap();
    let mut v = Vec::with_capacity(n);
    for i in 0..(n + warm - 1) {
        let t = Instant::now();
        c.send("srv", zmq::SNDMORE).unwrap();
        c.send(&payload[..], 0).unwrap();
        let _ = c.recv_multipart(0).unwrap();
        if i >= warm - 1 {
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    srv.join().unwrap();
    v
}

fn cfg(node: &str) -> MeshConfig {
    let mut c = MeshConfig::new(MeshName::new("bench").unwrap(), NodeRid::new(node).unwrap());
    c.secret = Some(MeshSecret::new(SECRET.to_vec()).unwrap());
    // No session layer accepts clients here: full window at once.
    c.client_admission = zlink_mesh::ClientAdmission::Open;
    if let Some(w) = std::env::var("BENCH_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.peer_window.messages = w;
        c.peer_budget.messages = u64::from(w);
    }
    if let Some(w) = std::env::var("BENCH_SPIN")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.io_spin_yields = w;
    }
    if let Some(b) = std::env::var("BENCH_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.batching.max_records = b;
    }
    if let Some(w) = std::env::var("BENCH_INBOUND")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.inbound_capacity = w;
    }
    c
}

async fn mesh_pair() -> (
    MeshNode,
    zlink_mesh::InboundReceiver,
    MeshNode,
    zlink_mesh::InboundReceiver,
) {
    let (a, ra) = MeshNode::start(cfg("a")).unwrap();
    let (b, rb) = MeshNode::start(cfg("b")).unwrap();
    a.connect(b.address()).unwrap();
    a.wait_peer_up(b.node(), None, Duration::from_secs(30))
        .await
        .unwrap();
    b.wait_peer_up(a.node(), None, Duration::from_secs(30))
        .await
        .unwrap();
    (a, ra, b, rb)
}

async fn mesh_oneway(n: usize) -> f64 {
    let (a, _ra, b, mut rb) = mesh_pair().await;
    let recv = tokio::spawn(async move {
        rb.recv().await.unwrap();
        let t0 = Instant::now();
        for _ in 1..n {
            rb.recv().await.unwrap();
        }
        (t0.elapsed(), rb)
    });
    let payload = Bytes::from_static(&[0x5a; SIZE]);
    let to = b.node().clone();
    for _ in 0..n {
        a.send(&to, DispatchKey::new(1), payload.clone())
            .await
            .unwrap();
    }
    let (el, _rb) = recv.await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
    (n - 1) as f64 / el.as_secs_f64()
}

async fn mesh_oneway_batched(n: usize, batch: usize) -> f64 {
    let (a, _ra, b, mut rb) = mesh_pair().await;
    let recv = tokio::spawn(async move {
        rb.recv().await.unwrap();
        let t0 = Instant::now();
        for _ in 1..n {
            rb.recv().await.unwrap();
        }
        (t0.elapsed(), rb)
    });
    let payload = Bytes::from_static(&[0x5a; SIZE]);
    let to = b.node().clone();
    let mut sent = 0;
    while sent < n {
        let k = batch.min(n - sent);
        a.send_batch(
            &to,
            DispatchKey::new(1),
            std::iter::repeat_n(payload.clone(), k),
        )
        .await
        .unwrap();
        sent += k;
    }
    let (el, _rb) = recv.await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
    (n - 1) as f64 / el.as_secs_f64()
}

async fn mesh_rtt(n: usize) -> Vec<f64> {
    let (a, _ra, b, mut rb) = mesh_pair().await;
    let echo = tokio::spawn(async move {
        while let Some(m) = rb.recv().await {
            if let Some(r) = m.reply {
                r.reply(m.payload.unwrap_or_default());
            }
        }
    });
    let payload = Bytes::from_static(&[0x5a; SIZE]);
    let to = b.node().clone();
    let mut v = Vec::with_capacity(n);
    for i in 0..(n + 1000) {
        let t = Instant::now();
        a.request(
            &to,
            DispatchKey::new(1),
            payload.clone(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        if i >= 1000 {
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    a.shutdown().await;
    b.shutdown().await;
    let _ = echo.await;
    v
}

// ---------------------------------------------------------------- ClientServer

/// Raw libzmq DEALER → ROUTER one-way, 64 B, one thread each side (the client's shape).
fn raw_client_oneway(n: usize) -> f64 {
    let r = router(&zmq::Context::new(), b"");
    let ep = bind_local(&r);
    let recv = timed_receiver(r, n, 2);
    dealers_send(&ep, 1, n);
    let el = recv.join().unwrap();
    (n - 1) as f64 / el.as_secs_f64()
}

/// `senders` DEALERs (one context, one thread each) connect to `ep` and each sends `per` 64 B
/// messages; returns when all have been handed to libzmq.
fn dealers_send(ep: &str, senders: usize, per: usize) {
    let ctx = zmq::Context::new();
    let threads: Vec<_> = (0..senders)
        .map(|_| {
            let d = dealer(&ctx, ep, b"");
            std::thread::spawn(move || {
                let payload = [0x5au8; SIZE];
                for _ in 0..per {
                    d.send(&payload[..], 0).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Raw libzmq ROUTER → DEALER one-way (a server push), 64 B, one thread each side.
fn raw_client_push(n: usize) -> f64 {
    let s = router(&zmq::Context::new(), b"");
    let ep = bind_local(&s);
    let d = dealer(&zmq::Context::new(), &ep, b"cli");
    let recv = timed_receiver(d, n, 1);
    router_stream(&s, &["cli"], n, recv)
}

/// Raw libzmq request/reply: DEALER client → ROUTER echo thread, sequential.
fn raw_client_rtt(n: usize) -> Vec<f64> {
    let r = router(&zmq::Context::new(), b"");
    let ep = bind_local(&r);
    let srv = echo_server(r, n + WARM_UP);
    let v = dealer_rtt(&ep, n);
    srv.join().unwrap();
    v
}

/// Round trips before the measured ones of every request/reply line.
const WARM_UP: usize = 1000;

/// A DEALER connected to `ep` sends 64 B requests one at a time and waits for each reply:
/// `WARM_UP` round trips, then returns the next `n` ones' times in µs.
fn dealer_rtt(ep: &str, n: usize) -> Vec<f64> {
    let c = dealer(&zmq::Context::new(), ep, b"");
    let payload = [0x5au8; SIZE];
    let mut v = Vec::with_capacity(n);
    for i in 0..(n + WARM_UP) {
        let t = Instant::now();
        c.send(&payload[..], 0).unwrap();
        let _ = c.recv_multipart(0).unwrap();
        if i >= WARM_UP {
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    v
}

// ------------------------------------------------------------ raw two-hop baselines

/// Most messages the forwarder moves from one socket per wake-up.
const BURST: usize = 256;

/// The raw two-hop path's sockets, each end its own libzmq context (own I/O thread), as three
/// processes would have: the far ROUTER (id "srv", bound: the sink, echo server or push source,
/// as node b), and the forwarder's (as node a) ROUTER `front` (bound; the clients' DEALERs
/// connect to the returned endpoint) and ROUTER `back` (id "fwd", `ROUTER_MANDATORY`,
/// connected to "srv", as the mesh's relay socket). Returns `(srv, front, back, front_ep)`.
fn two_hop() -> (zmq::Socket, zmq::Socket, zmq::Socket, String) {
    let srv = router(&zmq::Context::new(), b"srv");
    let srv_ep = bind_local(&srv);
    let ctx = zmq::Context::new();
    let front = router(&ctx, b"");
    let front_ep = bind_local(&front);
    let back = router(&ctx, b"fwd");
    back.connect(&srv_ep).unwrap();
    (srv, front, back, front_ep)
}

/// The forwarder thread of the raw two-hop path (no framework logic: the relay's limit):
/// `[client, payload]` from `front` leaves `back` as `["srv", client, payload]`, and
/// `["srv", client, payload]` from `back` leaves `front` as `[client, payload]`, frames moved
/// without copies. Blocking `zmq::poll` on both, then drains each readable socket with
/// `DONTWAIT` (at most `BURST` per wake-up); ends after `count` messages in all.
fn forwarder(front: zmq::Socket, back: zmq::Socket, count: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut left = count;
        let mut items = [
            front.as_poll_item(zmq::POLLIN),
            back.as_poll_item(zmq::POLLIN),
        ];
        while left > 0 {
            zmq::poll(&mut items, -1).unwrap();
            for (i, (from, to)) in [(&front, &back), (&back, &front)].into_iter().enumerate() {
                if !items[i].is_readable() {
                    continue;
                }
                for _ in 0..BURST.min(left) {
                    if !forward_one(from, to, i == 0) {
                        break;
                    }
                    left -= 1;
                }
            }
        }
    })
}

/// Moves one message if `from` has one (`up`: front → back); false if none was waiting.
fn forward_one(from: &zmq::Socket, to: &zmq::Socket, up: bool) -> bool {
    let mut first = zmq::Message::new();
    match from.recv(&mut first, zmq::DONTWAIT) {
        Ok(()) => {}
        Err(zmq::Error::EAGAIN) => return false,
        Err(e) => panic!("forwarder: {e}"),
    }
    let mut payload = zmq::Message::new();
    if up {
        from.recv(&mut payload, 0).unwrap();
        send_route(to, b"srv");
        to.send(first, zmq::SNDMORE).unwrap();
    } else {
        // `first` is "srv"; the client's routing id follows.
        from.recv(&mut first, 0).unwrap();
        from.recv(&mut payload, 0).unwrap();
        send_route(to, &first);
    }
    to.send(payload, 0).unwrap();
    true
}

/// Sends routing id `rid` on a `ROUTER_MANDATORY` socket, waiting while the peer is not yet
/// connected (only before the first message of a run).
fn send_route(s: &zmq::Socket, rid: &[u8]) {
    loop {
        match s.send(rid, zmq::SNDMORE) {
            Ok(()) => return,
            Err(zmq::Error::EHOSTUNREACH) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("forwarder: {e}"),
        }
    }
}

/// `raw_2hop_pipeline`: `senders` DEALER clients → forwarder → ROUTER sink, one-way, `n`
/// messages in all; the rate at the sink over messages 2..=n.
fn raw_2hop_pipeline(n: usize, senders: usize) -> f64 {
    let (sink, front, back, ep) = two_hop();
    let per = n / senders;
    let total = per * senders;
    let recv = timed_receiver(sink, total, 3);
    let fwd = forwarder(front, back, total);
    dealers_send(&ep, senders, per);
    let el = recv.join().unwrap();
    fwd.join().unwrap();
    (total - 1) as f64 / el.as_secs_f64()
}

/// `raw_2hop_echo`: DEALER client → forwarder → ROUTER echo → forwarder → client, one request
/// outstanding; `n` round trip times in µs after `WARM_UP` ones.
fn raw_2hop_echo(n: usize) -> Vec<f64> {
    let (srv, front, back, ep) = two_hop();
    let echo = echo_server(srv, n + WARM_UP);
    let fwd = forwarder(front, back, 2 * (n + WARM_UP));
    let v = dealer_rtt(&ep, n);
    echo.join().unwrap();
    fwd.join().unwrap();
    v
}

/// `raw_2hop_push`: ROUTER source → forwarder → DEALER client (an actor's push through the
/// session owner), one-way; the rate at the client over messages 2..=n.
fn raw_2hop_push(n: usize) -> f64 {
    let (src, front, back, ep) = two_hop();
    let fwd = forwarder(front, back, n);
    let d = dealer(&zmq::Context::new(), &ep, b"cli");
    let recv = timed_receiver(d, n, 1);
    let rate = router_stream(&src, &["fwd", "cli"], n, recv);
    fwd.join().unwrap();
    rate
}

/// Senders of the many-clients line `raw_2hop_pipeline_100`.
const MANY_SENDERS: usize = 100;

/// The raw two-hop lines whose name starts with `which` (`--only raw_2hop` runs them all):
/// throughputs are medians of 3 interleaved runs of `n` messages, latencies of `rtt_n` round
/// trips. No baseline: these *are* the baselines of the session path (docs/PERFORMANCE.md).
fn raw_2hop_lines(which: &str, n: usize, rtt_n: usize) -> bool {
    let want = |name: &str| name.starts_with(which);
    let lines = [
        "raw_2hop_pipeline",
        "raw_2hop_pipeline_100",
        "raw_2hop_push",
        "raw_2hop_echo",
    ];
    if !lines.iter().any(|l| want(l)) {
        return false;
    }
    let mut rates: [Vec<f64>; 3] = Default::default();
    for _ in 0..3 {
        if want(lines[0]) {
            rates[0].push(raw_2hop_pipeline(n, 1));
        }
        if want(lines[1]) {
            rates[1].push(raw_2hop_pipeline(n, MANY_SENDERS));
        }
        if want(lines[2]) {
            rates[2].push(raw_2hop_push(n));
        }
    }
    for (name, v) in lines.iter().zip(&mut rates) {
        if !v.is_empty() {
            json(name, "msgs_per_s", percentile(v, 0.5), None);
        }
    }
    if want(lines[3]) && rtt_n > 0 {
        let mut l = raw_2hop_echo(rtt_n);
        // The baseline of the benchmark that runs this (bench_session: session_request).
        let of = std::env::var("BENCH_SAMPLES_BENCH").unwrap_or_else(|_| lines[3].to_owned());
        samples::write(&of, samples::BASELINE, &l);
        json(lines[3], "p50_us", percentile(&mut l, 0.5), None);
        json(lines[3], "p99_us", percentile(&mut l, 0.99), None);
    }
    true
}

fn client_node_cfg() -> MeshConfig {
    let mut c = cfg("srv");
    c.client_endpoint = Some("tcp://127.0.0.1:*".into());
    if let Some(w) = std::env::var("BENCH_CLIENT_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.client_window.messages = w;
    }
    if let Some(w) = std::env::var("BENCH_CLIENT_BUDGET")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.client_budget.messages = w;
    }
    if let Some(w) = std::env::var("BENCH_CLIENT_HWM")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.client_outbound.send_hwm = w;
    }
    if let Some(w) = std::env::var("BENCH_CLIENT_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.client_outbound.batch_records = w;
    }
    c
}

/// A node with its client endpoint and one connected `MeshClient`; the session is known
/// (the node saw the client's first Ping).
async fn client_pair() -> (
    MeshNode,
    zlink_mesh::InboundReceiver,
    MeshClient,
    SessionRid,
) {
    let (node, rx) = MeshNode::start(client_node_cfg()).unwrap();
    let mut events = node.subscribe();
    let ep = node.endpoints().client.clone().unwrap();
    let mut cc = ClientConfig::new(ep);
    if let Some(w) = std::env::var("BENCH_CLIENT_SPIN")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cc.io_spin_yields = w;
    }
    if let Some(w) = std::env::var("BENCH_PUSH_CAPACITY")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cc.push_capacity = w;
    }
    let client = MeshClient::connect(cc).unwrap();
    let session = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Ok(PeerEvent::ClientConnected { session }) = events.recv().await {
                return session;
            }
        }
    })
    .await
    .expect("client connected");
    (node, rx, client, session)
}

async fn client_oneway(n: usize) -> f64 {
    let (node, mut rx, client, _session) = client_pair().await;
    let recv = tokio::spawn(async move {
        rx.recv().await.unwrap();
        let t0 = Instant::now();
        for _ in 1..n {
            rx.recv().await.unwrap();
        }
        (t0.elapsed(), rx)
    });
    let payload = Bytes::from_static(&[0x5a; SIZE]);
    for _ in 0..n {
        client
            .send(DispatchKey::new(1), payload.clone())
            .await
            .unwrap();
    }
    let (el, _rx) = recv.await.unwrap();
    client.close().await;
    node.shutdown().await;
    (n - 1) as f64 / el.as_secs_f64()
}

async fn client_push(n: usize) -> f64 {
    let (node, _rx, client, session) = client_pair().await;
    let client = std::sync::Arc::new(client);
    let c2 = client.clone();
    let recv = tokio::spawn(async move {
        c2.recv_push().await.unwrap();
        let t0 = Instant::now();
        for _ in 1..n {
            c2.recv_push().await.unwrap();
        }
        t0.elapsed()
    });
    let payload = Bytes::from_static(&[0x5a; SIZE]);
    for _ in 0..n {
        node.push(session, DispatchKey::new(1), payload.clone())
            .await
            .unwrap();
    }
    let el = recv.await.unwrap();
    if let Ok(client) = std::sync::Arc::try_unwrap(client) {
        client.close().await;
    }
    node.shutdown().await;
    (n - 1) as f64 / el.as_secs_f64()
}

async fn client_rtt(n: usize) -> Vec<f64> {
    let (node, mut rx, client, _session) = client_pair().await;
    let echo = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if let Some(r) = m.reply {
                r.reply(m.payload.unwrap_or_default());
            }
        }
    });
    let payload = Bytes::from_static(&[0x5a; SIZE]);
    let mut v = Vec::with_capacity(n);
    for i in 0..(n + 1000) {
        let t = Instant::now();
        client
            .request(
                DispatchKey::new(1),
                payload.clone(),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        if i >= 1000 {
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    client.close().await;
    node.shutdown().await;
    let _ = echo.await;
    v
}

/// The ClientServer lines (see the module doc).
fn client_benches(rt: &tokio::runtime::Runtime, n: usize, rtt_n: usize) {
    let only_mesh = std::env::var_os("BENCH_ONLY_MESH").is_some();
    let parts = std::env::var("BENCH_CLIENT_PARTS").unwrap_or_else(|_| "opr".into());
    if parts.contains('o') {
        client_oneway_lines(rt, n, only_mesh);
    }
    if parts.contains('p') {
        client_push_lines(rt, n, only_mesh);
    }
    if rtt_n == 0 || !parts.contains('r') {
        return;
    }
    let mut raw_l = raw_client_rtt(rtt_n);
    let mut mesh_l = rt.block_on(client_rtt(rtt_n));
    let (r50, r99) = (percentile(&mut raw_l, 0.5), percentile(&mut raw_l, 0.99));
    let (m50, m99) = (percentile(&mut mesh_l, 0.5), percentile(&mut mesh_l, 0.99));
    samples::write("client_request_reply", samples::ZLINK, &mesh_l);
    samples::write("client_request_reply", samples::BASELINE, &raw_l);
    json("client_request_reply", "p50_us", m50, Some(r50));
    json("client_request_reply", "p99_us", m99, Some(r99));
}

fn client_oneway_lines(rt: &tokio::runtime::Runtime, n: usize, only_mesh: bool) {
    let (mut raw, mut mesh) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        raw.push(if only_mesh { 1.0 } else { raw_client_oneway(n) });
        mesh.push(rt.block_on(client_oneway(n)));
    }
    json(
        "client_oneway",
        "msgs_per_s",
        percentile(&mut mesh, 0.5),
        Some(percentile(&mut raw, 0.5)),
    );
}

fn client_push_lines(rt: &tokio::runtime::Runtime, n: usize, only_mesh: bool) {
    let (mut raw, mut mesh) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        raw.push(if only_mesh { 1.0 } else { raw_client_push(n) });
        mesh.push(rt.block_on(client_push(n)));
    }
    json(
        "client_push",
        "msgs_per_s",
        percentile(&mut mesh, 0.5),
        Some(percentile(&mut raw, 0.5)),
    );
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Child mode: a sender whose peer (a separate process) never reads. Sends 1 KiB records
/// until admission has failed 20 times; prints its peak RSS.
async fn rss_child() {
    let before = vm_hwm_kib();
    let mut c = cfg("sender");
    c.send_timeout = Duration::from_millis(50);
    let (a, _ra) = MeshNode::start(c).unwrap();
    let peer_bin = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("zlink-mesh-peer");
    let mut child = tokio::process::Command::new(peer_bin)
        .args([
            "bench",
            "sink",
            "sender",
            &a.endpoints().relay,
            &a.endpoints().completion,
            "--no-read",
        ])
        .env("ZLINK_MESH_SECRET", std::str::from_utf8(SECRET).unwrap())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("build the zlink-mesh-peer bin first");
    let sink = NodeRid::new("sink").unwrap();
    a.wait_peer_up(&sink, None, Duration::from_secs(30))
        .await
        .unwrap();
    let payload = Bytes::from(vec![0x5au8; 1024]);
    let (mut ok, mut failed) = (0u64, 0u32);
    let t0 = Instant::now();
    while failed < 20 && t0.elapsed() < Duration::from_secs(60) {
        match a.send(&sink, DispatchKey::new(1), payload.clone()).await {
            Ok(()) => ok += 1,
            Err(_) => failed += 1,
        }
    }
    let after = vm_hwm_kib();
    println!("{ok} {failed} {before} {after}");
    let _ = child.start_kill();
    let _ = child.wait().await;
}

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let only = args.iter().position(|a| a == "--only").map(|i| {
        args.remove(i);
        if i == args.len() {
            eprintln!("--only needs a value (raw_2hop)");
            std::process::exit(2);
        }
        args.remove(i)
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if args.get(1).map(String::as_str) == Some("--rss-child") {
        rt.block_on(rss_child());
        return;
    }
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let n: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(if quick { 100_000 } else { 1_000_000 });
    let rtt_n: usize = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(if quick { 2_000 } else { 10_000 });
    if let Some(which) = only {
        if !raw_2hop_lines(&which, n, rtt_n) {
            eprintln!("--only {which}: no such line (raw_2hop…)");
            std::process::exit(2);
        }
        return;
    }

    if std::env::var_os("BENCH_ONLY_CLIENT").is_some() {
        client_benches(&rt, n, rtt_n);
        return;
    }
    // Interleave raw and mesh runs, report medians of 3.
    let mut raw = Vec::new();
    let mut mesh = Vec::new();
    let only_mesh = std::env::var_os("BENCH_ONLY_MESH").is_some();
    if std::env::var_os("BENCH_ONLY_RAW").is_some() {
        for _ in 0..3 {
            raw.push(raw_oneway(n));
        }
        json("raw_oneway", "msgs_per_s", percentile(&mut raw, 0.5), None);
        return;
    }
    // Which RouteMesh lines: `o` one-way (mesh_oneway, mesh_oneway_batch64), `r`
    // request/reply, `s` the stalled peer; default all (the ClientServer lines as before).
    let mesh_parts = std::env::var("BENCH_MESH_PARTS").unwrap_or_else(|_| "ors".into());
    progress::start("bench_mesh", 5);
    if mesh_parts.contains('o') {
        progress::step(format!("one-way, raw libzmq and mesh, 3 rounds ({n})"));
        for _ in 0..3 {
            raw.push(if only_mesh { 1.0 } else { raw_oneway(n) });
            mesh.push(rt.block_on(mesh_oneway(n)));
        }
        progress::step(format!("one-way in batches of 64, 3 rounds ({n})"));
        let mut batched = Vec::new();
        for _ in 0..3 {
            batched.push(rt.block_on(mesh_oneway_batched(n, 64)));
        }
        let raw_tp = percentile(&mut raw, 0.5);
        let mesh_tp = percentile(&mut mesh, 0.5);
        json("mesh_oneway", "msgs_per_s", mesh_tp, Some(raw_tp));
        json(
            "mesh_oneway_batch64",
            "msgs_per_s",
            percentile(&mut batched, 0.5),
            Some(raw_tp),
        );
    }

    if rtt_n > 0 && mesh_parts.contains('r') {
        progress::step(format!("request/reply, raw libzmq and mesh ({rtt_n})"));
        let mut raw_l = raw_rtt(rtt_n);
        let mut mesh_l = rt.block_on(mesh_rtt(rtt_n));
        let (r50, r99) = (percentile(&mut raw_l, 0.5), percentile(&mut raw_l, 0.99));
        let (m50, m99) = (percentile(&mut mesh_l, 0.5), percentile(&mut mesh_l, 0.99));
        samples::write("mesh_request_reply", samples::ZLINK, &mesh_l);
        samples::write("mesh_request_reply", samples::BASELINE, &raw_l);
        json("mesh_request_reply", "p50_us", m50, Some(r50));
        json("mesh_request_reply", "p99_us", m99, Some(r99));
    }

    if std::env::var_os("BENCH_NO_CLIENT").is_none() {
        progress::step("ClientServer benchmarks");
        client_benches(&rt, n, rtt_n);
    }

    if rtt_n == 0 || !mesh_parts.contains('s') {
        progress::finish();
        return;
    }
    progress::step("stalled peer: sender memory (a child process)");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("--rss-child")
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    let f: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if f.len() == 4 {
        json(
            "mesh_stalled_peer_sender",
            "admitted_msgs",
            f[0] as f64,
            None,
        );
        json(
            "mesh_stalled_peer_sender",
            "peak_rss_kib",
            f[3] as f64,
            None,
        );
    } else {
        progress::note(format_args!(
            "rss child failed: {line} {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    progress::finish();
}
