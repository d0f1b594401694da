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

use bytes::Bytes;
use zlink_wire::{FlowCredit, Ping, Pong};

use crate::budget::{Budget, RxWindow};
use crate::codec::Class;
use crate::codec::Parts;
use crate::config::{Batching, InboundWindow, Liveness};
use crate::counters::DropReason;

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

/// Credit the other end granted for our data on this connection. Wire values saturate (a
/// receiver granting "infinite" credit only gives up its own window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendCredit {
    msgs: u64,
    bytes: u64,
    /// Bytes the last record overdrew (it may take the byte credit below zero): paid back
    /// out of the next grants first, since the receiver returns every record's full cost.
    debt: u64,
    /// When the last record may overdraw the byte credit.
    overdraw: Overdraw,
}

/// When the last record within a [`SendCredit`] may take its byte credit below zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Overdraw {
    /// Always (a mesh peer returns every record's full cost).
    #[default]
    Allowed,
    /// Only from the other end's second grant on: a node's client port grants a session it
    /// has not accepted yet a stranger's window first, whose bytes are a hard bound (a record
    /// beyond what is left is dropped, docs/CLIENT-PROTOCOL.md 5.1); the second grant comes
    /// with the acceptance. Until then a record goes out only if it fits. `grants`: the
    /// grants received so far (saturating).
    FromSecondGrant {
        /// Grants received so far.
        grants: u8,
    },
}

impl SendCredit {
    /// No credit yet; a client of a node's client port: its records stay within the first
    /// grant, overdrawing only from the second ([`Overdraw::FromSecondGrant`]).
    pub(crate) fn client() -> Self {
        Self {
            overdraw: Overdraw::FromSecondGrant { grants: 0 },
            ..Self::default()
        }
    }

    /// No credit, as at the start of a lifecycle, in the same [`Overdraw`] mode.
    pub(crate) fn fresh(&self) -> Self {
        match self.overdraw {
            Overdraw::Allowed => Self::default(),
            Overdraw::FromSecondGrant { .. } => Self::client(),
        }
    }

    /// A FlowCredit arrived.
    #[inline]
    pub(crate) fn grant(&mut self, msgs: u32, bytes: u64) {
        self.msgs = self.msgs.saturating_add(u64::from(msgs));
        let paid = bytes.min(self.debt);
        self.debt -= paid;
        self.bytes = self.bytes.saturating_add(bytes - paid);
        if let Overdraw::FromSecondGrant { grants } = &mut self.overdraw {
            *grants = grants.saturating_add(1);
        }
    }

    /// Whether a record must fit in the byte credit left (no overdraw yet).
    #[inline]
    fn exact(&self) -> bool {
        matches!(self.overdraw, Overdraw::FromSecondGrant { grants } if grants < 2)
    }

    /// Whether a first record of `len()` bytes may go out now: always where it may overdraw,
    /// else only if it fits ([`Overdraw`]).
    #[inline]
    pub(crate) fn fits(&self, len: impl FnOnce() -> u64) -> bool {
        !self.exact() || len() <= self.bytes
    }

    /// At least one more record may go out.
    #[inline]
    pub(crate) fn open(&self) -> bool {
        self.msgs > 0 && self.bytes > 0
    }

    /// The credit left: (messages, bytes).
    pub(crate) fn left(&self) -> (u64, u64) {
        (self.msgs, self.bytes)
    }

    /// The records of `run` went out: each charged as if sent alone (the counts saturate at
    /// zero, as record by record).
    #[inline]
    pub(crate) fn charge_run(&mut self, run: Run) {
        self.msgs = self.msgs.saturating_sub(run.n as u64);
        let over = run.bytes.saturating_sub(self.bytes);
        self.bytes = self.bytes.saturating_sub(run.bytes);
        self.debt = self.debt.saturating_add(over);
    }

    /// Which records from the front of `queue` ((frames, correlation id or 0)) go out as one
    /// message within this credit: the batching rule ([`batch_run`]), each record charged on
    /// its own as if sent alone, stopping before a request that already `ended`. At least 1
    /// (the caller checked the first record and that the credit is open).
    #[inline]
    pub(crate) fn run<'a>(
        &self,
        batching: &Batching,
        queue: impl Iterator<Item = (&'a [Bytes], u64)>,
        mut ended: impl FnMut(u64) -> bool,
    ) -> Run {
        let (mut msgs, mut bytes) = self.left();
        let exact = self.exact();
        batch_run(batching, queue, |len, corr| {
            if msgs == 0 || bytes == 0 || (exact && len > bytes) || (corr != 0 && ended(corr)) {
                return false;
            }
            msgs -= 1;
            bytes = bytes.saturating_sub(len);
            true
        })
    }
}

/// The records from the front of a queue that go out as one message: how many, and their
/// bytes (all parts of each record), the unit credit is charged in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// Records (at least 1).
    pub(crate) n: usize,
    /// Their bytes in total.
    pub(crate) bytes: u64,
    /// Bytes of their 139 batch frame when `n` ≥ 2 (prefix and sub-records, measured in the
    /// same walk: [`encode_run`] sizes its buffer with it).
    pub(crate) frame: usize,
}

/// Which records from the front of a queue go out as one message (natural batching): at
/// least 1; more only while each record is small (payload ≤ `max_record_payload`), the frame
/// stays within `max_records`/`max_bytes` and `admit(len, corr)` accepts the record (the
/// caller's credit and request-ended checks; `len` its bytes). The first record is always
/// taken (the caller checked it). One walk: each record's parts are measured once.
#[inline]
pub(crate) fn batch_run<'a>(
    cfg: &Batching,
    queue: impl Iterator<Item = (&'a [Bytes], u64)>,
    mut admit: impl FnMut(u64, u64) -> bool,
) -> Run {
    let mut n = 0;
    let mut total = 0u64;
    let mut size = zlink_wire::batch::BATCH_PREFIX_LEN;
    for (frames, corr) in queue.take(cfg.max_records.max(1)) {
        let envelope = frames[0].len();
        let payload = frames.get(1).map(Bytes::len);
        let len = (envelope + payload.unwrap_or(0)) as u64;
        let sub = zlink_wire::batch::sub_record_len(envelope, payload);
        let small = payload.is_none_or(|l| l <= cfg.max_record_payload);
        if n > 0 && (!small || size + sub > cfg.max_bytes) {
            break;
        }
        if !admit(len, corr) {
            if n == 0 {
                // Taken anyway (see above).
                return Run {
                    n: 1,
                    bytes: len,
                    frame: 0,
                };
            }
            break;
        }
        n += 1;
        total += len;
        if !small {
            break;
        }
        size += sub;
    }
    Run {
        n: n.max(1),
        bytes: total,
        frame: size,
    }
}

/// What limits the records a queue may transmit besides the transport: the other end's
/// credit ([`SendCredit`]: mesh relay data, a client's requests and DATA), or nothing
/// ([`Unlimited`]: replies, a session's pushes). A type parameter of [`flush`], so each kind of
/// queue gets its own monomorphic, inlined loop.
pub(crate) trait Credit {
    /// At least one more record may go out.
    fn open(&self) -> bool;
    /// Which records from the front of `queue` go out as one message (see
    /// [`SendCredit::run`]); never a request that `ended`.
    fn run<'a>(
        &self,
        batching: &Batching,
        queue: impl Iterator<Item = (&'a [Bytes], u64)>,
        ended: impl FnMut(u64) -> bool,
    ) -> Run;
    /// The records of `run` went out.
    fn charge_run(&mut self, run: Run);
    /// Whether the first record of a run, of `len()` bytes, may go out now (the credit is
    /// open): `false` only where the credit is a hard bound it does not fit in
    /// ([`SendCredit::fits`]).
    fn fits(&self, len: impl FnOnce() -> u64) -> bool;
    /// Whether all `n` records of a [`Framed`] run, `bytes` in all and `before_last` without
    /// the last one, go out within this credit, each checked as if sent alone (the rule of
    /// [`SendCredit::run`]; the caller checked that the credit is open).
    fn admits(&self, n: usize, bytes: u64, before_last: u64) -> bool;
}

impl Credit for SendCredit {
    #[inline]
    fn open(&self) -> bool {
        SendCredit::open(self)
    }

    #[inline]
    fn run<'a>(
        &self,
        batching: &Batching,
        queue: impl Iterator<Item = (&'a [Bytes], u64)>,
        ended: impl FnMut(u64) -> bool,
    ) -> Run {
        SendCredit::run(self, batching, queue, ended)
    }

    #[inline]
    fn charge_run(&mut self, run: Run) {
        SendCredit::charge_run(self, run);
    }

    #[inline]
    fn fits(&self, len: impl FnOnce() -> u64) -> bool {
        SendCredit::fits(self, len)
    }

    /// Record by record, the credit admits the next one while messages and bytes are left;
    /// the bytes only fall, so the last record's check is the one that matters (where the
    /// credit is a hard bound, the last record must fit: all `bytes`).
    #[inline]
    fn admits(&self, n: usize, bytes: u64, before_last: u64) -> bool {
        self.msgs >= n as u64
            && if self.exact() {
                bytes <= self.bytes
            } else {
                self.bytes > before_last
            }
    }
}

/// No credit limit: only the transport and the batching rule bound a run.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Unlimited;

impl Credit for Unlimited {
    #[inline]
    fn open(&self) -> bool {
        true
    }

    #[inline]
    fn run<'a>(
        &self,
        batching: &Batching,
        queue: impl Iterator<Item = (&'a [Bytes], u64)>,
        mut ended: impl FnMut(u64) -> bool,
    ) -> Run {
        batch_run(batching, queue, |_, corr| corr == 0 || !ended(corr))
    }

    #[inline]
    fn charge_run(&mut self, _run: Run) {}

    #[inline]
    fn fits(&self, _len: impl FnOnce() -> u64) -> bool {
        true
    }

    #[inline]
    fn admits(&self, _n: usize, _bytes: u64, _before_last: u64) -> bool {
        true
    }
}

/// What the transport did with one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendOutcome {
    /// Taken (libzmq queued it).
    Sent,
    /// Refused for now (high-water mark): retry later, in order.
    Paused,
    /// The connection is gone: the records are lost.
    Unreachable,
}

/// The driver's side of a queue being flushed: the transport, and what only the driver knows
/// (the correlation table, the counters).
pub(crate) trait Transport {
    /// Sends `run` (one or more records for this connection) as one message: a lone record as
    /// its own frames, several as one 139 batch frame.
    /// `frame` is the batch frame's size when the run has two or more records
    /// ([`Run::frame`]).
    fn send_run<'a>(
        &mut self,
        run: impl ExactSizeIterator<Item = &'a Parts>,
        frame: usize,
    ) -> SendOutcome;
    /// Sends a run its senders framed ([`Framed`]) as one message: a lone record as its own
    /// frames, several as the 139 batch frame they already form ([`Framed::take_frame`] once
    /// the transport accepted the message; a refused one keeps its frame for the retry).
    fn send_framed(&mut self, run: &mut Framed) -> SendOutcome;
    /// The request `corr` (≠ 0) must not be transmitted any more: it reached its terminal, or
    /// its deadline passed (then it is ended now). Counted by the driver.
    fn ended(&mut self, corr: u64) -> bool;
    /// Like [`Transport::ended`] but only asks (nothing ended, nothing counted): a run stops
    /// before such a request (it is discarded at the front next round).
    fn expired(&self, corr: u64) -> bool;
    /// A record could not be sent: the connection is gone (counted by the driver).
    fn lost(&mut self, out: &Out);
}

/// Why [`flush`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Everything went out (or was discarded).
    Empty,
    /// The other end's credit is used up: nothing to retry until a grant arrives.
    CreditBlocked,
    /// The transport refused (PAUSED): retry later.
    Paused,
}

/// Transmits `queue` in order while the transport takes it and `credit` allows: a request that
/// already ended is discarded at the front (its reservation released); then the run of records
/// that go out as one message (natural batching within the credit, [`Credit::run`]); a sent
/// run is charged to the credit record by record and its reservations released to `budget` at
/// once; a run the transport could not deliver is released and reported lost. One loop for
/// every queue of a mesh node and of a `MeshClient`, monomorphic in the credit and transport.
/// Each run is measured once ([`Credit::run`] returns its bytes with its length).
#[inline]
pub(crate) fn flush<C: Credit, T: Transport>(
    queue: &mut VecDeque<Out>,
    credit: &mut C,
    budget: &Budget,
    batching: &Batching,
    t: &mut T,
) -> Flushed {
    while let Some(out) = queue.front_mut() {
        if let Some(run) = out.framed.as_deref_mut() {
            if !credit.open() {
                return Flushed::CreditBlocked;
            }
            let (n, bytes) = (run.records(), run.bytes);
            if !credit.admits(n, bytes, run.before_last) {
                // The credit ends inside the run: its records continue one by one, as if
                // queued so (copied out of the frame; ≈ 2 % of the runs under a relay flood),
                // and go out exactly as far as the credit admits each of them.
                let Some(framed) = queue.pop_front() else {
                    break;
                };
                let records: Vec<Out> = framed.framed.map(|f| f.unframe()).unwrap_or_default();
                for out in records.into_iter().rev() {
                    queue.push_front(out);
                }
                continue;
            }
            match t.send_framed(run) {
                SendOutcome::Sent => {
                    credit.charge_run(Run { n, bytes, frame: 0 });
                    budget.release_n(n as u64, bytes);
                    queue.pop_front();
                }
                SendOutcome::Paused => return Flushed::Paused,
                SendOutcome::Unreachable => {
                    if let Some(out) = queue.pop_front() {
                        release(budget, &out);
                        for _ in 0..n {
                            t.lost(&out);
                        }
                    }
                }
            }
            continue;
        }
        if out.corr != 0 && t.ended(out.corr) {
            // The request reached its terminal (deadline, cancel) while queued: it must never
            // be sent afterwards (SB-12, EG-16.26).
            release(budget, out);
            queue.pop_front();
            continue;
        }
        if !credit.open() || !credit.fits(|| out.frames.iter().map(|f| f.len() as u64).sum()) {
            return Flushed::CreditBlocked;
        }
        // A run of records queued one by one stops before a framed run.
        let run = credit.run(
            batching,
            queue
                .iter()
                .take_while(|o| o.framed.is_none())
                .map(|o| (&*o.frames, o.corr)),
            |c| t.expired(c),
        );
        let n = run.n;
        match t.send_run(queue.iter().take(n).map(|o| &o.frames), run.frame) {
            SendOutcome::Sent => {
                credit.charge_run(run);
                let (mut reserved_n, mut reserved_bytes) = (0, 0);
                for out in queue.drain(..n) {
                    if let Some(b) = out.bytes {
                        reserved_n += 1;
                        reserved_bytes += b;
                    }
                }
                if reserved_n > 0 {
                    budget.release_n(reserved_n, reserved_bytes);
                }
            }
            SendOutcome::Paused => return Flushed::Paused,
            SendOutcome::Unreachable => {
                for out in queue.drain(..n) {
                    release(budget, &out);
                    t.lost(&out);
                }
            }
        }
    }
    Flushed::Empty
}

/// The 139 batch frame of `run` (two or more records, `len` bytes in all: [`Run::frame`]) in
/// a buffer of exactly its size, so it becomes the libzmq message without a copy
/// (`zmq::Message::from(Vec<u8>)` takes the buffer over when its length is its capacity;
/// libzmq frees it once transmitted), where a reused buffer was copied into a fresh message
/// per frame.
pub(crate) fn encode_run<'a>(run: impl Iterator<Item = &'a Parts>, len: usize) -> Vec<u8> {
    let mut enc = zlink_wire::BatchEncoder::new(Vec::with_capacity(len));
    for frames in run {
        // Cannot fail: an application, request or DATA record is never a batch, a run holds
        // at most `Batching::max_records` (≤ MAX_BATCH_RECORDS, checked at start) records and
        // every part is bounded by the message size.
        let pushed = enc.push(&frames[0], frames.get(1).map(|p| &p[..]));
        debug_assert!(pushed.is_ok(), "batch push: {pushed:?}");
    }
    let frame = enc.finish();
    debug_assert_eq!(frame.len(), len, "batch frame measured by the run");
    debug_assert_eq!(frame.len(), frame.capacity(), "batch frame sized exactly");
    frame
}

/// A record queued for a connection (its frames), with what it reserved; or a run of one-way
/// records its senders framed already ([`Out::framed`]).
pub(crate) struct Out {
    /// The record's parts (empty for a framed run).
    pub(crate) frames: Parts,
    /// Bytes reserved against the destination budget (a framed run: all its records');
    /// `None` for replies (not budgeted).
    pub(crate) bytes: Option<u64>,
    /// Correlation id of a request (0 = not a request). Checked against the correlation
    /// table at the moment of transmission: a request that already ended is never sent.
    pub(crate) corr: u64,
    /// One-way records framed by their senders as the sub-records of one 139 batch frame
    /// ([`Framed`]), sent without the I/O thread copying them.
    pub(crate) framed: Option<Box<Framed>>,
}

impl Out {
    /// One record's parts.
    pub(crate) fn parts(frames: Parts, bytes: Option<u64>, corr: u64) -> Self {
        Self {
            frames,
            bytes,
            corr,
            framed: None,
        }
    }

    /// A framed run of one-way records, each of which reserved its bytes.
    pub(crate) fn framed(run: Box<Framed>) -> Self {
        Self {
            frames: Parts::default(),
            bytes: Some(run.bytes),
            corr: 0,
            framed: Some(run),
        }
    }

    /// How many records this is (a framed run's, else 1).
    pub(crate) fn records(&self) -> usize {
        self.framed.as_ref().map_or(1, |f| f.records())
    }
}

/// A run of one-way records written as the sub-records of one 139 batch frame by the threads
/// that sent them (`node::Outbox`: the record's bytes are copied while they are still in the
/// sender's cache), within the batching rule of [`batch_run`]: records whose payload is at
/// most `max_record_payload`, at most `max_records` of them and at most `max_bytes` of frame
/// (a first record may exceed it, and then travels alone). The I/O thread sends the frame as
/// the message as it is (a lone record as its own frames), without touching the records'
/// bytes; each record is still charged to the credit on its own ([`Credit::admits`]; a run
/// the credit ends inside goes on record by record, [`Framed::unframe`]).
#[derive(Debug)]
pub(crate) struct Framed {
    /// The frame: [`zlink_wire::batch::batch_prefix`] (the count kept current), then the
    /// sub-records.
    frame: Vec<u8>,
    /// Records in the frame.
    n: u32,
    /// Their bytes (all parts of each record), the unit of the budget and the credit.
    bytes: u64,
    /// Their bytes without the last record's.
    before_last: u64,
}

impl Framed {
    /// An empty run whose frame buffer has room for `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> Self {
        let mut frame = Vec::with_capacity(capacity.max(zlink_wire::batch::BATCH_PREFIX_LEN));
        frame.extend_from_slice(&zlink_wire::batch::batch_prefix(0));
        Self {
            frame,
            n: 0,
            bytes: 0,
            before_last: 0,
        }
    }

    /// Records in the run.
    pub(crate) fn records(&self) -> usize {
        self.n as usize
    }

    /// Bytes of its records (all parts of each): what they reserved.
    pub(crate) fn reserved(&self) -> u64 {
        self.bytes
    }

    /// Bytes the frame's buffer holds room for.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.frame.capacity()
    }

    /// Bytes of the frame so far.
    pub(crate) fn frame_len(&self) -> usize {
        self.frame.len()
    }

    /// Whether `batching` lets a record of `envelope` and `payload` bytes travel in a batch
    /// frame at all (its payload is small; batching is on).
    pub(crate) fn batchable(batching: &Batching, payload: usize) -> bool {
        batching.max_records > 1 && payload <= batching.max_record_payload
    }

    /// Whether one more record whose sub-record takes `sub` bytes joins this run (the rule of
    /// [`batch_run`]: an empty run takes any record).
    pub(crate) fn has_room(&self, batching: &Batching, sub: usize) -> bool {
        self.n == 0
            || (self.records() < batching.max_records.min(MAX_RUN)
                && self.frame.len() + sub <= batching.max_bytes)
    }

    /// Appends one record (envelope and payload); `false` (nothing appended) only for what the
    /// mesh never sends framed: a batch as envelope or a part longer than `u32::MAX`.
    #[cfg(test)]
    pub(crate) fn push(&mut self, envelope: &[u8], payload: Option<&[u8]>) -> bool {
        let len = (envelope.len() + payload.map_or(0, <[u8]>::len)) as u64;
        self.push_with(len, |frame| {
            zlink_wire::batch::push_sub_record(frame, envelope, payload)
        })
    }

    /// Appends one record of `len` bytes (envelope and payload) that `write` appends as a
    /// sub-record to the frame (`false`: nothing written, nothing appended).
    #[inline]
    pub(crate) fn push_with(&mut self, len: u64, write: impl FnOnce(&mut Vec<u8>) -> bool) -> bool {
        if !write(&mut self.frame) {
            return false;
        }
        self.n += 1;
        self.before_last = self.bytes;
        self.bytes += len;
        zlink_wire::batch::set_batch_count(&mut self.frame, self.n);
        true
    }

    /// The run's only record (its envelope and payload), when it holds exactly one.
    pub(crate) fn lone(&self) -> Option<zlink_wire::RawRecord<'_>> {
        if self.n != 1 {
            return None;
        }
        zlink_wire::batch::sub_records(&self.frame, 1).next()
    }

    /// The frame as it stands (a valid 139 frame once it holds a record).
    pub(crate) fn frame(&self) -> &[u8] {
        &self.frame
    }

    /// Takes the frame to hand it to the transport (which takes it over without a copy). The
    /// run is spent: the caller removes it.
    pub(crate) fn take_frame(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.frame)
    }

    /// The run's records, one by one, each with its own reservation (together the run's).
    pub(crate) fn unframe(&self) -> Vec<Out> {
        zlink_wire::batch::sub_records(&self.frame, self.n)
            .map(|r| {
                let frames = Parts::new(
                    Bytes::copy_from_slice(r.envelope),
                    r.payload.map(Bytes::copy_from_slice),
                );
                let len = (r.envelope.len() + r.payload.map_or(0, <[u8]>::len)) as u64;
                Out::parts(frames, Some(len), 0)
            })
            .collect()
    }
}

/// Most records of one framed run: what a batch frame may hold.
const MAX_RUN: usize = zlink_wire::MAX_BATCH_RECORDS as usize;

/// All bytes of a queued record.
#[cfg(test)]
pub(crate) fn out_len(out: &Out) -> u64 {
    out.frames.iter().map(|f| f.len() as u64).sum()
}

/// Gives a queued record's (or framed run's) reservation back to its budget.
pub(crate) fn release(budget: &Budget, out: &Out) {
    if let Some(b) = out.bytes {
        budget.release_n(out.records() as u64, b);
    }
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
    pub(crate) budget: Arc<Budget>,
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
    pub(crate) fn idle(window: InboundWindow, budget: Arc<Budget>, now: Instant) -> Self {
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
    pub(crate) fn to_client_port(window: InboundWindow, budget: Arc<Budget>, now: Instant) -> Self {
        Self {
            credit: SendCredit::client(),
            ..Self::idle(window, budget, now)
        }
    }

    /// A connection granted its whole `window` at once (the grant leaves with the next
    /// [`Conn::poll_grant`]).
    pub(crate) fn granted(window: InboundWindow, budget: Arc<Budget>, now: Instant) -> Self {
        Self {
            window,
            rx: RxWindow::initial_grant(window),
            strict: false,
            credit: SendCredit::default(),
            queue: VecDeque::new(),
            budget,
            last_rx: now,
            next_ping: now,
            ping_seq: 0,
        }
    }

    /// [`Conn::granted`] for a stranger's session: the window's bytes are a hard bound (a
    /// record must fit in what is left of them) until it is widened ([`Conn::widen`]).
    pub(crate) fn stranger(window: InboundWindow, budget: Arc<Budget>, now: Instant) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: InboundWindow = InboundWindow {
        messages: 4,
        bytes: 1000,
    };

    fn budget() -> Arc<Budget> {
        Arc::new(Budget::new(crate::budget::OutboundBudget::default()))
    }

    fn app(conn: &mut Conn, bytes: u64) -> Verdict {
        conn.ingress(Lane::Relay, &Class::App, bytes, Instant::now())
    }

    /// The window-drop branch, deterministically: a sender that ignores its window has the
    /// excess dropped (`CreditExceeded`), what fit is delivered, and credit granted back lets
    /// it send again — no sockets, no timing.
    #[test]
    fn records_beyond_the_window_are_dropped_until_credit_returns() {
        let now = Instant::now();
        let mut conn = Conn::granted(WINDOW, budget(), now);
        // Nothing may arrive before the initial grant left.
        assert_eq!(
            app(&mut conn, 10),
            Verdict::Drop(DropReason::CreditExceeded)
        );
        // The initial grant, and the cost of the dropped record given back (resync: the
        // sender paid for it).
        let grant = conn.poll_grant().expect("the initial grant");
        assert_eq!((grant.messages, grant.bytes), (4 + 1, 1000 + 10));
        conn.grant_sent(grant);
        assert_eq!(conn.poll_grant(), None);
        for _ in 0..4 {
            assert_eq!(app(&mut conn, 10), Verdict::Deliver);
        }
        // The sender ignores its window: the fifth record is dropped.
        assert_eq!(
            app(&mut conn, 10),
            Verdict::Drop(DropReason::CreditExceeded)
        );
        // One delivered record left the window: a quarter of it, granted back now, with the
        // refund of the dropped one (which freed nothing of the window).
        assert!(conn.released(10));
        let grant = conn.poll_grant().expect("credit owed");
        assert_eq!((grant.messages, grant.bytes), (1 + 1, 10 + 10));
        // Not granted until the transport took it: still refused.
        assert_eq!(
            app(&mut conn, 10),
            Verdict::Drop(DropReason::CreditExceeded)
        );
        conn.grant_sent(grant);
        assert_eq!(app(&mut conn, 10), Verdict::Deliver);
        // The byte bound applies too (one record may overshoot it).
        let mut conn = Conn::granted(WINDOW, budget(), now);
        conn.grant_sent(conn.poll_grant().unwrap());
        assert_eq!(app(&mut conn, 999), Verdict::Deliver);
        assert_eq!(app(&mut conn, 500), Verdict::Deliver);
        assert_eq!(app(&mut conn, 1), Verdict::Drop(DropReason::CreditExceeded));
    }

    #[test]
    fn each_lane_takes_only_its_records() {
        let now = Instant::now();
        let mut conn = Conn::granted(WINDOW, budget(), now);
        conn.grant_sent(conn.poll_grant().unwrap());
        let wrong = Verdict::Drop(DropReason::WrongConnection);
        assert_eq!(conn.ingress(Lane::Relay, &Class::Ping(1), 8, now), wrong);
        assert_eq!(conn.ingress(Lane::Relay, &Class::Reply, 8, now), wrong);
        assert_eq!(conn.ingress(Lane::Completion, &Class::App, 8, now), wrong);
        assert_eq!(conn.ingress(Lane::Client, &Class::Reply, 8, now), wrong);
        assert_eq!(conn.ingress(Lane::Client, &Class::Push, 8, now), wrong);
        let credit = Class::FlowCredit {
            messages: 1,
            bytes: 1,
        };
        assert_eq!(conn.ingress(Lane::Client, &credit, 8, now), wrong);
        assert_eq!(conn.ingress(Lane::Relay, &credit, 8, now), wrong);
        assert_eq!(
            conn.ingress(Lane::Client, &Class::Ping(7), 8, now),
            Verdict::Answer(Pong { seq: 7 })
        );
        assert_eq!(
            conn.ingress(Lane::Completion, &Class::Reply, 8, now),
            Verdict::Complete
        );
        assert_eq!(
            conn.ingress(
                Lane::Relay,
                &Class::Disconnect(zlink_wire::DisconnectReason::Shutdown),
                8,
                now
            ),
            Verdict::Disconnect
        );
        assert_eq!(
            conn.ingress(Lane::Client, &Class::App, 8, now),
            Verdict::Deliver
        );
        // The client side of a ClientServer connection: pushes delivered uncharged, replies
        // completed, credit granted, Pings only noted; no application records.
        assert_eq!(
            conn.ingress(Lane::Server, &Class::Push, 8, now),
            Verdict::Deliver
        );
        assert_eq!(
            conn.ingress(Lane::Server, &Class::Reply, 8, now),
            Verdict::Complete
        );
        assert_eq!(
            conn.ingress(Lane::Server, &Class::Ping(3), 8, now),
            Verdict::Control { resume: false }
        );
        assert_eq!(
            conn.ingress(Lane::Server, &credit, 8, now),
            Verdict::Control { resume: true }
        );
        assert_eq!(conn.ingress(Lane::Server, &Class::App, 8, now), wrong);
        assert_eq!(conn.ingress(Lane::Client, &Class::Push, 8, now), wrong);
        // Replies and control are not charged to the window.
        assert_eq!(conn.rx, {
            let mut w = RxWindow::default();
            assert!(w.try_charge(WINDOW, 8));
            w
        });
    }

    // SB-5.4: inside a batch frame only application records (and, between nodes, replies)
    // are accepted; handshake and control records travel alone.
    #[test]
    fn only_data_travels_in_a_batch() {
        let credit = Class::FlowCredit {
            messages: 1,
            bytes: 1,
        };
        for lane in [Lane::Relay, Lane::Completion, Lane::Client, Lane::Server] {
            for control in [&Class::Ping(1), &Class::Pong, &credit] {
                assert!(!lane.batchable(control), "{lane:?} {control:?}");
            }
            let bye = Class::Disconnect(zlink_wire::DisconnectReason::Shutdown);
            assert!(!lane.batchable(&bye));
        }
        for lane in [Lane::Relay, Lane::Completion, Lane::Client] {
            assert!(lane.batchable(&Class::App));
        }
        assert!(Lane::Relay.batchable(&Class::Reply));
        assert!(Lane::Completion.batchable(&Class::Reply));
        assert!(!Lane::Client.batchable(&Class::Reply));
        assert!(Lane::Server.batchable(&Class::Push) && Lane::Server.batchable(&Class::Reply));
        assert!(!Lane::Server.batchable(&Class::App));
    }

    #[test]
    fn send_credit_saturates_and_resumes() {
        let now = Instant::now();
        let mut conn = Conn::idle(WINDOW, budget(), now);
        assert!(!conn.credit.open());
        let max = Class::FlowCredit {
            messages: u32::MAX,
            bytes: u64::MAX,
        };
        assert_eq!(
            conn.ingress(Lane::Completion, &max, 8, now),
            Verdict::Control { resume: true }
        );
        assert_eq!(
            conn.ingress(Lane::Completion, &max, 8, now),
            Verdict::Control { resume: true }
        );
        assert_eq!(conn.credit.left(), (2 * u64::from(u32::MAX), u64::MAX));
        conn.credit.charge_run(Run {
            n: 1,
            bytes: 10,
            frame: 0,
        });
        assert!(conn.credit.open());
        conn.reset();
        assert!(!conn.credit.open());
    }

    // docs/CLIENT-PROTOCOL.md 5.1: the last record may overdraw the byte credit; the receiver
    // returns its full cost, so the overdraft is paid back out of the next grant (treated as
    // 0 the sender would end above its window).
    #[test]
    fn an_overdraft_is_paid_back_by_the_next_grant() {
        let mut c = SendCredit::default();
        c.grant(4, 100);
        c.charge_run(Run {
            n: 1,
            bytes: 150,
            frame: 0,
        });
        assert_eq!(c.left(), (3, 0));
        assert!(!c.open(), "no bytes left");
        // The receiver returns the record's full cost: back to the window, not above it.
        c.grant(1, 150);
        assert_eq!(c.left(), (4, 100));
    }

    #[test]
    fn widening_grants_the_difference() {
        let now = Instant::now();
        let small = InboundWindow {
            messages: 2,
            bytes: 100,
        };
        let mut conn = Conn::granted(small, budget(), now);
        conn.grant_sent(conn.poll_grant().unwrap());
        assert_eq!(app(&mut conn, 10), Verdict::Deliver);
        assert_eq!(app(&mut conn, 10), Verdict::Deliver);
        assert_eq!(
            app(&mut conn, 10),
            Verdict::Drop(DropReason::CreditExceeded)
        );
        conn.widen(WINDOW);
        assert_eq!(conn.window(), WINDOW);
        // The difference, and the refund of the dropped record.
        let grant = conn.poll_grant().unwrap();
        assert_eq!((grant.messages, grant.bytes), (2 + 1, 900 + 10));
        conn.grant_sent(grant);
        assert_eq!(app(&mut conn, 10), Verdict::Deliver);
        assert_eq!(app(&mut conn, 10), Verdict::Deliver);
        assert_eq!(
            app(&mut conn, 10),
            Verdict::Drop(DropReason::CreditExceeded)
        );
    }

    /// A transport that takes `room` messages, then refuses (PAUSED) or reports the peer
    /// gone; requests in `ended` have reached their terminal.
    #[derive(Default)]
    struct Fake {
        room: usize,
        gone: bool,
        ended: Vec<u64>,
        sent: Vec<usize>,
        /// The messages of framed runs: a batch frame, or a lone record's envelope.
        framed: Vec<Vec<u8>>,
        discarded: Vec<u64>,
        lost: usize,
    }

    impl Transport for Fake {
        fn send_run<'a>(
            &mut self,
            run: impl ExactSizeIterator<Item = &'a Parts>,
            _frame: usize,
        ) -> SendOutcome {
            if self.gone {
                return SendOutcome::Unreachable;
            }
            if self.room == 0 {
                return SendOutcome::Paused;
            }
            self.room -= 1;
            self.sent.push(run.len());
            SendOutcome::Sent
        }

        fn send_framed(&mut self, run: &mut Framed) -> SendOutcome {
            if self.gone {
                return SendOutcome::Unreachable;
            }
            if self.room == 0 {
                return SendOutcome::Paused;
            }
            self.room -= 1;
            self.sent.push(run.records());
            let message = match run.lone() {
                Some(r) => r.envelope.to_vec(),
                None => run.take_frame(),
            };
            self.framed.push(message);
            SendOutcome::Sent
        }

        fn ended(&mut self, corr: u64) -> bool {
            let ended = self.ended.contains(&corr);
            if ended {
                self.discarded.push(corr);
            }
            ended
        }

        fn expired(&self, corr: u64) -> bool {
            self.ended.contains(&corr)
        }

        fn lost(&mut self, _out: &Out) {
            self.lost += 1;
        }
    }

    fn queue_of(records: &[(usize, u64)], budget: &Budget) -> VecDeque<Out> {
        records
            .iter()
            .map(|&(len, corr)| {
                let frames = crate::codec::Parts::new(
                    Bytes::from(vec![0u8; 8]),
                    Some(Bytes::from(vec![0u8; len])),
                );
                let bytes = out_len(&Out::parts(frames.clone(), None, corr));
                assert!(budget.try_reserve(bytes));
                Out::parts(frames, Some(bytes), corr)
            })
            .collect()
    }

    // docs/CLIENT-PROTOCOL.md 5.1 — a client stays within the node's first grant (a stranger's
    // window: a record that does not fit in what is left of its bytes is dropped by the node);
    // from the second grant (the acceptance) its last record may overdraw as usual. Records of
    // 18 bytes, a first grant of 4 records / 60 bytes: three fit (54), the fourth waits (and the
    // ones behind it, in order) although messages and bytes are left; the second grant sends it.
    #[test]
    fn a_client_never_overdraws_the_first_grant() {
        let budget = budget();
        let batching = Batching::default();
        for framed in [false, true] {
            let mut q = if framed {
                // The same records framed by their sender as one run.
                VecDeque::from([framed_of(&[10; 5], &budget).0])
            } else {
                queue_of(&[(10, 0); 5], &budget)
            };
            let mut credit = SendCredit::client();
            credit.grant(4, 60);
            let mut t = Fake {
                room: 10,
                ..Fake::default()
            };
            assert_eq!(
                flush(&mut q, &mut credit, &budget, &batching, &mut t),
                Flushed::CreditBlocked
            );
            let sent: usize = t.sent.iter().sum();
            assert_eq!(sent, 3, "framed: {framed}: only what fits the first grant");
            assert_eq!(credit.left(), (1, 6));
            // The acceptance's grant: the rest may overdraw (the receiver returns it all).
            credit.grant(1, 10);
            assert_eq!(
                flush(&mut q, &mut credit, &budget, &batching, &mut t),
                Flushed::CreditBlocked
            );
            let sent: usize = t.sent.iter().sum();
            assert_eq!(
                sent, 4,
                "framed: {framed}: the fourth overdraws after the second grant"
            );
            // A peer's credit may overdraw from its first grant on.
            let mut q = queue_of(&[(10, 0); 3], &budget);
            let mut peer = SendCredit::default();
            peer.grant(3, 20);
            let mut t = Fake {
                room: 10,
                ..Fake::default()
            };
            assert_eq!(
                flush(&mut q, &mut peer, &budget, &batching, &mut t),
                Flushed::CreditBlocked
            );
            assert_eq!(t.sent.iter().sum::<usize>(), 2);
            budget.release_n(budget.reserved_messages(), budget.reserved_bytes());
        }
    }

    // The one send loop of every queue: runs batched within the credit (each record charged on
    // its own), a request that ended discarded at the front and never put in a run, PAUSED and
    // credit-blocked told apart, every reservation released exactly once (sent, discarded or
    // lost).
    #[test]
    fn flush_batches_within_credit_and_releases_every_reservation() {
        let budget = budget();
        let batching = Batching {
            max_records: 3,
            ..Batching::default()
        };
        let mut q = queue_of(
            &[
                (10, 0),
                (10, 0),
                (10, 7),
                (10, 0),
                (10, 0),
                (10, 0),
                (10, 0),
            ],
            &budget,
        );
        let mut credit = SendCredit::default();
        credit.grant(5, 1 << 20);
        let mut t = Fake {
            room: 10,
            ended: vec![7],
            ..Fake::default()
        };
        // The run stops before the ended request, which is then discarded at the front; the
        // credit (5 records) ends the second run of 3 after 3 more.
        let r = flush(&mut q, &mut credit, &budget, &batching, &mut t);
        assert_eq!(r, Flushed::CreditBlocked);
        assert_eq!(t.sent, vec![2, 3]);
        assert_eq!(t.discarded, vec![7]);
        assert_eq!(q.len(), 1, "one record waits for credit");
        assert!(!credit.open());
        assert_eq!(
            credit.left(),
            (0, (1 << 20) - 5 * 18),
            "each sent record charged with all its bytes"
        );
        assert_eq!(
            budget.reserved_messages(),
            1,
            "only the waiting record still reserved"
        );
        // Without credit limit: the rest goes as soon as the transport takes it.
        t.room = 0;
        assert_eq!(
            flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
            Flushed::Paused
        );
        t.room = 1;
        assert_eq!(
            flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
            Flushed::Empty
        );
        assert_eq!(budget.reserved_messages(), 0);
        // A connection that is gone: each record lost, reservation released.
        let mut q = queue_of(&[(10, 0), (10, 0)], &budget);
        t.gone = true;
        assert_eq!(
            flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
            Flushed::Empty
        );
        assert_eq!((t.lost, budget.reserved_messages()), (2, 0));
    }

    /// A framed run of one-way records of `lens` payload bytes (8-byte envelopes), each
    /// reserved against `budget` as `MeshNode` does before framing it.
    fn framed_of(lens: &[usize], budget: &Budget) -> (Out, Vec<Parts>) {
        let mut run = Framed::new(0);
        let mut records = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            let parts = crate::codec::Parts::new(
                Bytes::from(vec![i as u8; 8]),
                Some(Bytes::from(vec![0u8; len])),
            );
            assert!(budget.try_reserve(8 + len as u64));
            assert!(run.push(&parts[0], Some(&parts[1])));
            records.push(parts);
        }
        (Out::framed(Box::new(run)), records)
    }

    // Runs framed by their senders go out as the batch frame they form (the encoder's bytes),
    // in queue order with the records queued one by one (a run of those stops before a framed
    // run); each record is charged to the credit as if sent alone; a run the credit ends
    // inside continues record by record; PAUSED keeps the run whole; every reservation is
    // released exactly once (sent, or lost with one drop per record).
    #[test]
    fn framed_runs_go_out_whole_within_credit_and_record_by_record_past_it() {
        let budget = budget();
        let batching = Batching::default();
        let mut q = queue_of(&[(10, 0)], &budget);
        let (framed, records) = framed_of(&[10, 20, 30], &budget);
        q.push_back(framed);
        q.extend(queue_of(&[(10, 0), (10, 0)], &budget));
        let mut credit = SendCredit::default();
        credit.grant(5, 1 << 20);
        let mut t = Fake {
            room: 10,
            ..Fake::default()
        };
        assert_eq!(
            flush(&mut q, &mut credit, &budget, &batching, &mut t),
            Flushed::CreditBlocked
        );
        assert_eq!(
            t.sent,
            vec![1, 3, 1],
            "the framed run is a message of its own"
        );
        let expected =
            zlink_wire::encode_batch(records.iter().map(|p| (&p[0][..], Some(&p[1][..])))).unwrap();
        assert_eq!(t.framed, vec![expected.to_vec()], "the encoder's frame");
        assert_eq!(credit.left(), (0, (1 << 20) - 18 - 84 - 18));
        assert_eq!(budget.reserved_messages(), 1);
        assert_eq!(q.len(), 1);
        q.clear();
        budget.release(18);

        // The byte credit admits a record while any is left: all of a run whose last record
        // starts within it (as record by record), the bytes then saturate at zero.
        let (framed, _) = framed_of(&[10, 20, 30], &budget);
        q.push_back(framed);
        let mut credit = SendCredit::default();
        credit.grant(3, 18 + 28 + 1);
        t.sent.clear();
        assert_eq!(
            flush(&mut q, &mut credit, &budget, &batching, &mut t),
            Flushed::Empty
        );
        assert_eq!((t.sent.clone(), credit.left()), (vec![3], (0, 0)));

        // The credit ends inside a run: the records it admits go (as one batch of two), the
        // rest waits one by one with its own reservations.
        let (framed, records) = framed_of(&[10, 20, 30, 40], &budget);
        q.push_back(framed);
        credit.grant(2, 1 << 20);
        t.sent.clear();
        assert_eq!(
            flush(&mut q, &mut credit, &budget, &batching, &mut t),
            Flushed::CreditBlocked
        );
        assert_eq!(t.sent, vec![2]);
        assert_eq!(q.len(), 2);
        assert_eq!(budget.reserved_messages(), 2);
        assert_eq!(budget.reserved_bytes(), 38 + 48);
        for (out, parts) in q.iter().zip(&records[2..]) {
            assert_eq!(
                (&out.frames[..], out.bytes),
                (&parts[..], Some(out_len(out)))
            );
        }
        // PAUSED: nothing leaves, the run stays whole for the retry.
        let (framed, _) = framed_of(&[5, 5], &budget);
        q.push_back(framed);
        t.room = 0;
        assert_eq!(
            flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
            Flushed::Paused
        );
        t.room = 10;
        t.sent.clear();
        assert_eq!(
            flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
            Flushed::Empty
        );
        assert_eq!(t.sent, vec![2, 2]);
        assert_eq!(budget.reserved_messages(), 0);
        // A lone framed record goes out as its own frames; a lost run counts each record.
        let (framed, records) = framed_of(&[7], &budget);
        q.push_back(framed);
        assert_eq!(
            flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
            Flushed::Empty
        );
        assert_eq!(t.framed.last(), Some(&records[0][0].to_vec()));
        let (framed, _) = framed_of(&[7, 7, 7], &budget);
        q.push_back(framed);
        t.gone = true;
        assert_eq!(
            flush(&mut q, &mut Unlimited, &budget, &batching, &mut t),
            Flushed::Empty
        );
        assert_eq!(
            (t.lost, budget.reserved_messages(), budget.reserved_bytes()),
            (3, 0, 0)
        );
    }

    // A run takes records while the batching rule would put them in one frame.
    #[test]
    fn a_framed_run_is_cut_where_a_batch_run_is() {
        let batching = Batching {
            max_records: 3,
            max_bytes: zlink_wire::batch::BATCH_PREFIX_LEN + 2 * (9 + 8 + 10) + 13,
            max_record_payload: 100,
        };
        let sub = zlink_wire::batch::sub_record_len(8, Some(10));
        let mut run = Framed::new(0);
        assert!(
            run.has_room(&batching, 1 << 20),
            "an empty run takes any record"
        );
        for _ in 0..2 {
            assert!(run.has_room(&batching, sub));
            assert!(run.push(&[1; 8], Some(&[0; 10])));
        }
        assert!(!run.has_room(&batching, sub), "max_bytes");
        assert!(
            run.has_room(&batching, 13),
            "an envelope-only record still fits"
        );
        assert!(run.push(&[1; 8], None));
        assert!(!run.has_room(&batching, 1), "max_records");
        assert!(Framed::batchable(&batching, 100));
        assert!(!Framed::batchable(&batching, 101));
        let off = Batching {
            max_records: 1,
            ..batching
        };
        assert!(!Framed::batchable(&off, 0), "batching off");
        assert!(zlink_wire::BatchFrame::parse(Bytes::from(run.take_frame())).is_ok());
    }

    // Liveness without a clock: a Ping per interval while the other end is heard from,
    // down after the peer timeout of silence; a Ping the transport refused is due again at
    // once.
    #[test]
    fn liveness_pings_per_interval_and_times_out_on_silence() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let liveness = Liveness {
            ping_interval: s,
            peer_timeout: 3 * s,
            ..Liveness::default()
        };
        let mut conn = Conn::idle(WINDOW, budget(), t0);
        conn.came_up(t0, s);
        assert_eq!(conn.poll_liveness(t0, &liveness), Alive::Quiet);
        assert_eq!(conn.next_ping(), t0 + s);
        assert_eq!(
            conn.poll_liveness(t0 + s, &liveness),
            Alive::Ping(Ping { seq: 1 })
        );
        assert_eq!(conn.poll_liveness(t0 + s, &liveness), Alive::Quiet);
        conn.ping_again(t0 + s);
        assert_eq!(
            conn.poll_liveness(t0 + s, &liveness),
            Alive::Ping(Ping { seq: 2 })
        );
        // Heard from (any record): the silence starts over.
        assert_eq!(
            conn.ingress(Lane::Completion, &Class::Pong, 8, t0 + 2 * s),
            Verdict::Control { resume: false }
        );
        assert!(!conn.silent(t0 + 5 * s, 3 * s));
        assert_eq!(
            conn.poll_liveness(t0 + 5 * s + s / 2, &liveness),
            Alive::TimedOut
        );
    }
}
