//! Unit tests of the scheduling core (the lane rules, seals, batches, inline starts).

use super::*;

fn core() -> GateCore<u32, ()> {
    GateCore::new(LaneLimits::default())
}

fn run(c: &mut GateCore<u32, ()>) -> Option<(LaneId, LaneClass, u32)> {
    match c.poll_turn()? {
        Turn::Run {
            lane,
            class,
            invocation,
            item,
            ..
        } => {
            c.handle_turn_finished(lane, invocation).unwrap();
            Some((lane, class, item))
        }
        Turn::Resume { .. } => panic!("unexpected resume"),
    }
}

// spec: EG-7.3, EG-16.17
#[test]
fn lifecycle_first_when_both_ready() {
    let mut c = core();
    let l = c.add_lane(()).unwrap();
    c.handle_submit(l, LaneClass::Application, 0, 1).unwrap();
    c.handle_submit(l, LaneClass::Lifecycle, 0, 2).unwrap();
    assert_eq!(run(&mut c).unwrap().2, 2);
    assert_eq!(run(&mut c).unwrap().2, 1);
    assert!(run(&mut c).is_none());
}

// spec: EG-7.4, EG-7.5
#[test]
fn cap_then_debt_then_reset() {
    let mut c = core();
    let l = c.add_lane(()).unwrap();
    for i in 0..20 {
        c.handle_submit(l, LaneClass::Lifecycle, 0, 100 + i)
            .unwrap();
    }
    c.handle_submit(l, LaneClass::Application, 0, 1).unwrap();
    let classes: Vec<LaneClass> = (0..10).map(|_| run(&mut c).unwrap().1).collect();
    assert!(classes[..8].iter().all(|c| *c == LaneClass::Lifecycle));
    assert_eq!(classes[8], LaneClass::Application);
    assert_eq!(classes[9], LaneClass::Lifecycle);
    assert_eq!(c.lane_stats(l).unwrap().decision.consecutive_lifecycle, 1);
}

// spec: EG-6.1
#[test]
fn late_completion_is_stale() {
    let mut c = core();
    let l = c.add_lane(()).unwrap();
    c.handle_submit(l, LaneClass::Application, 0, 1).unwrap();
    let Some(Turn::Run { invocation, .. }) = c.poll_turn() else {
        panic!()
    };
    assert_eq!(
        c.handle_turn_finished(l, invocation + 1),
        Err(StaleCompletion)
    );
    c.handle_turn_finished(l, invocation).unwrap();
    assert_eq!(c.handle_turn_finished(l, invocation), Err(StaleCompletion));
}

// spec: EG-5.1, EG-5.2, EG-5.4 — the sans-IO barrier: inactive blocks nothing; active blocks
// the object's FIFOs; the Join result runs first and lifts it at its terminal.
#[test]
fn active_barrier_blocks_fifo_records_until_the_join_result_ran() {
    let mut c = core();
    let l = c.add_lane(()).unwrap();
    assert!(c.handle_barrier_register(l));
    c.handle_submit(l, LaneClass::Application, 0, 1).unwrap();
    assert_eq!(
        run(&mut c).unwrap().2,
        1,
        "an inactive barrier blocks nothing"
    );
    c.handle_barrier_activate(l);
    c.handle_submit(l, LaneClass::Application, 0, 2).unwrap();
    c.handle_submit(l, LaneClass::Lifecycle, 0, 3).unwrap();
    assert!(
        c.poll_turn().is_none(),
        "active barrier: no FIFO record starts"
    );
    assert_eq!(c.handle_join_result(l, Some(99)), Ok(()));
    assert_eq!(c.lane_stats(l).unwrap().lifecycle_reserved_items, 2);
    assert_eq!(run(&mut c).unwrap(), (l, LaneClass::Lifecycle, 99));
    assert_eq!(c.lane_stats(l).unwrap().barriers_active, 0);
    assert_eq!(run(&mut c).unwrap().2, 3);
    assert_eq!(run(&mut c).unwrap().2, 2);
    // a stale Join result (no active barrier) is handed back
    assert_eq!(c.handle_join_result(l, Some(7)), Err(Some(7)));
    // discarded: nothing blocks
    assert!(c.handle_barrier_register(l));
    c.handle_barrier_discard(l);
    c.handle_submit(l, LaneClass::Application, 0, 4).unwrap();
    assert_eq!(run(&mut c).unwrap().2, 4);
}

// spec: EG-9, EG-7.2, EG-7.3, EG-6.4 — a batch is the one-by-one sequence of turns: the extra
// records keep their reservations; ending it after one extra record started puts the others
// back at the front of the FIFO in order, the claim names the record in flight, and the
// invocation numbers continue as if no batch had been taken.
#[test]
fn batch_end_restores_the_one_by_one_state() {
    let mut c = core();
    let l = c.add_lane(()).unwrap();
    for i in 1..=5 {
        c.handle_submit(l, LaneClass::Application, 10, i).unwrap();
    }
    let mut extra = VecDeque::new();
    let Some(Turn::Run {
        invocation, item, ..
    }) = c.poll_turn_batch(3, &mut extra)
    else {
        panic!("no turn")
    };
    assert_eq!(item, 1);
    let taken: Vec<u32> = extra.iter().map(|q| q.item).collect();
    assert_eq!(taken, [2, 3, 4]);
    assert!(c.batch_active());
    // an application record of the batch's own lane does not end it; a lifecycle one does
    c.handle_submit(l, LaneClass::Application, 10, 6).unwrap();
    assert!(!c.batch_preempted());
    c.handle_submit(l, LaneClass::Lifecycle, 0, 100).unwrap();
    assert!(c.batch_preempted());
    // record 1 ended, record 2 started (in flight); 3 and 4 not started
    let two = extra.pop_front().unwrap();
    assert_eq!(two.item, 2);
    let b = two.bytes;
    c.handle_batch_end(1, b, (1, b), extra.drain(..));
    assert!(!c.batch_active());
    let s = c.lane_stats(l).unwrap();
    assert_eq!(s.application_queued, 4, "3, 4 back at the front, then 5, 6");
    assert_eq!(
        s.application_reserved_items, 5,
        "2 in flight, 3 to 6 queued"
    );
    assert!(s.claimed);
    assert_eq!(c.handle_turn_finished(l, invocation), Err(StaleCompletion));
    c.handle_turn_finished(l, invocation + 1).unwrap();
    // lifecycle first at the next boundary, then the FIFO in order, numbering continued
    let order: Vec<(u32, u64)> = std::iter::from_fn(|| match c.poll_turn()? {
        Turn::Run {
            lane,
            invocation,
            item,
            ..
        } => {
            c.handle_turn_finished(lane, invocation).unwrap();
            Some((item, invocation))
        }
        Turn::Resume { .. } => None,
    })
    .collect();
    let n = invocation;
    assert_eq!(
        order,
        [(100, n + 2), (3, n + 3), (4, n + 4), (5, n + 5), (6, n + 6)]
    );
    let s = c.lane_stats(l).unwrap();
    assert_eq!(
        (s.application_reserved_items, s.application_reserved_bytes),
        (0, 0)
    );
}

// spec: EG-4.1
#[test]
fn resume_after_seal_is_refused() {
    let mut c = core();
    let l = c.add_lane(()).unwrap();
    c.handle_submit(l, LaneClass::Application, 10, 1).unwrap();
    let Some(Turn::Run { invocation, .. }) = c.poll_turn() else {
        panic!()
    };
    c.handle_yield(l, invocation).unwrap();
    c.handle_seal();
    assert_eq!(c.handle_resume(l, invocation), Err(ResumeRefused::Sealed));
    assert_eq!(c.lane_stats(l).unwrap().application_reserved_items, 0);
}

// spec: EG-4.1, EG-2.1 — sealing one object of a shared gate (one actor of a SpotWide Spot)
// holds only its records: the gate's other lanes keep running; its record in flight
// finishes; unsealed, it runs again in FIFO order.
#[test]
fn sealing_one_lane_holds_only_that_lane() {
    let mut c = core();
    let a = c.add_lane(()).unwrap();
    let b = c.add_lane(()).unwrap();
    c.handle_submit(a, LaneClass::Application, 0, 1).unwrap();
    c.handle_submit(a, LaneClass::Application, 0, 2).unwrap();
    c.handle_submit(b, LaneClass::Application, 0, 10).unwrap();
    let Some(Turn::Run { invocation, .. }) = c.poll_turn() else {
        panic!()
    };
    // a's first record is running when a is sealed: it finishes
    assert!(c.handle_seal_lane(a).is_empty());
    assert!(c.is_lane_sealed(a) && !c.is_lane_sealed(b) && !c.is_sealed());
    c.handle_turn_finished(a, invocation).unwrap();
    c.handle_submit(a, LaneClass::Lifecycle, 0, 3).unwrap();
    c.handle_submit(b, LaneClass::Application, 0, 11).unwrap();
    assert_eq!(run(&mut c).unwrap(), (b, LaneClass::Application, 10));
    assert_eq!(run(&mut c).unwrap(), (b, LaneClass::Application, 11));
    assert!(run(&mut c).is_none(), "the sealed lane starts nothing");
    assert!(!c.inline_admissible(a, 0), "nor inline");
    c.handle_unseal_lane(a);
    assert_eq!(run(&mut c).unwrap(), (a, LaneClass::Lifecycle, 3));
    assert_eq!(run(&mut c).unwrap(), (a, LaneClass::Application, 2));
}

// spec: EG-4.1 — a pending Yield resume of a sealed object fails, whether its resume record
// was already queued or arrives after the seal; the other lane's resume runs.
#[test]
fn resume_of_a_sealed_lane_is_refused() {
    let mut c = core();
    let a = c.add_lane(()).unwrap();
    let b = c.add_lane(()).unwrap();
    c.handle_submit(a, LaneClass::Application, 10, 1).unwrap();
    c.handle_submit(b, LaneClass::Application, 10, 2).unwrap();
    let Some(Turn::Run { invocation: ia, .. }) = c.poll_turn() else {
        panic!()
    };
    c.handle_yield(a, ia).unwrap();
    let Some(Turn::Run { invocation: ib, .. }) = c.poll_turn() else {
        panic!()
    };
    c.handle_yield(b, ib).unwrap();
    // a's resume is queued, then a is sealed: refused and returned
    c.handle_resume(a, ia).unwrap();
    c.handle_resume(b, ib).unwrap();
    assert_eq!(c.handle_seal_lane(a), vec![(a, ia)]);
    assert_eq!(c.lane_stats(a).unwrap().application_reserved_items, 0);
    assert!(!c.lane_stats(a).unwrap().claimed);
    let Some(Turn::Resume { lane, .. }) = c.poll_turn() else {
        panic!("b's resume runs")
    };
    assert_eq!(lane, b);
    // a resume arriving after the seal is refused too
    c.handle_unseal_lane(a);
    c.handle_submit(a, LaneClass::Application, 10, 3).unwrap();
    c.handle_turn_finished(b, ib).unwrap();
    let Some(Turn::Run { invocation, .. }) = c.poll_turn() else {
        panic!()
    };
    c.handle_yield(a, invocation).unwrap();
    c.handle_seal_lane(a);
    assert_eq!(c.handle_resume(a, invocation), Err(ResumeRefused::Sealed));
}

// spec: EG-7.5, EG-1.4 — the moving object's queued records come back alone, lifecycle then
// application, each in FIFO order, reservations released; its decision counters and debt are
// dropped, another object's stay.
#[test]
fn return_pending_of_one_lane_drops_only_its_debt() {
    let mut c = core();
    let a = c.add_lane(()).unwrap();
    let b = c.add_lane(()).unwrap();
    let cap = LaneLimits::default().lifecycle_turn_cap;
    for lane in [a, b] {
        for i in 0..cap {
            c.handle_submit(lane, LaneClass::Lifecycle, 0, 100 + i)
                .unwrap();
        }
    }
    while run(&mut c).is_some() {}
    assert!(c.lane_stats(a).unwrap().decision.debt);
    assert!(c.lane_stats(b).unwrap().decision.debt);
    c.handle_submit(a, LaneClass::Application, 5, 1).unwrap();
    c.handle_submit(a, LaneClass::Lifecycle, 0, 2).unwrap();
    c.handle_submit(a, LaneClass::Application, 5, 3).unwrap();
    c.handle_seal_lane(a);
    let back: Vec<(LaneClass, u32, usize)> = c
        .handle_return_pending_lane(a)
        .into_iter()
        .map(|r| (r.class, r.item, r.payload_len))
        .collect();
    assert_eq!(
        back,
        [
            (LaneClass::Lifecycle, 2, 0),
            (LaneClass::Application, 1, 5),
            (LaneClass::Application, 3, 5)
        ]
    );
    let sa = c.lane_stats(a).unwrap();
    assert_eq!(
        sa.decision,
        LaneDecision::default(),
        "the mover's debt drops"
    );
    assert_eq!(
        (sa.application_reserved_items, sa.lifecycle_reserved_items),
        (0, 0)
    );
    assert!(c.lane_stats(b).unwrap().decision.debt, "b keeps its debt");
}

// Issue 12: a removed lane's slot is reused, a stale id never reaches the new lane, and an
// emptied core keeps no table.
#[test]
fn removed_slot_is_reused_and_stale_ids_refused() {
    let mut c = core();
    let a = c.add_lane(()).unwrap();
    c.handle_submit(a, LaneClass::Application, 0, 1).unwrap();
    let (_, items) = c.remove_lane(a).unwrap();
    assert_eq!(items, vec![1]);
    assert!(!c.has_ready());
    assert_eq!(c.lane_count(), 0);
    let b = c.add_lane(()).unwrap();
    assert_eq!(b.index(), a.index());
    assert_ne!(b, a);
    assert!(c.handle_submit(a, LaneClass::Application, 0, 2).is_err());
    assert!(c.lane_stats(a).is_none());
    assert!(c.remove_lane(a).is_none());
    c.handle_submit(b, LaneClass::Application, 0, 3).unwrap();
    assert_eq!(run(&mut c).unwrap().2, 3);
}

// Issue 12: a FIFO that held a burst gives its buffer back when the lane goes idle.
#[test]
fn idle_lane_gives_big_buffers_back() {
    let mut c = core();
    let l = c.add_lane(()).unwrap();
    for i in 0..100 {
        c.handle_submit(l, LaneClass::Application, 0, i).unwrap();
    }
    while run(&mut c).is_some() {}
    let s = c.lane_ref(l).unwrap();
    assert!(s.application.capacity() <= IDLE_FIFO_KEEP);
}

// Issue 12: ending a gate removes every lane (their driver data is handed back).
#[test]
fn end_removes_every_lane() {
    let mut c = core();
    let a = c.add_lane(()).unwrap();
    let b = c.add_lane(()).unwrap();
    c.handle_submit(b, LaneClass::Lifecycle, 0, 7).unwrap();
    let ended = c.handle_end();
    assert_eq!(ended.items, vec![7]);
    assert_eq!(
        ended.lanes.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
        vec![a, b]
    );
    assert_eq!(c.lane_count(), 0);
    assert!(c.add_lane(()).is_none());
}

// Inline request (docs/RUNTIME.md "Inline ask"): starting a record in the caller's task
// leaves the core exactly as submit + poll_turn would (reservation, lane decision, claim,
// invocation numbering), and its terminal is an ordinary one.
// spec: EG-7.2, EG-7.3, EG-7.5, EG-6.1
#[test]
fn inline_start_is_submit_then_poll_turn() {
    let (mut inline, mut queued) = (core(), core());
    let (a, b) = (inline.add_lane(()).unwrap(), queued.add_lane(()).unwrap());
    for (c, l) in [(&mut inline, a), (&mut queued, b)] {
        for i in 0..9 {
            c.handle_submit(l, LaneClass::Lifecycle, 0, i).unwrap();
        }
        while run(c).is_some() {}
        assert!(c.lane_stats(l).unwrap().decision.debt);
    }
    let inv = inline.handle_inline_start(a, 10).unwrap();
    queued
        .handle_submit(b, LaneClass::Application, 10, 0)
        .unwrap();
    let Some(Turn::Run { invocation, .. }) = queued.poll_turn() else {
        panic!("no turn")
    };
    assert_eq!(inv, invocation);
    assert_eq!(inline.lane_stats(a), queued.lane_stats(b));
    assert!(!inline.lane_stats(a).unwrap().decision.debt);
    // a record submitted meanwhile waits behind the claim and runs after the terminal
    inline
        .handle_submit(a, LaneClass::Application, 0, 7)
        .unwrap();
    assert!(!inline.has_ready());
    inline.handle_turn_finished(a, inv).unwrap();
    assert_eq!(run(&mut inline).unwrap().2, 7);
    queued.handle_turn_finished(b, invocation).unwrap();
    assert_eq!(inline.lane_stats(a), queued.lane_stats(b));
    // numbering goes on as one-by-one
    assert_eq!(inline.handle_inline_start(a, 0), Some(invocation + 2));
}

// Nothing queued is ever overtaken: an inline start is refused whenever anything waits for
// the right, the lane is not idle, the gate is sealed or ended, or the record would not fit.
// spec: EG-6.4, EG-7.6, EG-3.1, EG-4.1, EG-5.2, EG-7.1
#[test]
fn inline_start_refused_unless_nothing_waits() {
    let mut c = core();
    let (a, b) = (c.add_lane(()).unwrap(), c.add_lane(()).unwrap());
    assert!(c.inline_admissible(a, 0));
    // another lane waits in the ready set
    c.handle_submit(b, LaneClass::Application, 0, 1).unwrap();
    assert!(!c.inline_admissible(a, 0));
    assert_eq!(c.handle_inline_start(a, 0), None);
    assert_eq!(run(&mut c).unwrap().2, 1);
    // the lane's own FIFOs hold work
    c.handle_submit(a, LaneClass::Lifecycle, 0, 2).unwrap();
    assert!(!c.inline_admissible(a, 0));
    assert_eq!(run(&mut c).unwrap().2, 2);
    // a record of the lane is in flight (or yielded)
    let inv = c.handle_inline_start(a, 0).unwrap();
    assert!(!c.inline_admissible(a, 0));
    c.handle_yield(a, inv).unwrap();
    assert!(!c.inline_admissible(a, 0));
    assert!(c.inline_admissible(b, 0), "another idle lane may still run");
    c.handle_resume(a, inv).unwrap();
    assert!(!c.inline_admissible(b, 0), "the resume record waits");
    let Some(Turn::Resume { .. }) = c.poll_turn() else {
        panic!("no resume")
    };
    c.handle_turn_finished(a, inv).unwrap();
    assert!(c.inline_admissible(a, 0));
    // an active barrier
    assert!(c.handle_barrier_register(a));
    c.handle_barrier_activate(a);
    assert!(!c.inline_admissible(a, 0));
    c.handle_join_result(a, None).unwrap();
    while run(&mut c).is_some() {}
    assert!(c.inline_admissible(a, 0));
    // too big for the application lane
    let max = c.limits().application_bytes as usize;
    assert!(!c.inline_admissible(a, max));
    // sealed, then ended
    c.handle_seal();
    assert!(!c.inline_admissible(a, 0));
    c.handle_unseal();
    assert!(c.inline_admissible(a, 0));
    let _ = c.handle_end();
    assert!(!c.inline_admissible(a, 0));
}

// A held inline run: the previous inline record's terminal and the next record's start in
// one step leave exactly the state of `handle_turn_finished` then `handle_inline_start`.
// spec: EG-7.2, EG-7.3
#[test]
fn inline_continue_is_finish_then_inline_start() {
    let (mut held, mut plain) = (core(), core());
    let (a, b) = (held.add_lane(()).unwrap(), plain.add_lane(()).unwrap());
    let (h0, p0) = (
        held.handle_inline_start(a, 10).unwrap(),
        plain.handle_inline_start(b, 10).unwrap(),
    );
    let (mut h, mut p) = (h0, p0);
    for len in [20, 0, 300, 7, 20] {
        let Continued::Started { invocation, room } = held.handle_inline_continue(a, h, len) else {
            panic!("nothing waits: the run continues")
        };
        assert!(room);
        assert!(plain.handle_turn_finished(b, p).unwrap());
        assert_eq!(plain.handle_inline_start(b, len), Some(invocation));
        assert_eq!(held.lane_stats(a), plain.lane_stats(b));
        (h, p) = (invocation, invocation);
    }
    let invocation = h;
    // the old invocation is over: its terminal is stale now
    assert_eq!(held.handle_turn_finished(a, h0), Err(StaleCompletion));
    assert_eq!(held.handle_turn_finished(a, invocation), Ok(true));
    assert!(held.inline_admissible(a, 0));
}

// Nothing overtakes what waits (EG-6.3, EG-6.4): a record that entered the lane while the
// right was held, or another lane or resume record in the ready set, refuses the
// continuation; the finished record has ended all the same, and what waits is ready.
// spec: EG-6.3, EG-6.4, EG-7.2
#[test]
fn inline_continue_refused_when_something_waits() {
    let mut c = core();
    let (a, b) = (c.add_lane(()).unwrap(), c.add_lane(()).unwrap());
    // a record of the same lane queued meanwhile (another thread's submission)
    let inv = c.handle_inline_start(a, 0).unwrap();
    c.handle_submit(a, LaneClass::Application, 0, 1).unwrap();
    assert!(!c.has_ready(), "the claim stands while the right is held");
    assert_eq!(
        c.handle_inline_continue(a, inv, 0),
        Continued::Refused { room: true }
    );
    assert!(c.has_ready(), "the queued record waits for the right");
    assert_eq!(run(&mut c).unwrap().2, 1);
    assert_eq!(
        c.lane_stats(a).unwrap().application_reserved_items,
        0,
        "nothing left reserved"
    );
    // a lifecycle record of the same lane
    let inv = c.handle_inline_start(a, 0).unwrap();
    c.handle_submit(a, LaneClass::Lifecycle, 0, 2).unwrap();
    assert!(matches!(
        c.handle_inline_continue(a, inv, 0),
        Continued::Refused { .. }
    ));
    assert_eq!(run(&mut c).unwrap().2, 2);
    // another lane waits for the right
    let inv = c.handle_inline_start(a, 0).unwrap();
    c.handle_submit(b, LaneClass::Application, 0, 3).unwrap();
    assert!(matches!(
        c.handle_inline_continue(a, inv, 0),
        Continued::Refused { .. }
    ));
    assert_eq!(run(&mut c).unwrap().2, 3);
    assert!(c.inline_admissible(a, 0));
}

// The continuation is refused where an inline start would be: a record that does not fit
// the lane's limits, a barrier activated by the finished record, a sealed or ended gate, a
// stale invocation (the lane removed meanwhile).
// spec: EG-7.1, EG-5.2, EG-4.1
#[test]
fn inline_continue_refused_at_limits_barriers_seal_and_end() {
    let mut c = core();
    let a = c.add_lane(()).unwrap();
    let max = c.limits().application_bytes as usize;
    let inv = c.handle_inline_start(a, 0).unwrap();
    assert!(matches!(
        c.handle_inline_continue(a, inv, max),
        Continued::Refused { .. }
    ));
    assert!(c.inline_admissible(a, 0), "the finished record ended");
    // the finished record's barrier was activated at its terminal
    let inv = c.handle_inline_start(a, 0).unwrap();
    assert!(c.handle_barrier_register(a));
    c.handle_barrier_activate(a);
    assert!(matches!(
        c.handle_inline_continue(a, inv, 0),
        Continued::Refused { .. }
    ));
    c.handle_join_result(a, None).unwrap();
    while run(&mut c).is_some() {}
    // sealed meanwhile
    let inv = c.handle_inline_start(a, 0).unwrap();
    c.handle_seal();
    assert!(matches!(
        c.handle_inline_continue(a, inv, 0),
        Continued::Refused { .. }
    ));
    c.handle_unseal();
    // a stale invocation
    let inv = c.handle_inline_start(a, 0).unwrap();
    assert_eq!(
        c.handle_inline_continue(a, inv + 7, 0),
        Continued::Refused { room: false }
    );
    assert!(!c.inline_admissible(a, 0), "the real record still runs");
    c.handle_turn_finished(a, inv).unwrap();
    // ended meanwhile
    let inv = c.handle_inline_start(a, 0).unwrap();
    let _ = c.handle_end();
    assert!(matches!(
        c.handle_inline_continue(a, inv, 0),
        Continued::Refused { .. }
    ));
}
