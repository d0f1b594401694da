//! Ingress: messages read from the sockets, decoded (the one-way memo), authenticated and
//! classified by the connection core ([`crate::conn::Conn::ingress`]), and delivered to the
//! layer above (inbound channel or sink) or answered.

use super::decode::{Decoding, MemoDecoded, Pl, decode_memoized};
use super::*;

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
            self.app_work = true;
            let cx = Context::new(&self.memo, &self.shared, self.local.generation, now);
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
                Source::Client(session) => self.client_said_disconnect(session),
            },
            Verdict::Complete => match (src, record) {
                (Source::Peer { node, generation }, Some(rec)) => {
                    self.app_work = true;
                    self.complete(
                        header.correlation.get(),
                        (node.clone(), generation),
                        rec,
                        payload,
                    )
                }
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
    pub(super) fn stale(&mut self, src: Source<'_>, target: NodeGeneration, corr: u64, bytes: u64) {
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
        self.client_said_disconnect(session);
    }

    /// The client ended `session` (its Disconnect, or its connection's end): the session ends
    /// now, unless the node was already closing it: that close stands.
    fn client_said_disconnect(&mut self, session: u64) {
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
