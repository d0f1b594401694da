//! Seeded simulation of session bindings on N nodes (docs/RELIABILITY.md): the real session
//! aggregate and the actor owner's binding slot, with binds, replacements, late 51s, relays and
//! pushes, unbinds, disconnects, partitions between session and actor owners, and crashes with
//! restarts (`tests/sim/sessions.rs`).
//!
//! `SIM_SEEDS` / `SIM_START` choose the seeds of the first test, `SIM_FAULT` switches a driver
//! rule off (`tests/sim/sessions.rs`, `Faults::named`), `SIM_SEED` replays one seed with its
//! trace (`scripts/sim --world sessions --seed N`).

mod sim;

use sim::sessions::Sessions;

/// Seeds every `cargo test` runs.
const CI_SEEDS: u64 = 10_000;

// spec: SB-1.1 — at most one current binding per actor incarnation
// spec: SB-5.5, SB-5.8 — a push reaches only the session it was bound to
// spec: SB-12 — every bind exactly one terminal
// spec: SB-6.6 — a late or duplicate 51 changes nothing
// spec: SB-7.4, SB-6.5 — after a crash every binding of the dead session owner ends
// spec: SB-7.3 — a binding the owner watch ended (a partition past the peer timeout) never
// processes a relay again
#[test]
fn ten_thousand_session_seeds_keep_every_invariant() {
    let (count, total) = sim::check_seeds::<Sessions>(CI_SEEDS);
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
    sim::replays_exactly::<Sessions>(&[3, 99, 5_151], 5);
}

/// Each driver rule switched off is caught within the first 2,000 seeds and shrinks.
#[test]
fn an_injected_session_fault_is_caught_and_shrinks() {
    sim::caught_and_shrinks::<Sessions>(&[
        "keep_dead_owners_bindings",
        "push_skips_check",
        "no_replaced_51",
        "binds_survive_peer_loss",
    ]);
}

/// Replays one seed (`SIM_SEED`, with `SIM_FAULT`), prints its trace and, when it fails, the
/// shrunk scenario.
#[test]
#[ignore = "a tool: scripts/sim --world sessions --seed N"]
fn replay() {
    sim::replay::<Sessions>();
}
