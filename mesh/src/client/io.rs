//! The `MeshClient`'s I/O thread: its pass over the DEALER (the outbox taken, the send queue
//! flushed through the connection core, reads, Pings, deadlines), run by the mesh's one driver
//! loop ([`crate::driver`], also the node engine's: one clock read per pass, the spin, the one
//! sleeping poll), and the DEALER as the transport of `conn::flush`.

use super::*;
use crate::driver::{Driver, Pass, Ready};

/// Longest the client's I/O thread spins (yields) watching for work before it sleeps.
const SPIN_LIMIT: Duration = Duration::from_micros(200);

/// The DEALER's bit in [`ClientIo::ready`].
const DEALER: u8 = 1;
/// The monitor's bit in [`ClientIo::ready`].
const MON: u8 = 16;

pub(super) struct ClientIo {
    pub(super) dealer: zmq::Socket,
    /// Connection events of the DEALER: a lost connection ends the node's session, and with
    /// it the credit it granted.
    pub(super) mon: zmq::Socket,
    pub(super) door: Door<Cmd>,
    /// The `ZMQ_FD`s and drained bits of the dealer ([`DEALER`]), the doorbell
    /// ([`Ready::DOOR`]) and the monitor ([`MON`]): the readiness check of a pass and of the
    /// sleep.
    pub(super) ready: Ready,
    pub(super) shared: Arc<ClientShared>,
    pub(super) corr: Correlations<(), Waiter>,
    pub(super) pushes: PushSender,
    pub(super) stalled: Option<Push>,
    /// The connection core ([`crate::conn`]), the node's as seen from here: the send queue
    /// (requests and DATA, PAUSED or waiting for the end of the pass to share a batch frame)
    /// with the admission budget, and the credit the node granted (FlowCredit: requests and
    /// DATA go out only within it; none before the node's first grant, which answers the
    /// first Ping). No receive window: what the node sends is bounded by the push channel.
    pub(super) conn: Conn,
    /// The time of the current pass of the loop: read once per pass (at its start, and again
    /// after a sleep) and used by everything the pass does — ingress, liveness, Pings, request
    /// deadlines at transmission.
    pub(super) now: Instant,
    /// Mesh Ping interval (the Pings themselves: [`Conn::poll_ping`]).
    pub(super) ping_interval: Duration,
    pub(super) tap: Option<WireTap>,
    pub(super) limits: Limits,
    pub(super) batching: Batching,
    /// Yields before sleeping (`ClientConfig::io_spin_yields`).
    pub(super) spin: usize,
    /// Reused buffers of [`ClientIo::take_outbox`]: the outbox's next record queue (empty),
    /// its requests and its cancels.
    pub(super) spare: std::collections::VecDeque<Out>,
    pub(super) taken_requests: Vec<NewRequest>,
    pub(super) taken_cancels: Vec<u64>,
    /// The records of a received batch frame behind a push that found the push channel full
    /// (`stalled`): the frame and the index of the first record not handled yet. Handled, in
    /// order, once the stalled push was taken; nothing is read from the socket before that.
    pub(super) rest: Option<(zlink_wire::BatchFrame, usize)>,
    /// Decode memo of the last push envelope (see `memo::DecodeMemo`).
    pub(super) memo: DecodeMemo,
    /// A record from the node was handled in this read pass (liveness, see `read`).
    pub(super) heard: bool,
    /// The node closed the session (its 149 Disconnect): the I/O thread stops.
    pub(super) server_closed: Option<DisconnectReason>,
    pub(super) _ctx: zmq::Context,
}

impl ClientIo {
    /// The `ZMQ_FD`s of the sockets by their bits in [`ClientIo::ready`].
    pub(super) fn fds(
        dealer: std::os::fd::RawFd,
        door: std::os::fd::RawFd,
        mon: std::os::fd::RawFd,
    ) -> [std::os::fd::RawFd; 8] {
        let mut fds = [-1; 8];
        fds[DEALER.trailing_zeros() as usize] = dealer;
        fds[Ready::DOOR.trailing_zeros() as usize] = door;
        fds[MON.trailing_zeros() as usize] = mon;
        fds
    }

    pub(super) fn run(mut self) {
        crate::driver::run(&mut self);
    }

    /// Longest the thread may sleep: until the next Ping or request deadline; at most 1 ms
    /// while a push is stalled, records wait in the send queue or a Ping did not get through.
    fn timeout(&self) -> Duration {
        let now = self.now;
        let pinged = self.conn.next_ping() > now;
        let mut t = self.conn.next_ping().saturating_duration_since(now);
        if let Some(d) = self.corr.poll_timeout() {
            t = t.min(d.saturating_duration_since(now));
        }
        if self.stalled.is_some() || !self.conn.queue.is_empty() || !pinged {
            t = t.min(Duration::from_millis(1));
        }
        t
    }

    /// After the last pass: the node's Disconnect made visible, or ours sent; every request
    /// still open ended and what was never transmitted released.
    fn finish(&mut self) {
        self.pushes.flush();
        let error = match self.server_closed {
            Some(reason) => {
                // The node ended the session: nothing more is sent. The reason is visible
                // before any request fails with it; the pushes received before the
                // Disconnect are in the channel, which ends when this thread does.
                self.shared
                    .close_code
                    .store(reason.code(), Ordering::Release);
                self.shared.close_tx.send_replace(Some(reason));
                RequestError::SessionClosed(reason)
            }
            None => {
                let f = codec::encode_control(Record::Disconnect(Disconnect {
                    reason: DisconnectReason::Shutdown,
                }));
                let _ = self.raw_send(&f);
                RequestError::Closed
            }
        };
        close_all(&mut self.corr, &error);
        for out in self.conn.queue.drain(..) {
            conn::release(&self.conn.budget, &out);
        }
        // What was handed over since the last take is never transmitted: closed out here.
        let mut outbox = self.shared.outbox();
        outbox.closed = true;
        let queue = std::mem::take(&mut outbox.queue);
        let requests = std::mem::take(&mut outbox.requests);
        drop(outbox);
        for out in &queue {
            conn::release(&self.conn.budget, out);
        }
        for r in requests {
            let _ = r.waiter.send(Err(error.clone()));
        }
    }

    /// Takes what the senders handed over ([`Outbox`]): its requests are registered (before
    /// any of them can be transmitted), then its cancels applied (each behind its request).
    /// Its records are taken out under the lock without a copy (the outbox keeps a spare
    /// buffer) when the send queue holds less than a batch frame's `max_records`: they become
    /// the send queue, the few records it held moved in front of them. A longer send queue
    /// (waiting for credit or libzmq) only has its last run topped up to a whole batch frame
    /// from the front of the outbox (at most `max_records` − 1 records moved); the rest stay
    /// in the outbox until the send queue drained ([`ClientIo::flush`]). So a run of small
    /// records is not cut where one take ended and the next began, and an outbox that filled
    /// during a credit stall is never copied record by record. True if records were taken.
    fn take_outbox(&mut self) -> bool {
        if !self.shared.outbox_full.load(Ordering::Acquire) {
            return false;
        }
        let mut requests = std::mem::take(&mut self.taken_requests);
        let mut cancels = std::mem::take(&mut self.taken_cancels);
        let max = self.batching.max_records.max(1);
        let queued = self.conn.queue.len();
        let (taken, topped) = {
            let mut outbox = self.shared.outbox();
            let mut taken = None;
            let mut topped = false;
            if queued < max {
                taken = (!outbox.queue.is_empty())
                    .then(|| std::mem::replace(&mut outbox.queue, std::mem::take(&mut self.spare)));
            } else {
                for _ in 0..(max - queued % max) % max {
                    let Some(out) = outbox.queue.pop_front() else {
                        break;
                    };
                    self.conn.queue.push_back(out);
                    topped = true;
                }
            }
            std::mem::swap(&mut requests, &mut outbox.requests);
            std::mem::swap(&mut cancels, &mut outbox.cancels);
            self.shared
                .outbox_full
                .store(!outbox.queue.is_empty(), Ordering::Release);
            (taken, topped)
        };
        let took = topped || taken.is_some();
        if let Some(mut taken) = taken {
            // The send queue's few records go in front of the taken ones (order kept).
            while let Some(out) = self.conn.queue.pop_back() {
                taken.push_front(out);
            }
            std::mem::swap(&mut self.conn.queue, &mut taken);
            self.spare = taken;
        }
        for r in requests.drain(..) {
            if let Err(w) = self.corr.register(r.corr, (), r.deadline, r.waiter) {
                // Never transmitted: out of the queues again, its reservation released.
                self.unqueue(r.corr);
                let _ = w.send(Err(RequestError::Closed));
            }
        }
        for c in cancels.drain(..) {
            drop(self.corr.handle_cancel(c));
        }
        self.taken_requests = requests;
        self.taken_cancels = cancels;
        took
    }

    /// Removes the last queued record of request `corr` (send queue or outbox) and releases
    /// its reservation.
    fn unqueue(&mut self, corr: u64) {
        let mut outbox = self.shared.outbox();
        let out = match outbox.queue.iter().rposition(|o| o.corr == corr) {
            Some(i) => outbox.queue.remove(i),
            None => {
                drop(outbox);
                let i = self.conn.queue.iter().rposition(|o| o.corr == corr);
                i.and_then(|i| self.conn.queue.remove(i))
            }
        };
        if let Some(out) = out {
            conn::release(&self.conn.budget, &out);
        }
    }

    /// A lost connection ends the node's session: the credit it granted is void (the next
    /// connection is a new session with a fresh grant, which the first Ping on it obtains).
    fn read_monitor(&mut self) {
        // Read until EAGAIN: drained (a monitor is never sent on from here).
        self.ready.set_drained(MON, true);
        while let Some((first, _)) = recv_multipart(&self.mon) {
            if first.len() >= 2
                && zmq::SocketEvent::from_raw(u16::from_le_bytes([first[0], first[1]]))
                    == zmq::SocketEvent::DISCONNECTED
            {
                // A new connection is a new session: Ping at once (it grants the window).
                self.conn.reset();
                self.conn.ping_again(self.now);
                self.shared.counters.event(TransportEvent::Disconnected);
            }
        }
    }

    fn raw_send(&self, frames: &[Bytes]) -> bool {
        self.ready.touched(DEALER);
        dealer_send(&self.dealer, self.tap.as_ref(), frames)
    }

    /// Sends queued records in order while libzmq takes them and the node's window allows
    /// ([`conn::flush`], the loop a node runs for its peers): a run of small records as one
    /// 139 batch frame, a lone or large record alone, each record of a run charged to the
    /// credit on its own; a request that already ended is never put in a run (it is
    /// discarded at the front, `RequestEnded`). Once the queue drained, records handed over
    /// since the last take follow ([`ClientIo::take_outbox`]).
    fn flush(&mut self) {
        loop {
            if !self.conn.queue.is_empty() {
                self.ready.touched(DEALER);
            }
            let mut wire = DealerWire {
                dealer: &self.dealer,
                tap: self.tap.as_ref(),
                corr: &mut self.corr,
                counters: &self.shared.counters,
                now: self.now,
            };
            conn::flush(
                &mut self.conn.queue,
                &mut self.conn.credit,
                &self.conn.budget,
                &self.batching,
                &mut wire,
            );
            if !self.conn.queue.is_empty() || !self.take_outbox() {
                return;
            }
        }
    }

    fn read(&mut self) {
        if !self.resume() {
            return;
        }
        self.read_pass();
        self.pushes.flush();
        // Liveness: any record from the node counts, at the pass's time.
        if std::mem::take(&mut self.heard) {
            self.heard_now();
        }
    }

    /// Marks the node heard from at the pass's time (`MeshClient::server_alive`).
    fn heard_now(&self) {
        let ms = self
            .now
            .saturating_duration_since(self.shared.epoch)
            .as_millis() as u64;
        self.shared.last_rx_ms.store(ms.max(1), Ordering::Release);
    }

    /// Reads the dealer until EAGAIN (then it is drained, see [`Ready::drained`]), a stalled
    /// push, the node's Disconnect or 512 messages.
    fn read_pass(&mut self) {
        self.ready.set_drained(DEALER, false);
        for _ in 0..512 {
            if self.stalled.is_some() || self.server_closed.is_some() {
                return;
            }
            let Some((first, rest)) = recv_multipart(&self.dealer) else {
                self.ready.set_drained(DEALER, true);
                return;
            };
            let mut parts = Vec::with_capacity(2);
            parts.push(first);
            parts.extend(rest);
            if let Some(tap) = &self.tap {
                tap.record(TapDirection::Received, LinkKind::Client, b"", &parts);
            }
            if let [frame] = &parts[..]
                && zlink_wire::is_batch(frame)
            {
                match zlink_wire::BatchFrame::parse(frame.clone()) {
                    Ok(batch) => self.on_batch(batch, 0),
                    // Broken framing: the whole frame is dropped, once.
                    Err(e) => self
                        .shared
                        .counters
                        .drop(codec::drop_reason(&e), &format_args!("client: batch: {e}")),
                }
                continue;
            }
            match codec::decode(&parts, &self.limits) {
                Ok(d) => self.on_record(d, false),
                Err(e) => self.shared.counters.drop(codec::drop_reason(&e), &e),
            }
        }
    }

    /// The sub-records of a batch frame from index `from` on, in order, each decoded and
    /// checked exactly like a record received alone (same limits; a bad one is dropped and
    /// counted by itself). A push that finds the push channel full stops the walk: the rest
    /// of the frame waits in `rest` until that push was taken ([`ClientIo::resume`]).
    fn on_batch(&mut self, batch: zlink_wire::BatchFrame, from: usize) {
        let mut stopped_at = None;
        for (i, sub) in batch.records().enumerate().skip(from) {
            match self.decode_sub(sub) {
                Ok(d) => self.on_record(d, true),
                Err(e) => self
                    .shared
                    .counters
                    .drop(codec::drop_reason(&e), &format_args!("client: batch: {e}")),
            }
            if self.stalled.is_some() {
                stopped_at = Some(i + 1);
                break;
            }
        }
        if let Some(next) = stopped_at
            && next < batch.len()
        {
            self.rest = Some((batch, next));
        }
    }

    /// Decodes a sub-record like a record received alone. A push envelope byte-identical to
    /// the last one decoded (it depends only on the key) reuses that decode; the payload is
    /// bounded as the decoder bounds it.
    fn decode_sub(
        &mut self,
        sub: zlink_wire::BatchRecord<'_>,
    ) -> Result<zlink_wire::Decoded, zlink_wire::DecodeError> {
        if let Some(p) = &sub.payload
            && p.len() <= self.limits.max_payload
            && let Some(header) = self.memo.header(sub.envelope)
        {
            return Ok(zlink_wire::Decoded {
                header,
                record: self.memo.record(),
                payload: sub.payload,
            });
        }
        let d = sub.decode(&self.limits)?;
        if d.payload.is_some() {
            self.memo.store(sub.envelope, &d);
        }
        Ok(d)
    }

    /// Hands up what a full push channel held back: the stalled push, then the rest of its
    /// batch frame. True when nothing is held back any more (reading may go on).
    fn resume(&mut self) -> bool {
        if let Some(p) = self.stalled.take() {
            if let Err(p) = self.pushes.try_push(p) {
                self.stalled = Some(p);
                // What the application has not taken yet must reach it.
                self.pushes.flush();
                return false;
            }
        }
        if let Some((batch, from)) = self.rest.take() {
            self.on_batch(batch, from);
        }
        self.pushes.flush();
        self.stalled.is_none()
    }

    /// One record from the node (alone or from a batch). Inside a batch only pushes and
    /// replies are accepted (control records travel alone, SB-5.4): anything else there is
    /// dropped as `WrongConnection`, like a record that has no business on this connection.
    fn on_record(&mut self, d: zlink_wire::Decoded, in_batch: bool) {
        let corr = d.header.correlation.get();
        self.heard = true;
        // A push (the hot path) is classified without moving its record out.
        if let Record::Push(p) = &d.record {
            let key = p.key;
            if self.verdict(&Class::Push, in_batch) == Some(Verdict::Deliver) {
                let p = Push {
                    key,
                    payload: d.payload,
                };
                if let Err(p) = self.pushes.try_push(p) {
                    self.stalled = Some(p);
                }
            }
            return;
        }
        let class = codec::classify(&d.record);
        let record = Some(d.record);
        let Some(verdict) = self.verdict(&class, in_batch) else {
            return;
        };
        match verdict {
            Verdict::Control { resume } => {
                if resume {
                    self.flush();
                }
            }
            // The node ended this session: nothing after it on this connection counts.
            Verdict::Disconnect => {
                if let Class::Disconnect(reason) = class {
                    self.server_closed = Some(reason);
                }
            }
            Verdict::Complete => match self.corr.handle_reply(corr, &()) {
                ReplyOutcome::Deliver(w) => {
                    // The pushes that arrived before the reply are handed over first.
                    self.pushes.flush();
                    if let Some(rec) = record {
                        let _ = w.send(crate::engine::reply_result(rec, d.payload));
                    }
                }
                ReplyOutcome::Late(t) => self
                    .shared
                    .counters
                    .drop(DropReason::LateReply, &format_args!("after {t:?}")),
                _ => self.shared.counters.drop(DropReason::UnknownReply, &corr),
            },
            Verdict::Deliver | Verdict::Answer(_) | Verdict::Drop(_) => self
                .shared
                .counters
                .drop(DropReason::WrongConnection, &"client"),
        }
    }

    /// One record's verdict from the connection core ([`Conn::ingress`]: credit added,
    /// liveness noted), after the batch rule (inside a batch only pushes and replies; control
    /// records travel alone, SB-5.4); `None` when it was dropped (counted here).
    #[inline]
    fn verdict(&mut self, class: &Class, in_batch: bool) -> Option<Verdict> {
        if in_batch && !Lane::Server.batchable(class) {
            self.shared.counters.drop(
                DropReason::WrongConnection,
                &"client: control record inside a batch",
            );
            return None;
        }
        match self.conn.ingress(Lane::Server, class, 0, self.now) {
            Verdict::Drop(reason) => {
                self.shared.counters.drop(reason, &"client");
                None
            }
            v => Some(v),
        }
    }
}

/// The client's I/O thread as the mesh's one driver loop runs it ([`crate::driver::run`]).
impl Driver for ClientIo {
    #[inline]
    fn begin(&mut self, now: Instant) {
        self.now = now;
    }

    /// Commands (rings) → the outbox taken → (a Close: what was admitted flushed, stop) →
    /// monitor → send queue flushed → a stalled push resumed → request deadlines → Ping →
    /// the dealer read → pushes handed over. The monitor and the dealer are read when they
    /// may have something ([`Ready::to_read`]: not drained, or their FD signaled, and not
    /// found quiet by the sleep that ended the previous pass).
    fn pass(&mut self, quiet: u8) -> Pass {
        let mut close = false;
        while let Ok(cmd) = self.door.rx.try_recv() {
            match cmd {
                Cmd::Outbox | Cmd::Resume => {}
                Cmd::Close => close = true,
            }
        }
        // After the rings: a Close comes behind every record handed over before it.
        self.take_outbox();
        if close {
            // What was admitted before the Close goes out as far as credit and libzmq
            // allow, as it would have in a pass without the Close.
            self.flush();
            return Pass::Stop;
        }
        // Which of the monitor and the dealer may have something (one `poll()` when both are
        // drained): the monitor before anything is sent (a lost connection voids the credit).
        // A send below clears the dealer's drained bit, so the sleep's level check looks at
        // it again whatever this said.
        let read = self.ready.to_read(MON | DEALER, quiet);
        if read & MON != 0 {
            self.read_monitor();
        }
        self.flush();
        if self.stalled.is_some() {
            self.resume();
        }
        let now = self.now;
        if self.stalled.is_some() {
            // Not reading (pushes not taken): silence proves nothing about the node.
            self.heard_now();
        }
        expire(&mut self.corr, now);
        // Until a Ping got through (the first creates the session on the node, which
        // grants the window on it), it is retried on every pass, not once per interval.
        if let Some(ping) = self.conn.poll_ping(now, self.ping_interval) {
            let f = codec::encode_control(Record::Ping(ping));
            if !self.raw_send(&f) {
                self.conn.ping_again(now);
            }
        }
        if read & DEALER != 0 {
            self.read();
            if self.server_closed.is_some() {
                return Pass::Stop;
            }
        }
        self.pushes.flush();
        // A reply usually follows a request within a spin; the dealer's level is checked
        // again before any sleep.
        Pass::Idle
    }

    /// Yields the CPU up to `spin` times while watching for commands or a readable dealer
    /// ([`Ready::spin`]; not while a full push channel keeps the dealer unread), for at most
    /// [`SPIN_LIMIT`] and never past the next Ping or deadline: on a busy machine one yield
    /// can last a whole time slice, and a late Ping would make the node look dead.
    fn spin(&mut self) -> Option<u8> {
        if self.stalled.is_some() || self.spin == 0 {
            return None;
        }
        let until = Instant::now() + self.timeout().min(SPIN_LIMIT);
        self.ready
            .spin(self.spin, &self.door, DEALER, 0, Some(until), |bit| {
                (bit == DEALER).then_some(&self.dealer)
            })
    }

    /// Sleeps at most until the next Ping or deadline ([`ClientIo::timeout`], at least 1 ms)
    /// until the doorbell rings, the monitor has an event (read at the top of the next pass)
    /// or, unless a push is stalled, the dealer is readable ([`Ready::wait`]); then reads the
    /// dealer if it is.
    fn sleep(&mut self) -> Option<u8> {
        let ms = self.timeout().as_millis().max(1) as i64;
        let dealer = if self.stalled.is_none() { DEALER } else { 0 };
        let woke = self.ready.wait(
            &self.shared.bell,
            &self.door,
            Ready::DOOR | MON | dealer,
            0,
            ms,
            |bit| match bit {
                DEALER => Some(&self.dealer),
                MON => Some(&self.mon),
                _ => None,
            },
        );
        if woke.slept {
            // Slept: what it reads now is a new pass.
            self.now = Instant::now();
        }
        if woke.ready & dealer != 0 {
            self.read();
            if self.server_closed.is_some() {
                return None;
            }
        }
        Some(woke.quiet & dealer)
    }

    fn end(&mut self) {
        self.finish();
    }
}

/// Sends one message on the client's DEALER without blocking; false if libzmq refused it.
fn dealer_send(dealer: &zmq::Socket, tap: Option<&WireTap>, frames: &[Bytes]) -> bool {
    if !crate::engine::send_parts(dealer, frames) {
        return false;
    }
    if let Some(tap) = tap {
        tap.record(TapDirection::Sent, LinkKind::Client, b"", frames);
    }
    true
}

/// The client's DEALER as the [`Transport`] of [`conn::flush`]: the socket and the correlation
/// table a queued request is checked against at transmission.
struct DealerWire<'c> {
    dealer: &'c zmq::Socket,
    tap: Option<&'c WireTap>,
    corr: &'c mut Correlations<(), Waiter>,
    counters: &'c Counters,
    /// The pass's time (request deadlines are checked against it at transmission).
    now: Instant,
}

impl Transport for DealerWire<'_> {
    /// A lone record as its own frames, several as one 139 batch frame handed to libzmq
    /// without a copy ([`conn::encode_run`]); a refusal (HWM) is PAUSED (a DEALER has no
    /// unreachable peer).
    #[inline]
    fn send_run<'a>(
        &mut self,
        mut run: impl ExactSizeIterator<Item = &'a Parts>,
        frame: usize,
    ) -> SendOutcome {
        let sent = if run.len() <= 1 {
            match run.next() {
                Some(frames) => dealer_send(self.dealer, self.tap, frames),
                None => true,
            }
        } else {
            let frame = conn::encode_run(run, frame);
            let tapped = self.tap.map(|_| Bytes::copy_from_slice(&frame));
            let sent = self.dealer.send(frame, zmq::DONTWAIT).is_ok();
            if sent
                && let Some(tap) = self.tap
                && let Some(frame) = tapped
            {
                tap.record(TapDirection::Sent, LinkKind::Client, b"", &[frame]);
            }
            sent
        };
        if sent {
            SendOutcome::Sent
        } else {
            SendOutcome::Paused
        }
    }

    /// A framed run (the client frames none itself): sent copied, so a refused one stays
    /// whole for the retry.
    fn send_framed(&mut self, run: &mut conn::Framed) -> SendOutcome {
        let sent = match run.lone() {
            Some(r) => dealer_send(
                self.dealer,
                self.tap,
                &Parts::new(
                    Bytes::copy_from_slice(r.envelope),
                    r.payload.map(Bytes::copy_from_slice),
                ),
            ),
            None => {
                let sent = self.dealer.send(run.frame(), zmq::DONTWAIT).is_ok();
                if sent && let Some(tap) = self.tap {
                    tap.record(
                        TapDirection::Sent,
                        LinkKind::Client,
                        b"",
                        &[Bytes::copy_from_slice(run.frame())],
                    );
                }
                sent
            }
        };
        if sent {
            SendOutcome::Sent
        } else {
            SendOutcome::Paused
        }
    }

    fn ended(&mut self, corr: u64) -> bool {
        ended_before_transmission(self.corr, corr, self.now, self.counters, &"client")
    }

    fn expired(&self, corr: u64) -> bool {
        self.corr.is_ended_at(corr, self.now)
    }

    fn lost(&mut self, _out: &Out) {
        self.counters.drop(DropReason::PeerLost, &"client");
    }
}
