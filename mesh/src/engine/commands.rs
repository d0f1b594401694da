//! Commands from the API handles ([`Command`]): sends and requests queued for their
//! connection, replies, session and sink control.

use super::*;

impl Engine {
    pub(super) fn handle_command(&mut self, cmd: Command) {
        match cmd {
            Command::Connect(addr) => self.connect(addr),
            Command::Send {
                dest,
                frames,
                bytes,
            } => self.send_app(dest, Out::parts(frames, Some(bytes), 0)),
            Command::Flush(outbox) => {
                let mut items = std::mem::take(&mut self.outbox_buf);
                outbox.take_into(&mut items);
                let mut items_iter = items.drain(..);
                while let Some(item) = items_iter.next() {
                    match item {
                        OutItem::Send { frames, bytes } => {
                            // A run of one-way records: one peer lookup for the run.
                            let mut run =
                                std::iter::once((frames, bytes)).chain(std::iter::from_fn(|| {
                                    let next = items_iter.as_slice().first()?;
                                    if !matches!(next, OutItem::Send { .. }) {
                                        return None;
                                    }
                                    match items_iter.next() {
                                        Some(OutItem::Send { frames, bytes }) => {
                                            Some((frames, bytes))
                                        }
                                        _ => None,
                                    }
                                }));
                            self.queue_sends(&outbox, &mut run);
                        }
                        OutItem::Framed(run) => self.queue_framed(&outbox, run),
                        OutItem::Cancel { corr } => {
                            if let Some(w) = self.corr.handle_cancel(corr) {
                                drop(w);
                            }
                        }
                        OutItem::Request {
                            corr,
                            deadline,
                            frames,
                            bytes,
                            waiter,
                        } => self.start_request(
                            outbox.node.clone(),
                            outbox.generation,
                            corr,
                            deadline,
                            Out::parts(frames, Some(bytes), corr),
                            waiter,
                        ),
                    }
                }
                drop(items_iter);
                self.outbox_buf = items;
            }
            Command::Reply { to, frames } => self.send_reply(to, frames),
            Command::ClientEvents(tx) => {
                // Live sessions are announced first (they began before the channel existed).
                let mut live: Vec<u64> = self.clients.keys().copied().collect();
                live.sort_unstable();
                self.client_events = Some(tx);
                for session in live {
                    self.client_event(ClientEvent::Connected {
                        session: SessionRid::new(session),
                    });
                }
            }
            Command::CloseClient { session, reason } => {
                self.close_client(session, ClientCloseCause::Closed(reason), self.now);
            }
            Command::AcceptClient { session } => self.accept_client(session),
            Command::SetSink(sink) => self.up.sink = Some(sink),
            Command::ReleaseCredit => {
                let released = std::mem::take(
                    &mut *self
                        .shared
                        .released
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()),
                );
                for crate::reply::Released {
                    origin,
                    records,
                    bytes,
                } in released
                {
                    let from = match &origin {
                        Origin::Peer { node, generation } => ConnRef::Peer(node, Some(*generation)),
                        Origin::Client { session } => ConnRef::Client(session.get()),
                    };
                    self.credit_freed(from, records, bytes);
                }
            }
            #[cfg(feature = "testing")]
            Command::Hold { release, held } => {
                let _ = held.send(());
                // Released when the guard (the only sender) is dropped: `recv` then fails.
                if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    release.recv_timeout(HOLD_LIMIT)
                {
                    tracing::warn!("test hold of the mesh I/O thread expired");
                }
                // The thread was held: what it does next is a new pass, after a time away.
                self.resume_at(Instant::now());
            }
            Command::Shutdown => self.running = false,
            #[cfg(feature = "testing")]
            Command::Abort => {
                self.running = false;
                self.aborted = true;
            }
        }
    }

    /// The peer of `outbox` while the lifecycle the outbox was made for is up (`None` once it
    /// ended: what the outbox still holds is discarded).
    fn outbox_peer(&mut self, outbox: &Outbox) -> Option<&mut Peer> {
        self.peers
            .get_mut(&*outbox.node)
            .filter(|p| p.up && p.generation == Some(outbox.generation))
    }

    /// Queues a run of admitted one-way records of `outbox`'s lifecycle (transmitted at the end
    /// of the pass, like [`Engine::send_app`]): one peer lookup for the whole run. Records of
    /// a lifecycle that ended are discarded, their budget released, each counted `PeerLost`.
    pub(super) fn queue_sends(
        &mut self,
        outbox: &Outbox,
        run: &mut dyn Iterator<Item = (Parts, u64)>,
    ) {
        let node = &outbox.node;
        let Some(p) = self.outbox_peer(outbox) else {
            for (_, bytes) in run {
                outbox.budget.release(bytes);
                self.shared.counters.drop(DropReason::PeerLost, node);
            }
            return;
        };
        let was_empty = p.conn.queue.is_empty();
        for (frames, bytes) in run {
            p.conn.queue.push_back(Out::parts(frames, Some(bytes), 0));
        }
        if was_empty && !p.conn.queue.is_empty() {
            self.dirty.push(node.clone());
        }
    }

    /// Queues a run of one-way records framed by their senders ([`Framed`]) for the outbox's
    /// peer lifecycle, as [`Engine::queue_sends`] does records one by one.
    pub(super) fn queue_framed(&mut self, outbox: &Outbox, run: Box<Framed>) {
        let node = &outbox.node;
        let Some(p) = self.outbox_peer(outbox) else {
            outbox
                .budget
                .release_n(run.records() as u64, run.reserved());
            for _ in 0..run.records() {
                self.shared.counters.drop(DropReason::PeerLost, node);
            }
            return;
        };
        let was_empty = p.conn.queue.is_empty();
        p.conn.queue.push_back(Out::framed(run));
        if was_empty {
            self.dirty.push(node.clone());
        }
    }

    /// Registers a request in the correlation table (its deadline and waiter live here from
    /// now on) and queues it like relay data; a request for a lifecycle that already ended
    /// ends at once with `PeerLost`.
    pub(super) fn start_request(
        &mut self,
        node: Arc<NodeRid>,
        generation: NodeGeneration,
        corr: u64,
        deadline: Instant,
        out: Out,
        waiter: Waiter,
    ) {
        let bytes = out.bytes.unwrap_or(0);
        let current = self
            .peers
            .get(&node)
            .filter(|p| p.up && p.generation == Some(generation))
            .is_some();
        if !current {
            self.release_peer_budget(&node, bytes);
            let _ = waiter.send(Err(RequestError::PeerLost));
            return;
        }
        if let Err(w) = self
            .corr
            .register(corr, (node.clone(), generation), deadline, waiter)
        {
            self.release_peer_budget(&node, bytes);
            let _ = w.send(Err(RequestError::Closed));
            return;
        }
        self.send_app(Dest::Peer { node, generation }, out);
    }

    pub(super) fn mark_paused(&mut self, node: &NodeRid) {
        if !self.paused.contains(node) {
            self.paused.insert(node.clone());
        }
    }

    pub(super) fn release_peer_budget(&self, node: &NodeRid, bytes: u64) {
        if let Some(p) = self.peers.get(node) {
            p.conn.budget.release(bytes);
        } else if let Some(slot) = self.shared.peer_slot(node) {
            slot.budget.release(bytes);
        }
    }
}
