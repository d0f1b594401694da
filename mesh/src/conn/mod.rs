//! The sans-IO core of one connection's application data flow, shared by mesh peers and
//! ClientServer sessions (the quinn-proto / quinn split, like [`crate::handshake`] and
//! [`crate::correlation`]): the receive window (what the other end may have in flight towards
//! us, charged per record, credit returned in batches), the send credit (what the other end
//! granted us) and liveness (when it was last heard). [`Conn::ingress`] classifies one
//! decoded record into a [`Verdict`]; the zmq driver ([`crate::engine`]) acts on it (hands the
//! record up, sends the answer, counts the drop). No sockets, no clock reads: `now` is an input.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zlink_wire::{FlowCredit, Ping, Pong};

use crate::budget::RxWindow;
use crate::codec::Class;
use crate::config::{InboundWindow, Liveness};
use crate::counters::DropReason;
use crate::outbox::SendBudget;

mod send;
#[cfg(test)]
mod tests;

pub(crate) use send::*;

/// Which connection a record arrived on: the records each may carry differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Mesh relay connection: application records (requests, one-way records).
    Relay,
    /// Mesh completion connection: replies and control (Ping/Pong, FlowCredit, Disconnect).
    Completion,
    /// ClientServer connection (node side): requests, one-way DATA and control.
    Client,
    /// ClientServer connection (client side, `MeshClient`): pushes, replies and control from
    /// the node. No receive window: pushes are bounded by the client's push channel.
    Server,
}

impl Lane {
    /// Whether a record of `class` may travel inside a 139 batch frame on this connection:
    /// application records and (mesh) replies only; handshake and control records are sent
    /// alone (SB-5.4). Checked before anything else about a sub-record.
    #[inline]
    pub(crate) fn batchable(self, class: &Class) -> bool {
        match self {
            Lane::Relay | Lane::Completion => matches!(class, Class::App | Class::Reply),
            Lane::Client => matches!(class, Class::App),
            Lane::Server => matches!(class, Class::Push | Class::Reply),
        }
    }
}

/// What the driver does with one record, as decided by [`Conn::ingress`]. Small and `Copy`:
/// it is made for every record on the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// An application record within the receive window (charged): hand it up, then
    /// [`Conn::released`] once it left the window.
    Deliver,
    /// A reply to one of our requests: complete its correlation (not charged to the window;
    /// replies answer what we sent).
    Complete,
    /// Answer on the same connection (a Pong for a Ping).
    Answer(Pong),
    /// Control handled here (send credit added, liveness noted); `resume` when queued data
    /// may go out now (credit arrived).
    Control {
        /// The send credit grew.
        resume: bool,
    },
    /// The other end said goodbye (149).
    Disconnect,
    /// Dropped: count it with this reason.
    Drop(DropReason),
}

/// One connection's flow state (a mesh peer's relay data, or a client session).
pub(crate) struct Conn {
    /// The receive window in force (a client's grows once accepted, [`Conn::widen`]).
    window: InboundWindow,
    rx: RxWindow,
    /// The window's bytes are a hard bound (a stranger's session, until accepted): a record is
    /// accepted only if its bytes fit in what is left, never overshooting it.
    strict: bool,
    /// Send side: credit granted by the other end (peers; a client session's pushes are not
    /// credit-limited).
    pub(crate) credit: SendCredit,
    /// Send side: records admitted for the other end, in order, not yet taken by libzmq
    /// (PAUSED, or waiting for the end of the pass to go out in one batch frame).
    pub(crate) queue: VecDeque<Out>,
    /// Send side: the outbound admission budget the queued records reserved (also held by
    /// the senders, which wait on it).
    pub(crate) budget: Arc<SendBudget>,
    /// When the other end was last heard from.
    pub(crate) last_rx: Instant,
    /// When our next Ping is due, and the sequence number of the last one.
    next_ping: Instant,
    ping_seq: u64,
}

/// What a connection's liveness asks of the driver at some `now` ([`Conn::poll_liveness`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alive {
    /// Nothing to do.
    Quiet,
    /// Send this Ping (on the connection control travels on).
    Ping(Ping),
    /// Silent for longer than the peer timeout: the other end is down.
    TimedOut,
}

impl Conn {
    /// A connection whose window is not granted yet (a mesh peer before its lifecycle is up).
    pub(crate) fn idle(window: InboundWindow, budget: Arc<SendBudget>, now: Instant) -> Self {
        Self {
            window,
            rx: RxWindow::default(),
            strict: false,
            credit: SendCredit::default(),
            queue: VecDeque::new(),
            budget,
            last_rx: now,
            next_ping: now,
            ping_seq: 0,
        }
    }

    /// A `MeshClient`'s connection to a node's client port, nothing granted yet: its records
    /// stay within the node's first grant ([`SendCredit::client`]).
    pub(crate) fn to_client_port(
        window: InboundWindow,
        budget: Arc<SendBudget>,
        now: Instant,
    ) -> Self {
        Self {
            credit: SendCredit::client(),
            ..Self::idle(window, budget, now)
        }
    }

    /// A connection granted its whole `window` at once (the grant leaves with the next
    /// [`Conn::poll_grant`]).
    pub(crate) fn granted(window: InboundWindow, budget: Arc<SendBudget>, now: Instant) -> Self {
        Self {
            rx: RxWindow::initial_grant(window),
            ..Self::idle(window, budget, now)
        }
    }

    /// [`Conn::granted`] for a stranger's session: the window's bytes are a hard bound (a
    /// record must fit in what is left of them) until it is widened ([`Conn::widen`]).
    pub(crate) fn stranger(window: InboundWindow, budget: Arc<SendBudget>, now: Instant) -> Self {
        Self {
            strict: true,
            ..Self::granted(window, budget, now)
        }
    }

    /// A new lifecycle of the other end came up: its whole window is granted afresh (our send
    /// credit is its to grant, and may already have arrived).
    pub(crate) fn regrant(&mut self) {
        self.rx = RxWindow::initial_grant(self.window);
    }

    /// The other end came up at `now`: heard from now, the first Ping due `ping_interval`
    /// later.
    pub(crate) fn came_up(&mut self, now: Instant, ping_interval: Duration) {
        self.last_rx = now;
        self.next_ping = now + ping_interval;
    }

    /// Liveness at `now` of a connection that pings its other end (a mesh peer): down once
    /// silent for longer than `peer_timeout`, else a Ping every `ping_interval`.
    pub(crate) fn poll_liveness(&mut self, now: Instant, liveness: &Liveness) -> Alive {
        if self.silent(now, liveness.peer_timeout) {
            Alive::TimedOut
        } else {
            self.poll_ping(now, liveness.ping_interval)
                .map_or(Alive::Quiet, Alive::Ping)
        }
    }

    /// The driver was away for `gap` (no pass ran: descheduled, stopped, or one long pass):
    /// what the other end sent meanwhile waits unread, so that time is not its silence. Its
    /// silence is measured over the time the driver was there to hear it.
    pub(crate) fn away(&mut self, gap: Duration) {
        self.last_rx += gap;
    }

    /// Nothing was heard from the other end for longer than `timeout` at `now` (a client
    /// session: the node does not ping its clients, they ping it).
    pub(crate) fn silent(&self, now: Instant, timeout: Duration) -> bool {
        now.saturating_duration_since(self.last_rx) > timeout
    }

    /// The Ping to send at `now`, if one is due (the next one is then due `interval` later).
    pub(crate) fn poll_ping(&mut self, now: Instant, interval: Duration) -> Option<Ping> {
        if self.next_ping > now {
            return None;
        }
        self.ping_seq = self.ping_seq.wrapping_add(1);
        self.next_ping = now + interval;
        Some(Ping { seq: self.ping_seq })
    }

    /// The transport did not take the Ping (or the connection was lost): one is due again at
    /// `now`, retried on every pass until one gets through.
    pub(crate) fn ping_again(&mut self, now: Instant) {
        self.next_ping = now;
    }

    /// When the next Ping is due.
    pub(crate) fn next_ping(&self) -> Instant {
        self.next_ping
    }

    /// The lifecycle ended: nothing granted either way.
    pub(crate) fn reset(&mut self) {
        self.rx = RxWindow::default();
        self.credit = self.credit.fresh();
    }

    /// The receive window in force.
    #[cfg(test)]
    pub(crate) fn window(&self) -> InboundWindow {
        self.window
    }

    /// One decoded record of `bytes` (all frames) arrived on `lane` at `now`. Handshake
    /// records are the handshake's, never a connection's ([`Verdict::Drop`] if passed here).
    #[inline]
    pub(crate) fn ingress(
        &mut self,
        lane: Lane,
        class: &Class,
        bytes: u64,
        now: Instant,
    ) -> Verdict {
        self.last_rx = now;
        match (lane, class) {
            (Lane::Completion | Lane::Client, Class::Ping(seq)) => {
                Verdict::Answer(Pong { seq: *seq })
            }
            (Lane::Completion | Lane::Client | Lane::Server, Class::Pong) => {
                Verdict::Control { resume: false }
            }
            // A node does not ping its clients; a Ping it sends is only liveness.
            (Lane::Server, Class::Ping(_)) => Verdict::Control { resume: false },
            (Lane::Completion | Lane::Server, Class::FlowCredit { messages, bytes }) => {
                self.credit.grant(*messages, *bytes);
                Verdict::Control { resume: true }
            }
            (_, Class::Disconnect(_)) => Verdict::Disconnect,
            (Lane::Completion | Lane::Server, Class::Reply) => Verdict::Complete,
            (Lane::Relay | Lane::Client, Class::App) => self.charge(bytes),
            // Not charged: the client's push channel bounds what it holds.
            (Lane::Server, Class::Push) => Verdict::Deliver,
            _ => Verdict::Drop(DropReason::WrongConnection),
        }
    }

    /// Charges one application record of `bytes` to the receive window: [`Verdict::Deliver`],
    /// or a drop when the other end ignored its window (a protocol violation, counted).
    #[inline]
    pub(crate) fn charge(&mut self, bytes: u64) -> Verdict {
        if self.try_charge(bytes) {
            Verdict::Deliver
        } else {
            Verdict::Drop(DropReason::CreditExceeded)
        }
    }

    /// [`Conn::charge`] as a plain answer (the batch fast path): `false` when the other end
    /// had used its whole window (nothing charged; count a `CreditExceeded` drop).
    #[inline]
    pub(crate) fn try_charge(&mut self, bytes: u64) -> bool {
        let fits = !self.strict || self.rx.fits(self.window, bytes);
        if fits && self.rx.try_charge(self.window, bytes) {
            return true;
        }
        // Dropped over the window: its cost still goes back to the sender (resync).
        self.rx.refund(bytes);
        false
    }

    /// A delivered record of `bytes` left the window; `true` when credit should be granted
    /// back now ([`Conn::poll_grant`]; credit goes back in quarters of the window).
    #[inline]
    pub(crate) fn released(&mut self, bytes: u64) -> bool {
        self.rx.free(self.window, bytes)
    }

    /// [`Conn::released`] for `records` records of `bytes` bytes in total.
    #[inline]
    pub(crate) fn released_n(&mut self, records: u32, bytes: u64) -> bool {
        self.rx.free_n(self.window, records, bytes)
    }

    /// Freed credit is waiting to be granted back.
    pub(crate) fn owes(&self) -> bool {
        self.rx.owes()
    }

    /// The FlowCredit to send now, if credit is owed. It counts as granted only once the
    /// driver's transport took it ([`Conn::grant_sent`]); a lost grant would stall the sender.
    pub(crate) fn poll_grant(&self) -> Option<FlowCredit> {
        self.rx
            .pending()
            .map(|(messages, bytes)| FlowCredit { messages, bytes })
    }

    /// The transport took the FlowCredit [`Conn::poll_grant`] gave.
    pub(crate) fn grant_sent(&mut self, grant: FlowCredit) {
        self.rx.returned(grant.messages, grant.bytes);
    }

    /// The window grows to `to` (a stranger's session accepted): the difference is owed to
    /// the other end and leaves with the next grant.
    pub(crate) fn widen(&mut self, to: InboundWindow) {
        self.rx.widen(self.window, to);
        self.window = to;
        self.strict = false;
    }
}
