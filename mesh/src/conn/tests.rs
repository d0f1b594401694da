//! Unit tests of the connection core and its send side.

use bytes::Bytes;

use super::*;
use crate::codec::Parts;
use crate::config::Batching;

const WINDOW: InboundWindow = InboundWindow {
    messages: 4,
    bytes: 1000,
};

fn budget() -> Arc<SendBudget> {
    Arc::new(SendBudget::new(crate::config::OutboundBudget::default()))
}

fn app(conn: &mut Conn, bytes: u64) -> Verdict {
    conn.ingress(Lane::Relay, &Class::App, bytes, Instant::now())
}

/// The window-drop branch, deterministically: a sender that ignores its window has the
/// excess dropped (`CreditExceeded`), what fit is delivered, and credit granted back lets
/// it send again — no sockets, no timing.
#[test]
fn records_beyond_the_window_are_dropped_until_credit_returns() {
    let now = Instant::now();
    let mut conn = Conn::granted(WINDOW, budget(), now);
    // Nothing may arrive before the initial grant left.
    assert_eq!(
        app(&mut conn, 10),
        Verdict::Drop(DropReason::CreditExceeded)
    );
    // The initial grant, and the cost of the dropped record given back (resync: the
    // sender paid for it).
    let grant = conn.poll_grant().expect("the initial grant");
    assert_eq!((grant.messages, grant.bytes), (4 + 1, 1000 + 10));
    conn.grant_sent(grant);
    assert_eq!(conn.poll_grant(), None);
    for _ in 0..4 {
        assert_eq!(app(&mut conn, 10), Verdict::Deliver);
    }
    // The sender ignores its window: the fifth record is dropped.
    assert_eq!(
        app(&mut conn, 10),
        Verdict::Drop(DropReason::CreditExceeded)
    );
    // One delivered record left the window: a quarter of it, granted back now, with the
    // refund of the dropped one (which freed nothing of the window).
    assert!(conn.released(10));
    let grant = conn.poll_grant().expect("credit owed");
    assert_eq!((grant.messages, grant.bytes), (1 + 1, 10 + 10));
    // Not granted until the transport took it: still refused.
    assert_eq!(
        app(&mut conn, 10),
        Verdict::Drop(DropReason::CreditExceeded)
    );
    conn.grant_sent(grant);
    assert_eq!(app(&mut conn, 10), Verdict::Deliver);
    // The byte bound applies too (one record may overshoot it).
    let mut conn = Conn::granted(WINDOW, budget(), now);
    conn.grant_sent(conn.poll_grant().unwrap());
    assert_eq!(app(&mut conn, 999), Verdict::Deliver);
    assert_eq!(app(&mut conn, 500), Verdict::Deliver);
    assert_eq!(app(&mut conn, 1), Verdict::Drop(DropReason::CreditExceeded));
}

#[test]
fn each_lane_takes_only_its_records() {
    let now = Instant::now();
    let mut conn = Conn::granted(WINDOW, budget(), now);
    conn.grant_sent(conn.poll_grant().unwrap());
    let wrong = Verdict::Drop(DropReason::WrongConnection);
    assert_eq!(conn.ingress(Lane::Relay, &Class::Ping(1), 8, now), wrong);
    assert_eq!(conn.ingress(Lane::Relay, &Class::Reply, 8, now), wrong);
    assert_eq!(conn.ingress(Lane::Completion, &Class::App, 8, now), wrong);
    assert_eq!(conn.ingress(Lane::Client, &Class::Reply, 8, now), wrong);
    assert_eq!(conn.ingress(Lane::Client, &Class::Push, 8, now), wrong);
    let credit = Class::FlowCredit {
        messages: 1,
        bytes: 1,
    };
    assert_eq!(conn.ingress(Lane::Client, &credit, 8, now), wrong);
    assert_eq!(conn.ingress(Lane::Relay, &credit, 8, now), wrong);
    assert_eq!(
        conn.ingress(Lane::Client, &Class::Ping(7), 8, now),
        Verdict::Answer(Pong { seq: 7 })
    );
    assert_eq!(
        conn.ingress(Lane::Completion, &Class::Reply, 8, now),
        Verdict::Complete
    );
    assert_eq!(
        conn.ingress(
            Lane::Relay,
            &Class::Disconnect(zlink_wire::DisconnectReason::Shutdown),
            8,
            now
        ),
        Verdict::Disconnect
    );
    assert_eq!(
        conn.ingress(Lane::Client, &Class::App, 8, now),
        Verdict::Deliver
    );
    // The client side of a ClientServer connection: pushes delivered uncharged, replies
    // completed, credit granted, Pings only noted; no application records.
    assert_eq!(
        conn.ingress(Lane::Server, &Class::Push, 8, now),
        Verdict::Deliver
    );
    assert_eq!(
        conn.ingress(Lane::Server, &Class::Reply, 8, now),
        Verdict::Complete
    );
    assert_eq!(
        conn.ingress(Lane::Server, &Class::Ping(3), 8, now),
        Verdict::Control { resume: false }
    );
    assert_eq!(
        conn.ingress(Lane::Server, &credit, 8, now),
        Verdict::Control { resume: true }
    );
    assert_eq!(conn.ingress(Lane::Server, &Class::App, 8, now), wrong);
    assert_eq!(conn.ingress(Lane::Client, &Class::Push, 8, now), wrong);
    // Replies and control are not charged to the window.
    assert_eq!(conn.rx, {
        let mut w = RxWindow::default();
        assert!(w.try_charge(WINDOW, 8));
        w
    });
}

// SB-5.4: inside a batch frame only application records (and, between nodes, replies)
// are accepted; handshake and control records travel alone.
#[test]
fn only_data_travels_in_a_batch() {
    let credit = Class::FlowCredit {
        messages: 1,
        bytes: 1,
    };
    for lane in [Lane::Relay, Lane::Completion, Lane::Client, Lane::Server] {
        for control in [&Class::Ping(1), &Class::Pong, &credit] {
            assert!(!lane.batchable(control), "{lane:?} {control:?}");
        }
        let bye = Class::Disconnect(zlink_wire::DisconnectReason::Shutdown);
        assert!(!lane.batchable(&bye));
    }
    for lane in [Lane::Relay, Lane::Completion, Lane::Client] {
        assert!(lane.batchable(&Class::App));
    }
    assert!(Lane::Relay.batchable(&Class::Reply));
    assert!(Lane::Completion.batchable(&Class::Reply));
    assert!(!Lane::Client.batchable(&Class::Reply));
    assert!(Lane::Server.batchable(&Class::Push) && Lane::Server.batchable(&Class::Reply));
    assert!(!Lane::Server.batchable(&Class::App));
}

#[test]
fn send_credit_saturates_and_resumes() {
    let now = Instant::now();
    let mut conn = Conn::idle(WINDOW, budget(), now);
    assert!(!conn.credit.open());
    let max = Class::FlowCredit {
        messages: u32::MAX,
        bytes: u64::MAX,
    };
    assert_eq!(
        conn.ingress(Lane::Completion, &max, 8, now),
        Verdict::Control { resume: true }
    );
    assert_eq!(
        conn.ingress(Lane::Completion, &max, 8, now),
        Verdict::Control { resume: true }
    );
    assert_eq!(conn.credit.left(), (2 * u64::from(u32::MAX), u64::MAX));
    conn.credit.charge_run(Run {
        n: 1,
        bytes: 10,
        frame: 0,
    });
    assert!(conn.credit.open());
    conn.reset();
    assert!(!conn.credit.open());
}

// docs/CLIENT-PROTOCOL.md 5.1: the last record may overdraw the byte credit; the receiver
// returns its full cost, so the overdraft is paid back out of the next grant (treated as
// 0 the sender would end above its window).
#[test]
fn an_overdraft_is_paid_back_by_the_next_grant() {
    let mut c = SendCredit::default();
    c.grant(4, 100);
    c.charge_run(Run {
        n: 1,
        bytes: 150,
        frame: 0,
    });
    assert_eq!(c.left(), (3, 0));
    assert!(!c.open(), "no bytes left");
    // The receiver returns the record's full cost: back to the window, not above it.
    c.grant(1, 150);
    assert_eq!(c.left(), (4, 100));
}

#[test]
fn widening_grants_the_difference() {
    let now = Instant::now();
    let small = InboundWindow {
        messages: 2,
        bytes: 100,
    };
    let mut conn = Conn::granted(small, budget(), now);
    conn.grant_sent(conn.poll_grant().unwrap());
    assert_eq!(app(&mut conn, 10), Verdict::Deliver);
    assert_eq!(app(&mut conn, 10), Verdict::Deliver);
    assert_eq!(
        app(&mut conn, 10),
        Verdict::Drop(DropReason::CreditExceeded)
    );
    conn.widen(WINDOW);
    assert_eq!(conn.window(), WINDOW);
    // The difference, and the refund of the dropped record.
    let grant = conn.poll_grant().unwrap();
    assert_eq!((grant.messages, grant.bytes), (2 + 1, 900 + 10));
    conn.grant_sent(grant);
    assert_eq!(app(&mut conn, 10), Verdict::Deliver);
    assert_eq!(app(&mut conn, 10), Verdict::Deliver);
    assert_eq!(
        app(&mut conn, 10),
        Verdict::Drop(DropReason::CreditExceeded)
    );
}

/// A transport that takes `room` messages, then refuses (PAUSED) or reports the peer
/// gone; requests in `ended` have reached their terminal.
#[derive(Default)]
struct Fake {
    room: usize,
    gone: bool,
    ended: Vec<u64>,
    sent: Vec<usize>,
    /// The messages of framed runs: a batch frame, or a lone record's envelope.
    framed: Vec<Vec<u8>>,
    discarded: Vec<u64>,
    lost: usize,
}

impl Transport for Fake {
    fn send_run<'a>(
        &mut self,
        run: impl ExactSizeIterator<Item = &'a Parts>,
        _frame: usize,
    ) -> SendOutcome {
        if self.gone {
            return SendOutcome::Unreachable;
        }
        if self.room == 0 {
            return SendOutcome::Paused;
        }
        self.room -= 1;
        self.sent.push(run.len());
        SendOutcome::Sent
    }

    fn send_framed(&mut self, run: &mut Framed) -> SendOutcome {
        if self.gone {
            return SendOutcome::Unreachable;
        }
        if self.room == 0 {
            return SendOutcome::Paused;
        }
        self.room -= 1;
        self.sent.push(run.records());
        let message = match run.lone() {
            Some(r) => r.envelope.to_vec(),
            None => run.take_frame(),
        };
        self.framed.push(message);
        SendOutcome::Sent
    }

    fn ended(&mut self, corr: u64) -> bool {
        let ended = self.ended.contains(&corr);
        if ended {
            self.discarded.push(corr);
        }
        ended
    }

    fn expired(&self, corr: u64) -> bool {
        self.ended.contains(&corr)
    }

    fn lost(&mut self, _out: &Out) {
        self.lost += 1;
    }
}

fn queue_of(records: &[(usize, u64)], budget: &SendBudget) -> VecDeque<Out> {
    records
        .iter()
        .map(|&(len, corr)| {
            let frames = crate::codec::Parts::new(
                Bytes::from(vec![0u8; 8]),
                Some(Bytes::from(vec![0u8; len])),
            );
            let bytes = out_len(&Out::parts(frames.clone(), None, corr));
            assert!(budget.try_reserve(bytes));
            Out::parts(frames, Some(bytes), corr)
        })
        .collect()
}

// docs/CLIENT-PROTOCOL.md 5.1 — a client stays within the node's first grant (a stranger's
// window: a record that does not fit in what is left of its bytes is dropped by the node),
// returns of credit included; once accepted (a grant of more messages than were sent) its
// last record may overdraw as usual. Records of 18 bytes, a first grant of 4 records / 60
// bytes: three fit (54), the fourth waits (and the ones behind it, in order) although
// messages and bytes are left; a return keeps it waiting, the acceptance sends it.
#[test]
fn a_client_never_overdraws_the_first_grant() {
    let budget = budget();
    let batching = Batching::default();
    for framed in [false, true] {
        let mut q = if framed {
            // The same records framed by their sender as one run.
            VecDeque::from([framed_of(&[10; 5], &budget).0])
        } else {
            queue_of(&[(10, 0); 5], &budget)
        };
        let mut credit = SendCredit::client();
        credit.grant(4, 60);
        let mut t = Fake {
            room: 10,
            ..Fake::default()
        };
        assert_eq!(
            flush(&mut q, &mut credit, &budget, &batching, &mut t),
            Flushed::CreditBlocked
        );
        let sent: usize = t.sent.iter().sum();
        assert_eq!(sent, 3, "framed: {framed}: only what fits the first grant");
        assert_eq!(credit.left(), (1, 6));
        // A return of credit (1 message: no more than were sent) keeps the bound.
        credit.grant(1, 10);
        assert_eq!(
            flush(&mut q, &mut credit, &budget, &batching, &mut t),
            Flushed::CreditBlocked
        );
        assert_eq!(
            t.sent.iter().sum::<usize>(),
            3,
            "framed: {framed}: 16 < 18 left"
        );
        // The acceptance's grant (more messages than were sent): the rest may overdraw.
        credit.grant(3, 0);
        assert_eq!(
            flush(&mut q, &mut credit, &budget, &batching, &mut t),
            Flushed::CreditBlocked
        );
        let sent: usize = t.sent.iter().sum();
        assert_eq!(
            sent, 4,
            "framed: {framed}: the fourth overdraws once accepted"
        );
        // A peer's credit may overdraw from its first grant on.
        let mut q = queue_of(&[(10, 0); 3], &budget);
        let mut peer = SendCredit::default();
        peer.grant(3, 20);
        let mut t = Fake {
            room: 10,
            ..Fake::default()
        };
        assert_eq!(
            flush(&mut q, &mut peer, &budget, &batching, &mut t),
            Flushed::CreditBlocked
        );
        assert_eq!(t.sent.iter().sum::<usize>(), 2);
        budget.release_n(budget.reserved_messages(), budget.reserved_bytes());
    }
}

// The one send loop of every queue: runs batched within the credit (each record charged on
// its own), a request that ended discarded at the front and never put in a run, PAUSED and
// credit-blocked told apart, every reservation released exactly once (sent, discarded or
// lost).
#[test]
fn flush_batches_within_credit_and_releases_every_reservation() {
    let budget = budget();
    let batching = Batching {
        max_records: 3,
        ..Batching::default()
    };
    let mut q = queue_of(
        &[
            (10, 0),
            (10, 0),
            (10, 7),
            (10, 0),
            (10, 0),
            (10, 0),
            (10, 0),
        ],
        &budget,
    );
    let mut credit = SendCredit::default();
    credit.grant(5, 1 << 20);
    let mut t = Fake {
        room: 10,
        ended: vec![7],
        ..Fake::default()
    };
    // The run stops before the ended request, which is then discarded at the front; the
    // credit (5 records) ends the second run of 3 after 3 more.
    let r = flush(&mut q, &mut credit, &budget, &batching, &mut t);
    assert_eq!(r, Flushed::CreditBlocked);
    assert_eq!(t.sent, vec![2, 3]);
    assert_eq!(t.discarded, vec![7]);
    assert_eq!(q.len(), 1, "one record waits for credit");
    assert!(!credit.open());
    assert_eq!(
        credit.left(),
        (0, (1 << 20) - 5 * 18),
        "each sent record charged with all its bytes"
    );
    assert_eq!(
        budget.reserved_messages(),
        1,
        "only the waiting record still reserved"
    );
    // Without credit limit: the rest goes as soon as the transport takes it.
    t.room = 0;
    assert_eq!(
        flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
        Flushed::Paused
    );
    t.room = 1;
    assert_eq!(
        flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
        Flushed::Empty
    );
    assert_eq!(budget.reserved_messages(), 0);
    // A connection that is gone: each record lost, reservation released.
    let mut q = queue_of(&[(10, 0), (10, 0)], &budget);
    t.gone = true;
    assert_eq!(
        flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
        Flushed::Empty
    );
    assert_eq!((t.lost, budget.reserved_messages()), (2, 0));
}

/// A framed run of one-way records of `lens` payload bytes (8-byte envelopes), each
/// reserved against `budget` as `MeshNode` does before framing it.
fn framed_of(lens: &[usize], budget: &SendBudget) -> (Out, Vec<Parts>) {
    let mut run = Framed::new(0);
    let mut records = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let parts = crate::codec::Parts::new(
            Bytes::from(vec![i as u8; 8]),
            Some(Bytes::from(vec![0u8; len])),
        );
        assert!(budget.try_reserve(8 + len as u64));
        assert!(run.push(&parts[0], Some(&parts[1])));
        records.push(parts);
    }
    (Out::framed(Box::new(run)), records)
}

// Runs framed by their senders go out as the batch frame they form (the encoder's bytes),
// in queue order with the records queued one by one (a run of those stops before a framed
// run); each record is charged to the credit as if sent alone; a run the credit ends
// inside continues record by record; PAUSED keeps the run whole; every reservation is
// released exactly once (sent, or lost with one drop per record).
#[test]
fn framed_runs_go_out_whole_within_credit_and_record_by_record_past_it() {
    let budget = budget();
    let batching = Batching::default();
    let mut q = queue_of(&[(10, 0)], &budget);
    let (framed, records) = framed_of(&[10, 20, 30], &budget);
    q.push_back(framed);
    q.extend(queue_of(&[(10, 0), (10, 0)], &budget));
    let mut credit = SendCredit::default();
    credit.grant(5, 1 << 20);
    let mut t = Fake {
        room: 10,
        ..Fake::default()
    };
    assert_eq!(
        flush(&mut q, &mut credit, &budget, &batching, &mut t),
        Flushed::CreditBlocked
    );
    assert_eq!(
        t.sent,
        vec![1, 3, 1],
        "the framed run is a message of its own"
    );
    let expected =
        zlink_wire::encode_batch(records.iter().map(|p| (&p[0][..], Some(&p[1][..])))).unwrap();
    assert_eq!(t.framed, vec![expected.to_vec()], "the encoder's frame");
    assert_eq!(credit.left(), (0, (1 << 20) - 18 - 84 - 18));
    assert_eq!(budget.reserved_messages(), 1);
    assert_eq!(q.len(), 1);
    q.clear();
    budget.release(18);

    // The byte credit admits a record while any is left: all of a run whose last record
    // starts within it (as record by record), the bytes then saturate at zero.
    let (framed, _) = framed_of(&[10, 20, 30], &budget);
    q.push_back(framed);
    let mut credit = SendCredit::default();
    credit.grant(3, 18 + 28 + 1);
    t.sent.clear();
    assert_eq!(
        flush(&mut q, &mut credit, &budget, &batching, &mut t),
        Flushed::Empty
    );
    assert_eq!((t.sent.clone(), credit.left()), (vec![3], (0, 0)));

    // The credit ends inside a run: the records it admits go (as one batch of two), the
    // rest waits one by one with its own reservations.
    let (framed, records) = framed_of(&[10, 20, 30, 40], &budget);
    q.push_back(framed);
    credit.grant(2, 1 << 20);
    t.sent.clear();
    assert_eq!(
        flush(&mut q, &mut credit, &budget, &batching, &mut t),
        Flushed::CreditBlocked
    );
    assert_eq!(t.sent, vec![2]);
    assert_eq!(q.len(), 2);
    assert_eq!(budget.reserved_messages(), 2);
    assert_eq!(budget.reserved_bytes(), 38 + 48);
    for (out, parts) in q.iter().zip(&records[2..]) {
        assert_eq!(
            (&out.frames[..], out.bytes),
            (&parts[..], Some(out_len(out)))
        );
    }
    // PAUSED: nothing leaves, the run stays whole for the retry.
    let (framed, _) = framed_of(&[5, 5], &budget);
    q.push_back(framed);
    t.room = 0;
    assert_eq!(
        flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
        Flushed::Paused
    );
    t.room = 10;
    t.sent.clear();
    assert_eq!(
        flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
        Flushed::Empty
    );
    assert_eq!(t.sent, vec![2, 2]);
    assert_eq!(budget.reserved_messages(), 0);
    // A lone framed record goes out as its own frames; a lost run counts each record.
    let (framed, records) = framed_of(&[7], &budget);
    q.push_back(framed);
    assert_eq!(
        flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
        Flushed::Empty
    );
    assert_eq!(t.framed.last(), Some(&records[0][0].to_vec()));
    let (framed, _) = framed_of(&[7, 7, 7], &budget);
    q.push_back(framed);
    t.gone = true;
    assert_eq!(
        flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
        Flushed::Empty
    );
    assert_eq!(
        (t.lost, budget.reserved_messages(), budget.reserved_bytes()),
        (3, 0, 0)
    );
}

// A run takes records while the batching rule would put them in one frame.
#[test]
fn a_framed_run_is_cut_where_a_batch_run_is() {
    let batching = Batching {
        max_records: 3,
        max_bytes: zlink_wire::batch::BATCH_PREFIX_LEN + 2 * (9 + 8 + 10) + 13,
        max_record_payload: 100,
    };
    let sub = zlink_wire::batch::sub_record_len(8, Some(10));
    let mut run = Framed::new(0);
    assert!(
        run.has_room(&batching, 1 << 20),
        "an empty run takes any record"
    );
    for _ in 0..2 {
        assert!(run.has_room(&batching, sub));
        assert!(run.push(&[1; 8], Some(&[0; 10])));
    }
    assert!(!run.has_room(&batching, sub), "max_bytes");
    assert!(
        run.has_room(&batching, 13),
        "an envelope-only record still fits"
    );
    assert!(run.push(&[1; 8], None));
    assert!(!run.has_room(&batching, 1), "max_records");
    assert!(Framed::batchable(&batching, 100));
    assert!(!Framed::batchable(&batching, 101));
    let off = Batching {
        max_records: 1,
        ..batching
    };
    assert!(!Framed::batchable(&off, 0), "batching off");
    assert!(zlink_wire::BatchFrame::parse(Bytes::from(run.take_frame())).is_ok());
}

// Liveness without a clock: a Ping per interval while the other end is heard from,
// down after the peer timeout of silence; a Ping the transport refused is due again at
// once.
#[test]
fn liveness_pings_per_interval_and_times_out_on_silence() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let liveness = Liveness {
        ping_interval: s,
        peer_timeout: 3 * s,
        ..Liveness::default()
    };
    let mut conn = Conn::idle(WINDOW, budget(), t0);
    conn.came_up(t0, s);
    assert_eq!(conn.poll_liveness(t0, &liveness), Alive::Quiet);
    assert_eq!(conn.next_ping(), t0 + s);
    assert_eq!(
        conn.poll_liveness(t0 + s, &liveness),
        Alive::Ping(Ping { seq: 1 })
    );
    assert_eq!(conn.poll_liveness(t0 + s, &liveness), Alive::Quiet);
    conn.ping_again(t0 + s);
    assert_eq!(
        conn.poll_liveness(t0 + s, &liveness),
        Alive::Ping(Ping { seq: 2 })
    );
    // Heard from (any record): the silence starts over.
    assert_eq!(
        conn.ingress(Lane::Completion, &Class::Pong, 8, t0 + 2 * s),
        Verdict::Control { resume: false }
    );
    assert!(!conn.silent(t0 + 5 * s, 3 * s));
    assert_eq!(
        conn.poll_liveness(t0 + 5 * s + s / 2, &liveness),
        Alive::TimedOut
    );
}

// The driver's time away is not the other end's silence: silent for 4 s of which the driver
// was away 2 s is 2 s of silence; the rest of the timeout still runs.
#[test]
fn time_the_driver_was_away_is_not_silence() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut conn = Conn::idle(WINDOW, budget(), t0);
    conn.came_up(t0, s);
    assert!(conn.silent(t0 + 4 * s, 3 * s));
    conn.away(2 * s);
    assert!(!conn.silent(t0 + 4 * s, 3 * s));
    assert!(!conn.silent(t0 + 5 * s, 3 * s));
    assert!(conn.silent(t0 + 5 * s + s / 2, 3 * s));
}
