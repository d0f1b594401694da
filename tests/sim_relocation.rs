//! Seeded simulation of live relocation on N nodes (docs/RELIABILITY.md): the real source and
//! target cores, the session aggregate's seal, the binding slot, Message Follow and the store's
//! relocation fence and CAS, with sessions relaying sequence-numbered messages while actors move,
//! under delays, partitions, crashes with restarts and clock jumps (`tests/sim/relocation.rs`).
//!
//! `SIM_SEEDS` / `SIM_START` choose the seeds of the first test, `SIM_FAULT` switches a driver
//! rule off (`tests/sim/sessions.rs`, `Faults::named`), `SIM_SEED` replays one seed with its
//! trace (`cargo test --test sim_relocation replay -- --ignored --nocapture`).

mod sim;

use std::sync::Mutex;
use std::time::Instant;

use sim::relocation::{self, Faults, Scenario, Stats};
use sim::{Violation, run_seeds, seeds_from_env, shrink, threads_from_env};

/// Seeds every `cargo test` runs.
const CI_SEEDS: u64 = 10_000;

fn fault_from_env() -> Faults {
    let name = std::env::var("SIM_FAULT").unwrap_or_default();
    Faults::named(&name).unwrap_or_else(|| panic!("unknown SIM_FAULT {name:?}"))
}

/// The shortest scenario of `seed` that still fails under `faults`.
fn shrunk(seed: u64, faults: Faults) -> Scenario {
    let full = Scenario::generate(seed);
    let actions = shrink(full.actions.clone(), 3_000, |acts| {
        let s = Scenario {
            actions: acts.to_vec(),
            ..full.clone()
        };
        relocation::run(&s, faults, false).violation.is_some()
    });
    Scenario { actions, ..full }
}

fn report(seed: u64, faults: Faults, v: &Violation) -> String {
    let s = shrunk(seed, faults);
    let out = relocation::run(&s, faults, true);
    let mut text = format!(
        "seed {seed} violates: {v}\nreplay: SIM_SEED={seed} cargo test --test sim_relocation \
         replay -- --ignored --nocapture (faults {faults:?})\nshrunk to {} actions: {:?}\n\
         shrunk run: {}\ntrace:\n",
        s.actions.len(),
        s.actions,
        out.violation
            .map_or("passes (shrinking lost it)".into(), |v| v.to_string()),
    );
    for line in &out.trace {
        text.push_str(line);
        text.push('\n');
    }
    text
}

// spec: EG-14, SB-8.6, SB-8.9 — no two nodes serve one actor; only the store's owner serves
// spec: SB-8.4, SB-5.10 — no relay processed twice
// spec: SB-8.7, SB-8.9 — per session, per actor order across a relocation: held relays reach
// the target before anything newer
// spec: SB-8.3, SB-8.6 — every relay processed or dropped for a reason the spec allows
// spec: SB-8.3 — a late or duplicate 44 changes nothing
#[test]
fn ten_thousand_relocation_seeds_keep_every_invariant() {
    let (start, count) = seeds_from_env(CI_SEEDS);
    let faults = fault_from_env();
    let total = Mutex::new(Stats::default());
    let t0 = Instant::now();
    let (ran, failure) = run_seeds(start, count, threads_from_env(), |seed| {
        let out = relocation::run(&Scenario::generate(seed), faults, false);
        *total.lock().unwrap() += out.stats;
        out.violation
    });
    let total = total.into_inner().unwrap();
    eprintln!(
        "sim_relocation: {ran} seeds from {start} in {:.1?} ({:?}): {total:?}",
        t0.elapsed(),
        faults
    );
    if let Some((seed, v)) = failure {
        panic!("{}", report(seed, faults, &v));
    }
    assert_eq!(ran, count);
    if count >= 1_000 {
        assert!(total.moved > count, "{total:?}");
        assert!(total.aborted > 0 && total.failed > 0, "{total:?}");
        assert!(total.processed_after_move > count, "{total:?}");
        assert!(total.held > count / 10 && total.captured > 0, "{total:?}");
        assert!(
            total.cutover_timeouts > 0 && total.seal_timeouts > 0,
            "{total:?}"
        );
        assert!(total.late_44 > 0 && total.crashes > 0, "{total:?}");
    }
}

#[test]
fn a_relocation_seed_replays_exactly() {
    for seed in [3, 99, 5_151] {
        let a = relocation::run(&Scenario::generate(seed), Faults::default(), true);
        let b = relocation::run(&Scenario::generate(seed), Faults::default(), true);
        assert!(a.violation.is_none(), "{:?}", a.violation);
        assert!(a.trace.len() > 5, "a run does something: {}", a.trace.len());
        assert_eq!(a.trace, b.trace, "seed {seed} replays event for event");
    }
}

/// Each driver rule switched off is caught within the first 2,000 seeds and shrinks.
#[test]
fn an_injected_relocation_fault_is_caught_and_shrinks() {
    for name in [
        "target_dispatches_before_cas",
        "source_drops_late_ingress",
        "release_after_new",
        "no_follow",
    ] {
        let faults = Faults::named(name).unwrap();
        let (_, failure) = run_seeds(0, 2_000, threads_from_env(), |seed| {
            relocation::run(&Scenario::generate(seed), faults, false).violation
        });
        let (seed, v) = failure.unwrap_or_else(|| panic!("{name}: no seed of 2,000 caught it"));
        let s = shrunk(seed, faults);
        let replay = relocation::run(&s, faults, true);
        let full = Scenario::generate(seed).actions.len();
        eprintln!(
            "{name}: seed {seed} ({v}); shrunk {full} -> {} actions: {:?} -> {}",
            s.actions.len(),
            s.actions,
            replay
                .violation
                .as_ref()
                .map_or("passes".into(), ToString::to_string)
        );
        assert!(
            replay.violation.is_some(),
            "{name}: the shrunk scenario fails"
        );
        assert!(
            relocation::run(&s, Faults::default(), false)
                .violation
                .is_none(),
            "{name}: the shrunk scenario passes on the real rules"
        );
    }
}

/// Replays one seed (`SIM_SEED`, with `SIM_FAULT`), prints its trace and, when it fails, the
/// shrunk scenario.
#[test]
#[ignore = "a tool: SIM_SEED=N cargo test --test sim_relocation replay -- --ignored --nocapture"]
fn replay() {
    let seed: u64 = std::env::var("SIM_SEED")
        .expect("SIM_SEED")
        .parse()
        .expect("SIM_SEED is a number");
    let faults = fault_from_env();
    let out = relocation::run(&Scenario::generate(seed), faults, true);
    for line in &out.trace {
        println!("{line}");
    }
    println!("{:?}", out.stats);
    if let Some(v) = out.violation {
        panic!("{}", report(seed, faults, &v));
    }
}
