//! Sending: application records and replies queued per connection, transmitted at the end of
//! a pass (small records packed into 139 batch frames), PAUSED queues retried.

use super::*;
use crate::config::Batching;

impl Engine {
    // ---------------------------------------------------------------- sending

    pub(super) fn socket(&self, kind: LinkKind) -> &zmq::Socket {
        match kind {
            LinkKind::Relay => &self.sockets.relay,
            LinkKind::Completion => &self.sockets.completion,
            LinkKind::Client => self.sockets.client.as_ref().expect("client socket"),
        }
    }

    pub(super) fn raw_send(&self, kind: LinkKind, rid: &[u8], frames: &[Bytes]) -> SendOutcome {
        self.sockets.touched(kind);
        raw_send_on(self.socket(kind), self.cfg.tap.as_ref(), kind, rid, frames)
    }

    pub(super) fn send_app(&mut self, dest: Dest, out: Out) {
        match dest {
            Dest::Peer { node, generation } => {
                // A request that reached its terminal before transmission (e.g. the deadline
                // passed while it waited for admission) is never sent (SB-12). Asked first only
                // for requests (one-way records have no correlation): one peer lookup below.
                let ended = out.corr != 0
                    && self
                        .peers
                        .get(&node)
                        .is_some_and(|p| p.up && p.generation == Some(generation))
                    && ended_before_transmission(
                        &mut self.corr,
                        out.corr,
                        self.now,
                        &self.shared.counters,
                        &node,
                    );
                let Some(p) = self.peers.get_mut(&node) else {
                    if let Some(b) = out.bytes {
                        self.release_peer_budget(&node, b);
                    }
                    self.shared.counters.drop(DropReason::PeerLost, &node);
                    return;
                };
                if !p.up || p.generation != Some(generation) {
                    release(&p.conn.budget, &out);
                    self.shared.counters.drop(DropReason::PeerLost, &node);
                    return;
                }
                if ended {
                    release(&p.conn.budget, &out);
                    return;
                }
                // Queued and transmitted at the end of this pass (`flush_dirty`), together
                // with whatever else the pass queued for this peer. A queue that was not empty
                // is already PAUSED (HWM: listed in `paused`; credit: a FlowCredit lists it)
                // or dirty: the record waits behind, FIFO.
                let was_empty = p.conn.queue.is_empty();
                p.conn.queue.push_back(out);
                if was_empty {
                    self.dirty.push(node);
                }
            }
            Dest::Client { session } => {
                match self.clients.get(&session) {
                    None => {
                        if let Some(b) = self.shared.client_budget(session)
                            && let Some(n) = out.bytes
                        {
                            b.release(n);
                        }
                        self.shared.counters.drop(DropReason::PeerLost, &session);
                        return;
                    }
                    // Admitted before the close but handed over after it: never sent after
                    // the Disconnect.
                    Some(c) if c.closing.is_some() => {
                        release(&c.conn.budget, &out);
                        self.shared.counters.drop(DropReason::PeerLost, &session);
                        return;
                    }
                    Some(_) => {}
                }
                self.queue_client(session, out);
            }
        }
    }

    pub(super) fn send_reply(&mut self, to: ReplyTarget, frames: Parts) {
        match to {
            ReplyTarget::Peer { node, generation } => {
                let Some(p) = self.peers.get(&node) else {
                    self.shared
                        .counters
                        .drop(DropReason::ReplyUndeliverable, &node);
                    return;
                };
                if p.generation != Some(generation) || !matches!(p.completion, Link::Up(_)) {
                    self.shared
                        .counters
                        .drop(DropReason::ReplyUndeliverable, &node);
                    return;
                }
                // Like relay data: queued, transmitted at the end of the pass with the other
                // replies queued for this peer (`flush_dirty`); behind a PAUSED queue, FIFO.
                let was_empty = p.replies.is_empty();
                self.queue_reply(&node, frames);
                if was_empty {
                    self.dirty.push(node);
                }
            }
            ReplyTarget::Client { session } => {
                if self
                    .clients
                    .get(&session)
                    .is_none_or(|c| c.closing.is_some())
                {
                    self.shared
                        .counters
                        .drop(DropReason::ReplyUndeliverable, &session);
                    return;
                }
                // ClientServer: one connection, so the reply is ordered after earlier pushes
                // (EG-4: it may wait behind them and PAUSED). It is counted in the session's
                // outbound budget without waiting: a client that does not read is closed as a
                // slow consumer ([`Engine::over_budget`]).
                let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
                let over = self.clients.get(&session).is_some_and(|c| {
                    c.conn.budget.force_reserve(bytes);
                    c.conn.budget.reserved_bytes() > c.conn.budget.limit().bytes
                });
                self.queue_client(session, Out::parts(frames, Some(bytes), 0));
                if over {
                    self.over_budget(session, bytes);
                }
            }
        }
    }

    /// Queues a push or a reply for a client (FIFO: the connection's order). Transmitted at the
    /// end of the pass ([`Engine::flush_dirty`]) with whatever else the pass queued for it,
    /// small records packed into 139 batch frames; a queue that was not empty is already dirty
    /// or PAUSED, and the record waits behind.
    pub(super) fn queue_client(&mut self, session: u64, out: Out) {
        let Some(c) = self.clients.get_mut(&session) else {
            return;
        };
        let was_empty = c.conn.queue.is_empty();
        c.conn.queue.push_back(out);
        if was_empty {
            self.dirty_clients.push(session);
        }
    }

    pub(super) fn queue_reply(&mut self, node: &NodeRid, frames: Parts) {
        let p = self.peers.get_mut(node).expect("peer");
        if p.replies.len() >= MAX_QUEUED_REPLIES {
            self.shared
                .counters
                .drop(DropReason::ReplyUndeliverable, node);
        } else {
            p.replies.push_back(Out::parts(frames, None, 0));
        }
    }

    /// Retries the PAUSED queues (peers' and clients'); a closing client whose queue drained
    /// is finished. Returns how many queues moved (sent something or emptied).
    pub(super) fn flush_paused(&mut self) -> usize {
        let mut moved = 0;
        if !self.paused.is_empty() {
            let nodes: Vec<NodeRid> = self.paused.iter().cloned().collect();
            for node in nodes {
                let before = self
                    .peers
                    .get(&node)
                    .map(|p| (p.conn.queue.len(), p.replies.len()));
                if self.flush_peer(&node) {
                    self.paused.remove(&node);
                    moved += 1;
                } else if self
                    .peers
                    .get(&node)
                    .map(|p| (p.conn.queue.len(), p.replies.len()))
                    != before
                {
                    moved += 1;
                }
            }
        }
        if !self.paused_clients.is_empty() {
            let sessions: Vec<u64> = self.paused_clients.iter().copied().collect();
            for s in sessions {
                let before = self.clients.get(&s).map(|c| c.conn.queue.len());
                if self.flush_client(s) {
                    moved += 1;
                    self.paused_clients.remove(&s);
                    if self.clients.get(&s).is_some_and(|c| c.closing.is_some()) {
                        self.finish_client(s);
                    }
                } else if self.clients.get(&s).map(|c| c.conn.queue.len()) != before {
                    moved += 1;
                }
            }
        }
        moved
    }

    /// Transmits a peer's queues — replies on the completion connection, then relay data
    /// within the peer's credit — while libzmq takes them ([`conn::flush`]). Returns true when
    /// both are empty, or the relay queue waits only for credit (a FlowCredit puts the peer
    /// back into `paused`).
    pub(super) fn flush_peer(&mut self, node: &NodeRid) -> bool {
        let Some(p) = self.peers.get_mut(node) else {
            return true;
        };
        let mut wire = Wire {
            socket: &self.sockets.completion,
            sockets: &self.sockets,
            tap: self.cfg.tap.as_ref(),
            kind: LinkKind::Completion,
            rid: &p.rids[link_index(LinkKind::Completion)],
            corr: &mut self.corr,
            counters: &self.shared.counters,
            who: node,
            now: self.now,
        };
        let budget = &p.conn.budget;
        let batching = &self.cfg.batching;
        let replies = conn::flush(&mut p.replies, &mut Unlimited, budget, batching, &mut wire);
        wire.socket = &self.sockets.relay;
        wire.kind = LinkKind::Relay;
        wire.rid = &p.rids[link_index(LinkKind::Relay)];
        let relay = conn::flush(
            &mut p.conn.queue,
            &mut p.conn.credit,
            budget,
            batching,
            &mut wire,
        );
        replies == Flushed::Empty && relay != Flushed::Paused
    }

    /// Transmits a client's queue (pushes and replies, in order) while libzmq takes it, as for
    /// peers ([`Engine::flush_peer`]; no credit: pushes are bounded by the session's budget;
    /// runs cut at `ClientOutbound::batch_records`).
    /// Returns true when the queue is empty.
    pub(super) fn flush_client(&mut self, session: u64) -> bool {
        let Some(c) = self.clients.get_mut(&session) else {
            return true;
        };
        let mut wire = Wire {
            socket: self.sockets.client.as_ref().expect("client socket"),
            sockets: &self.sockets,
            tap: self.cfg.tap.as_ref(),
            kind: LinkKind::Client,
            rid: &c.rid,
            corr: &mut self.corr,
            counters: &self.shared.counters,
            who: &session,
            now: self.now,
        };
        // Runs of up to `ClientOutbound::batch_records` records (bytes as for peers): the
        // client socket's pipe holds `send_hwm` messages, so its messages carry more records.
        let batching = Batching {
            max_records: self.cfg.client_outbound.batch_records,
            ..self.cfg.batching
        };
        conn::flush(
            &mut c.conn.queue,
            &mut Unlimited,
            &c.conn.budget,
            &batching,
            &mut wire,
        ) == Flushed::Empty
    }
}

/// One connection of the node's sockets as the [`Transport`] of [`conn::flush`]: its socket
/// and routing id, and the correlation table a queued request is
/// checked against at the moment of transmission.
pub(super) struct Wire<'e> {
    pub(super) socket: &'e zmq::Socket,
    /// Told of each transmission on `socket` ([`Sockets::touched`]).
    pub(super) sockets: &'e Sockets,
    pub(super) tap: Option<&'e WireTap>,
    pub(super) kind: LinkKind,
    pub(super) rid: &'e [u8],
    pub(super) corr: &'e mut Correlations<(Arc<NodeRid>, NodeGeneration), Waiter>,
    pub(super) counters: &'e Counters,
    /// The other end, as the detail of a drop.
    pub(super) who: &'e dyn std::fmt::Display,
    /// The pass's time (request deadlines are checked against it at transmission).
    pub(super) now: Instant,
}

impl Transport for Wire<'_> {
    /// A lone record as its own frames, several as one 139 batch frame handed to libzmq
    /// without a copy ([`conn::encode_run`]).
    #[inline]
    fn send_run<'a>(
        &mut self,
        mut run: impl ExactSizeIterator<Item = &'a Parts>,
        frame: usize,
    ) -> SendOutcome {
        self.sockets.touched(self.kind);
        if run.len() <= 1 {
            let Some(frames) = run.next() else {
                return SendOutcome::Sent;
            };
            return raw_send_on(self.socket, self.tap, self.kind, self.rid, frames);
        }
        raw_send_one(
            self.socket,
            self.tap,
            self.kind,
            self.rid,
            conn::encode_run(run, frame),
        )
    }

    /// A run its senders framed: a lone record as its own frames; several as their 139 frame,
    /// which becomes the libzmq message without a copy once the routing id was accepted.
    #[inline]
    fn send_framed(&mut self, run: &mut Framed) -> SendOutcome {
        self.sockets.touched(self.kind);
        if let Some(r) = run.lone() {
            return raw_send_record(
                self.socket,
                self.tap,
                self.kind,
                self.rid,
                r.envelope,
                r.payload,
            );
        }
        if let Err(refused) = send_routing_id(self.socket, self.rid) {
            return refused;
        }
        // Tap entry before the message is complete, as in `raw_send_on`.
        if let Some(tap) = self.tap {
            tap.record(
                TapDirection::Sent,
                self.kind,
                self.rid,
                &[Bytes::copy_from_slice(run.frame())],
            );
        }
        let _ = self.socket.send(run.take_frame(), zmq::DONTWAIT);
        SendOutcome::Sent
    }

    fn ended(&mut self, corr: u64) -> bool {
        ended_before_transmission(self.corr, corr, self.now, self.counters, self.who)
    }

    fn expired(&self, corr: u64) -> bool {
        self.corr.is_ended_at(corr, self.now)
    }

    fn lost(&mut self, out: &Out) {
        let reason = if out.bytes.is_some() {
            DropReason::PeerLost
        } else {
            DropReason::ReplyUndeliverable
        };
        self.counters.drop(reason, self.who);
    }
}

/// Sends the routing id that starts a message, without blocking: `Err` with the outcome when
/// libzmq refuses it (HWM: PAUSED; no such peer: unreachable). Once it is accepted, the rest of
/// the message is too.
#[inline]
pub(super) fn send_routing_id(s: &zmq::Socket, rid: &[u8]) -> Result<(), SendOutcome> {
    match s.send(rid, zmq::SNDMORE | zmq::DONTWAIT) {
        Ok(()) => Ok(()),
        Err(zmq::Error::EAGAIN) => Err(SendOutcome::Paused),
        Err(_) => Err(SendOutcome::Unreachable),
    }
}

/// Sends one message (routing id, then the parts) without blocking.
#[inline]
pub(super) fn raw_send_on(
    s: &zmq::Socket,
    tap: Option<&WireTap>,
    kind: LinkKind,
    rid: &[u8],
    frames: &[Bytes],
) -> SendOutcome {
    if let Err(refused) = send_routing_id(s, rid) {
        return refused;
    }
    // Recorded once the routing id was accepted (the message will be sent) and before its
    // last part completes it: the tap entry exists before the peer can receive the message.
    if let Some(tap) = tap {
        tap.record(TapDirection::Sent, kind, rid, frames);
    }
    // After the routing id was accepted the remaining parts of the message are too.
    send_parts(s, frames);
    SendOutcome::Sent
}

/// Sends `frames` as (the rest of) one message without blocking, each but the last with
/// MORE; false when libzmq refused a part (the parts after it are not sent).
#[inline]
pub(crate) fn send_parts(s: &zmq::Socket, frames: &[Bytes]) -> bool {
    let last = frames.len().saturating_sub(1);
    for (i, f) in frames.iter().enumerate() {
        let flags = if i == last {
            zmq::DONTWAIT
        } else {
            zmq::SNDMORE | zmq::DONTWAIT
        };
        if s.send(&f[..], flags).is_err() {
            return false;
        }
    }
    true
}

/// Sends one record given as slices (routing id, envelope, payload if any) without blocking,
/// as [`raw_send_on`] does its frames.
pub(super) fn raw_send_record(
    s: &zmq::Socket,
    tap: Option<&WireTap>,
    kind: LinkKind,
    rid: &[u8],
    envelope: &[u8],
    payload: Option<&[u8]>,
) -> SendOutcome {
    if let Err(refused) = send_routing_id(s, rid) {
        return refused;
    }
    if let Some(tap) = tap {
        let mut frames = vec![Bytes::copy_from_slice(envelope)];
        frames.extend(payload.map(Bytes::copy_from_slice));
        tap.record(TapDirection::Sent, kind, rid, &frames);
    }
    // After the routing id was accepted the remaining parts of the message are too.
    match payload {
        Some(p) => {
            let _ = s.send(envelope, zmq::SNDMORE | zmq::DONTWAIT);
            let _ = s.send(p, zmq::DONTWAIT);
        }
        None => {
            let _ = s.send(envelope, zmq::DONTWAIT);
        }
    }
    SendOutcome::Sent
}

/// Sends a one-part message (routing id, then `frame`) without blocking.
pub(super) fn raw_send_one(
    s: &zmq::Socket,
    tap: Option<&WireTap>,
    kind: LinkKind,
    rid: &[u8],
    frame: Vec<u8>,
) -> SendOutcome {
    if let Err(refused) = send_routing_id(s, rid) {
        return refused;
    }
    // Tap entry before the message is complete, as in `raw_send_on`.
    if let Some(tap) = tap {
        tap.record(
            TapDirection::Sent,
            kind,
            rid,
            &[Bytes::copy_from_slice(&frame)],
        );
    }
    // After the routing id was accepted the remaining part of the message is too. The frame
    // becomes the message without a copy ([`conn::encode_run`]).
    let _ = s.send(frame, zmq::DONTWAIT);
    SendOutcome::Sent
}
