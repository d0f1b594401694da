//! Housekeeping on the I/O thread: handshake timeouts and retries, liveness (the connection
//! core's verdicts: Pings, peer and client timeouts), owed credit grants, request deadlines,
//! and when to wake next.

use super::*;

impl Engine {
    pub(super) fn timers(&mut self, now: Instant) {
        expire(&mut self.corr, now);
        self.shared.counters.summarize(now);
        let mut to_check = Vec::new();
        let mut to_retry = Vec::new();
        let mut timed_out = Vec::new();
        let mut ping = Vec::new();
        let peer_timeout = self.cfg.liveness.peer_timeout;
        for p in self.peers.values_mut() {
            for kind in [LinkKind::Relay, LinkKind::Completion] {
                match p.link_mut(kind) {
                    Link::Handshaking { hs, .. } if hs.poll_timeout().is_some_and(|t| t <= now) => {
                        hs.handle_timeout(now);
                        to_check.push((p.node.clone(), kind));
                    }
                    Link::Retry { at } if *at <= now => to_retry.push((p.node.clone(), kind)),
                    _ => {}
                }
            }
            if p.up {
                match p.conn.poll_liveness(now, &self.cfg.liveness) {
                    Alive::TimedOut => timed_out.push(p.node.clone()),
                    Alive::Ping(seq) => ping.push((p.rid(LinkKind::Completion).to_vec(), seq)),
                    Alive::Quiet => {}
                }
            }
        }
        for (node, kind) in to_check {
            self.check_handshake(&node, kind);
        }
        for (kind, hs) in self.accepts.expire(now) {
            self.shared.counters.drop(
                DropReason::HandshakeFailed,
                &format_args!("{kind:?} acceptor: {:?}", hs.poll_outcome()),
            );
        }
        for (node, kind) in to_retry {
            self.reconnect(&node, kind);
            self.start_initiator(&node, kind, now);
        }
        for node in timed_out {
            self.peer_down(&node, DownReason::Timeout, true);
        }
        let owed: Vec<NodeRid> = self
            .peers
            .values()
            .filter(|p| p.up && p.conn.owes())
            .map(|p| p.node.clone())
            .collect();
        for node in owed {
            self.flush_grant(ConnRef::Peer(&node, None));
        }
        for (rid, ping) in ping {
            self.send_control(LinkKind::Completion, &rid, Record::Ping(ping));
        }
        if !self.owing.is_empty() {
            let listed = std::mem::take(&mut self.owing);
            for &s in &listed {
                if let Some(c) = self.clients.get_mut(&s) {
                    c.owing = false;
                }
                self.flush_grant(ConnRef::Client(s));
                // Not taken by libzmq (its queue full): still owed, listed again.
                if self.clients.get(&s).is_some_and(|c| c.conn.owes()) {
                    self.note_owing(s);
                }
            }
        }
        self.check_slow_consumers(now);
        if now < self.next_client_sweep {
            return;
        }
        self.next_client_sweep = now + CLIENT_SWEEP;
        // ClientServer liveness: end the sessions of clients silent for the peer timeout (they
        // are told Disconnect { Timeout }); a closing session whose queue did not drain within
        // the peer timeout is ended with what it still holds dropped.
        let dead: Vec<(u64, bool)> = self
            .clients
            .iter()
            .filter_map(|(s, c)| match c.closing {
                Some((_, since)) => {
                    (now.duration_since(since) > peer_timeout).then_some((*s, true))
                }
                None => c.conn.silent(now, peer_timeout).then_some((*s, false)),
            })
            .collect();
        for (s, closing) in dead {
            if closing {
                self.finish_client(s);
            } else {
                if let Some(c) = self.clients.get(&s) {
                    tracing::debug!(
                        target: "zlink_mesh::stall",
                        session = s,
                        silent_ms = now.saturating_duration_since(c.conn.last_rx).as_millis() as u64,
                        "client session silent past the peer timeout"
                    );
                }
                self.close_client(s, ClientCloseCause::Timeout, now);
                // A silent client is not waited for: what did not go out now is dropped.
                if self.clients.contains_key(&s) {
                    self.finish_client(s);
                }
            }
        }
    }

    pub(super) fn next_wake(&self, now: Instant) -> Duration {
        let mut t = Duration::from_millis(100);
        if !self.paused.is_empty() || !self.paused_clients.is_empty() || !self.up.held.is_empty() {
            t = Duration::from_millis(1);
        }
        let pending_hs = self.peers.values().any(|p| {
            matches!(&p.relay, Link::Handshaking { out, .. } if !out.is_empty())
                || matches!(&p.completion, Link::Handshaking { out, .. } if !out.is_empty())
        });
        if pending_hs {
            t = t.min(Duration::from_millis(5));
        }
        if let Some(d) = self.corr.poll_timeout() {
            t = t.min(d.saturating_duration_since(now));
        }
        if let Some(d) = self.accepts.poll_timeout() {
            t = t.min(d.saturating_duration_since(now));
        }
        for p in self.peers.values() {
            if p.up {
                t = t.min(p.conn.next_ping().saturating_duration_since(now));
            }
            for l in [&p.relay, &p.completion] {
                match l {
                    Link::Handshaking { hs, .. } => {
                        if let Some(d) = hs.poll_timeout() {
                            t = t.min(d.saturating_duration_since(now));
                        }
                    }
                    Link::Retry { at } => t = t.min(at.saturating_duration_since(now)),
                    _ => {}
                }
            }
        }
        t
    }
}
