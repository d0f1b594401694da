//! Seeded simulation of actor ownership on N nodes (docs/RELIABILITY.md): the store core's
//! leases, fences and CAS, the owner lease state machine and standing, the owner's fence checks,
//! request correlations and the binding slot, under delays, reordering across links,
//! partitions, crashes with restarts, freezes and clock jumps (`tests/sim/ownership.rs`).
//!
//! `SIM_SEEDS` / `SIM_START` choose the seeds of the first test, `SIM_FAULT` switches a driver
//! rule off (`tests/sim/ownership.rs`, `Faults::named`), `SIM_SEED` replays one seed with its
//! trace (`scripts/sim --seed N`).

mod sim;

use std::sync::Mutex;
use std::time::Instant;

use sim::ownership::{self, Faults, Scenario, Stats};
use sim::{Violation, run_seeds, seeds_from_env, shrink, threads_from_env};

/// Seeds every `cargo test` runs.
const CI_SEEDS: u64 = 10_000;

fn fault_from_env() -> Faults {
    let name = std::env::var("SIM_FAULT").unwrap_or_default();
    Faults::named(&name).unwrap_or_else(|| panic!("unknown SIM_FAULT {name:?}"))
}

/// The shortest scenario of `seed` that still fails under `faults` (delta debugging over its
/// actions).
fn shrunk(seed: u64, faults: Faults) -> Scenario {
    let full = Scenario::generate(seed);
    let actions = shrink(full.actions.clone(), 3_000, |acts| {
        let s = Scenario {
            actions: acts.to_vec(),
            ..full.clone()
        };
        ownership::run(&s, faults, false).violation.is_some()
    });
    Scenario { actions, ..full }
}

/// Prints how to replay a failing seed, its shrunk actions and the shrunk run's trace.
fn report(seed: u64, faults: Faults, v: &Violation) -> String {
    let s = shrunk(seed, faults);
    let out = ownership::run(&s, faults, true);
    let mut text = format!(
        "seed {seed} violates: {v}\nreplay: SIM_SEED={seed} scripts/sim --seed {seed} \
         (faults {faults:?})\nshrunk to {} actions (of {}): {:?}\nshrunk run: {}\ntrace:\n",
        s.actions.len(),
        Scenario::generate(seed).actions.len(),
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

// spec: EG-14 — no two nodes serve one actor under live fences (takeover only after the
// owner's lease ended; a lapsed or fenced owner admits nothing)
// spec: SB-5.11 — past the local lease deadline the owner admits nothing
// spec: SB-12 — every request ends with exactly one terminal; late replies change nothing
// spec: SB-1.1 — at most one current binding per actor
// spec: SB-5.3 — a retired binding's relay is refused; SB-7.3: a late tombstone changes nothing
// spec: SB-4.1 — the store's fences per actor only grow
#[test]
fn ten_thousand_seeds_keep_every_invariant() {
    let (start, count) = seeds_from_env(CI_SEEDS);
    let faults = fault_from_env();
    let total = Mutex::new(Stats::default());
    let t0 = Instant::now();
    let (ran, failure) = run_seeds(start, count, threads_from_env(), |seed| {
        let out = ownership::run(&Scenario::generate(seed), faults, false);
        *total.lock().unwrap() += out.stats;
        out.violation
    });
    let total = total.into_inner().unwrap();
    eprintln!(
        "sim_ownership: {ran} seeds from {start} in {:.1?} ({:?}): {total:?}",
        t0.elapsed(),
        faults
    );
    if let Some((seed, v)) = failure {
        panic!("{}", report(seed, faults, &v));
    }
    assert_eq!(ran, count);
    // The runs exercised what the invariants are about.
    if count >= 1_000 {
        assert!(total.served > count, "{total:?}");
        assert!(total.takeovers > count / 20, "{total:?}");
        assert!(total.leases_lost > 0, "{total:?}");
        assert!(total.late_replies > 0, "{total:?}");
        assert!(
            total.relays_admitted > 0 && total.relays_refused > 0,
            "{total:?}"
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [1, 77, 4_242] {
        let s = Scenario::generate(seed);
        let a = ownership::run(&s, Faults::default(), true);
        let b = ownership::run(&Scenario::generate(seed), Faults::default(), true);
        assert!(a.violation.is_none(), "{:?}", a.violation);
        assert!(
            a.trace.len() > 50,
            "a run does something: {}",
            a.trace.len()
        );
        assert_eq!(a.trace, b.trace, "seed {seed} replays event for event");
    }
}

/// Each driver rule switched off is caught within the first few hundred seeds, and its
/// failing scenario shrinks to a few actions that still fail. The seeds found are recorded in
/// docs/RELIABILITY.md.
#[test]
fn an_injected_fault_is_caught_and_shrinks() {
    for name in [
        "keep_incarnations_on_lease_loss",
        "skip_standing_check",
        "relay_skips_binding_check",
        "deadline_from_answer",
        "clock_stops_while_frozen",
    ] {
        let faults = Faults::named(name).unwrap();
        let (_, failure) = run_seeds(0, 2_000, threads_from_env(), |seed| {
            ownership::run(&Scenario::generate(seed), faults, false).violation
        });
        let (seed, v) = failure.unwrap_or_else(|| panic!("{name}: no seed of 2,000 caught it"));
        let s = shrunk(seed, faults);
        let replay = ownership::run(&s, faults, true);
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
        assert!(s.actions.len() <= full);
        assert!(
            ownership::run(&s, Faults::default(), false)
                .violation
                .is_none(),
            "{name}: the shrunk scenario passes on the real rules"
        );
    }
}

/// `scripts/sim --seed N`: replays one seed (`SIM_SEED`, with `SIM_FAULT`), prints its trace
/// and, when it fails, the shrunk scenario.
#[test]
#[ignore = "a tool: scripts/sim --seed N"]
fn replay() {
    let seed: u64 = std::env::var("SIM_SEED")
        .expect("SIM_SEED")
        .parse()
        .expect("SIM_SEED is a number");
    let faults = fault_from_env();
    let s = Scenario::generate(seed);
    let out = ownership::run(&s, faults, true);
    for line in &out.trace {
        println!("{line}");
    }
    println!("{:?}", out.stats);
    if let Some(v) = out.violation {
        panic!("{}", report(seed, faults, &v));
    }
}
