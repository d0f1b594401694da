//! Ingress: messages read from the sockets, decoded (the one-way memo), authenticated and
//! classified by the connection core ([`crate::conn::Conn::ingress`]), and delivered to the
//! layer above (inbound channel or sink) or answered.

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

/// A record as [`Engine::decode_memoized`] gives it (the decoded record itself goes into the
/// caller's slot: a 160-byte value is moved as few times as possible).
struct MemoDecoded {
    header: zlink_wire::Header,
    class: Class,
    payload: Option<Bytes>,
    from_memo: bool,
}

impl Engine {
    // ---------------------------------------------------------------- ingress

    pub(super) fn on_peer_message(&mut self, kind: LinkKind, rid: &[u8], msg: Rx<'_>) {
        let cached = self.rid_cache.get(rid).cloned();
        let was_cached = cached.is_some();
        let node: Arc<NodeRid> = match cached.or_else(|| {
            // A connection another node opened, proved; else our own connection to the node
            // named by its routing id (checked against the peer in `on_record`).
            if let Some(n) = self.accepts.proved(kind, rid) {
                return Some(n.clone());
            }
            std::str::from_utf8(rid)
                .ok()
                .and_then(|s| NodeRid::new(s).ok())
                .map(Arc::new)
        }) {
            Some(n) => n,
            None => {
                self.shared
                    .counters
                    .drop(DropReason::InvalidRoutingId, &format_args!("{kind:?}"));
                return;
            }
        };
        let from = Sender::Peer {
            kind,
            rid,
            node: &node,
            was_cached,
        };
        self.on_parts(from, msg);
    }

    /// One message from a peer or a client: a 139 batch frame, or one record (envelope and
    /// optional payload); any other part count is `Malformed`.
    pub(super) fn on_parts(&mut self, from: Sender<'_>, msg: Rx<'_>) {
        let parts = match msg {
            Rx::Batch(frame) => return self.on_batch(from, frame),
            Rx::Parts(parts) => parts,
        };
        match parts {
            [frame] if zlink_wire::is_batch(frame) => {
                self.on_batch(from, Bytes::copy_from_slice(frame));
            }
            [envelope] => {
                self.on_record(from, envelope, Pl::None, false);
            }
            [envelope, payload] => {
                self.on_record(from, envelope, Pl::Copy(payload), false);
            }
            _ => {
                let e = zlink_wire::DecodeError::PartCount { count: parts.len() };
                self.shared
                    .counters
                    .drop(codec::drop_reason(&e), &format_args!("{from}: {e}"));
            }
        }
    }

    /// One record from a peer or a client (alone or from a batch), one path for both kinds of
    /// connection: decoded through the one-way memo; control inside a batch rejected
    /// ([`Lane::batchable`]); the sender authenticated — a peer by the connection that proved
    /// itself, up in the peer's current generation; a client connection by its session
    /// ([`Engine::client_session`], opened on its first record); the connection core's
    /// [`Verdict`] ([`Conn::ingress`]: window charged, credit added, liveness noted) acted on,
    /// an application record delivered ([`Delivery::deliver`]). Returns the source when the
    /// record was a plain one-way taken by the sink or handed up in the compact form, or an
    /// application record from a peer that went up: a batch's fast paths may follow it for
    /// that connection ([`Engine::fast_one_ways`], [`Engine::fast_peer_records`]).
    pub(super) fn on_record<'m>(
        &mut self,
        from: Sender<'m>,
        envelope: &[u8],
        payload: Pl<'_>,
        in_batch: bool,
    ) -> Option<Source<'m>> {
        let bytes = (envelope.len() + payload.len()) as u64;
        // `None` on a memo hit: the record is cloned from the memo only where it is handed up.
        let mut record = None;
        let MemoDecoded {
            header,
            class,
            payload,
            from_memo,
        } = self.decode_memoized(envelope, payload, &from, &mut record)?;
        let lane = from.lane();
        if in_batch && !lane.batchable(&class) {
            // Handshake and control records never travel in a batch (SB-5.4: control is sent
            // alone, on the completion connection).
            self.shared.counters.drop(
                DropReason::WrongConnection,
                &format_args!("{from}: control record inside a batch on {lane:?}"),
            );
            return None;
        }
        let now = self.now;
        // Authenticated: the sender's connection core, found with one lookup.
        let (conn, src) = match from {
            Sender::Peer {
                kind,
                rid,
                node,
                was_cached,
            } => {
                if let Class::Handshake = class {
                    if let Some(m) = record.and_then(HandshakeMsg::from_record) {
                        self.handle_handshake_msg(kind, rid, NodeRid::clone(node), m);
                    }
                    return None;
                }
                let Some(p) = self.peers.get_mut(&**node).filter(|p| p.rid(kind) == rid) else {
                    // Unknown, or not the connection that proved itself for this node.
                    self.shared.counters.drop(DropReason::Unauthenticated, node);
                    return None;
                };
                if !was_cached && self.rid_cache.len() < 4096 {
                    self.rid_cache.insert(rid.to_vec(), node.clone());
                }
                let current = p.generation;
                let generation = match (p.link_mut(kind), current) {
                    (Link::Up(g), Some(cur)) if *g == cur => cur,
                    (Link::Up(_), _) => {
                        self.shared.counters.drop(DropReason::StaleGeneration, node);
                        return None;
                    }
                    _ => {
                        self.shared.counters.drop(DropReason::Unauthenticated, node);
                        return None;
                    }
                };
                (&mut p.conn, Source::Peer { node, generation })
            }
            Sender::Client { rid } => {
                let session = self.client_session(rid, &class)?;
                let c = self.clients.get_mut(&session)?;
                if matches!(class, Class::App) {
                    // Only requests and one-way DATA are application records from a client (a
                    // memo hit is one only if the memo holds a one-way 147: it also keeps the
                    // 36s peers send).
                    let client_record = match &record {
                        Some(r) => matches!(r, Record::Request(_) | Record::OneWay(_)),
                        None => self.memo.one_way_key().is_some(),
                    };
                    if !client_record {
                        c.conn.last_rx = now;
                        self.shared
                            .counters
                            .drop(DropReason::WrongConnection, &"client");
                        return None;
                    }
                    if c.closing.is_some() {
                        self.shared.counters.drop(
                            DropReason::SessionClosed,
                            &format_args!("client {session}: session closing"),
                        );
                        return None;
                    }
                }
                (&mut c.conn, Source::Client(session))
            }
        };
        let verdict = conn.ingress(lane, &class, bytes, now);
        if verdict == Verdict::Deliver && (record.is_some() || from_memo) {
            let cx = Context {
                memo: &self.memo,
                shared: &self.shared,
                local: self.local.generation,
                now,
            };
            let arrived = Arrived {
                header,
                payload,
                bytes,
            };
            match self.up.deliver(conn, src, arrived, record, &cx) {
                Delivered::OneWay { grant } => {
                    if grant {
                        self.flush_grant(src.conn_ref());
                    }
                    return Some(src);
                }
                Delivered::Up { grant } => {
                    if grant {
                        self.flush_grant(src.conn_ref());
                    }
                    // A peer's record on relay: a batch's relay run may follow.
                    if let Source::Peer { .. } = src {
                        return Some(src);
                    }
                }
                Delivered::Stale { target, corr } => self.stale(src, target, corr, bytes),
            }
            return None;
        }
        let queued = !conn.queue.is_empty();
        match verdict {
            Verdict::Answer(pong) => self.answer(src.conn_ref(), Record::Pong(pong)),
            Verdict::Control { resume } => {
                if resume && queued {
                    // Credit arrived for queued data: it goes out with the PAUSED queues.
                    match src {
                        Source::Peer { node, .. } => self.mark_paused(node),
                        Source::Client(session) => {
                            self.paused_clients.insert(session);
                        }
                    }
                }
            }
            Verdict::Disconnect => match src {
                Source::Peer { node, .. } => self.peer_down(node, DownReason::Remote, true),
                Source::Client(session) => {
                    if self
                        .clients
                        .get(&session)
                        .is_some_and(|c| c.closing.is_some())
                    {
                        // The node was already closing it: that close stands.
                        self.finish_client(session);
                    } else {
                        self.remove_client(session, ClientCloseCause::Remote);
                    }
                }
            },
            Verdict::Complete => match (src, record) {
                (Source::Peer { node, generation }, Some(rec)) => self.complete(
                    header.correlation.get(),
                    (node.clone(), generation),
                    rec,
                    payload,
                ),
                _ => self.shared.counters.drop(DropReason::WrongConnection, &src),
            },
            // CreditExceeded: the sender ignored its window, a protocol violation.
            Verdict::Drop(reason) => self.shared.counters.drop(reason, &src),
            Verdict::Deliver => {
                // Charged, but nothing to deliver: the charge goes back.
                self.shared.counters.drop(DropReason::WrongConnection, &src);
                self.credit_freed(src.conn_ref(), 1, bytes);
            }
        }
        None
    }

    /// A record addressed to an older (or other) lifecycle of this node: dropped and counted,
    /// the `bytes` it was charged to its sender's window given back (a record that ends here
    /// must not keep its credit: 4,096 of them used to close a peer's window for good); a
    /// request is answered with an `Unavailable` error reply.
    fn stale(&mut self, src: Source<'_>, target: NodeGeneration, corr: u64, bytes: u64) {
        self.shared.counters.drop(
            DropReason::StaleGeneration,
            &format_args!("{src}: targets generation {target}"),
        );
        self.credit_freed(src.conn_ref(), 1, bytes);
        if corr != 0 {
            let frames = codec::encode(
                &Record::ErrorReply(zlink_wire::ErrorReply::new(
                    codec::ErrorKind::Unavailable,
                    "stale target node generation",
                )),
                corr,
                None,
            )
            .unwrap_or_default();
            self.send_reply(src.reply_target(), frames);
        }
    }

    /// Sends a control record (a Pong) on the connection grants go out on: a peer's
    /// completion connection, or the client connection.
    fn answer(&self, to: ConnRef<'_>, record: Record) {
        if let Some((_, kind, rid)) = self.conn_of(to) {
            self.send_control(kind, rid, record);
        }
    }

    /// A 139 batch frame (from a peer or a client; the received libzmq message itself, see
    /// [`Rx::Batch`]): its framing validated as a whole (a broken frame is dropped once,
    /// `Malformed`, none of its records delivered), then every sub-record goes through exactly
    /// the checks of a record received alone (authentication, generation, frame format,
    /// connection kind, window), each rejected sub-record dropped and counted by itself.
    /// Payloads are copied out of the frame ([`unpin`]): a held record pins only its bytes,
    /// and the frame is released when this returns.
    pub(super) fn on_batch(&mut self, from: Sender<'_>, frame: Bytes) {
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
                cx: Context {
                    memo: &self.memo,
                    shared: &self.shared,
                    local: self.local.generation,
                    now: self.now,
                },
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

    /// The run of relay records — 24 ActorSend and 36 BoundSessionSend, the per-message
    /// records between nodes — that follows an application record from peer `node` (up in
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
                            let cx = Context {
                                memo: &self.memo,
                                shared: &self.shared,
                                local: self.local.generation,
                                now,
                            };
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
                let cx = Context {
                    memo: &self.memo,
                    shared: &self.shared,
                    local: self.local.generation,
                    now,
                };
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

    /// [`decode_memoized`] with the engine's own memo, limits and id cache.
    #[inline]
    fn decode_memoized(
        &mut self,
        envelope: &[u8],
        payload: Pl<'_>,
        who: &dyn std::fmt::Display,
        record: &mut Option<Record>,
    ) -> Option<MemoDecoded> {
        decode_memoized(
            Decoding {
                memo: &mut self.memo,
                shared: &self.shared,
                limits: &self.limits,
                ids: &mut self.ids,
            },
            envelope,
            payload,
            who,
            record,
        )
    }

    pub(super) fn complete(
        &mut self,
        corr: u64,
        from: (Arc<NodeRid>, NodeGeneration),
        rec: Record,
        payload: Option<Bytes>,
    ) {
        match self.corr.handle_reply(corr, &from) {
            ReplyOutcome::Deliver(w) => {
                let _ = w.send(reply_result(rec, payload));
            }
            ReplyOutcome::Late(t) => self.shared.counters.drop(
                DropReason::LateReply,
                &format_args!("corr {corr} after {t:?}"),
            ),
            ReplyOutcome::Unknown | ReplyOutcome::WrongPeer => self
                .shared
                .counters
                .drop(DropReason::UnknownReply, &format_args!("corr {corr}")),
        }
    }

    pub(super) fn on_client_message(&mut self, rid: &[u8], msg: Rx<'_>) {
        self.tomb_answered = false;
        if let Rx::Parts([part]) = msg
            && part.is_empty()
        {
            // libzmq's notice that this connection ended (`ZMQ_ROUTER_NOTIFY`; a record is
            // never empty): its session ends with it.
            return self.client_connection_ended(rid);
        }
        self.on_parts(Sender::Client { rid }, msg);
        // Whatever the record did to the session's window (charged, refunded, freed, a new
        // session's first grant not taken), housekeeping grants what is still owed.
        if let Some(&session) = self.clients_by_rid.get(rid) {
            self.note_owing(session);
        }
    }

    /// The client connection `rid` ended: its session (if it had one) ends now, as if the
    /// client had said Disconnect (a close the node had begun stands). libzmq generates every
    /// client connection's routing id and never gives one to two connections, so no later
    /// connection can reach this session.
    fn client_connection_ended(&mut self, rid: &[u8]) {
        let Some(&session) = self.clients_by_rid.get(rid) else {
            return;
        };
        if self
            .clients
            .get(&session)
            .is_some_and(|c| c.closing.is_some())
        {
            self.finish_client(session);
        } else {
            self.remove_client(session, ClientCloseCause::Remote);
        }
    }

    /// The connection core of a peer (in `generation`, if given) or a client session, with
    /// the connection its grants go out on.
    pub(super) fn conn_of(&self, to: ConnRef<'_>) -> Option<(&Conn, LinkKind, &[u8])> {
        match to {
            ConnRef::Peer(node, generation) => self
                .peers
                .get(node)
                .filter(|p| generation.is_none() || p.generation == generation)
                .map(|p| (&p.conn, LinkKind::Completion, p.rid(LinkKind::Completion))),
            ConnRef::Client(session) => self
                .clients
                .get(&session)
                .map(|c| (&c.conn, LinkKind::Client, &c.rid[..])),
        }
    }

    pub(super) fn conn_mut(&mut self, to: ConnRef<'_>) -> Option<&mut Conn> {
        match to {
            ConnRef::Peer(node, generation) => self
                .peers
                .get_mut(node)
                .filter(|p| generation.is_none() || p.generation == generation)
                .map(|p| &mut p.conn),
            ConnRef::Client(session) => self.clients.get_mut(&session).map(|c| &mut c.conn),
        }
    }

    /// `records` delivered records of `bytes` bytes in total left the receive window of
    /// `from`; credit goes back in batches (a peer's only within the generation that sent the
    /// records).
    pub(super) fn credit_freed(&mut self, from: ConnRef<'_>, records: u32, bytes: u64) {
        if self
            .conn_mut(from)
            .is_some_and(|c| c.released_n(records, bytes))
        {
            self.flush_grant(from);
        }
        if let ConnRef::Client(session) = from {
            self.note_owing(session);
        }
    }

    /// Grants `to` its freed credit now (a FlowCredit on the peer's completion connection or
    /// on the client connection). Only once libzmq took the record is the credit considered
    /// returned; otherwise it stays owed and housekeeping retries (a lost grant would stall
    /// the sender for ever).
    pub(super) fn flush_grant(&mut self, to: ConnRef<'_>) {
        let Some((conn, kind, rid)) = self.conn_of(to) else {
            return;
        };
        let Some(grant) = conn.poll_grant() else {
            return;
        };
        let frames = codec::encode_control(Record::FlowCredit(grant));
        if matches!(self.raw_send(kind, rid, &frames), SendOutcome::Sent)
            && let Some(conn) = self.conn_mut(to)
        {
            conn.grant_sent(grant);
        }
    }

    /// Hands held records up in order while the inbound channel has room (each one's credit
    /// freed), and reports the session ends that waited behind them.
    pub(super) fn retry_stalled(&mut self) {
        while let Some(h) = self.up.held.pop_front() {
            match h {
                Held::Ended(session, cause) => {
                    // Its last record went up just before: make it visible first.
                    self.up.inbound.flush();
                    self.client_event(ClientEvent::Disconnected {
                        session: SessionRid::new(session),
                        cause,
                    });
                }
                Held::Record(owner, bytes, inb) => match self.up.inbound.try_push(inb) {
                    Ok(()) => {
                        self.shared.counters.delivered(1);
                        self.credit_freed(owner.conn_ref(), 1, bytes);
                    }
                    Err(inb) => {
                        self.up.held.push_front(Held::Record(owner, bytes, inb));
                        break;
                    }
                },
            }
        }
        self.up.inbound.flush();
    }
}

/// The engine's fields a decode reads or updates (borrowed apart from the connection maps, so
/// a run can decode while it holds a connection).
struct Decoding<'e> {
    memo: &'e mut DecodeMemo,
    shared: &'e Shared,
    limits: &'e Limits,
    ids: &'e mut zlink_wire::IdCache,
}

/// A relay record by its envelope's command byte (24 ActorSend, 36 BoundSessionSend): a routing
/// decision only, the decoder validates the envelope.
#[inline]
fn is_relay_record(envelope: &[u8]) -> bool {
    envelope.get(1).is_some_and(|&c| {
        matches!(
            zlink_wire::Command::from_number(c),
            Ok(zlink_wire::Command::ActorSend | zlink_wire::Command::BoundSessionSend)
        )
    })
}

/// A 24 ActorSend by its envelope's command byte: a routing decision only, the decoder
/// validates the envelope.
#[inline]
fn is_actor_send(envelope: &[u8]) -> bool {
    envelope.get(1) == Some(&zlink_wire::Command::ActorSend.number())
}

/// [`decode_counted`] for a 24 in the compact form (`zlink_wire::decode_actor_send_cached`):
/// the payload bounded first, every rejection counted against `who` exactly as there;
/// `Ok(None)` if the envelope is not a 24 after all.
#[inline(always)]
fn decode_actor_send_counted(
    shared: &Shared,
    limits: &Limits,
    envelope: &[u8],
    payload: Option<&Bytes>,
    who: &dyn std::fmt::Display,
    ids: &mut zlink_wire::IdCache,
) -> Result<Option<(zlink_wire::Header, zlink_wire::ActorSend)>, ()> {
    let len = payload.map_or(0, Bytes::len);
    let decoded = if len > limits.max_payload {
        Err(zlink_wire::DecodeError::PayloadTooLarge {
            len,
            max: limits.max_payload,
        })
    } else {
        zlink_wire::decode_actor_send_cached(envelope, payload, limits, ids)
    };
    decoded.map_err(|e| {
        shared
            .counters
            .drop(codec::drop_reason(&e), &format_args!("{who}: {e}"));
    })
}

/// Decodes one record (from a peer or a client, alone or from a batch) through the one-way
/// memo: a repeated one-way envelope (byte-identical to the last one decoded) is not
/// decoded again, its payload bounded and copied as [`decode_counted`] does; anything else
/// is decoded (rejections counted against `who`), its record put into `record`, and
/// classified. On a memo hit `record` stays `None` (the record is cloned from the memo only
/// where it is handed up).
#[inline(always)]
fn decode_memoized(
    d: Decoding<'_>,
    envelope: &[u8],
    payload: Pl<'_>,
    who: &dyn std::fmt::Display,
    record: &mut Option<Record>,
) -> Option<MemoDecoded> {
    let memo = match &payload {
        Pl::None => None,
        p if p.len() <= d.limits.max_payload => d.memo.header(envelope),
        _ => None,
    };
    if let Some(header) = memo {
        // The memo holds only 147 and 36 records: application class.
        return Some(MemoDecoded {
            header,
            class: Class::App,
            payload: payload.into_bytes(),
            from_memo: true,
        });
    }
    let has_payload = !matches!(payload, Pl::None);
    let Ok(decoded) = decode_counted(d.shared, d.limits, envelope, payload, who, d.ids) else {
        return None;
    };
    if has_payload {
        d.memo.store(envelope, &decoded);
    }
    let class = codec::classify(&decoded.record);
    let zlink_wire::Decoded {
        header,
        record: decoded,
        payload,
    } = decoded;
    *record = Some(decoded);
    Some(MemoDecoded {
        header,
        class,
        payload,
        from_memo: false,
    })
}

/// A message read from a socket, as the receive pass hands it to ingress.
pub(crate) enum Rx<'a> {
    /// Its parts after the routing id, borrowed from the reused receive buffers.
    Parts(&'a [&'a [u8]]),
    /// A single-part 139 batch frame: the libzmq message itself, taken out of the receive
    /// buffer and wrapped without copying ([`ZmqFrame`]). It lives only for the frame's
    /// [`Engine::on_batch`]: every payload is copied out of it ([`unpin`]).
    Batch(Bytes),
}

/// A received libzmq message as the owner of a [`Bytes`] (zero-copy receive of a batch frame).
pub(crate) struct ZmqFrame(pub(crate) zmq::Message);

impl AsRef<[u8]> for ZmqFrame {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A batch sub-record whose payload no longer points into the batch frame (copied out): a
/// record the node holds pins only its own bytes, which its window charge counts. Slices would
/// keep the whole frame alive — a frame of junk around one small valid record pinned the frame
/// (up to the message limit) for a few bytes charged. Copied from the plain slice: no shared
/// handle on the frame is taken and dropped per record.
#[inline]
pub(super) fn unpin(r: zlink_wire::RawRecord<'_>) -> zlink_wire::BatchRecord<'_> {
    zlink_wire::BatchRecord {
        envelope: r.envelope,
        payload: r.payload.map(Bytes::copy_from_slice),
    }
}

/// The payload part of a received record: none, a slice of a libzmq frame (copied once into
/// its own `Bytes` after the size check, so libzmq's receive buffer is not pinned), or a slice
/// already shared from a batch frame's buffer.
pub(crate) enum Pl<'a> {
    None,
    Copy(&'a [u8]),
    Shared(Bytes),
}

impl Pl<'_> {
    #[inline]
    pub(super) fn len(&self) -> usize {
        match self {
            Pl::None => 0,
            Pl::Copy(p) => p.len(),
            Pl::Shared(p) => p.len(),
        }
    }

    #[inline]
    pub(super) fn into_bytes(self) -> Option<Bytes> {
        match self {
            Pl::None => None,
            Pl::Copy(p) => Some(Bytes::copy_from_slice(p)),
            Pl::Shared(p) => Some(p),
        }
    }
}

/// Decodes one record, its payload bounded before it is copied (the decoder re-checks the
/// same limit), an actor identity taken from `ids` when it names the last one; a rejection
/// is counted against `who`.
#[inline(always)]
pub(super) fn decode_counted(
    shared: &Shared,
    limits: &Limits,
    envelope: &[u8],
    payload: Pl<'_>,
    who: &dyn std::fmt::Display,
    ids: &mut zlink_wire::IdCache,
) -> Result<Decoded, ()> {
    let decoded = if payload.len() > limits.max_payload {
        Err(zlink_wire::DecodeError::PayloadTooLarge {
            len: payload.len(),
            max: limits.max_payload,
        })
    } else {
        zlink_wire::decode_parts_cached(envelope, payload.into_bytes(), limits, ids)
    };
    // The decoded record stays where the decoder wrote it (no re-wrapping into an `Option`).
    decoded.map_err(|e| {
        shared
            .counters
            .drop(codec::drop_reason(&e), &format_args!("{who}: {e}"));
    })
}

/// A record of a peer's relay run ([`Engine::fast_peer_records`]) checked as one alone is: an
/// application record allowed inside a batch (`decoded`: its record is at hand), charged to
/// `conn`'s window. `false`: dropped and counted (a control record inside a batch, the window
/// overrun, or not an application verdict, as `on_record` drops it).
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the run's state, lent field by field
fn run_record_admitted(
    counters: &crate::counters::Counters,
    conn: &mut Conn,
    lane: Lane,
    class: &Class,
    bytes: u64,
    now: Instant,
    src: &Source<'_>,
    decoded: bool,
) -> bool {
    if !lane.batchable(class) {
        counters.drop(
            DropReason::WrongConnection,
            &format_args!("{src}: control record inside a batch on {lane:?}"),
        );
        return false;
    }
    match conn.ingress(lane, class, bytes, now) {
        Verdict::Deliver if decoded => true,
        Verdict::Drop(reason) => {
            counters.drop(reason, src);
            false
        }
        Verdict::Deliver => {
            // Charged, but nothing to deliver: the charge goes back (granted with the next
            // grant of this connection, or by housekeeping).
            counters.drop(DropReason::WrongConnection, src);
            conn.released(bytes);
            false
        }
        _ => {
            counters.drop(DropReason::WrongConnection, src);
            false
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
        let budget = Arc::new(Budget::new(crate::budget::OutboundBudget::default()));
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
