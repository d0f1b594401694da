//! Delivery of application records to the layer above, one path for peers and clients: a
//! record the connection core let in ([`Verdict::Deliver`],
//! charged to its sender's window) is offered to the sink, handed up through the inbound
//! channel (a plain one-way in the compact form), or held (FIFO) while that channel is full;
//! the caller grants the credit a record freed. What differs between a peer and a client is
//! data ([`Source`]: origin, reply target, whose window), not a second copy of the path.
//! No sockets here: the driver sends the grants and error replies the outcome asks for.

use super::*;

/// Who sent an authenticated application record: a mesh peer in the generation its connection
/// proved, or a client session. Everything delivery does differently for the two is read from
/// here.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source<'a> {
    Peer {
        node: &'a Arc<NodeRid>,
        generation: NodeGeneration,
    },
    Client(u64),
}

impl<'a> Source<'a> {
    /// The origin the layer above sees.
    #[inline]
    pub(super) fn origin(self) -> Origin {
        match self {
            Source::Peer { node, generation } => Origin::Peer {
                node: NodeRid::clone(node),
                generation,
            },
            Source::Client(session) => Origin::Client {
                session: SessionRid::new(session),
            },
        }
    }

    /// Where a reply to a request from this source goes.
    pub(super) fn reply_target(self) -> ReplyTarget {
        match self {
            Source::Peer { node, generation } => ReplyTarget::Peer {
                node: node.clone(),
                generation,
            },
            Source::Client(session) => ReplyTarget::Client { session },
        }
    }

    /// The connection core whose window the record was charged to (a peer's only in this
    /// generation).
    #[inline]
    pub(super) fn conn_ref(self) -> ConnRef<'a> {
        match self {
            Source::Peer { node, generation } => ConnRef::Peer(node, Some(generation)),
            Source::Client(session) => ConnRef::Client(session),
        }
    }

    /// The owner of a held record (kept past this message).
    pub(super) fn owner(self) -> Owner {
        match self {
            Source::Peer { node, generation } => Owner::Peer(node.clone(), generation),
            Source::Client(session) => Owner::Client(session),
        }
    }
}

impl std::fmt::Display for Source<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Peer { node, .. } => write!(f, "{node}"),
            Source::Client(session) => write!(f, "client {session}"),
        }
    }
}

/// The owner of a held record: whose window it is charged to until it went up.
pub(super) enum Owner {
    Peer(Arc<NodeRid>, NodeGeneration),
    Client(u64),
}

impl Owner {
    /// Its connection core (a peer's only in the generation that sent the record).
    pub(super) fn conn_ref(&self) -> ConnRef<'_> {
        match self {
            Owner::Peer(node, generation) => ConnRef::Peer(node, Some(*generation)),
            Owner::Client(session) => ConnRef::Client(*session),
        }
    }
}

/// An entry of the held FIFO (records read but not yet taken by the inbound channel, peers'
/// and clients' in arrival order). Not boxed: almost every entry is a record, and a box would
/// cost an allocation per held record.
#[allow(clippy::large_enum_variant)]
pub(super) enum Held {
    /// A record waiting for room in the inbound channel, with the bytes charged to its
    /// owner's window.
    Record(Owner, u64, Inbound),
    /// The `Disconnected` event of a session that ended while records of it were held: sent
    /// once those went up (ordering rule of [`ClientEvent`]).
    Ended(u64, ClientCloseCause),
}

/// An application record let in by its connection core, to deliver (its record travels
/// beside it: [`Delivery::deliver`]).
pub(super) struct Arrived {
    pub(super) header: zlink_wire::Header,
    pub(super) payload: Option<Bytes>,
    /// Envelope and payload: what was charged to the sender's window.
    pub(super) bytes: u64,
}

/// What the rest of the node is, as delivery reads it.
pub(super) struct Context<'e> {
    pub(super) memo: &'e DecodeMemo,
    pub(super) shared: &'e Arc<Shared>,
    /// This node's generation (a record addressed to another is stale).
    pub(super) local: NodeGeneration,
    pub(super) now: Instant,
}

impl<'e> Context<'e> {
    /// The context of the records a pass delivers at `now`.
    #[inline]
    pub(super) fn new(
        memo: &'e DecodeMemo,
        shared: &'e Arc<Shared>,
        local: NodeGeneration,
        now: Instant,
    ) -> Self {
        Self {
            memo,
            shared,
            local,
            now,
        }
    }
}

/// What became of a delivered record; `grant`: it left its sender's window and freed credit
/// the driver grants now ([`Engine::flush_grant`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Delivered {
    /// A plain one-way taken by the sink or handed up in the compact form: a batch's fast
    /// path may follow it.
    OneWay { grant: bool },
    /// Taken by the sink, handed up, or held.
    Up { grant: bool },
    /// Addressed to another lifecycle of this node (`target`): still charged to its
    /// sender's window; the driver drops and counts it, gives the charge back and answers a
    /// request (`corr` ≠ 0) with an error reply.
    Stale { target: NodeGeneration, corr: u64 },
}

impl Delivered {
    /// Whether freed credit is to be granted now.
    pub(super) fn grant(self) -> bool {
        match self {
            Delivered::OneWay { grant } | Delivered::Up { grant } => grant,
            Delivered::Stale { .. } => false,
        }
    }
}

/// The layer above as the receive pass sees it: the sink, the inbound channel, and the
/// records held for it.
pub(super) struct Delivery {
    pub(super) inbound: InboundSender,
    /// Offered every application record before the inbound channel ([`crate::sink`]).
    pub(super) sink: Option<Box<dyn crate::sink::InboundSink>>,
    /// Records read but not yet taken by the inbound channel (FIFO over peers and clients, so
    /// each connection's order is kept, EG-4; bounded by the senders' windows), and the
    /// session ends that wait behind them.
    pub(super) held: VecDeque<Held>,
}

/// What the sink's answer to an offer means for the record: `Ok(grant)` when the sink took
/// it (counted delivered; `Taken` frees its credit now, `grant` when that asks for a grant;
/// `Held`: the sink returns the credit later, `MeshNode::release_credit`), `Err` with the
/// record it passed on.
#[inline(always)]
#[allow(clippy::result_large_err)] // the passed record by value, as `Offer::Pass` carries it
fn settle(offer: Offer, conn: &mut Conn, bytes: u64, cx: &Context<'_>) -> Result<bool, Inbound> {
    match offer {
        Offer::Taken => {
            cx.shared.counters.delivered(1);
            Ok(conn.released(bytes))
        }
        Offer::Held => {
            cx.shared.counters.delivered(1);
            Ok(false)
        }
        Offer::Pass(inb) => Err(inb),
    }
}

impl Delivery {
    pub(super) fn new(inbound: InboundSender) -> Self {
        Self {
            inbound,
            sink: None,
            held: VecDeque::new(),
        }
    }

    /// The receive pass ended: the sink (if any) is told.
    pub(super) fn end_pass(&mut self) {
        if let Some(sink) = self.sink.as_mut() {
            sink.end_pass();
        }
    }

    /// Delivers one application record from `src`, charged to `conn`'s receive window: offered
    /// to the sink if one is installed (every application record is, in arrival order), else
    /// a plain one-way (no correlation: no reply, no deadline) goes up in the compact form; a
    /// record addressed to another generation of this node is stale; anything else goes up as
    /// an [`Inbound`] (built once, moved straight into the channel's batch), or is held while
    /// the channel is full or older records are held.
    ///
    /// `record` is `None` on a memo hit (cloned from the memo only where it is handed up). It
    /// is a parameter of its own, not a field of `rec`: each wrapping of the 160-byte record
    /// into another value is a copy.
    #[inline(always)]
    pub(super) fn deliver(
        &mut self,
        conn: &mut Conn,
        src: Source<'_>,
        rec: Arrived,
        record: Option<Record>,
        cx: &Context<'_>,
    ) -> Delivered {
        let Arrived {
            header,
            payload,
            bytes,
        } = rec;
        let corr = header.correlation;
        let one_way_key = match &record {
            None => cx.memo.one_way_key(),
            Some(Record::OneWay(o)) => Some(o.key),
            Some(_) => None,
        };
        if let Some(key) = one_way_key
            && corr.is_none()
            && let Some(payload) = payload
        {
            // A plain one-way (no correlation: no reply, no deadline, no target generation):
            // offered to the sink in the compact form, or handed up in it.
            return self.one_way(conn, src, key, payload, bytes, cx);
        }
        let (target, deadline) = {
            let r = record.as_ref().unwrap_or_else(|| cx.memo.record_ref());
            (codec::target_generation(r), codec::record_deadline(r))
        };
        if let Some(target) = target
            && target != cx.local
        {
            return Delivered::Stale {
                target,
                corr: corr.get(),
            };
        }
        let inb = Inbound {
            origin: src.origin(),
            correlation: corr,
            deadline: deadline.map(|d| cx.now + d),
            reply: corr
                .is_some()
                .then(|| ReplyHandle::new(cx.shared.clone(), src.reply_target(), corr.get())),
            record: match record {
                Some(r) => r,
                None => cx.memo.record(),
            },
            payload,
        };
        self.up(conn, src, inb, bytes, cx)
    }

    /// Delivers a 24 ActorSend from a peer decoded in the compact form (`header`, `send`,
    /// `payload`; `zlink_wire::decode_actor_send_cached`), charged to `conn`'s window, exactly
    /// as [`Delivery::deliver`] delivers it as a `Record::ActorSend` (a 24 names no target
    /// generation: never stale): a one-way (no correlation) is offered to the sink in the
    /// compact form ([`InboundSink::offer_actor_send`](crate::sink::InboundSink::offer_actor_send),
    /// its origin lent), its `Inbound` built only if the sink passes it on; a request relay, or any 24 without a
    /// sink, as an `Inbound` as `deliver` builds it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn actor_send(
        &mut self,
        conn: &mut Conn,
        src: Source<'_>,
        header: zlink_wire::Header,
        send: zlink_wire::ActorSend,
        payload: Option<Bytes>,
        bytes: u64,
        cx: &Context<'_>,
    ) -> Delivered {
        let corr = header.correlation;
        let deadline = send.deadline.map(|d| cx.now + d.as_duration());
        let inb = match (self.sink.as_mut(), payload, src) {
            (Some(sink), Some(payload), Source::Peer { node, generation }) if corr.is_none() => {
                let offer = sink.offer_actor_send(node, generation, send, payload, deadline, bytes);
                let grant = match settle(offer, conn, bytes, cx) {
                    Ok(grant) => grant,
                    Err(inb) => self.channel(conn, src, inb, bytes, cx),
                };
                return Delivered::Up { grant };
            }
            (_, payload, _) => Inbound {
                origin: src.origin(),
                correlation: corr,
                deadline,
                reply: corr
                    .is_some()
                    .then(|| ReplyHandle::new(cx.shared.clone(), src.reply_target(), corr.get())),
                record: Record::ActorSend(send),
                payload,
            },
        };
        self.up(conn, src, inb, bytes, cx)
    }

    /// Offers `inb` to the sink if one is installed, else (or passed by the sink) hands it up
    /// through the channel ([`Delivery::channel`]).
    #[inline(always)]
    fn up(
        &mut self,
        conn: &mut Conn,
        src: Source<'_>,
        inb: Inbound,
        bytes: u64,
        cx: &Context<'_>,
    ) -> Delivered {
        let inb = match self.sink.as_mut() {
            None => inb,
            Some(sink) => match settle(sink.offer(inb, bytes), conn, bytes, cx) {
                Ok(grant) => return Delivered::Up { grant },
                Err(inb) => inb,
            },
        };
        Delivered::Up {
            grant: self.channel(conn, src, inb, bytes, cx),
        }
    }

    /// Delivers a plain one-way 147 (`key`, `payload`; no correlation) from `src`, charged to
    /// `conn`'s window: offered to the sink in the compact form
    /// ([`InboundSink::offer_one_way`](crate::sink::InboundSink::offer_one_way)); without a
    /// sink handed up in the compact form while nothing is held and the channel has room;
    /// else (or passed by the sink) up through the channel as a full record, or held.
    /// [`Delivered::OneWay`] when the sink took it or it went up in the compact form: the
    /// batch fast path (`Engine::fast_one_ways`) may follow.
    #[inline]
    pub(super) fn one_way(
        &mut self,
        conn: &mut Conn,
        src: Source<'_>,
        key: crate::types::DispatchKey,
        payload: Bytes,
        bytes: u64,
        cx: &Context<'_>,
    ) -> Delivered {
        let inb = match self.sink.as_mut() {
            None => {
                if self.held.is_empty() && self.inbound.has_room() {
                    self.inbound.push_one_way(src.origin(), key, payload);
                    cx.shared.counters.delivered(1);
                    return Delivered::OneWay {
                        grant: conn.released(bytes),
                    };
                }
                Inbound::one_way(src.origin(), key, payload)
            }
            Some(sink) => match settle(
                sink.offer_one_way(src.origin(), key, payload, bytes),
                conn,
                bytes,
                cx,
            ) {
                Ok(grant) => return Delivered::OneWay { grant },
                Err(inb) => inb,
            },
        };
        Delivered::Up {
            grant: self.channel(conn, src, inb, bytes, cx),
        }
    }

    /// Hands `inb` up through the inbound channel, or holds it (FIFO) while the channel is
    /// full or older records are held; true when its credit was freed and should be granted.
    fn channel(
        &mut self,
        conn: &mut Conn,
        src: Source<'_>,
        inb: Inbound,
        bytes: u64,
        cx: &Context<'_>,
    ) -> bool {
        if self.held.is_empty() && self.inbound.has_room() {
            self.inbound.push(inb);
            cx.shared.counters.delivered(1);
            conn.released(bytes)
        } else {
            self.held.push_back(Held::Record(src.owner(), bytes, inb));
            false
        }
    }

    /// Some record of `session` is held.
    pub(super) fn holds_session(&self, session: u64) -> bool {
        self.held
            .iter()
            .any(|h| matches!(h, Held::Record(Owner::Client(s), ..) if *s == session))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::InboundWindow;
    use zlink_wire::{CorrelationId, DispatchKey};

    const WINDOW: InboundWindow = InboundWindow {
        messages: 64,
        bytes: 1 << 20,
    };

    fn conn(now: Instant) -> Conn {
        let budget = Arc::new(SendBudget::new(crate::config::OutboundBudget::default()));
        let mut c = Conn::granted(WINDOW, budget, now);
        c.grant_sent(c.poll_grant().expect("initial grant"));
        c
    }

    /// A record as decoded from the wire, with a payload.
    fn arrived(record: Record, corr: u64) -> (Arrived, Option<Record>) {
        let parts = codec::encode(&record, corr, Some(Bytes::from_static(b"p"))).expect("encodes");
        let d =
            zlink_wire::decode_parts(&parts[0], Some(parts[1].clone()), &codec::limits(1 << 20))
                .expect("decodes");
        let arrived = Arrived {
            header: d.header,
            payload: d.payload,
            bytes: 10,
        };
        (arrived, Some(d.record))
    }

    fn deliver(
        up: &mut Delivery,
        conn: &mut Conn,
        src: Source<'_>,
        (arrived, record): (Arrived, Option<Record>),
        cx: &Context<'_>,
    ) -> Delivered {
        up.deliver(conn, src, arrived, record, cx)
    }

    /// What a delivery test's records arrive with: the node's shared state, the decode memo,
    /// the pass's time, and a peer `a` in generation 7 (this node is in generation 1).
    struct Fixture {
        shared: Arc<Shared>,
        memo: DecodeMemo,
        now: Instant,
        node: Arc<NodeRid>,
    }

    impl Fixture {
        fn new() -> Self {
            Self {
                shared: Shared::for_tests(),
                memo: DecodeMemo::default(),
                now: Instant::now(),
                node: Arc::new(NodeRid::new("a").unwrap()),
            }
        }

        fn cx(&self) -> Context<'_> {
            Context {
                memo: &self.memo,
                shared: &self.shared,
                local: NodeGeneration::new(1),
                now: self.now,
            }
        }

        fn peer(&self) -> Source<'_> {
            Source::Peer {
                node: &self.node,
                generation: NodeGeneration::new(7),
            }
        }
    }

    fn one_way(key: u32) -> (Arrived, Option<Record>) {
        arrived(
            Record::OneWay(zlink_wire::OneWay {
                key: DispatchKey::new(key),
            }),
            0,
        )
    }

    fn request(key: u32, corr: u64) -> (Arrived, Option<Record>) {
        arrived(
            Record::Request(zlink_wire::Request {
                key: DispatchKey::new(key),
                deadline: zlink_wire::Deadline::from_millis(1000),
            }),
            corr,
        )
    }

    /// Records every offer; takes requests, passes everything else.
    struct Recorder(Arc<std::sync::Mutex<Vec<Origin>>>);

    impl crate::sink::InboundSink for Recorder {
        fn offer(&mut self, inbound: Inbound, _bytes: u64) -> Offer {
            self.0.lock().unwrap().push(inbound.origin.clone());
            match inbound.record {
                Record::Request(_) => Offer::Taken,
                _ => Offer::Pass(inbound),
            }
        }
    }

    // spec: EG-4 — peers and clients share one delivery path and one held FIFO: once a record
    // is held (the inbound channel is full), every later record of any connection is held
    // behind it, even a plain one-way that would otherwise go up in the compact form; the
    // compact form is used only with nothing held and room in the channel.
    #[test]
    fn held_records_keep_arrival_order_over_peers_and_clients() {
        let f = Fixture::new();
        let (now, cx, peer) = (f.now, f.cx(), f.peer());
        let (tx, mut rx) = crate::inbound::channel(1);
        let mut up = Delivery::new(tx);
        let (mut pc, mut cc) = (conn(now), conn(now));
        assert_eq!(
            deliver(&mut up, &mut pc, peer, one_way(1), &cx),
            Delivered::OneWay { grant: false }
        );
        // The channel is full: the client's request is held, and so is the peer's one-way.
        assert_eq!(
            deliver(&mut up, &mut cc, Source::Client(3), request(2, 5), &cx),
            Delivered::Up { grant: false }
        );
        up.inbound.flush();
        assert!(rx.try_recv().is_some(), "the first record went up");
        assert_eq!(
            deliver(&mut up, &mut pc, peer, one_way(3), &cx),
            Delivered::Up { grant: false },
            "behind the held request, not in the compact form"
        );
        let held: Vec<_> = up
            .held
            .iter()
            .map(|h| match h {
                Held::Record(Owner::Client(s), bytes, inb) => {
                    (format!("client {s}"), *bytes, inb.correlation)
                }
                Held::Record(Owner::Peer(n, g), bytes, inb) => {
                    (format!("{n} {g}"), *bytes, inb.correlation)
                }
                Held::Ended(..) => panic!("no session ended"),
            })
            .collect();
        assert_eq!(
            held,
            vec![
                ("client 3".to_owned(), 10, CorrelationId::new(5)),
                (format!("{} 7", f.node), 10, CorrelationId::NONE),
            ]
        );
        assert!(up.holds_session(3) && !up.holds_session(4));
        // A held record is still charged to its window: no credit freed for it yet.
        assert!(!cc.owes());
    }

    // Every application record is offered to the sink, a plain one-way from a peer too (it is
    // not handed up in the compact form around the sink); what the sink takes frees its
    // sender's credit at once, what it passes goes up through the channel.
    #[test]
    fn the_sink_is_offered_every_application_record() {
        let f = Fixture::new();
        let (now, cx, peer) = (f.now, f.cx(), f.peer());
        let (tx, mut rx) = crate::inbound::channel(16);
        let mut up = Delivery::new(tx);
        let offers = Arc::new(std::sync::Mutex::new(Vec::new()));
        up.sink = Some(Box::new(Recorder(offers.clone())));
        // A window of 64 records: a quarter of it freed asks for a grant.
        let mut pc = conn(now);
        let mut grants = 0;
        for i in 0..16 {
            match deliver(&mut up, &mut pc, peer, one_way(i), &cx) {
                Delivered::Up { grant } => grants += usize::from(grant),
                d => panic!("passed by the sink, then up through the channel: {d:?}"),
            }
        }
        assert_eq!(
            grants, 1,
            "up: credit freed (a quarter of the window: one grant)"
        );
        assert_eq!(offers.lock().unwrap().len(), 16);
        up.inbound.flush();
        let mut got = 0;
        while let Some(m) = rx.try_recv() {
            assert!(matches!(m.record, Record::OneWay(_)));
            got += 1;
        }
        assert_eq!(got, 16);
        let mut cc = conn(now);
        grants = 0;
        for i in 0..16 {
            match deliver(
                &mut up,
                &mut cc,
                Source::Client(3),
                request(i, u64::from(i) + 1),
                &cx,
            ) {
                Delivered::Up { grant } => grants += usize::from(grant),
                d => panic!("{d:?}"),
            }
        }
        assert_eq!(
            grants, 1,
            "taken records free their credit (a quarter: one grant)"
        );
        assert_eq!(offers.lock().unwrap().len(), 32);
        assert!(rx.try_recv().is_none(), "taken by the sink, not handed up");
    }

    /// A 24 as the relay run decodes it in the compact form (`decode_actor_send_cached`).
    fn compact_24(seq: u64, corr: u64) -> (zlink_wire::Header, zlink_wire::ActorSend, Bytes) {
        let send = zlink_wire::ActorSend {
            actor: zlink_wire::ActorId::new("actor-1").unwrap(),
            object_generation: 3.into(),
            authority_owner_generation: 4.into(),
            owner_lease_generation: 5.into(),
            session_lifecycle: 6.into(),
            key: DispatchKey::new(7),
            deadline: Some(zlink_wire::Deadline::from_millis(1000)),
            tail: zlink_wire::BoundSessionTail {
                binding_generation: 8.into(),
                session_sequence: seq.into(),
            },
        };
        let payload = Bytes::from(seq.to_string());
        let parts =
            codec::encode(&Record::ActorSend(send), corr, Some(payload.clone())).expect("encodes");
        let (header, send) = zlink_wire::decode_actor_send_cached(
            &parts[0],
            Some(&payload),
            &codec::limits(1 << 20),
            &mut zlink_wire::IdCache::default(),
        )
        .expect("decodes")
        .expect("a 24");
        (header, send, payload)
    }

    /// What a sink was offered: compact or full, correlation, deadline, reply handle present,
    /// session sequence, payload.
    type SendOffer = (bool, u64, Option<Instant>, bool, u64, Bytes);

    /// Takes every 24, recording how it was offered.
    struct SendSink(Arc<std::sync::Mutex<Vec<SendOffer>>>);

    impl crate::sink::InboundSink for SendSink {
        fn offer(&mut self, inbound: Inbound, _bytes: u64) -> Offer {
            let Record::ActorSend(s) = &inbound.record else {
                panic!("{:?}", inbound.record)
            };
            self.0.lock().unwrap().push((
                false,
                inbound.correlation.get(),
                inbound.deadline,
                inbound.reply.is_some(),
                s.tail.session_sequence.get(),
                inbound.payload.clone().unwrap(),
            ));
            Offer::Taken
        }

        fn offer_actor_send(
            &mut self,
            node: &NodeRid,
            generation: NodeGeneration,
            send: zlink_wire::ActorSend,
            payload: Bytes,
            deadline: Option<Instant>,
            _bytes: u64,
        ) -> Offer {
            assert_eq!((node.as_str(), generation), ("a", NodeGeneration::new(7)));
            self.0.lock().unwrap().push((
                true,
                0,
                deadline,
                false,
                send.tail.session_sequence.get(),
                payload,
            ));
            Offer::Taken
        }
    }

    // spec: SB-2.1 — a 24 decoded in the compact form is delivered as its `Record` would be:
    // a one-way offered to the sink without the `Inbound` (same local deadline and payload),
    // a request relay (correlation) offered in full with its reply handle, and without a
    // sink each goes up the channel as the decoded `Record::ActorSend`.
    #[test]
    fn a_compact_24_is_delivered_as_its_record() {
        let f = Fixture::new();
        let (shared, now, cx, peer) = (&f.shared, f.now, f.cx(), f.peer());
        let deadline = Some(now + Duration::from_millis(1000));
        let (tx, mut rx) = crate::inbound::channel(16);
        let mut up = Delivery::new(tx);
        let offers = Arc::new(std::sync::Mutex::new(Vec::new()));
        up.sink = Some(Box::new(SendSink(offers.clone())));
        let mut pc = conn(now);
        for (seq, corr) in [(1, 0), (2, 5)] {
            let (header, send, payload) = compact_24(seq, corr);
            let d = up.actor_send(&mut pc, peer, header, send, Some(payload), 10, &cx);
            assert!(matches!(d, Delivered::Up { .. }), "{d:?}");
        }
        assert_eq!(
            *offers.lock().unwrap(),
            vec![
                (true, 0, deadline, false, 1, Bytes::from("1")),
                (false, 5, deadline, true, 2, Bytes::from("2")),
            ]
        );
        assert_eq!(shared.counters.delivered_total(), 2);
        up.sink = None;
        for (seq, corr) in [(3, 0), (4, 6)] {
            let (header, send, payload) = compact_24(seq, corr);
            let record = Record::ActorSend(send.clone());
            let d = up.actor_send(&mut pc, peer, header, send, Some(payload), 10, &cx);
            assert!(matches!(d, Delivered::Up { .. }), "{d:?}");
            up.inbound.flush();
            let m = rx.try_recv().expect("went up");
            assert_eq!(m.record, record);
            assert_eq!(m.correlation.get(), corr);
            assert_eq!(m.deadline, deadline);
            assert_eq!(m.reply.is_some(), corr != 0);
            assert_eq!(m.payload, Some(Bytes::from(seq.to_string())));
        }
    }
}
