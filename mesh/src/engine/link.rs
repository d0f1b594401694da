//! Mesh links: handshakes (initiator and acceptor, the sans-IO [`crate::handshake`] driven
//! over the sockets), peers coming up and going down, reconnects, control records.

use super::*;

impl Engine {
    /// Moves handshake messages from the state machine to the link's out queue and tries to
    /// send them; an unreachable peer (not yet connected) keeps them for the next tick.
    pub(super) fn pump_handshake(&mut self, node: &NodeRid, kind: LinkKind) {
        let Some(mut p) = self.peers.remove(node) else {
            return;
        };
        if let Link::Handshaking { hs, out } = p.link_mut(kind) {
            while let Some(m) = hs.poll_transmit() {
                out.push_back(codec::encode_control(m.into_record()));
            }
        }
        let rid = p.rid(kind).to_vec();
        if let Link::Handshaking { out, .. } = p.link_mut(kind) {
            while let Some(f) = out.front() {
                match self.raw_send(kind, &rid, f) {
                    SendOutcome::Sent => {
                        out.pop_front();
                    }
                    SendOutcome::Paused | SendOutcome::Unreachable => break,
                }
            }
        }
        self.peers.insert(node.clone(), p);
        self.check_handshake(node, kind);
    }

    pub(super) fn flush_handshakes(&mut self) {
        let pending: Vec<(NodeRid, LinkKind)> = self
            .peers
            .values()
            .flat_map(|p| {
                let mut v = Vec::new();
                for (kind, link) in [
                    (LinkKind::Relay, &p.relay),
                    (LinkKind::Completion, &p.completion),
                ] {
                    if let Link::Handshaking { out, .. } = link
                        && !out.is_empty()
                    {
                        v.push((p.node.clone(), kind));
                    }
                }
                v
            })
            .collect();
        for (node, kind) in pending {
            self.pump_handshake(&node, kind);
        }
    }

    // ---------------------------------------------------------------- handshake

    /// A handshake message on connection `rid` of `kind`; `node` is the routing id read as a
    /// NodeRid. On our own outgoing connection to `node` (the acceptor announces its NodeRid)
    /// it feeds our initiator; on any other connection it goes to that connection's acceptor
    /// handshake (`accept.rs`), which touches no peer until it completes.
    pub(super) fn handle_handshake_msg(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        node: NodeRid,
        msg: HandshakeMsg,
    ) {
        let now = self.now;
        let outgoing = self
            .peers
            .get(&node)
            .is_some_and(|p| p.addr.is_some() && p.rid(kind) == rid);
        if !outgoing {
            self.accept_handshake_msg(kind, rid, msg, now);
            return;
        }
        let p = self.peers.get_mut(&node).expect("peer");
        match p.link_mut(kind) {
            Link::Handshaking { hs, .. } if !matches!(msg, HandshakeMsg::Hello { .. }) => {
                hs.handle_message(msg, now)
            }
            _ => {
                self.shared
                    .counters
                    .drop(DropReason::Unauthenticated, &node);
                return;
            }
        }
        self.pump_handshake(&node, kind);
    }

    /// The acceptor side of a handshake on connection `rid`: a Hello starts (or restarts) the
    /// connection's handshake, bounded by `max_pending_handshakes`; nothing about any peer
    /// changes before the initiator proved the secret on this very connection.
    pub(super) fn accept_handshake_msg(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        msg: HandshakeMsg,
        now: Instant,
    ) {
        let hs = if let HandshakeMsg::Hello {
            node, generation, ..
        } = &msg
        {
            if self.own_dial_wins(node, kind, *generation) {
                // Both nodes dial each other: the connection the node whose name sorts first
                // dialled is the link (docs/MESH.md, "Who dials whom"); the peer's initiator
                // fails and its side takes ours when our handshake completes there.
                self.shared.counters.drop(
                    DropReason::DuplicateLink,
                    &format_args!("{node} {kind:?}: our own dial is the link"),
                );
                self.send_control(
                    kind,
                    rid,
                    HandshakeMsg::Reject {
                        reason: HandshakeReject::Duplicate,
                    }
                    .into_record(),
                );
                return;
            }
            self.yield_own_dial(node, kind, now);
            let known = self.peers.get(node).and_then(|p| p.generation);
            if known.is_some_and(|g| *generation < g) {
                self.shared.counters.drop(
                    DropReason::StaleGeneration,
                    &format_args!("{node} hello gen {generation}"),
                );
                self.send_control(
                    kind,
                    rid,
                    HandshakeMsg::Reject {
                        reason: HandshakeReject::Duplicate,
                    }
                    .into_record(),
                );
                return;
            }
            let hs = Handshake::acceptor(
                self.local.clone(),
                kind,
                rid,
                None,
                rand::random(),
                now,
                self.cfg.liveness.handshake_timeout,
            );
            match self.accepts.start(kind, rid, self.rx_source.clone(), hs) {
                Ok(hs) => hs,
                Err(full) => {
                    let reason = match full {
                        crate::accept::Full::Total => DropReason::HandshakeCapacity,
                        crate::accept::Full::Source => DropReason::SourceCapacity,
                    };
                    self.shared.counters.drop(reason, node);
                    return;
                }
            }
        } else {
            match self.accepts.pending_mut(kind, rid) {
                Some(hs) => hs,
                None => {
                    self.shared.counters.drop(
                        DropReason::Unauthenticated,
                        &format_args!("{kind:?} handshake message without a Hello"),
                    );
                    return;
                }
            }
        };
        hs.handle_message(msg, now);
        let mut out = Vec::new();
        while let Some(m) = hs.poll_transmit() {
            out.push(m);
        }
        let outcome = hs.poll_outcome().cloned();
        for m in out {
            self.send_control(kind, rid, m.into_record());
        }
        match outcome {
            None => {}
            Some(Outcome::Failed(why)) => {
                self.accepts.finish(kind, rid);
                let reason = match why {
                    HandshakeFailure::RidMismatch => DropReason::RidMismatch,
                    _ => DropReason::HandshakeFailed,
                };
                self.shared
                    .counters
                    .drop(reason, &format_args!("{kind:?} acceptor: {why:?}"));
            }
            Some(Outcome::Established(id)) => {
                if let Some(hs) = self.accepts.finish(kind, rid) {
                    self.install_accepted(kind, rid, id, hs);
                }
            }
        }
    }

    /// Whether a Hello from `node` on a connection it dialled is refused because our own dial
    /// to it is the link of that kind: both nodes dial each other, our name sorts first, and
    /// our connection is in its handshake and reached it (our Hello went out), or is up on the
    /// generation the Hello claims. A Hello of a newer generation than the up link's (the peer
    /// restarted) is not refused here.
    fn own_dial_wins(&self, node: &NodeRid, kind: LinkKind, generation: NodeGeneration) -> bool {
        if self.local.node.as_str() >= node.as_str() {
            return false;
        }
        let Some(p) = self.peers.get(node) else {
            return false;
        };
        if p.addr.is_none() || p.rid(kind) != node.as_bytes() {
            return false;
        }
        match p.link(kind) {
            Link::Handshaking { out, .. } => out.is_empty(),
            Link::Up(g) => *g == generation,
            Link::Idle | Link::Retry { .. } => false,
        }
    }

    /// A Hello from `node` that our own dial did not win over (`own_dial_wins`): when our name
    /// sorts first and our own dial of that kind has not reached the peer yet (its Hello still
    /// queued), it stands back for a handshake timeout, so that only the peer's connection
    /// completes on both sides; if that handshake fails, our dial retries. A dial already
    /// waiting to retry is not pushed back: a Hello proves nothing yet, so a stranger claiming
    /// the peer's name delays our dial by one handshake timeout at most.
    fn yield_own_dial(&mut self, node: &NodeRid, kind: LinkKind, now: Instant) {
        if self.local.node.as_str() >= node.as_str() {
            return;
        }
        let timeout = self.cfg.liveness.handshake_timeout;
        let Some(p) = self.peers.get_mut(node) else {
            return;
        };
        if p.addr.is_none() || p.rid(kind) != node.as_bytes() {
            return;
        }
        let link = p.link_mut(kind);
        if matches!(link, Link::Handshaking { .. }) {
            *link = Link::Retry { at: now + timeout };
        }
    }

    /// A connection another node opened completed its handshake: from now on its routing id
    /// (and only it) speaks for `id.node` on this link. A newer generation replaces the old
    /// lifecycle (`check_handshake`); the same generation on a new connection is the peer
    /// reconnecting (its old connection is forgotten); an older one is refused.
    pub(super) fn install_accepted(
        &mut self,
        kind: LinkKind,
        rid: &[u8],
        id: crate::handshake::PeerIdentity,
        hs: Box<Handshake>,
    ) {
        let node = id.node.clone();
        let known = self.peers.get(&node).and_then(|p| p.generation);
        if known.is_some_and(|g| id.generation < g) {
            self.shared
                .counters
                .drop(DropReason::StaleGeneration, &node);
            return;
        }
        if known == Some(id.generation) && self.peers.get(&node).is_some_and(|p| p.up) {
            self.peer_down(&node, DownReason::Reconnected, false);
        }
        self.accepts.prove(kind, rid, Arc::new(node.clone()));
        let p = self.peer_entry(&node);
        p.rids[link_index(kind)] = rid.to_vec();
        *p.link_mut(kind) = Link::Handshaking {
            hs,
            out: VecDeque::new(),
        };
        self.check_handshake(&node, kind);
    }

    pub(super) fn check_handshake(&mut self, node: &NodeRid, kind: LinkKind) {
        let Some(p) = self.peers.get_mut(node) else {
            return;
        };
        let outcome = match p.link_mut(kind) {
            Link::Handshaking { hs, out } if out.is_empty() => hs.poll_outcome().cloned(),
            _ => None,
        };
        match outcome {
            None => {}
            Some(Outcome::Failed(why)) => {
                let reason = match why {
                    HandshakeFailure::RidMismatch => DropReason::RidMismatch,
                    _ => DropReason::HandshakeFailed,
                };
                self.shared
                    .counters
                    .drop(reason, &format_args!("{node}: {why:?}"));
                let retry = self.cfg.liveness.reconnect_interval;
                let p = self.peers.get_mut(node).expect("peer");
                if p.addr.is_some() {
                    *p.link_mut(kind) = Link::Retry {
                        at: self.now + retry,
                    };
                } else {
                    *p.link_mut(kind) = Link::Idle;
                    if p.generation.is_none()
                        && matches!(p.relay, Link::Idle)
                        && matches!(p.completion, Link::Idle)
                    {
                        self.peers.remove(node);
                    }
                }
            }
            Some(Outcome::Established(id)) => {
                if id.node != *node {
                    self.shared.counters.drop(DropReason::RidMismatch, node);
                    *self.peers.get_mut(node).expect("peer").link_mut(kind) = Link::Idle;
                    return;
                }
                let old = self.peers.get(node).and_then(|p| p.generation);
                if let Some(g) = old
                    && id.generation < g
                {
                    self.shared.counters.drop(DropReason::StaleGeneration, node);
                    *self.peers.get_mut(node).expect("peer").link_mut(kind) = Link::Idle;
                    return;
                }
                if old.is_some_and(|g| g != id.generation) {
                    // A restarted peer: the old lifecycle ends here.
                    self.peer_down(node, DownReason::Restarted, false);
                    let p = self.peers.get_mut(node).expect("peer");
                    let other = if kind == LinkKind::Relay {
                        &mut p.completion
                    } else {
                        &mut p.relay
                    };
                    if matches!(other, Link::Up(_)) {
                        *other = Link::Idle;
                    }
                }
                let now = self.now;
                let p = self.peers.get_mut(node).expect("peer");
                p.generation = Some(id.generation);
                *p.link_mut(kind) = Link::Up(id.generation);
                p.conn.last_rx = now;
                if matches!(p.relay, Link::Up(g) if g == id.generation)
                    && matches!(p.completion, Link::Up(g) if g == id.generation)
                    && !p.up
                {
                    p.up = true;
                    p.conn.came_up(now, self.cfg.liveness.ping_interval);
                    let shared_node = Arc::new(node.clone());
                    let slot = PeerSlot {
                        generation: id.generation,
                        budget: p.conn.budget.clone(),
                        outbox: Arc::new(Outbox::new(
                            shared_node,
                            id.generation,
                            p.conn.budget.clone(),
                            self.cfg.batching,
                        )),
                    };
                    self.shared.set_peer(node.clone(), Some(slot));
                    self.shared.counters.event(TransportEvent::PeerUp);
                    p.conn.regrant();
                    self.flush_grant(ConnRef::Peer(node, None));
                    tracing::debug!(peer = %node, generation = %id.generation, "peer up");
                    self.shared.publish(PeerEvent::Up {
                        node: node.clone(),
                        generation: id.generation,
                    });
                }
            }
        }
    }

    /// Ends the peer's current lifecycle (if up): fails its requests, discards its queues.
    pub(super) fn peer_down(&mut self, node: &NodeRid, reason: DownReason, restart: bool) {
        let Some(p) = self.peers.get_mut(node) else {
            return;
        };
        let generation = p.generation;
        let was_up = std::mem::replace(&mut p.up, false);
        p.conn.reset();
        for out in p.conn.queue.drain(..) {
            release(&p.conn.budget, &out);
            for _ in 0..out.records() {
                self.shared.counters.drop(DropReason::PeerLost, node);
            }
        }
        for _ in p.replies.drain(..) {
            self.shared
                .counters
                .drop(DropReason::ReplyUndeliverable, node);
        }
        self.paused.remove(node);
        if was_up {
            self.shared.set_peer(node.clone(), None);
            self.shared.counters.event(TransportEvent::PeerDown);
            let generation = generation.expect("up peer has a generation");
            tracing::debug!(peer = %node, %generation, ?reason, "peer down");
            fail(
                self.corr
                    .handle_peer_lost(&(Arc::new(node.clone()), generation)),
                &RequestError::PeerLost,
            );
            self.shared.publish(PeerEvent::Down {
                node: node.clone(),
                generation,
                reason,
            });
        }
        if restart {
            let p = self.peers.get_mut(node).expect("peer");
            if p.addr.is_some() {
                let now = self.now;
                for kind in [LinkKind::Relay, LinkKind::Completion] {
                    self.reconnect(node, kind);
                    self.start_initiator(node, kind, now);
                }
            } else {
                p.relay = Link::Idle;
                p.completion = Link::Idle;
            }
        }
    }

    /// Replaces our outbound connection of `kind` to `node` with a fresh TCP connection that
    /// announces a fresh random routing id (the next handshake is bound to it; whatever the
    /// remote side still holds of the old connection can never speak for us again).
    pub(super) fn reconnect(&mut self, node: &NodeRid, kind: LinkKind) {
        let Some(addr) = self.peers.get(node).and_then(|p| p.addr.clone()) else {
            return;
        };
        let ep = if kind == LinkKind::Relay {
            &addr.relay
        } else {
            &addr.completion
        };
        let rid = fresh_rid();
        let s = self.socket(kind);
        self.sockets.touched(kind);
        let _ = s.disconnect(ep);
        if let Err(e) = connect_as(s, &rid, ep) {
            tracing::warn!(peer = %node, error = %e, "reconnect failed");
        }
        if let Some(p) = self.peers.get_mut(node) {
            p.own_rids[link_index(kind)] = rid;
        }
    }

    pub(super) fn send_control(&self, kind: LinkKind, rid: &[u8], record: Record) {
        let frames = codec::encode_control(record);
        // Control never waits: if libzmq's pipe is full the next tick sends a fresh one.
        let _ = self.raw_send(kind, rid, &frames);
    }

    pub(super) fn connect(&mut self, addr: PeerAddress) {
        if addr.node == self.local.node {
            return;
        }
        if self
            .peers
            .get(&addr.node)
            .and_then(|p| p.addr.as_ref())
            .is_some_and(|a| *a == addr)
        {
            // Idempotent: already connecting/connected to this address.
            return;
        }
        if self
            .peers
            .get(&addr.node)
            .is_some_and(|p| p.up && p.addr.is_none())
        {
            // Up on connections the peer dialled: they stay the link. The address is kept for
            // the next reconnect (`peer_down` with a restart dials it).
            self.endpoints
                .insert(addr.relay.clone(), (addr.node.clone(), LinkKind::Relay));
            self.endpoints.insert(
                addr.completion.clone(),
                (addr.node.clone(), LinkKind::Completion),
            );
            let node = addr.node.clone();
            self.peer_entry(&node).addr = Some(addr);
            return;
        }
        let own_rids = [fresh_rid(), fresh_rid()];
        self.sockets.touched(LinkKind::Relay);
        self.sockets.touched(LinkKind::Completion);
        if let Err(e) = connect_as(&self.sockets.relay, &own_rids[0], &addr.relay) {
            tracing::warn!(peer = %addr.node, error = %e, "relay connect failed");
            return;
        }
        if let Err(e) = connect_as(&self.sockets.completion, &own_rids[1], &addr.completion) {
            tracing::warn!(peer = %addr.node, error = %e, "completion connect failed");
            return;
        }
        self.endpoints
            .insert(addr.relay.clone(), (addr.node.clone(), LinkKind::Relay));
        self.endpoints.insert(
            addr.completion.clone(),
            (addr.node.clone(), LinkKind::Completion),
        );
        let node = addr.node.clone();
        let p = self.peer_entry(&node);
        p.addr = Some(addr);
        p.own_rids = own_rids;
        p.rids = [node.as_bytes().to_vec(), node.as_bytes().to_vec()];
        let now = self.now;
        self.start_initiator(&node, LinkKind::Relay, now);
        self.start_initiator(&node, LinkKind::Completion, now);
    }

    pub(super) fn peer_entry(&mut self, node: &NodeRid) -> &mut Peer {
        let budget = self.cfg.peer_budget;
        let peer_window = self.cfg.peer_window;
        let now = self.now;
        self.peers.entry(node.clone()).or_insert_with(|| Peer {
            node: node.clone(),
            rids: [node.as_bytes().to_vec(), node.as_bytes().to_vec()],
            own_rids: [Vec::new(), Vec::new()],
            addr: None,
            generation: None,
            relay: Link::Idle,
            completion: Link::Idle,
            up: false,
            replies: VecDeque::new(),
            conn: Conn::idle(peer_window, Arc::new(SendBudget::new(budget)), now),
        })
    }

    pub(super) fn start_initiator(&mut self, node: &NodeRid, kind: LinkKind, now: Instant) {
        let local = self.local.clone();
        let timeout = self.cfg.liveness.handshake_timeout;
        let Some(p) = self.peers.get_mut(node) else {
            return;
        };
        // Our own connection: the acceptor announces its NodeRid as routing id (a connection
        // the peer opened and we accepted before is not ours to speak on).
        p.rids[link_index(kind)] = node.as_bytes().to_vec();
        let hs = Handshake::initiator(
            local,
            kind,
            &p.own_rids[link_index(kind)],
            Some(node.clone()),
            rand::random(),
            now,
            timeout,
        );
        *p.link_mut(kind) = Link::Handshaking {
            hs: Box::new(hs),
            out: VecDeque::new(),
        };
        self.pump_handshake(node, kind);
    }
}
