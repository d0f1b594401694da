//! Client sessions on the node's ClientServer port: a session opened on a connection's
//! first record (within the bounds of [`crate::admission`]), accepted, closed by the node
//! (its queue drained first, then Disconnect and a tombstone for its connection) or by the
//! client, and removed.

use super::*;

pub(super) struct Client {
    pub(super) rid: Vec<u8>,
    /// Receive window (like a peer's; `client_window`, or the strangers' window until
    /// accepted), the queue of pushes and replies with the push budget, and liveness: the
    /// sans-IO core ([`crate::conn`]).
    pub(super) conn: Conn,
    /// Not yet accepted ([`crate::ClientAdmission::OnAccept`]): counted in
    /// the session admission ([`crate::admission`]).
    pub(super) stranger: bool,
    /// The node is closing this session (cause, since when): its queue drains first, then it
    /// gets a Disconnect and is removed ([`Engine::close_client`]).
    pub(super) closing: Option<(ClientCloseCause, Instant)>,
    /// The connection's source address (peer IP), counted per source by the session admission.
    pub(super) source: Option<Arc<str>>,
    /// Since when the session's queue has been over its outbound budget (a slow consumer
    /// once that lasts `ClientOutbound::grace`).
    pub(super) over_since: Option<Instant>,
    /// Listed in `Engine::owing` (housekeeping grants what it owes).
    pub(super) owing: bool,
}

/// Routing ids of client connections whose session the node ended, with the reason it sent.
/// Bounded by a count (`MeshConfig::max_clients`, at least 1): the oldest is forgotten first,
/// after which a record on that connection would start a new session again.
pub(super) struct Tombstones {
    reasons: SeededMap<Vec<u8>, DisconnectReason>,
    order: VecDeque<Vec<u8>>,
    cap: usize,
}

impl Tombstones {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            reasons: SeededMap::default(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    pub(super) fn insert(&mut self, rid: Vec<u8>, reason: DisconnectReason) {
        if let Some(r) = self.reasons.get_mut(&rid) {
            *r = reason;
            return;
        }
        while self.order.len() >= self.cap {
            if let Some(old) = self.order.pop_front() {
                self.reasons.remove(&old);
            }
        }
        self.reasons.insert(rid.clone(), reason);
        self.order.push_back(rid);
    }

    pub(super) fn get(&self, rid: &[u8]) -> Option<DisconnectReason> {
        if self.reasons.is_empty() {
            return None;
        }
        self.reasons.get(rid).copied()
    }
}

impl Engine {
    /// The session of the client connection `rid`; on the connection's first record a new
    /// session is opened ([`Engine::open_session`]).
    #[inline]
    pub(super) fn client_session(&mut self, rid: &[u8], class: &Class) -> Option<u64> {
        match self.clients_by_rid.get(rid) {
            Some(s) => Some(*s),
            None => self.open_session(rid, class),
        }
    }

    /// The first record on a client connection: a tombstoned connection (the node ended its
    /// session) is answered with its Disconnect again, never a new session; otherwise a
    /// session is opened within `max_clients`, the strangers' bounds and the per-source
    /// bounds (each refusal counted), granted its window (the strangers' until accepted), and
    /// announced.
    #[cold]
    pub(super) fn open_session(&mut self, rid: &[u8], class: &Class) -> Option<u64> {
        let now = self.now;
        if let Some(reason) = self.tombstones.get(rid) {
            // The node ended this connection's session: no new one on it.
            self.shared.counters.drop(
                DropReason::SessionClosed,
                &"client: record on a closed session's connection",
            );
            if !self.tomb_answered && !matches!(class, Class::Disconnect(_)) {
                self.tomb_answered = true;
                self.send_control(
                    LinkKind::Client,
                    rid,
                    Record::Disconnect(Disconnect { reason }),
                );
            }
            return None;
        }
        let source = self.rx_source.clone();
        let admitted = match self.admission.open(source.as_ref()) {
            Ok(a) => a,
            Err(reason) => {
                let src = source.as_deref().unwrap_or("?");
                self.shared
                    .counters
                    .drop(reason, &format_args!("client {src}"));
                return None;
            }
        };
        let s = self.next_session;
        self.next_session += 1;
        let budget = Arc::new(SendBudget::new(self.cfg.client_budget));
        self.clients.insert(
            s,
            Client {
                rid: rid.to_vec(),
                conn: if admitted.stranger {
                    Conn::stranger(admitted.window, budget.clone(), now)
                } else {
                    Conn::granted(admitted.window, budget.clone(), now)
                },
                stranger: admitted.stranger,
                closing: None,
                source,
                over_since: None,
                owing: false,
            },
        );
        self.clients_by_rid.insert(rid.to_vec(), s);
        self.shared.set_client(s, Some(budget));
        self.flush_grant(ConnRef::Client(s));
        self.shared.publish(PeerEvent::ClientConnected {
            session: SessionRid::new(s),
        });
        self.client_event(ClientEvent::Connected {
            session: SessionRid::new(s),
        });
        Some(s)
    }

    /// The node ends a session (`close_client`, timeout, shutdown): no new pushes are admitted
    /// and records from the client are dropped from now on; what is queued for it goes out
    /// first (FIFO), then [`Engine::finish_client`] sends the Disconnect and removes it. A
    /// PAUSED queue is finished by `flush_paused` once it drained, or by the timers after the
    /// peer timeout. Unknown or already closing sessions: nothing.
    pub(super) fn close_client(&mut self, session: u64, cause: ClientCloseCause, now: Instant) {
        let Some(c) = self.clients.get_mut(&session) else {
            return;
        };
        if c.closing.is_some() {
            return;
        }
        c.closing = Some((cause, now));
        self.shared.set_client(session, None);
        if self.flush_client(session) {
            self.paused_clients.remove(&session);
            self.finish_client(session);
        } else {
            self.paused_clients.insert(session);
        }
    }

    /// Ends a closing session: one last try at its queue, then Disconnect { reason } to the
    /// client (best effort: control never waits), its routing id tombstoned, and removal
    /// (what is still queued is dropped, counted `PeerLost`).
    pub(super) fn finish_client(&mut self, session: u64) {
        let Some((cause, _)) = self.clients.get(&session).and_then(|c| c.closing) else {
            return;
        };
        self.flush_client(session);
        if let Some(reason) = cause.disconnect_reason()
            && let Some(c) = self.clients.get(&session)
        {
            let rid = c.rid.clone();
            self.send_control(
                LinkKind::Client,
                &rid,
                Record::Disconnect(Disconnect { reason }),
            );
            self.tombstones.insert(rid, reason);
        }
        self.remove_client(session, cause);
    }

    /// `session`'s queue went over its outbound budget (a reply of `reply` bytes, which never
    /// waits, put it there): when the queue held more than twice the budget's bytes before
    /// that reply, it is closed as a slow consumer now; else the moment is noted, and
    /// housekeeping closes it once it stayed over for `ClientOutbound::grace`
    /// ([`Engine::check_slow_consumers`]). The reply itself is not held against the session:
    /// one larger than the budget is queued whole (a client that reads takes it), and the
    /// queue holds at most twice the budget plus one reply.
    #[cold]
    pub(super) fn over_budget(&mut self, session: u64, reply: u64) {
        let Some(c) = self.clients.get_mut(&session) else {
            return;
        };
        let limit = c.conn.budget.limit().bytes;
        let before = c.conn.budget.reserved_bytes().saturating_sub(reply);
        if before > limit.saturating_mul(2) {
            self.slow_consumer(session, self.now);
        } else if c.over_since.is_none() {
            c.over_since = Some(self.now);
            self.over_budget.push(session);
        }
    }

    /// Housekeeping: sessions whose queue stayed over their outbound budget for longer than
    /// the grace are closed as slow consumers; a session back within its budget is forgiven.
    pub(super) fn check_slow_consumers(&mut self, now: Instant) {
        if self.over_budget.is_empty() {
            return;
        }
        let grace = self.cfg.client_outbound.grace;
        let mut slow = Vec::new();
        let clients = &mut self.clients;
        self.over_budget.retain(|s| {
            let Some(c) = clients.get_mut(s) else {
                return false;
            };
            let Some(since) = c.over_since else {
                return false;
            };
            if c.conn.budget.reserved_bytes() <= c.conn.budget.limit().bytes {
                c.over_since = None;
                return false;
            }
            if c.closing.is_none() && now.saturating_duration_since(since) > grace {
                slow.push(*s);
                return false;
            }
            true
        });
        for s in slow {
            self.slow_consumer(s, now);
        }
    }

    /// Closes `session` as a slow consumer: counted, Disconnect { SlowConsumer } tried, and
    /// what is still queued for it dropped (a client that does not read is not waited for).
    fn slow_consumer(&mut self, session: u64, now: Instant) {
        self.shared
            .counters
            .drop(DropReason::SlowConsumer, &format_args!("client {session}"));
        self.close_client(
            session,
            ClientCloseCause::Closed(DisconnectReason::SlowConsumer),
            now,
        );
        if self.clients.contains_key(&session) {
            self.finish_client(session);
        }
    }

    /// Removes a session: queued records released (counted `PeerLost`), maps cleaned, events
    /// published (the lossless `Disconnected` after the session's last record went up).
    pub(super) fn remove_client(&mut self, session: u64, cause: ClientCloseCause) {
        let Some(mut c) = self.clients.remove(&session) else {
            return;
        };
        for out in c.conn.queue.drain(..) {
            release(&c.conn.budget, &out);
            self.shared.counters.drop(DropReason::PeerLost, &session);
        }
        self.clients_by_rid.remove(&c.rid);
        self.admission.closed(c.source.as_ref(), c.stranger);
        self.paused_clients.remove(&session);
        self.shared.set_client(session, None);
        self.shared.publish(PeerEvent::ClientDisconnected {
            session: SessionRid::new(session),
        });
        if self.client_events.is_none() {
            return;
        }
        if self.up.holds_session(session) {
            self.up.held.push_back(Held::Ended(session, cause));
        } else {
            // Records of this pass still in the inbound batch go up first.
            self.up.inbound.flush();
            self.client_event(ClientEvent::Disconnected {
                session: SessionRid::new(session),
                cause,
            });
        }
    }

    /// The node's session layer accepted a stranger's session: full window (the difference
    /// granted now), no longer counted as a stranger. A no-op for unknown or accepted sessions.
    pub(super) fn accept_client(&mut self, session: u64) {
        let Some(c) = self.clients.get_mut(&session).filter(|c| c.stranger) else {
            return;
        };
        c.stranger = false;
        c.conn.widen(self.admission.accepted(c.source.as_ref()));
        self.flush_grant(ConnRef::Client(session));
        self.note_owing(session);
    }

    /// `session`'s receive window changed (a record arrived, credit was freed, refunded or
    /// widened): housekeeping grants what it still owes then. Housekeeping looks only at the
    /// sessions listed here, not at every session.
    #[inline]
    pub(super) fn note_owing(&mut self, session: u64) {
        if let Some(c) = self.clients.get_mut(&session)
            && !c.owing
        {
            c.owing = true;
            self.owing.push(session);
        }
    }

    /// Sends a session event on the lossless channel, if it was taken (and is still read).
    pub(super) fn client_event(&mut self, ev: ClientEvent) {
        if let Some(tx) = &self.client_events
            && tx.send(ev).is_err()
        {
            self.client_events = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Tombstones are bounded by their count: the oldest routing id is forgotten first; closing
    // the same connection again keeps one entry (with the latest reason).
    #[test]
    fn tombstones_forget_the_oldest_beyond_their_bound() {
        let mut t = Tombstones::new(2);
        assert_eq!(t.get(b"a"), None);
        t.insert(b"a".to_vec(), DisconnectReason::Timeout);
        t.insert(b"b".to_vec(), DisconnectReason::Closed);
        t.insert(b"b".to_vec(), DisconnectReason::Replaced);
        assert_eq!(t.get(b"a"), Some(DisconnectReason::Timeout));
        assert_eq!(t.get(b"b"), Some(DisconnectReason::Replaced));
        t.insert(b"c".to_vec(), DisconnectReason::Shutdown);
        assert_eq!(t.get(b"a"), None, "oldest forgotten");
        assert_eq!(t.get(b"b"), Some(DisconnectReason::Replaced));
        assert_eq!(t.get(b"c"), Some(DisconnectReason::Shutdown));
        assert_eq!((t.reasons.len(), t.order.len()), (2, 2));
        // A bound of 0 still remembers the last one.
        let mut t = Tombstones::new(0);
        t.insert(b"x".to_vec(), DisconnectReason::Closed);
        assert_eq!(t.get(b"x"), Some(DisconnectReason::Closed));
    }
}
