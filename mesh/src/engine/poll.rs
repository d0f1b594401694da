//! The engine's sockets and how it waits on them: which sockets may have something to read
//! (`Sockets`: their `ZMQ_FD`s and drained bits), the idle spin, the one sleeping poll of a
//! pass, and the batched reads of data sockets and monitors.

use super::*;

pub(super) struct Sockets {
    pub(super) relay: zmq::Socket,
    pub(super) completion: zmq::Socket,
    pub(super) client: Option<zmq::Socket>,
    pub(super) mon_relay: zmq::Socket,
    pub(super) mon_completion: zmq::Socket,
    pub(super) mon_client: Option<zmq::Socket>,
    /// The `ZMQ_FD` of each socket, by bit index ([`Sockets::bit`], the doorbell at
    /// [`Sockets::DOOR`], the monitors after it); -1 for an absent one. The readiness check of
    /// the spin, of a pass and of the sleep (see [`Sockets::drained`]).
    pub(super) fds: [std::os::fd::RawFd; 7],
    /// One bit per socket: the last libzmq call on it that can process its commands was a
    /// receive that ended in EAGAIN (or a `ZMQ_EVENTS` without POLLIN). libzmq then processed
    /// its commands and marked its empty pipes inactive, so a message arriving later makes
    /// the writer send `activate_read`, which signals the socket's `ZMQ_FD` (edge-triggered:
    /// readable while a command waits, not while a message does). Such a socket has nothing
    /// to read while its FD is quiet. Any other call (send, connect, disconnect) may process
    /// commands and activate a pipe without the FD: it clears the bit
    /// ([`Sockets::touched`]), and the socket is read (or asked) again.
    pub(super) drained: std::cell::Cell<u8>,
}

impl Sockets {
    pub(super) const RELAY: u8 = 1;
    pub(super) const COMPLETION: u8 = 2;
    pub(super) const CLIENT: u8 = 4;
    /// The doorbell (`Door::socket`), only ever received from on this thread.
    pub(super) const DOOR: u8 = 8;
    pub(super) const MON_RELAY: u8 = 16;
    pub(super) const MON_COMPLETION: u8 = 32;
    pub(super) const MON_CLIENT: u8 = 64;

    pub(super) fn bit(kind: LinkKind) -> u8 {
        match kind {
            LinkKind::Relay => Self::RELAY,
            LinkKind::Completion => Self::COMPLETION,
            LinkKind::Client => Self::CLIENT,
        }
    }

    pub(super) fn mon_bit(kind: LinkKind) -> u8 {
        Self::bit(kind) << 4
    }

    /// Every data socket this node has.
    pub(super) fn all(&self) -> u8 {
        if self.client.is_some() {
            Self::RELAY | Self::COMPLETION | Self::CLIENT
        } else {
            Self::RELAY | Self::COMPLETION
        }
    }

    /// Every monitor socket this node has.
    pub(super) fn monitors(&self) -> u8 {
        self.all() << 4
    }

    /// A call other than a receive was made on `kind`'s socket (see [`Sockets::drained`]).
    #[inline]
    pub(super) fn touched(&self, kind: LinkKind) {
        self.drained.set(self.drained.get() & !Self::bit(kind));
    }

    pub(super) fn set_drained(&self, bits: u8, drained: bool) {
        let d = self.drained.get();
        self.drained.set(if drained { d | bits } else { d & !bits });
    }

    /// Polls the `ZMQ_FD`s of the sockets in `bits` for at most `ms` (0: without waiting):
    /// those whose FD is readable (a command waits), or `None` if the poll failed.
    pub(super) fn signaled(&self, bits: u8, ms: i64) -> Option<u8> {
        let mut items: [zmq::PollItem<'_>; 7] =
            std::array::from_fn(|_| zmq::PollItem::from_fd(-1, zmq::PollEvents::empty()));
        let mut which = [0u8; 7];
        let mut n = 0;
        for (i, fd) in self.fds.iter().enumerate() {
            let bit = 1u8 << i;
            if bits & bit != 0 {
                items[n] = zmq::PollItem::from_fd(*fd, zmq::POLLIN);
                which[n] = bit;
                n += 1;
            }
        }
        zmq::poll(&mut items[..n], ms).ok()?;
        Some(
            items[..n]
                .iter()
                .zip(which)
                .filter(|(it, _)| it.is_readable())
                .fold(0, |acc, (_, bit)| acc | bit),
        )
    }

    /// Of the sockets in `undrained` that have a PAUSED queue (`waiting`, see
    /// [`Engine::waiting_room`]): those with libzmq commands not yet processed (their
    /// `ZMQ_FD` signaled; one `poll()`, none when no queue waits).
    ///
    /// A ROUTER's `ZMQ_EVENTS` says nothing about one connection's pipe, and the command that
    /// gives a full pipe room back (its write activation, sent when the reader took half of
    /// the high-water mark) signals the FD once: whatever processes it (`ZMQ_EVENTS`, a
    /// receive) must be followed by a retry of the waiting queue. So such a socket is read
    /// in a pass (which retries its queues) rather than asked for `ZMQ_EVENTS` before a
    /// sleep that only the timer would end.
    pub(super) fn commands_for_waiting(&self, undrained: u8, waiting: u8) -> u8 {
        let ask = undrained & waiting;
        if ask == 0 {
            return 0;
        }
        self.signaled(ask, 0).unwrap_or(ask)
    }

    /// Of the sockets in `bits`: those not drained, and the drained ones whose `ZMQ_FD` is
    /// signaled, except those in `quiet`. One `poll()` over the FDs of two or more drained
    /// sockets replaces a receive ending in EAGAIN on each (a `poll()` inside libzmq); a
    /// single one is read directly (the same cost).
    pub(super) fn to_read(&self, bits: u8, quiet: u8) -> u8 {
        let drained = self.drained.get() & bits;
        let ask = drained & !quiet;
        let mut read = bits & !drained;
        if ask.count_ones() >= 2 {
            read |= self.signaled(ask, 0).unwrap_or(ask);
        } else {
            read |= ask;
        }
        read
    }
}

impl Engine {
    /// Yields the CPU a few times while watching for commands or readable sockets. `Some`
    /// with the sockets seen quiet when there is work.
    ///
    /// Called after a pass that found no work. A socket not [`Sockets::drained`] is asked once
    /// for `ZMQ_EVENTS` (level: libzmq processes its commands); after that every socket is
    /// drained and one `poll()` over their `ZMQ_FD`s per turn sees every new message (and
    /// other commands: the pass then reads, which processes them) without the `poll()` that
    /// each `get_events` makes inside libzmq. `poll_once` keeps the level check
    /// (`zmq_poll` asks each socket's `ZMQ_EVENTS`) before any sleep.
    pub(super) fn spin_for_work(&self) -> Option<u8> {
        if self.cfg.io_spin_yields == 0 {
            return None;
        }
        let all = self.sockets.all();
        let undrained = all & !self.sockets.drained.get();
        if self
            .sockets
            .commands_for_waiting(undrained, self.waiting_room())
            != 0
        {
            // A pass reads it (processing its commands) and retries its PAUSED queues.
            return Some(0);
        }
        for kind in [LinkKind::Completion, LinkKind::Relay, LinkKind::Client] {
            let bit = Sockets::bit(kind);
            if undrained & bit == 0 {
                continue;
            }
            match self.socket(kind).get_events() {
                Ok(e) if e.contains(zmq::POLLIN) => return Some(0),
                Ok(_) => self.sockets.set_drained(bit, true),
                Err(_) => return Some(0),
            }
        }
        let mut quiet = 0;
        for _ in 0..self.cfg.io_spin_yields {
            if !self.door.rx.is_empty() {
                return Some(quiet);
            }
            match self.sockets.signaled(all, 0) {
                Some(0) => {}
                Some(signaled) => return Some(all & !signaled),
                None => return Some(0),
            }
            quiet = all;
            std::thread::yield_now();
        }
        None
    }

    /// Reads the monitors that may have events (see [`Sockets::to_read`]).
    pub(super) fn read_monitors(&mut self) {
        let read = self.sockets.to_read(self.sockets.monitors(), 0);
        for kind in [LinkKind::Relay, LinkKind::Completion, LinkKind::Client] {
            if read & Sockets::mon_bit(kind) != 0 {
                self.read_monitor(kind);
            }
        }
    }

    /// Sleeps until a socket, the doorbell or the next timer, and reads what is readable.
    /// Returns the data sockets it found quiet (see `run`).
    ///
    /// Level check first: a socket not [`Sockets::drained`] is asked for `ZMQ_EVENTS` (libzmq
    /// processes its commands; without POLLIN it is drained). When none is readable, every
    /// socket is drained and the thread sleeps in one `poll()` over their `ZMQ_FD`s, which
    /// signal anything new: two syscalls at most where `zmq_poll` made a `poll()` and a
    /// `ZMQ_EVENTS` per socket before and after the sleep.
    pub(super) fn poll_once(&mut self) -> u8 {
        let mut timeout = self.next_wake(self.now);
        let sleeping = self.shared.bell.prepare_sleep();
        if !sleeping {
            timeout = Duration::ZERO;
        }
        let present = self.sockets.all() | self.sockets.monitors() | Sockets::DOOR;
        let waiting = self.waiting_room();
        let mut ready = 0u8;
        {
            let s = &self.sockets;
            let undrained = present & !s.drained.get();
            // Commands pending on a socket with a PAUSED queue: read it (see `spin_for_work`).
            ready |= s.commands_for_waiting(undrained, waiting);
            for i in 0..7 {
                let bit = 1u8 << i;
                if (undrained & !ready) & bit == 0 {
                    continue;
                }
                let socket = match bit {
                    Sockets::RELAY => &s.relay,
                    Sockets::COMPLETION => &s.completion,
                    Sockets::DOOR => &self.door.socket,
                    Sockets::MON_RELAY => &s.mon_relay,
                    Sockets::MON_COMPLETION => &s.mon_completion,
                    Sockets::CLIENT => s.client.as_ref().expect("client socket"),
                    Sockets::MON_CLIENT => s.mon_client.as_ref().expect("client monitor"),
                    _ => continue,
                };
                match socket.get_events() {
                    Ok(e) if !e.contains(zmq::POLLIN) => s.set_drained(bit, true),
                    _ => ready |= bit,
                }
            }
        }
        let mut quiet = 0;
        if ready == 0 {
            let ms = if timeout.is_zero() {
                0
            } else {
                timeout.as_millis().max(1) as i64
            };
            match self.sockets.signaled(present, ms) {
                Some(signaled) => {
                    ready = signaled;
                    quiet = self.sockets.all() & !signaled;
                }
                // Interrupted: look at everything.
                None => ready = present,
            }
            if ms > 0 {
                // Slept: what it reads now is a new pass.
                self.now = Instant::now();
            }
        }
        self.shared.bell.awake();
        if ready & Sockets::DOOR != 0 {
            self.door.drain_rings();
            self.sockets.set_drained(Sockets::DOOR, true);
        }
        for kind in [LinkKind::Completion, LinkKind::Relay, LinkKind::Client] {
            if ready & Sockets::bit(kind) != 0 {
                self.read_socket(kind);
            }
        }
        for kind in [LinkKind::Relay, LinkKind::Completion, LinkKind::Client] {
            if ready & Sockets::mon_bit(kind) != 0 {
                self.read_monitor(kind);
            }
        }
        quiet
    }

    pub(super) fn read_socket(&mut self, kind: LinkKind) -> usize {
        let mut n = 0;
        // The receive buffers are reused for every message of the pass (libzmq closes the old
        // content on each receive): no allocation per message on this path.
        let mut rid = std::mem::replace(&mut self.rx_rid, zmq::Message::new());
        let mut parts = std::mem::take(&mut self.rx_parts);
        while n < RECV_BATCH {
            let Some(count) = recv_frames_into(self.socket(kind), &mut rid, &mut parts) else {
                break;
            };
            n += 1;
            self.rx_source = if kind == LinkKind::Client {
                // A connection without a session may open one: its source address counts.
                if self.clients_by_rid.contains_key(&rid[..]) {
                    None
                } else {
                    parts
                        .first_mut()
                        .and_then(|m| m.gets("Peer-Address"))
                        .map(Arc::from)
                }
            } else if count == 1 && parts[0].get(1) == Some(&zlink_wire::Command::Hello.number()) {
                // A Hello starts a handshake that counts against its source address.
                parts[0].gets("Peer-Address").map(Arc::from)
            } else {
                None
            };
            let rid_bytes: &[u8] = &rid;
            if count == 1 && self.cfg.tap.is_none() && zlink_wire::is_batch(&parts[0]) {
                // A batch frame is not copied: the message leaves the receive buffer (a fresh
                // one takes its slot) and is wrapped as the frame's `Bytes`; it is released at
                // the end of `on_batch`, which copies each payload out of it.
                let msg = std::mem::replace(&mut parts[0], zmq::Message::new());
                let frame = Rx::Batch(Bytes::from_owner(ZmqFrame(msg)));
                match kind {
                    LinkKind::Client => self.on_client_message(rid_bytes, frame),
                    _ => self.on_peer_message(kind, rid_bytes, frame),
                }
                continue;
            }
            // Each `zmq::Message` deref is two FFI calls (data, size): take the slices once.
            let mut slices: [&[u8]; MAX_PARTS] = [&[]; MAX_PARTS];
            for (slot, m) in slices.iter_mut().zip(&parts[..count]) {
                *slot = m;
            }
            let frames = &slices[..count.min(MAX_PARTS)];
            if let Some(tap) = &self.cfg.tap {
                let copy: Vec<Bytes> = frames.iter().map(|m| Bytes::copy_from_slice(m)).collect();
                tap.record(TapDirection::Received, kind, rid_bytes, &copy);
            }
            match kind {
                LinkKind::Client => self.on_client_message(rid_bytes, Rx::Parts(frames)),
                _ => self.on_peer_message(kind, rid_bytes, Rx::Parts(frames)),
            }
        }
        self.rx_rid = rid;
        self.rx_parts = parts;
        // Ended in EAGAIN (not on the batch limit): drained until the next other call.
        self.sockets.set_drained(Sockets::bit(kind), n < RECV_BATCH);
        n
    }

    pub(super) fn read_monitor(&mut self, kind: LinkKind) {
        let m = match kind {
            LinkKind::Relay => &self.sockets.mon_relay,
            LinkKind::Completion => &self.sockets.mon_completion,
            LinkKind::Client => match &self.sockets.mon_client {
                Some(m) => m,
                None => return,
            },
        };
        let mut events = Vec::new();
        while let Some((first, parts)) = recv_multipart(m) {
            if first.len() < 6 {
                continue;
            }
            let ev = u16::from_le_bytes([first[0], first[1]]);
            let addr = parts
                .first()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .unwrap_or_default();
            let value = u32::from_le_bytes([first[2], first[3], first[4], first[5]]);
            events.push((ev, value, addr));
        }
        // Read until EAGAIN: drained (a monitor is never sent on from here).
        self.sockets.set_drained(Sockets::mon_bit(kind), true);
        for (ev, value, addr) in events {
            let ev = zmq::SocketEvent::from_raw(ev);
            match ev {
                zmq::SocketEvent::ACCEPTED => self.shared.counters.event(TransportEvent::Accepted),
                zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL
                    if value == codec::ZMQ_PROTOCOL_ERROR_MESSAGE_TOO_LARGE =>
                {
                    self.shared.counters.drop(
                        DropReason::MessageTooLarge,
                        &format_args!("{kind:?} {addr}"),
                    );
                }
                zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL
                | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL
                | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH => {
                    self.shared
                        .counters
                        .drop(DropReason::ZmtpProtocol, &format_args!("{kind:?} {addr}"));
                }
                zmq::SocketEvent::DISCONNECTED => {
                    self.shared.counters.event(TransportEvent::Disconnected);
                    if let Some((node, k)) = self.endpoints.get(&addr).cloned()
                        && k == kind
                        && self
                            .peers
                            .get(&node)
                            .is_some_and(|p| p.rid(kind) == node.as_bytes())
                    {
                        // Our outbound connection dropped: libzmq reconnects; the handshake
                        // re-runs on the new connection. (When the link is a connection the
                        // peer dialled, ours was not in use: nothing to do.)
                        self.peer_down(&node, DownReason::Disconnected, false);
                        self.start_initiator(&node, kind, self.now);
                    }
                }
                zmq::SocketEvent::HANDSHAKE_SUCCEEDED => {
                    if let Some((node, k)) = self.endpoints.get(&addr).cloned()
                        && k == kind
                    {
                        self.pump_handshake(&node, kind);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Reads one multipart message without blocking, without copying and without allocating,
/// into reused buffers: the routing id into `rid`, the remaining parts into `parts[..count]`.
/// Returns `count`. Messages with more than [`MAX_PARTS`] parts are consumed and returned
/// with one extra empty part so that they fail decoding.
pub(crate) fn recv_frames_into(
    s: &zmq::Socket,
    rid: &mut zmq::Message,
    parts: &mut Vec<zmq::Message>,
) -> Option<usize> {
    s.recv(rid, zmq::DONTWAIT).ok()?;
    let mut more = rid.get_more();
    let mut count = 0;
    let mut n = 1;
    while more {
        if count == parts.len() {
            parts.push(zmq::Message::new());
        }
        if s.recv(&mut parts[count], zmq::DONTWAIT).is_err() {
            break;
        }
        more = parts[count].get_more();
        n += 1;
        // Up to MAX_PARTS parts are kept; one more is kept as the marker (decoding fails on
        // the part count); any further part is received into that scratch slot.
        if n <= MAX_PARTS + 1 {
            count += 1;
        }
    }
    Some(count)
}

/// Reads one multipart message without blocking: (first part, remaining parts). Messages with
/// more than [`MAX_PARTS`] parts are consumed and returned truncated to one extra empty part
/// so that they fail decoding.
pub(crate) fn recv_multipart(s: &zmq::Socket) -> Option<(Bytes, Vec<Bytes>)> {
    let first = s.recv_msg(zmq::DONTWAIT).ok()?;
    let first_bytes = Bytes::copy_from_slice(&first);
    let mut more = first.get_more();
    let mut parts = Vec::new();
    let mut n = 1;
    while more {
        let Ok(m) = s.recv_msg(zmq::DONTWAIT) else {
            break;
        };
        more = m.get_more();
        n += 1;
        if n <= MAX_PARTS {
            parts.push(Bytes::copy_from_slice(&m));
        } else if n == MAX_PARTS + 1 {
            parts.push(Bytes::new());
        }
    }
    Some((first_bytes, parts))
}
