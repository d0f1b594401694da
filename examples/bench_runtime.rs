//! Lane runtime benchmark: send→handler throughput (1 actor; 1,000 actors SpotWide and
//! PerActor), ask round trip, threads with 10 and 10,000 Spots — each against a
//! `tokio::sync::mpsc` baseline measured in the same run on a runtime of the same size.
//!
//! `cargo run --release --example bench_runtime [-- --quick]` (or `BENCH_QUICK=1`) prints one JSON line per figure:
//! `{"bench":"runtime_tell_1","metric":"msgs_per_s","value":…,"baseline":…,"ratio":…}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc, oneshot};
use zlink::runtime::*;

#[path = "support/progress.rs"]
mod progress;

const WORKERS: usize = 2;

fn line(bench: &str, metric: &str, value: f64, baseline: f64) {
    let ratio = if baseline > 0.0 {
        value / baseline
    } else {
        0.0
    };
    progress::out(format_args!(
        "{{\"bench\":\"{bench}\",\"metric\":\"{metric}\",\"value\":{value:.1},\"baseline\":{baseline:.1},\"ratio\":{ratio:.3}}}"
    ));
}

fn baseline_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .unwrap()
}

fn zlink_rt() -> Runtime {
    zlink_rt_with(WORKERS)
}

fn zlink_rt_with(workers: usize) -> Runtime {
    Runtime::new(RuntimeConfig {
        application_workers: workers,
        infrastructure_workers: 1,
        ..Default::default()
    })
    .unwrap()
}

/// mpsc(1024) baseline: `actors` consumer tasks, one producer sending `per_actor` messages to each
/// (round robin). Returns messages per second.
fn mpsc_tell(actors: usize, per_actor: u64) -> f64 {
    let rt = baseline_rt();
    rt.block_on(async move {
        let total = actors as u64 * per_actor;
        let done = Arc::new(Notify::new());
        let left = Arc::new(AtomicU64::new(actors as u64));
        let mut txs = Vec::new();
        for _ in 0..actors {
            let (tx, mut rx) = mpsc::channel::<u64>(1024);
            txs.push(tx);
            let (done, left) = (done.clone(), left.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                let mut sum = 0u64;
                while let Some(v) = rx.recv().await {
                    sum = sum.wrapping_add(v);
                    n += 1;
                    if n == per_actor {
                        break;
                    }
                }
                std::hint::black_box(sum);
                if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                    done.notify_one();
                }
            });
        }
        let start = Instant::now();
        let notified = done.notified();
        tokio::spawn(async move {
            for i in 0..per_actor {
                for tx in &txs {
                    tx.send(i).await.unwrap();
                }
            }
        });
        notified.await;
        total as f64 / start.elapsed().as_secs_f64()
    })
}

/// ZLink: `actors` actors in one Spot of kind `K`, one producer task on the application pool
/// using `ActorRef::send` (waits for lane space; bounded lanes of 1,024).
fn zlink_tell<K: SpotKind>(actors: usize, per_actor: u64) -> f64 {
    let rt = zlink_rt();
    let spot = rt.create_spot::<K, _>(|_c, b| Handled::ok(b)).unwrap();
    let done = Arc::new(Notify::new());
    let left = Arc::new(AtomicU64::new(actors as u64));
    let refs: Vec<ActorRef<u64>> = (0..actors)
        .map(|_| {
            let (done, left) = (done.clone(), left.clone());
            let n = AtomicU64::new(0);
            spot.spawn_actor(move |_c: Ctx<K::Yield>, v: u64| {
                std::hint::black_box(v);
                if n.fetch_add(1, Ordering::Relaxed) + 1 == per_actor
                    && left.fetch_sub(1, Ordering::AcqRel) == 1
                {
                    done.notify_one();
                }
                Handled::ok(())
            })
            .unwrap()
        })
        .collect();
    let total = actors as u64 * per_actor;
    let start = Instant::now();
    let notified = done.notified();
    rt.application_handle().spawn(async move {
        for i in 0..per_actor {
            for a in &refs {
                a.send(i).await.unwrap();
            }
        }
    });
    rt.block_on(notified).unwrap();
    total as f64 / start.elapsed().as_secs_f64()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Ask round trip from one asker; returns (asks/s, mean µs, p50 µs, p99 µs). `workers` 0: a
/// tokio `current_thread` runtime (as actix's figure in `../shared/BASELINES.md`).
fn mpsc_ask(n: usize, workers: usize) -> (f64, f64, f64, f64) {
    let rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap()
    };
    rt.block_on(async move {
        let (tx, mut rx) = mpsc::channel::<(u64, oneshot::Sender<u64>)>(1024);
        tokio::spawn(async move {
            while let Some((v, r)) = rx.recv().await {
                let _ = r.send(v + 1);
            }
        });
        let h = tokio::spawn(async move {
            let mut lat = Vec::with_capacity(n);
            let start = Instant::now();
            for i in 0..n as u64 {
                let t = Instant::now();
                let (rtx, rrx) = oneshot::channel();
                tx.send((i, rtx)).await.unwrap();
                assert_eq!(rrx.await.unwrap(), i + 1);
                lat.push(t.elapsed());
            }
            (start.elapsed(), lat)
        });
        let (el, mut lat) = h.await.unwrap();
        lat.sort();
        let mean = el.as_secs_f64() * 1e6 / n as f64;
        (
            n as f64 / el.as_secs_f64(),
            mean,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
        )
    })
}

fn zlink_ask(n: usize, workers: usize) -> (f64, f64, f64, f64) {
    let rt = zlink_rt_with(workers);
    let spot = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let a = spot
        .spawn_actor(|_c: SpotWideCtx, v: u64| Handled::ok(v + 1))
        .unwrap();
    let h = rt.application_handle().spawn(async move {
        let mut lat = Vec::with_capacity(n);
        let start = Instant::now();
        for i in 0..n as u64 {
            let t = Instant::now();
            assert_eq!(a.ask(i).await.unwrap(), i + 1);
            lat.push(t.elapsed());
        }
        (start.elapsed(), lat)
    });
    let (el, mut lat) = rt.block_on(h).unwrap().unwrap();
    lat.sort();
    let mean = el.as_secs_f64() * 1e6 / n as f64;
    (
        n as f64 / el.as_secs_f64(),
        mean,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
    )
}

/// mpsc + oneshot ask rate from one asker task, without per-ask timing (the baseline of the
/// actor-asker lines). `workers` 0: tokio `current_thread`.
fn mpsc_ask_rate(n: usize, workers: usize) -> f64 {
    let rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap()
    };
    rt.block_on(async move {
        let (tx, mut rx) = mpsc::channel::<(u64, oneshot::Sender<u64>)>(1024);
        tokio::spawn(async move {
            while let Some((v, r)) = rx.recv().await {
                let _ = r.send(v + 1);
            }
        });
        let h = tokio::spawn(async move {
            let start = Instant::now();
            for i in 0..n as u64 {
                let (rtx, rrx) = oneshot::channel();
                tx.send((i, rtx)).await.unwrap();
                assert_eq!(rrx.await.unwrap(), i + 1);
            }
            start.elapsed()
        });
        n as f64 / h.await.unwrap().as_secs_f64()
    })
}

/// Ask rate of an actor asking another actor (actor → actor requests): the asker's handler
/// continuation makes `n` sequential `ctx.ask` calls to an actor of another Spot (another
/// gate); returns asks per second, timed inside the handler.
fn zlink_ask_actor(n: usize, workers: usize) -> f64 {
    let rt = zlink_rt_with(workers);
    let spot_a = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let spot_b = rt
        .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
        .unwrap();
    let target = spot_b
        .spawn_actor(|_c: SpotWideCtx, v: u64| Handled::ok(v + 1))
        .unwrap();
    let asker = spot_a
        .spawn_actor(move |ctx: SpotWideCtx, n: u64| {
            let t = target.clone();
            Handled::later(async move {
                let start = Instant::now();
                for i in 0..n {
                    assert_eq!(ctx.ask(&t, i).await.unwrap(), i + 1);
                }
                Ok(n as f64 / start.elapsed().as_secs_f64())
            })
        })
        .unwrap();
    rt.block_on(asker.ask(n as u64)).unwrap().unwrap()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Threads in use with 10 Spots, then with 10,000 Spots, on one runtime.
fn spots_threads() -> (usize, usize) {
    let rt = zlink_rt();
    let mut keep = Vec::new();
    let mut counts = Vec::new();
    for target in [10usize, 10_000] {
        while keep.len() < target {
            let s = rt
                .create_spot::<SpotWideUser, _>(|_c, b| Handled::ok(b))
                .unwrap();
            let a = s
                .spawn_actor(|_c: SpotWideCtx, v: u64| Handled::ok(v))
                .unwrap();
            a.tell(1).unwrap();
            keep.push((s, a));
        }
        for (_, a) in &keep {
            rt.block_on(a.ask(2)).unwrap().unwrap();
        }
        counts.push(threads());
    }
    (counts[0], counts[1])
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|v| v.parse().unwrap_or(0)))
        })
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The argument at `at` parsed as a `T`, or `default` when it is missing or does not parse.
fn arg<T: std::str::FromStr>(args: &[String], at: usize, default: T) -> T {
    args.get(at).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    // `--tell1 N [ROUNDS]`: only the single-actor tell figure (profiling, peer comparison)
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--tell1") {
        let n: u64 = arg(&args, i + 1, 5_000_000);
        let rounds: usize = arg(&args, i + 2, 3);
        let (mut z, mut b) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            b.push(mpsc_tell(1, n));
            z.push(zlink_tell::<SpotWideUser>(1, n));
        }
        line("runtime_tell_1", "msgs_per_s", median(z), median(b));
        return;
    }
    // `--ask-actor N [ROUNDS] [WORKERS]`: only the actor-asker ZLink figure, no baseline
    // (profiling: callgrind, perf)
    if let Some(i) = args.iter().position(|a| a == "--ask-actor") {
        let n: usize = arg(&args, i + 1, 200_000);
        let rounds: usize = arg(&args, i + 2, 1);
        let workers: usize = arg(&args, i + 3, 1);
        let z: Vec<f64> = (0..rounds).map(|_| zlink_ask_actor(n, workers)).collect();
        line("runtime_ask_1_actor_only", "asks_per_s", median(z), 0.0);
        return;
    }
    // `--ask-base N [ROUNDS] [WORKERS]`: only the mpsc + oneshot baseline of the actor-asker
    // lines (WORKERS 0: current_thread), for the same profiling
    if let Some(i) = args.iter().position(|a| a == "--ask-base") {
        let n: usize = arg(&args, i + 1, 200_000);
        let rounds: usize = arg(&args, i + 2, 1);
        let workers: usize = arg(&args, i + 3, 0);
        let b: Vec<f64> = (0..rounds).map(|_| mpsc_ask_rate(n, workers)).collect();
        line("runtime_ask_1_base_only", "asks_per_s", median(b), 0.0);
        return;
    }
    // `--ask-ext N [ROUNDS] [WORKERS]`: only the external-asker ZLink figure
    // (`runtime_ask_1`'s ZLink side), no baseline (profiling: callgrind, perf)
    if let Some(i) = args.iter().position(|a| a == "--ask-ext") {
        let n: usize = arg(&args, i + 1, 200_000);
        let rounds: usize = arg(&args, i + 2, 1);
        let workers: usize = arg(&args, i + 3, WORKERS);
        let z: Vec<f64> = (0..rounds).map(|_| zlink_ask(n, workers).0).collect();
        line("runtime_ask_1_only", "asks_per_s", median(z), 0.0);
        return;
    }
    // `--ask1 N [ROUNDS]`: only the ask figures (profiling)
    if let Some(i) = args.iter().position(|a| a == "--ask1") {
        let n: usize = arg(&args, i + 1, 200_000);
        let rounds: usize = arg(&args, i + 2, 3);
        asks(n, rounds);
        return;
    }
    let rounds = if quick { 1 } else { 3 };
    let single: u64 = if quick { 1_000_000 } else { 5_000_000 };
    let per_actor: u64 = if quick { 500 } else { 2_000 };
    let n_asks = if quick { 50_000 } else { 200_000 };

    progress::start("bench_runtime", 5);
    // first, before other runtimes' threads come and go
    progress::step("threads with 10 and 10,000 Spots");
    let (t10, t10k) = spots_threads();

    // interleave ZLink and baseline runs; report medians
    progress::step(format!("tell, 1 actor ({rounds} rounds)"));
    let (mut z, mut b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        b.push(mpsc_tell(1, single));
        z.push(zlink_tell::<SpotWideUser>(1, single));
    }
    line("runtime_tell_1", "msgs_per_s", median(z), median(b));

    progress::step(format!("tell, 1,000 actors ({rounds} rounds)"));
    let (mut z, mut zp, mut b) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        b.push(mpsc_tell(1000, per_actor));
        z.push(zlink_tell::<SpotWideUser>(1000, per_actor));
        zp.push(zlink_tell::<PerActorUser>(1000, per_actor));
    }
    let base = median(b);
    line("runtime_tell_1000_spotwide", "msgs_per_s", median(z), base);
    line("runtime_tell_1000_peractor", "msgs_per_s", median(zp), base);

    progress::step(format!("ask ({rounds} rounds)"));
    asks(n_asks, rounds);

    progress::step("threads and peak RSS");
    line(
        "runtime_threads_10k_spots",
        "threads",
        t10k as f64,
        t10 as f64,
    );
    progress::out(format_args!(
        "{{\"bench\":\"runtime_process\",\"metric\":\"peak_rss_kib\",\"value\":{}}}",
        peak_rss_kib()
    ));
    progress::finish();
}

/// `runtime_ask_1`: ZLink's 2 application workers against tokio mpsc + oneshot on a 2-worker
/// multi-thread runtime; `runtime_ask_1_w1`: one application worker against tokio
/// `current_thread` (actix's figure in `../shared/BASELINES.md` is current_thread). The asker
/// of these is an external task (`ActorRef::ask`: queued, two scheduler hops per ask).
/// `runtime_ask_1_actor` / `runtime_ask_1_actor_w1`: the asker is an actor's handler
/// continuation (`Ctx::ask` to an actor of another Spot: the inline path), on 2 workers against
/// the 2-worker mpsc + oneshot, on 1 worker against `current_thread` (both baselines without
/// per-ask timing, as the actor line).
fn asks(n: usize, rounds: usize) {
    let (mut z, mut b, mut z1, mut b1) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut za, mut ba, mut za1, mut ba1) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        b.push(mpsc_ask(n, WORKERS));
        z.push(zlink_ask(n, WORKERS));
        b1.push(mpsc_ask(n, 0));
        z1.push(zlink_ask(n, 1));
        ba.push(mpsc_ask_rate(n, WORKERS));
        za.push(zlink_ask_actor(n, WORKERS));
        ba1.push(mpsc_ask_rate(n, 0));
        za1.push(zlink_ask_actor(n, 1));
    }
    line(
        "runtime_ask_1_actor_w1",
        "asks_per_s",
        median(za1),
        median(ba1),
    );
    line("runtime_ask_1_actor", "asks_per_s", median(za), median(ba));
    line(
        "runtime_ask_1_w1",
        "asks_per_s",
        median(z1.iter().map(|x| x.0).collect()),
        median(b1.iter().map(|x| x.0).collect()),
    );
    let pick = |v: &[(f64, f64, f64, f64)], f: fn(&(f64, f64, f64, f64)) -> f64| {
        median(v.iter().map(f).collect())
    };
    line(
        "runtime_ask_1",
        "asks_per_s",
        pick(&z, |x| x.0),
        pick(&b, |x| x.0),
    );
    line(
        "runtime_ask_1",
        "mean_us",
        pick(&z, |x| x.1),
        pick(&b, |x| x.1),
    );
    line(
        "runtime_ask_1",
        "p50_us",
        pick(&z, |x| x.2),
        pick(&b, |x| x.2),
    );
    line(
        "runtime_ask_1",
        "p99_us",
        pick(&z, |x| x.3),
        pick(&b, |x| x.3),
    );
}
