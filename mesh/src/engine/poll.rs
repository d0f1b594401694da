//! The engine's sockets and how it waits on them: which sockets may have something to read
//! (`Sockets`, with their `ZMQ_FD`s and drained bits in a [`Ready`]), the idle spin, the one
//! sleeping poll of a pass, and the batched reads of data sockets and monitors.

use super::*;
use crate::driver::Ready;

pub(super) struct Sockets {
    pub(super) relay: zmq::Socket,
    pub(super) completion: zmq::Socket,
    pub(super) client: Option<zmq::Socket>,
    pub(super) mon_relay: zmq::Socket,
    pub(super) mon_completion: zmq::Socket,
    pub(super) mon_client: Option<zmq::Socket>,
    /// Their `ZMQ_FD`s and drained bits, by the bits below ([`Sockets::bit`], the doorbell at
    /// [`Sockets::DOOR`], the monitors after it): the readiness check of the spin, of a pass
    /// and of the sleep.
    pub(super) ready: Ready,
}

impl Sockets {
    pub(super) const RELAY: u8 = 1;
    pub(super) const COMPLETION: u8 = 2;
    pub(super) const CLIENT: u8 = 4;
    /// The doorbell (`Door::socket`), only ever received from on this thread.
    pub(super) const DOOR: u8 = Ready::DOOR;
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

    /// A call other than a receive was made on `kind`'s socket (see [`Ready::touched`]).
    #[inline]
    pub(super) fn touched(&self, kind: LinkKind) {
        self.ready.touched(Self::bit(kind));
    }

    /// The socket at `bit` (not the doorbell), if this node has it.
    fn by_bit(&self, bit: u8) -> Option<&zmq::Socket> {
        match bit {
            Self::RELAY => Some(&self.relay),
            Self::COMPLETION => Some(&self.completion),
            Self::CLIENT => self.client.as_ref(),
            Self::MON_RELAY => Some(&self.mon_relay),
            Self::MON_COMPLETION => Some(&self.mon_completion),
            Self::MON_CLIENT => self.mon_client.as_ref(),
            _ => None,
        }
    }
}

impl Engine {
    /// Yields the CPU a few times (`io_spin_yields`) while watching for commands or readable
    /// data sockets ([`Ready::spin`]), once application work was done since the last sleep.
    /// `Some` with the sockets seen quiet when there is work.
    pub(super) fn spin_for_work(&self) -> Option<u8> {
        if !self.app_work {
            // Only control since the last sleep (an idle session's Ping): sleep at once.
            return None;
        }
        self.sockets.ready.spin(
            self.cfg.io_spin_yields,
            &self.door,
            self.sockets.all(),
            self.waiting_room(),
            None,
            |bit| self.sockets.by_bit(bit),
        )
    }

    /// Reads the monitors that may have events (see [`Ready::to_read`]).
    pub(super) fn read_monitors(&mut self) {
        let read = self.sockets.ready.to_read(self.sockets.monitors(), 0);
        for kind in [LinkKind::Relay, LinkKind::Completion, LinkKind::Client] {
            if read & Sockets::mon_bit(kind) != 0 {
                self.read_monitor(kind);
            }
        }
    }

    /// Sleeps until a socket, the doorbell or the next timer ([`Ready::wait`]: the level check,
    /// then one `poll()` over the `ZMQ_FD`s), and reads what is readable. Returns the data
    /// sockets it found quiet (see [`crate::driver::Driver::pass`]).
    pub(super) fn poll_once(&mut self) -> u8 {
        let timeout = self.next_wake(self.now);
        let ms = if timeout.is_zero() {
            0
        } else {
            timeout.as_millis().max(1) as i64
        };
        let present = self.sockets.all() | self.sockets.monitors() | Sockets::DOOR;
        let woke = self.sockets.ready.wait(
            &self.shared.bell,
            &self.door,
            present,
            self.waiting_room(),
            ms,
            |bit| self.sockets.by_bit(bit),
        );
        if woke.slept {
            // Slept: what it reads now is a new pass.
            self.now = Instant::now();
        }
        let ready = woke.ready;
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
        woke.quiet & self.sockets.all()
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
        self.sockets
            .ready
            .set_drained(Sockets::bit(kind), n < RECV_BATCH);
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
        self.sockets.ready.set_drained(Sockets::mon_bit(kind), true);
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
