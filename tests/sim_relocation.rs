//! Seeded simulation of live relocation on N nodes (docs/RELIABILITY.md): the real source and
//! target cores, the session aggregate's seal, the binding slot, Message Follow and the store's
//! relocation fence and CAS, with sessions relaying sequence-numbered messages while actors and
//! whole Spots move, under delays, partitions, crashes with restarts and clock jumps
//! (`tests/sim/relocation.rs`).
//!
//! `SIM_SEEDS` / `SIM_START` choose the seeds of the first test, `SIM_FAULT` switches a driver
//! rule off (`tests/sim/relocation.rs`, `Faults::named`), `SIM_SEED` replays one seed with its
//! trace (`scripts/sim --world relocation --seed N`).

mod sim;

use sim::relocation::Relocation;

/// Seeds every `cargo test` runs.
const CI_SEEDS: u64 = 10_000;

// spec: EG-14, SB-8.6, SB-8.9 — no two nodes serve one actor; only the store's owner serves
// spec: SB-8.4, SB-5.10 — no relay processed twice
// spec: SB-8.7, SB-8.9 — per session, per actor order across a relocation: held relays reach
// the target before anything newer
// spec: SB-8.3, SB-8.6 — every relay processed or dropped for a reason the spec allows
// spec: SB-8.3 — a late or duplicate 44 changes nothing
// spec: EG-14, SB-4 — an actor whose owner crashed is activated again only once the store's
// lease check lets a new owner win the reservation; its messages are refused only while no
// owner serves it, and its old binding's relays are refused by the new slot (SB-5.3)
// spec: EG-14, SB-5.11 — an owner whose lease ran out (mid-relocation too) serves nothing under
// it; the store's fences decide its relocations in flight
// spec: SB-6.1, SB-5.3, SB-5.12 — binds and replacements race the relocation's 42/43/44: a
// replaced binding's relays are refused, a 51 ends its seal (the held relays go with it), a
// bind the owner registers is the one the target's slot holds after the move
// spec: SB-6.6 — a refused 51 changes nothing
// spec: SB-8.6 — a target whose CAS answer is lost reads the record back and the store decides
// spec: SB-8.6 — a failed relocation's source replaces the record with a new incarnation and
// activates the actor again from its state, retrying while the store is out of reach; after the
// drain an actor the store names on a live node is served there
// spec: SB-12 — every request exactly one terminal at its caller (reply, refusal or deadline),
// and a reply or refusal tells the truth about whether it ran
// spec: SB-8.9, EG-4.1 — a whole-Spot move (Subject::Spot) seals the Spot's unit: no member runs a
// turn at the source once its state was taken; every member's bound session is sealed and gets
// its 44; the same invariants hold for every member
// spec: SB-8.3 — every session a committed relocation sealed gets its 44 commit from the target
// spec: SB-8.6 — every relocation ends: a source whose target's result is lost decides from the
// store's records after its result timeout
// spec: SB-6.6, SB-7.3, SB-7.4, SB-8.4 — a 38 unbind or disconnect mid-move waits on the source
// (held by the seal): applied there after an abort, forwarded once to the target after a commit;
// no binding its session removed stays anywhere, and the Spot's OnDisconnectActor runs exactly
// once per disconnected binding
#[test]
fn ten_thousand_relocation_seeds_keep_every_invariant() {
    let (count, total) = sim::check_seeds::<Relocation>(CI_SEEDS);
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
        assert!(
            total.reactivated > count / 10 && total.processed_after_reactivation > count / 10,
            "{total:?}"
        );
        assert!(
            total.lease_expiries_mid_move > count / 100 && total.dropped_lease > 0,
            "{total:?}"
        );
        assert!(
            total.bound > count / 10 && total.replacements > count / 10,
            "{total:?}"
        );
        assert!(
            total.replaced_while_sealed > 0 && total.dropped_replaced > 0,
            "{total:?}"
        );
        assert!(
            total.request_replies > count && total.request_refusals > 0,
            "{total:?}"
        );
        assert!(total.request_deadlines > 0, "{total:?}");
        assert!(
            total.recovered > 0 && total.recovery_retries > 0,
            "{total:?}"
        );
        assert!(
            total.result_waits_expired > 0 && total.result_waits_moved > 0,
            "{total:?}"
        );
        assert!(
            total.tombstones > count / 2
                && total.disconnects > count / 4
                && total.tombstones_held > count / 10
                && total.tombstones_forwarded > count / 100,
            "{total:?}"
        );
        assert!(
            total.hooks_run > count / 10 && total.hooks_run_forwarded > count / 100,
            "{total:?}"
        );
        assert!(
            total.cas_answers_lost > count / 100 && total.cas_read_backs > count / 100,
            "{total:?}"
        );
        assert!(
            total.spot_seeds > count / 5 && total.spot_relocations_shared > count / 20,
            "{total:?}"
        );
        assert!(
            total.spot_moved > count / 50
                && total.spot_aborted > 0
                && total.spot_failed > 0
                && total.processed_after_spot_move > count / 10,
            "{total:?}"
        );
        assert!(
            total.spot_busy > 0 && total.spot_restores_refused > 0,
            "{total:?}"
        );
    }
}

#[test]
fn a_relocation_seed_replays_exactly() {
    sim::replays_exactly::<Relocation>(&[3, 99, 5_151], 5);
}

/// The seeds long runs found failing on an older world (docs/RELIABILITY.md: the relocation
/// world's seven seeds of a 150,000-seed run, and seed 287,656 of the million): each was a
/// model error (Message Follow's fences, a record older than the last move, a binding ended
/// with its owner's lease, a fallback that found its source seen gone; seed 28,726: a binding
/// left at a target whose CAS won after its source decided "failed", exempt only when the
/// source's recovery ended superseded, not when it ended with the source's lease; seed 47,069:
/// an unbind sent while sealed, its 44 lost, reaching the old owner after its follow entry
/// ended), fixed in the world; they pass and replay exactly.
// spec: SB-5.10 — a followed record carries the new owner's fences; one older than the last
// move is refused as stale, never forwarded
// spec: SB-5.3 — a binding ends with the incarnation that held it
// spec: SB-8.9 — a fallback that finds its source seen gone opens at once; what the source
// relays later goes behind, counted (the documented case)
#[test]
fn seeds_a_long_run_found_pass() {
    sim::replays_exactly::<Relocation>(
        &[
            28_726, 36_504, 47_069, 87_313, 99_242, 111_175, 111_199, 120_975, 131_715, 287_656,
        ],
        5,
    );
}

/// Each driver rule switched off is caught within the first 2,000 seeds and shrinks.
#[test]
fn an_injected_relocation_fault_is_caught_and_shrinks() {
    sim::caught_and_shrinks::<Relocation>(&[
        "target_dispatches_before_cas",
        "source_drops_late_ingress",
        "release_after_new",
        "no_follow",
        "activation_installs_nothing",
        "activate_on_unreachable_owner",
        "serve_past_lease",
        "open_under_lost_lease",
        "bind_until_runtime_seal",
        "no_request_deadline",
        "no_recovery",
        "spot_seals_one_lane",
        "open_into_moving_spot",
        "spot_44_to_first_member",
        "source_by_generation",
        "recovery_tries_once",
        "no_result_timeout",
        "tombstone_ignores_seal",
        "forward_as_unbind",
        "cas_loss_is_failure",
    ]);
}

/// The cutover fallback's order (SB-8.9): with regular ingress let in at once after the
/// fallback, a session's relay overtakes captured work still on its way from the source. The
/// window is rare (a fallback with relays in flight on both paths: about 1 seed in 5,000), so
/// it is searched where the long runs found it (seed 9,952).
// spec: SB-8.9, SB-8.7
#[test]
fn the_fallback_that_ignores_the_source_stream_is_caught_and_shrinks() {
    sim::caught_in_and_shrinks::<Relocation>("fallback_ignores_source_stream", 8_000, 2_000);
}

/// The Follow table's seal entry ends with the relocation: with today's node rule (released
/// only at the unseal or a failure, else ending by its 8 s hold time) a source that waits out its
/// 11 s result timeout outlives it, and a held tombstone then applies at the source while the
/// moved binding lives at the target. The window is rare (a lost result and a tombstone in the
/// same move), so it is searched where the long run found it (seed 2,735).
// spec: SB-7.3, SB-8.4, SB-5.12
#[test]
fn a_seal_entry_that_expires_before_the_move_ends_is_caught_and_shrinks() {
    sim::caught_in_and_shrinks::<Relocation>("seal_entry_expires", 2_000, 2_000);
}

/// Replays one seed (`SIM_SEED`, with `SIM_FAULT`), prints its trace and, when it fails, the
/// shrunk scenario.
#[test]
#[ignore = "a tool: scripts/sim --world relocation --seed N"]
fn replay() {
    sim::replay::<Relocation>();
}
