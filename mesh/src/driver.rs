//! The mesh's one I/O driver: the loop every thread that owns libzmq sockets runs — a node's
//! engine ([`crate::engine`]) and a [`crate::MeshClient`]'s — over a [`Driver`] (its pass, its
//! idle spin, its sleep), and how a driver waits on its sockets ([`Ready`]: their `ZMQ_FD`s
//! and drained bits, the pass's one sleeping poll).
//!
//! Loop (one iteration, one pass): the clock is read once at its start ([`Driver::begin`]) and
//! that `now` serves everything the pass does; a pass that did work is followed by the next
//! one at once; an idle one by a short spin watching for work, then by one sleeping poll
//! (after which the driver reads the clock again and reads what became readable).

use std::cell::Cell;
use std::os::fd::RawFd;
use std::time::Instant;

use crate::bridge::{Bell, Door};

/// What a pass of a driver found.
pub(crate) enum Pass {
    /// It did work: the next pass follows at once.
    Work,
    /// Nothing to do: spin, then sleep.
    Idle,
    /// The driver stops ([`Driver::end`] follows).
    Stop,
}

/// A thread of the mesh that owns libzmq sockets, as [`run`] drives it.
pub(crate) trait Driver {
    /// Sets the time of the pass about to run (the loop's one clock read per pass).
    fn begin(&mut self, now: Instant);
    /// One pass at that time: commands, queues, timers and reads of the sockets that may have
    /// something to read, except those in `quiet` (found quiet by the readiness check that
    /// ended the previous pass: what arrives later signals their FD).
    fn pass(&mut self, quiet: u8) -> Pass;
    /// After a pass without work: watches briefly for work before sleeping. `Some` with the
    /// sockets it saw quiet when there is work.
    fn spin(&mut self) -> Option<u8>;
    /// Sleeps until a socket, the doorbell or the next timer (one [`Ready::wait`]), then
    /// reads what is readable: the sockets found quiet, or `None` when the driver stops.
    fn sleep(&mut self) -> Option<u8>;
    /// After the last pass.
    fn end(&mut self);
}

/// Runs `d` until it stops.
pub(crate) fn run(d: &mut impl Driver) {
    let mut quiet = 0u8;
    loop {
        // The pass's one clock read.
        d.begin(Instant::now());
        match d.pass(std::mem::take(&mut quiet)) {
            Pass::Stop => break,
            Pass::Work => continue,
            Pass::Idle => {}
        }
        // Idle: yield a little before sleeping (a wake-up costs 20-25 µs on small VMs).
        if let Some(q) = d.spin() {
            quiet = q;
            continue;
        }
        match d.sleep() {
            Some(q) => quiet = q,
            None => break,
        }
    }
    d.end();
}

/// A driver's sockets as far as waiting goes: one bit per socket (at most 8), the `ZMQ_FD`
/// of each and which of them are drained. The doorbell is always bit [`Ready::DOOR`].
pub(crate) struct Ready {
    /// The `ZMQ_FD` of each socket, by bit index; -1 for an absent one. The readiness check of
    /// the spin, of a pass and of the sleep (see [`Ready::drained`]).
    fds: [RawFd; 8],
    /// One bit per socket: the last libzmq call on it that can process its commands was a
    /// receive that ended in EAGAIN (or a `ZMQ_EVENTS` without POLLIN). libzmq then processed
    /// its commands and marked its empty pipes inactive, so a message arriving later makes
    /// the writer send `activate_read`, which signals the socket's `ZMQ_FD` (edge-triggered:
    /// readable while a command waits, not while a message does). Such a socket has nothing
    /// to read while its FD is quiet. Any other call (send, connect, disconnect) may process
    /// commands and activate a pipe without the FD: it clears the bit ([`Ready::touched`]),
    /// and the socket is read (or asked) again.
    drained: Cell<u8>,
}

/// What [`Ready::wait`] found.
pub(crate) struct Woke {
    /// The sockets that may have something to read (the doorbell's rings not drained yet).
    pub(crate) ready: u8,
    /// The sockets whose FD the poll found quiet (0 when it did not poll).
    pub(crate) quiet: u8,
    /// It slept: the driver reads the clock again (a new pass).
    pub(crate) slept: bool,
}

impl Ready {
    /// The doorbell (`Door::socket`), only ever received from on the driver's thread.
    pub(crate) const DOOR: u8 = 8;

    /// `fds` by bit index (-1: no socket at that bit); none drained yet.
    pub(crate) fn new(fds: [RawFd; 8]) -> Self {
        Self {
            fds,
            drained: Cell::new(0),
        }
    }

    /// A call other than a receive was made on the sockets in `bits` (see [`Ready::drained`]).
    #[inline]
    pub(crate) fn touched(&self, bits: u8) {
        self.drained.set(self.drained.get() & !bits);
    }

    pub(crate) fn set_drained(&self, bits: u8, drained: bool) {
        let d = self.drained.get();
        self.drained.set(if drained { d | bits } else { d & !bits });
    }

    /// Polls the `ZMQ_FD`s of the sockets in `bits` for at most `ms` (0: without waiting):
    /// those whose FD is readable (a command waits), or `None` if the poll failed.
    pub(crate) fn signaled(&self, bits: u8, ms: i64) -> Option<u8> {
        let mut items: [zmq::PollItem<'_>; 8] =
            std::array::from_fn(|_| zmq::PollItem::from_fd(-1, zmq::PollEvents::empty()));
        let mut which = [0u8; 8];
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

    /// Of the sockets in `undrained` that have a PAUSED queue (`waiting`): those with libzmq
    /// commands not yet processed (their `ZMQ_FD` signaled; one `poll()`, none when no queue
    /// waits).
    ///
    /// A ROUTER's `ZMQ_EVENTS` says nothing about one connection's pipe, and the command that
    /// gives a full pipe room back (its write activation, sent when the reader took half of
    /// the high-water mark) signals the FD once: whatever processes it (`ZMQ_EVENTS`, a
    /// receive) must be followed by a retry of the waiting queue. So such a socket is read
    /// in a pass (which retries its queues) rather than asked for `ZMQ_EVENTS` before a
    /// sleep that only the timer would end.
    pub(crate) fn commands_for_waiting(&self, undrained: u8, waiting: u8) -> u8 {
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
    pub(crate) fn to_read(&self, bits: u8, quiet: u8) -> u8 {
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

    /// The idle spin of a driver: yields the CPU up to `yields` times (and not past `until`)
    /// while watching for commands (`door`) or a readable socket among `data`. `Some` with the
    /// sockets it saw quiet when there is work.
    ///
    /// Called after a pass that found no work. A data socket not drained is asked once for
    /// `ZMQ_EVENTS` (`socket(bit)`; level: libzmq processes its commands), and one with a
    /// PAUSED queue (`waiting`) and commands pending is work at once; after that every socket
    /// is drained and one `poll()` over their `ZMQ_FD`s per turn sees every new message (and
    /// other commands: the pass then reads, which processes them) without the `poll()` that
    /// each `ZMQ_EVENTS` makes inside libzmq. The sleep ([`Ready::wait`]) keeps its own level
    /// check.
    pub(crate) fn spin<'s, C>(
        &self,
        yields: usize,
        door: &Door<C>,
        data: u8,
        waiting: u8,
        until: Option<Instant>,
        socket: impl Fn(u8) -> Option<&'s zmq::Socket>,
    ) -> Option<u8> {
        if yields == 0 {
            return None;
        }
        let undrained = data & !self.drained.get();
        if self.commands_for_waiting(undrained, waiting) != 0 {
            // A pass reads it (processing its commands) and retries its PAUSED queues.
            return Some(0);
        }
        for i in 0..8 {
            let bit = 1u8 << i;
            if undrained & bit == 0 {
                continue;
            }
            let Some(s) = socket(bit) else {
                continue;
            };
            match s.get_events() {
                Ok(e) if e.contains(zmq::POLLIN) => return Some(0),
                Ok(_) => self.set_drained(bit, true),
                Err(_) => return Some(0),
            }
        }
        let mut quiet = 0;
        for _ in 0..yields {
            if until.is_some_and(|u| Instant::now() >= u) {
                return None;
            }
            if !door.rx.is_empty() {
                return Some(quiet);
            }
            match self.signaled(data, 0) {
                Some(0) => {}
                Some(signaled) => return Some(data & !signaled),
                None => return Some(0),
            }
            quiet = data;
            std::thread::yield_now();
        }
        None
    }

    /// The one sleeping poll of a pass, over the sockets in `present`, for at most `ms` (0:
    /// without waiting; also when a command is already waiting, [`Bell::prepare_sleep`]).
    ///
    /// Level check first: a socket not drained is asked for `ZMQ_EVENTS` (`socket(bit)`;
    /// libzmq processes its commands; without POLLIN it is drained), and one with a PAUSED
    /// queue (`waiting`) and commands pending is ready ([`Ready::commands_for_waiting`]).
    /// When none is ready, every socket is drained and the thread sleeps in one `poll()` over
    /// their `ZMQ_FD`s, which signal anything new: two syscalls at most where `zmq_poll` made
    /// a `poll()` and a `ZMQ_EVENTS` per socket before and after the sleep. The doorbell's
    /// rings are drained when it was ready.
    pub(crate) fn wait<'s, C>(
        &self,
        bell: &Bell<C>,
        door: &Door<C>,
        present: u8,
        waiting: u8,
        ms: i64,
        socket: impl Fn(u8) -> Option<&'s zmq::Socket>,
    ) -> Woke {
        let ms = if bell.prepare_sleep() { ms } else { 0 };
        let undrained = present & !self.drained.get();
        // Commands pending on a socket with a PAUSED queue: read it.
        let mut ready = self.commands_for_waiting(undrained, waiting);
        for i in 0..8 {
            let bit = 1u8 << i;
            if (undrained & !ready) & bit == 0 {
                continue;
            }
            let s = if bit == Self::DOOR {
                Some(&door.socket)
            } else {
                socket(bit)
            };
            let Some(s) = s else {
                continue;
            };
            match s.get_events() {
                Ok(e) if !e.contains(zmq::POLLIN) => self.set_drained(bit, true),
                _ => ready |= bit,
            }
        }
        let mut quiet = 0;
        let mut slept = false;
        if ready == 0 {
            match self.signaled(present, ms) {
                Some(signaled) => {
                    ready = signaled;
                    quiet = present & !signaled;
                }
                // Interrupted: look at everything.
                None => ready = present,
            }
            slept = ms > 0;
        }
        bell.awake();
        if ready & Self::DOOR != 0 {
            door.drain_rings();
            self.set_drained(Self::DOOR, true);
        }
        Woke {
            ready,
            quiet,
            slept,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two connected inproc PAIR sockets: (the one the driver reads, the peer that writes).
    fn pair(ctx: &zmq::Context, name: &str) -> (zmq::Socket, zmq::Socket) {
        let ep = format!("inproc://driver-test-{name}");
        let a = ctx.socket(zmq::PAIR).unwrap();
        a.bind(&ep).unwrap();
        let b = ctx.socket(zmq::PAIR).unwrap();
        b.connect(&ep).unwrap();
        (a, b)
    }

    /// Reads `s` until EAGAIN, as a driver's read does before it marks a socket drained.
    fn drain(s: &zmq::Socket) {
        while s.recv_msg(zmq::DONTWAIT).is_ok() {}
    }

    // A drained socket is read again only when its FD signals something new or a call other
    // than a receive touched it: no message waits unread behind a drained bit.
    #[test]
    fn a_drained_socket_is_read_again_after_a_message_or_a_touch() {
        let ctx = zmq::Context::new();
        let (a, peer_a) = pair(&ctx, "a");
        let (b, peer_b) = pair(&ctx, "b");
        let mut fds = [-1; 8];
        fds[0] = a.get_fd().unwrap();
        fds[1] = b.get_fd().unwrap();
        let ready = Ready::new(fds);
        // Nothing drained yet: both are read.
        assert_eq!(ready.to_read(0b11, 0), 0b11);
        drain(&a);
        drain(&b);
        ready.set_drained(0b11, true);
        // Both drained, nothing new: one poll says neither. With `a` found quiet, `b` is the
        // only one asked, and a single one is read directly (a receive costs what a poll does).
        assert_eq!(ready.to_read(0b11, 0), 0);
        assert_eq!(ready.to_read(0b11, 0b01), 0b10);
        // A message for `a` signals its FD: `a` alone is read.
        peer_a.send("x", 0).unwrap();
        let until = Instant::now() + std::time::Duration::from_secs(20);
        while ready.to_read(0b11, 0) != 0b01 {
            assert!(Instant::now() < until, "a's FD never signaled its message");
            std::thread::yield_now();
        }
        assert!(
            a.recv_msg(zmq::DONTWAIT).is_ok(),
            "the message was there to read"
        );
        drain(&a);
        // A send on `b` may process its commands without its FD: touched, it is read again.
        b.send("y", 0).unwrap();
        ready.touched(0b10);
        assert_eq!(ready.to_read(0b11, 0) & 0b10, 0b10);
        drop((peer_a, peer_b));
    }
}
