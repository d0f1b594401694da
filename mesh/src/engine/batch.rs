//! Batch frames: one 139 frame's sub-records, each through the checks of a record received
//! alone, and the fast paths for the runs inside a frame (repeated memoized one-ways, a peer's
//! relay records) that look the connection up once per run.

use super::decode::{
    Decoding, MemoDecoded, Pl, decode_actor_send_counted, decode_memoized, is_actor_send,
    is_relay_record, run_record_admitted, unpin,
};
use super::*;

/// The batch fast path's view of the engine (see [`Engine::fast_one_ways`]):
/// the fields a run of repeated one-way records reads or updates
/// besides its connection, borrowed apart from the connection maps.
struct OneWayRun<'e> {
    up: &'e mut Delivery,
    cx: Context<'e>,
    max_payload: usize,
    /// The key of the memoized one-way record.
    key: crate::types::DispatchKey,
}

impl OneWayRun<'_> {
    /// Takes, for one connection (its core `conn`: receive window, liveness), the
    /// records from `next` on that are byte-identical to the memoized one-way, each exactly as
    /// a lone record: payload bounded, window charged (over it: dropped, `CreditExceeded`,
    /// counted against `src`), delivered by [`Delivery::one_way`] (offered to the sink in the
    /// compact form, or handed up in it), credit freed.
    /// Stops at the first record it may not take — another envelope, a payload over the
    /// bound — and returns it, or after a record that did not take the compact way (passed up
    /// as a full record, or held), or whose return frees credit the caller must grant first
    /// (then with `true`).
    fn take<'a>(
        &mut self,
        conn: &mut Conn,
        src: Source<'_>,
        mut next: Option<zlink_wire::BatchRecord<'a>>,
        records: &mut impl Iterator<Item = zlink_wire::BatchRecord<'a>>,
    ) -> (Option<zlink_wire::BatchRecord<'a>>, bool) {
        while let Some(sub) = next.take() {
            let eligible = sub
                .payload
                .as_ref()
                .is_some_and(|pl| pl.len() <= self.max_payload)
                && self.cx.memo.header(sub.envelope).is_some();
            if !eligible {
                return (Some(sub), false);
            }
            let payload = sub.payload.expect("checked");
            let bytes = (sub.envelope.len() + payload.len()) as u64;
            conn.last_rx = self.cx.now;
            next = records.next();
            if !conn.try_charge(bytes) {
                // The sender ignored its window: a protocol violation, counted.
                self.cx
                    .shared
                    .counters
                    .drop(DropReason::CreditExceeded, &src);
                continue;
            }
            match self
                .up
                .one_way(conn, src, self.key, payload, bytes, &self.cx)
            {
                Delivered::OneWay { grant: false } => {}
                d => return (next, d.grant()),
            }
        }
        (None, false)
    }
}

impl Engine {
    /// A 139 batch frame (from a peer or a client; the received libzmq message itself, see
    /// [`Rx::Batch`]): its framing validated as a whole (a broken frame is dropped once,
    /// `Malformed`, none of its records delivered), then every sub-record goes through exactly
    /// the checks of a record received alone (authentication, generation, frame format,
    /// connection kind, window), each rejected sub-record dropped and counted by itself.
    /// Payloads are copied out of the frame ([`unpin`]): a held record pins only its bytes,
    /// and the frame is released when this returns.
    pub(super) fn on_batch(&mut self, from: Sender<'_>, frame: Bytes) {
        // Only application records travel in a batch.
        self.app_work = true;
        let batch = match zlink_wire::BatchFrame::parse(frame) {
            Ok(b) => b,
            Err(e) => {
                self.shared
                    .counters
                    .drop(codec::drop_reason(&e), &format_args!("{from}: batch: {e}"));
                return;
            }
        };
        let mut records = batch.raw_records().map(unpin);
        let mut next = records.next();
        while let Some(sub) = next.take() {
            let payload = match sub.payload {
                Some(p) => Pl::Shared(p),
                None => Pl::None,
            };
            let run = self.on_record(from, sub.envelope, payload, true);
            next = records.next();
            // That record was a memoized one-way taken by the sink or handed up in the compact
            // form, or a peer's application record that went up: the sender is authenticated
            // (a peer up in that generation on relay, a session not closing) and nothing can
            // change that between two sub-records of one frame (control inside a batch is
            // rejected, timers do not run here). The records after it that are byte-identical
            // one-ways, or a peer's 24s and 36s, take the same path with the connection looked
            // up once; each still has its payload bounded (and, off the memo, is decoded), its
            // window charged and its credit freed, exactly as a lone record. Anything else
            // goes back through `on_record`.
            if let Some(src) = run {
                next = self.fast_one_ways(src, next, &mut records);
                if let Source::Peer { node, generation } = src {
                    next = self.fast_peer_records(node, generation, next, &mut records);
                }
            }
        }
    }

    /// The run of memoized one-way records that follows one `on_record` handed up in the
    /// compact form, for its source `src` (a peer in the generation the first record proved,
    /// or a session), each taken by [`OneWayRun::take`] exactly as a lone record would be;
    /// returns the first record it did not take.
    pub(super) fn fast_one_ways<'a>(
        &mut self,
        src: Source<'_>,
        mut next: Option<zlink_wire::BatchRecord<'a>>,
        records: &mut impl Iterator<Item = zlink_wire::BatchRecord<'a>>,
    ) -> Option<zlink_wire::BatchRecord<'a>> {
        let Some(key) = self.memo.one_way_key() else {
            return next;
        };
        // Held records go first (FIFO); nothing in a run adds to them.
        if !self.up.held.is_empty() {
            return next;
        }
        loop {
            // Looked up again after each grant: the peer must still be up in the generation
            // of the run on relay, the session not closing.
            let conn = match src {
                Source::Peer { node, generation } => self
                    .peers
                    .get_mut(&**node)
                    .filter(|p| {
                        p.generation == Some(generation)
                            && matches!(p.relay, Link::Up(g) if g == generation)
                    })
                    .map(|p| &mut p.conn),
                Source::Client(session) => self
                    .clients
                    .get_mut(&session)
                    .filter(|c| c.closing.is_none())
                    .map(|c| &mut c.conn),
            };
            let Some(conn) = conn else {
                return next;
            };
            let mut run = OneWayRun {
                up: &mut self.up,
                cx: Context::new(&self.memo, &self.shared, self.local.generation, self.now),
                max_payload: self.limits.max_payload,
                key,
            };
            let credit;
            (next, credit) = run.take(conn, src, next, records);
            if !credit {
                return next;
            }
            self.flush_grant(src.conn_ref());
        }
    }

    /// The run of relay records — 24 ActorSend, 36 BoundSessionSend and 160 ActorCall, the
    /// per-message records between nodes — that follows an application record from peer `node` (up in
    /// `generation` on relay) in one batch frame: the peer is authenticated for the frame
    /// (nothing can change that between two sub-records, as for [`Engine::fast_one_ways`]), so
    /// its connection is looked up once per run instead of once per record. Each record still
    /// takes exactly the steps of a lone one after authentication: decoded through the memo
    /// (a rejection counted and dropped), the batch rule of the relay lane, the window
    /// charged ([`Conn::ingress`]), delivered ([`Delivery::deliver`]), its freed credit
    /// granted (then the peer is looked up again). Stops at the first record of another
    /// command (its envelope's command byte), which goes through `on_record`; returns it.
    pub(super) fn fast_peer_records<'a>(
        &mut self,
        node: &Arc<NodeRid>,
        generation: NodeGeneration,
        mut next: Option<zlink_wire::BatchRecord<'a>>,
        records: &mut impl Iterator<Item = zlink_wire::BatchRecord<'a>>,
    ) -> Option<zlink_wire::BatchRecord<'a>> {
        let src = Source::Peer { node, generation };
        let lane = Lane::Relay;
        let now = self.now;
        loop {
            let Some(p) = self.peers.get_mut(&**node).filter(|p| {
                p.generation == Some(generation)
                    && matches!(p.relay, Link::Up(g) if g == generation)
            }) else {
                return next;
            };
            let conn = &mut p.conn;
            // What ended the inner run: a grant to send, or a stale record to answer.
            let mut grant = false;
            let mut stale = None;
            while let Some(sub) = next.take() {
                if !is_relay_record(sub.envelope) {
                    return Some(sub);
                }
                next = records.next();
                if is_actor_send(sub.envelope) {
                    // A 24: the same steps as below, decoded in the compact form (the memo
                    // holds no 24s) and delivered without a `Record` around it.
                    let bytes =
                        (sub.envelope.len() + sub.payload.as_ref().map_or(0, Bytes::len)) as u64;
                    let decoded = decode_actor_send_counted(
                        &self.shared,
                        &self.limits,
                        sub.envelope,
                        sub.payload.as_ref(),
                        &src,
                        &mut self.ids,
                    );
                    match decoded {
                        // Rejected and counted.
                        Err(()) => continue,
                        // Never (the command byte said 24): decoded as any record below.
                        Ok(None) => {}
                        Ok(Some((header, send))) => {
                            // A 24 is an application record (`codec::classify`).
                            let class = Class::App;
                            let counters = &self.shared.counters;
                            if !run_record_admitted(
                                counters, conn, lane, &class, bytes, now, &src, true,
                            ) {
                                continue;
                            }
                            let cx =
                                Context::new(&self.memo, &self.shared, self.local.generation, now);
                            match self.up.actor_send(
                                conn,
                                src,
                                header,
                                send,
                                sub.payload,
                                bytes,
                                &cx,
                            ) {
                                Delivered::OneWay { grant: false }
                                | Delivered::Up { grant: false } => {}
                                Delivered::OneWay { grant: true }
                                | Delivered::Up { grant: true } => {
                                    grant = true;
                                    break;
                                }
                                Delivered::Stale { target, corr } => {
                                    stale = Some((target, corr, bytes));
                                    break;
                                }
                            }
                            continue;
                        }
                    }
                }
                let payload = match sub.payload {
                    Some(p) => Pl::Shared(p),
                    None => Pl::None,
                };
                let bytes = (sub.envelope.len() + payload.len()) as u64;
                let mut record = None;
                let Some(MemoDecoded {
                    header,
                    class,
                    payload,
                    from_memo,
                }) = decode_memoized(
                    Decoding {
                        memo: &mut self.memo,
                        shared: &self.shared,
                        limits: &self.limits,
                        ids: &mut self.ids,
                    },
                    sub.envelope,
                    payload,
                    &src,
                    &mut record,
                )
                else {
                    continue;
                };
                let decoded = record.is_some() || from_memo;
                let counters = &self.shared.counters;
                if !run_record_admitted(counters, conn, lane, &class, bytes, now, &src, decoded) {
                    continue;
                }
                let cx = Context::new(&self.memo, &self.shared, self.local.generation, now);
                let arrived = Arrived {
                    header,
                    payload,
                    bytes,
                };
                match self.up.deliver(conn, src, arrived, record, &cx) {
                    Delivered::OneWay { grant: false } | Delivered::Up { grant: false } => {}
                    Delivered::OneWay { grant: true } | Delivered::Up { grant: true } => {
                        grant = true;
                        break;
                    }
                    Delivered::Stale { target, corr } => {
                        stale = Some((target, corr, bytes));
                        break;
                    }
                }
            }
            if grant {
                self.flush_grant(src.conn_ref());
            } else if let Some((target, corr, bytes)) = stale {
                self.stale(src, target, corr, bytes);
            } else {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlink_wire::DispatchKey;

    fn one_way(key: u32) -> Parts {
        codec::encode(
            &Record::OneWay(zlink_wire::OneWay {
                key: DispatchKey::new(key),
            }),
            0,
            Some(Bytes::from_static(b"payload")),
        )
        .unwrap()
    }

    /// Takes a batch frame of ten identical one-ways (key 7) then one other (key 8) with
    /// the fast path into `up`, on a connection whose window is 4 records and whose grants
    /// are never sent (credit never comes back): the number of stops for a grant, the
    /// counters, and the other envelope it stopped at.
    fn run_ten(up: &mut Delivery) -> (usize, Arc<Shared>) {
        let limits = codec::limits(1 << 20);
        let mut memo = DecodeMemo::default();
        let a = one_way(7);
        let d = zlink_wire::decode_parts(&a[0], Some(a[1].clone()), &limits).unwrap();
        memo.store(&a[0], &d);
        let other = one_way(8);
        let mut parts: Vec<&Parts> = vec![&a; 10];
        parts.push(&other);
        let frame =
            zlink_wire::encode_batch(parts.iter().map(|p| (&p[0][..], Some(&p[1][..])))).unwrap();
        let batch = zlink_wire::BatchFrame::parse(frame).unwrap();
        let mut records = batch.records();
        let shared = Shared::for_tests();
        // window of 4 records, a quarter (1 record) freed asks for a grant
        let window = crate::config::InboundWindow {
            messages: 4,
            bytes: 1 << 20,
        };
        let now = Instant::now();
        let budget = Arc::new(SendBudget::new(crate::config::OutboundBudget::default()));
        let mut conn = Conn::granted(window, budget, now - Duration::from_secs(1));
        conn.grant_sent(conn.poll_grant().expect("initial grant"));
        let mut run = OneWayRun {
            up,
            cx: Context {
                memo: &memo,
                shared: &shared,
                local: NodeGeneration::new(1),
                now,
            },
            max_payload: 1 << 20,
            key: DispatchKey::new(7),
        };
        let mut next = records.next();
        let mut stops = 0;
        loop {
            let credit;
            (next, credit) = run.take(&mut conn, Source::Client(1), next, &mut records);
            if !credit {
                break;
            }
            // the grant cannot be sent: nothing is returned to the sender
            stops += 1;
        }
        let rest = next.expect("stopped at the other envelope");
        assert_eq!(rest.envelope, &other[0][..]);
        assert!(records.next().is_none());
        assert_eq!(conn.last_rx, now);
        (stops, shared)
    }

    // spec: EG-1.2, SB-2.1 — the batch fast path charges the receive window per record, like
    // a lone record: a sender past its window (here: the node's grants could not be sent, so
    // the credit never came back) has each further record dropped and counted
    // `CreditExceeded`, never handed up; the records before go up in order; the run stops
    // after a record whose freed credit must be granted first, and at another envelope.
    #[test]
    fn one_way_run_charges_the_window_per_record() {
        let (inbound, mut app) = crate::inbound::channel(1024);
        let mut up = Delivery::new(inbound);
        let (stops, shared) = run_ten(&mut up);
        assert_eq!(stops, 4, "one stop per freed record, for its grant");
        assert_eq!(shared.counters.dropped(DropReason::CreditExceeded), 6);
        assert_eq!(shared.counters.delivered_total(), 4);
        up.inbound.flush();
        let mut went_up = 0;
        while let Some(m) = app.try_recv() {
            let Record::OneWay(o) = m.record else {
                panic!("{:?}", m.record)
            };
            assert_eq!(o.key, DispatchKey::new(7));
            went_up += 1;
        }
        assert_eq!(went_up, 4, "exactly the charged records went up");
    }

    /// Takes every record offered in the compact form, holding the credit of the first two
    /// (`Offer::Held`); a full record offered is a test failure.
    struct CompactSink(Arc<std::sync::Mutex<Vec<(Origin, DispatchKey, u64)>>>);

    impl crate::sink::InboundSink for CompactSink {
        fn offer(&mut self, inbound: Inbound, _bytes: u64) -> crate::sink::Offer {
            panic!("offered in full: {:?}", inbound.record)
        }

        fn offer_one_way(
            &mut self,
            origin: Origin,
            key: DispatchKey,
            _payload: Bytes,
            bytes: u64,
        ) -> crate::sink::Offer {
            let mut offers = self.0.lock().unwrap();
            offers.push((origin, key, bytes));
            if offers.len() <= 2 {
                crate::sink::Offer::Held
            } else {
                crate::sink::Offer::Taken
            }
        }
    }

    // spec: EG-1.2, SB-2.1 — with a sink installed, the batch fast path offers each record of
    // a run to the sink in the compact form, charged to the window one by one exactly as a
    // lone record: what the sink holds keeps its credit charged (no grant), what it takes
    // frees its credit (a grant stop per freed quarter), and once the window is used up the
    // rest is dropped `CreditExceeded`, never offered.
    #[test]
    fn one_way_run_offers_the_sink_the_compact_form() {
        let (inbound, mut app) = crate::inbound::channel(1024);
        let mut up = Delivery::new(inbound);
        let offers = Arc::new(std::sync::Mutex::new(Vec::new()));
        up.sink = Some(Box::new(CompactSink(offers.clone())));
        let (stops, shared) = run_ten(&mut up);
        // The window admits 4 records: 2 held, 2 taken (each frees a quarter: a grant stop).
        assert_eq!(stops, 2, "one stop per taken record, for its grant");
        assert_eq!(shared.counters.delivered_total(), 4);
        assert_eq!(shared.counters.dropped(DropReason::CreditExceeded), 6);
        let offers = offers.lock().unwrap();
        assert_eq!(offers.len(), 4);
        let session = SessionRid::new(1);
        assert!(offers.iter().all(|(o, k, b)| {
            matches!(o, Origin::Client { session: s } if *s == session)
                && *k == DispatchKey::new(7)
                && *b > 0
        }));
        up.inbound.flush();
        assert!(app.try_recv().is_none(), "nothing passed up the channel");
    }
}
