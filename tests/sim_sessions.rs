//! Seeded simulation of session bindings on N nodes (docs/RELIABILITY.md): the real session
//! aggregate and the actor owner's binding slot, with binds, replacements, late 51s, relays and
//! pushes, unbinds, disconnects, partitions between session and actor owners, and crashes with
//! restarts (`tests/sim/sessions.rs`).
//!
//! `SIM_SEEDS` / `SIM_START` choose the seeds of the first test, `SIM_FAULT` switches a driver
//! rule off (`tests/sim/sessions.rs`, `Faults::named`), `SIM_SEED` replays one seed with its
//! trace (`cargo test --test sim_sessions replay -- --ignored --nocapture`).

mod sim;

use std::sync::Mutex;
use std::time::Instant;

use sim::sessions::{self, Faults, Scenario, Stats};
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
        sessions::run(&s, faults, false).violation.is_some()
    });
    Scenario { actions, ..full }
}

fn report(seed: u64, faults: Faults, v: &Violation) -> String {
    let s = shrunk(seed, faults);
    let out = sessions::run(&s, faults, true);
    let mut text = format!(
        "seed {seed} violates: {v}\nreplay: SIM_SEED={seed} cargo test --test sim_sessions \
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

// spec: SB-1.1 — at most one current binding per actor incarnation
// spec: SB-5.5, SB-5.8 — a push reaches only the session it was bound to
// spec: SB-12 — every bind exactly one terminal
// spec: SB-6.6 — a late or duplicate 51 changes nothing
// spec: SB-7.4, SB-6.5 — after a crash every binding of the dead session owner ends
// spec: SB-7.3 — a binding the owner watch ended (a partition past the peer timeout) never
// processes a relay again
#[test]
fn ten_thousand_session_seeds_keep_every_invariant() {
    let (start, count) = seeds_from_env(CI_SEEDS);
    let faults = fault_from_env();
    let total = Mutex::new(Stats::default());
    let t0 = Instant::now();
    let (ran, failure) = run_seeds(start, count, threads_from_env(), |seed| {
        let out = sessions::run(&Scenario::generate(seed), faults, false);
        *total.lock().unwrap() += out.stats;
        out.violation
    });
    let total = total.into_inner().unwrap();
    eprintln!(
        "sim_sessions: {ran} seeds from {start} in {:.1?} ({:?}): {total:?}",
        t0.elapsed(),
        faults
    );
    if let Some((seed, v)) = failure {
        panic!("{}", report(seed, faults, &v));
    }
    assert_eq!(ran, count);
    if count >= 1_000 {
        assert!(total.bound > count, "{total:?}");
        assert!(total.replacements > count / 10, "{total:?}");
        assert!(total.refused_51 > 0, "{total:?}");
        assert!(total.pushes > count, "{total:?}");
        assert!(total.relays_refused > 0, "{total:?}");
        assert!(total.owner_lost > 0, "{total:?}");
        assert!(total.crashes > 0 && total.bind_failures > 0, "{total:?}");
        assert!(
            total.partitions > count / 10 && total.stalls > 0,
            "{total:?}"
        );
        assert!(total.partition_ended > 0, "{total:?}");
    }
}

#[test]
fn a_session_seed_replays_exactly() {
    for seed in [3, 99, 5_151] {
        let a = sessions::run(&Scenario::generate(seed), Faults::default(), true);
        let b = sessions::run(&Scenario::generate(seed), Faults::default(), true);
        assert!(a.violation.is_none(), "{:?}", a.violation);
        assert!(a.trace.len() > 5, "a run does something: {}", a.trace.len());
        assert_eq!(a.trace, b.trace, "seed {seed} replays event for event");
    }
}

/// Each driver rule switched off is caught within the first 2,000 seeds and shrinks.
#[test]
fn an_injected_session_fault_is_caught_and_shrinks() {
    for name in [
        "keep_dead_owners_bindings",
        "push_skips_check",
        "no_replaced_51",
        "binds_survive_peer_loss",
    ] {
        let faults = Faults::named(name).unwrap();
        let (_, failure) = run_seeds(0, 2_000, threads_from_env(), |seed| {
            sessions::run(&Scenario::generate(seed), faults, false).violation
        });
        let (seed, v) = failure.unwrap_or_else(|| panic!("{name}: no seed of 2,000 caught it"));
        let s = shrunk(seed, faults);
        let replay = sessions::run(&s, faults, true);
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
            sessions::run(&s, Faults::default(), false)
                .violation
                .is_none(),
            "{name}: the shrunk scenario passes on the real rules"
        );
    }
}

/// Replays one seed (`SIM_SEED`, with `SIM_FAULT`), prints its trace and, when it fails, the
/// shrunk scenario.
#[test]
#[ignore = "a tool: SIM_SEED=N cargo test --test sim_sessions replay -- --ignored --nocapture"]
fn replay() {
    let seed: u64 = std::env::var("SIM_SEED")
        .expect("SIM_SEED")
        .parse()
        .expect("SIM_SEED is a number");
    let faults = fault_from_env();
    let out = sessions::run(&Scenario::generate(seed), faults, true);
    for line in &out.trace {
        println!("{line}");
    }
    println!("{:?}", out.stats);
    if let Some(v) = out.violation {
        panic!("{}", report(seed, faults, &v));
    }
}
