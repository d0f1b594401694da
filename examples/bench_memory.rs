//! Lane runtime memory benchmark (issue 12): bytes per idle actor per Spot kind, and memory
//! growth over create + destroy churn of actors and of session lanes.
//!
//! `cargo run --release --example bench_memory [-- --quick]` prints one JSON line per figure:
//! - `idle_actors_<kind>_<n>` `bytes_per_actor`: live heap bytes (counting global allocator) per
//!   idle actor (spawned, asked once, idle), at 100 k and 1 M actors (100 k only with `--quick`);
//!   baseline: the goal, 1,024 B; ratio below 1 meets it. `rss_bytes_per_actor` beside it (each
//!   kind and size in a fresh child process, so RSS is not reused memory).
//! - `churn_<kind>` / `session_churn`: `live_bytes_growth` and `rss_kib_growth` after 1 M
//!   create, ask and destroy cycles (100 k with `--quick`), measured after a warm-up round of
//!   the same size; goal flat (0). `lanes_live` / `gates_live` at the end (0: nothing held).

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use zlink::runtime::*;

#[path = "support/progress.rs"]
mod progress;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::live;

const GOAL: f64 = 1024.0;

fn rss_kib() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|v| v.parse().unwrap_or(0)))
        })
        .unwrap_or(0)
}

fn line(bench: &str, metric: &str, value: f64, baseline: Option<f64>) {
    match baseline {
        Some(b) => {
            let ratio = if b > 0.0 { value / b } else { 0.0 };
            progress::out(format_args!(
                "{{\"bench\":\"{bench}\",\"metric\":\"{metric}\",\"value\":{value:.1},\"baseline\":{b:.1},\"ratio\":{ratio:.3}}}"
            ))
        }
        None => progress::out(format_args!(
            "{{\"bench\":\"{bench}\",\"metric\":\"{metric}\",\"value\":{value:.1}}}"
        )),
    }
}

fn zlink_rt() -> Runtime {
    Runtime::new(RuntimeConfig {
        application_workers: 2,
        infrastructure_workers: 1,
        ..Default::default()
    })
    .unwrap()
}

/// Wait until the runtime holds `lanes` lanes and `gates` gates (the last drains finish).
fn settle(rt: &Runtime, lanes: u64, gates: u64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        let m = rt.metrics();
        if m.lanes_live <= lanes && m.gates_live <= gates {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn idle_actors<K: SpotKind>(name: &str, n: usize) {
    let rt = zlink_rt();
    let spot = rt
        .create_spot::<K, _>(|_c: Ctx<K::Yield>, b: Bytes| Handled::ok(b))
        .unwrap();
    let mut actors = Vec::with_capacity(n);
    let (l0, r0) = (live(), rss_kib());
    rt.block_on(async {
        for i in 0..n as u64 {
            let a = spot
                .spawn_actor(|_c: Ctx<K::Yield>, v: u64| Handled::ok(v + 1))
                .unwrap();
            assert_eq!(a.ask(i).await.unwrap(), i + 1);
            actors.push(a);
        }
    })
    .unwrap();
    let m = rt.metrics();
    settle(&rt, m.lanes_live, m.gates_live);
    // the handles' own vector is the caller's, not the runtime's
    let handles = (actors.capacity() * std::mem::size_of::<ActorRef<u64, u64>>()) as isize;
    let bytes = (live() - l0 - handles) as f64 / n as f64;
    let rss = (rss_kib() - r0) as f64 * 1024.0 / n as f64;
    let bench = format!("idle_actors_{name}_{}k", n / 1000);
    line(&bench, "bytes_per_actor", bytes, Some(GOAL));
    line(&bench, "rss_bytes_per_actor", rss, Some(GOAL));
    spot.end();
    drop(actors);
}

fn churn<K: SpotKind>(name: &str, n: usize) {
    let rt = zlink_rt();
    let spot = rt
        .create_spot::<K, _>(|_c: Ctx<K::Yield>, b: Bytes| Handled::ok(b))
        .unwrap();
    let m = rt.metrics();
    let (lanes, gates) = (m.lanes_live, m.gates_live);
    let round = || {
        rt.block_on(async {
            for i in 0..n as u64 {
                let a = spot
                    .spawn_actor(|_c: Ctx<K::Yield>, v: u64| Handled::ok(v + 1))
                    .unwrap();
                assert_eq!(a.ask(i).await.unwrap(), i + 1);
                a.destroy().unwrap();
            }
        })
        .unwrap();
        settle(&rt, lanes, gates);
    };
    report_churn(&format!("churn_{name}"), &rt, n, round);
    spot.end();
}

fn session_churn(n: usize) {
    let rt = zlink_rt();
    let round = || {
        rt.block_on(async {
            for _ in 0..n {
                let lane = rt.session_lane().unwrap();
                let (tx, rx) = oneshot::channel::<()>();
                lane.submit(0, move |_c| {
                    let _ = tx.send(());
                    Handled::ok(())
                })
                .unwrap();
                rx.await.unwrap();
                lane.connection_closed();
            }
        })
        .unwrap();
        settle(&rt, 0, 0);
    };
    report_churn("session_churn", &rt, n, round);
}

fn report_churn(bench: &str, rt: &Runtime, n: usize, round: impl Fn()) {
    round();
    let (l0, r0) = (live(), rss_kib());
    let start = Instant::now();
    round();
    let el = start.elapsed();
    let m = rt.metrics();
    line(bench, "live_bytes_growth", (live() - l0) as f64, Some(0.0));
    line(bench, "rss_kib_growth", (rss_kib() - r0) as f64, Some(0.0));
    line(bench, "lanes_live", m.lanes_live as f64, None);
    line(bench, "gates_live", m.gates_live as f64, None);
    progress::note(format_args!(
        "{bench}: {:.0} cycles/s",
        n as f64 / el.as_secs_f64()
    ));
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let sizes: &[usize] = if quick {
        &[100_000]
    } else {
        &[100_000, 1_000_000]
    };
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--idle") {
        // child: one kind, one size
        let n: usize = args[i + 2].parse().unwrap();
        match args[i + 1].as_str() {
            "spotwide" => idle_actors::<SpotWideUser>("spotwide", n),
            "instance" => idle_actors::<InstanceSpot>("instance", n),
            "entry" => idle_actors::<EntrySpot>("entry", n),
            _ => idle_actors::<PerActorUser>("peractor", n),
        }
        return;
    }
    let me = std::env::current_exe().unwrap();
    progress::start("bench_memory", sizes.len() as u64 * 4 + 3);
    for &n in sizes {
        for kind in ["spotwide", "instance", "entry", "peractor"] {
            progress::step(format!("{n} idle {kind} actors (a child process)"));
            let ok = std::process::Command::new(&me)
                .args(["--idle", kind, &n.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "idle_actors {kind} {n} failed");
        }
    }
    let cycles = if quick { 100_000 } else { 1_000_000 };
    progress::step(format!("{cycles} create + destroy cycles, SpotWide"));
    churn::<SpotWideUser>("spotwide", cycles);
    progress::step(format!("{cycles} create + destroy cycles, Entry"));
    churn::<EntrySpot>("entry", cycles);
    progress::step(format!("{cycles} session lane cycles"));
    session_churn(cycles);
    progress::finish();
}
