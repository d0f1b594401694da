//! The send side of one connection: the credit the other end granted ([`SendCredit`]), the
//! queued records ([`Out`]) and their framing into batch runs ([`Framed`], [`encode_run`]), and
//! [`flush`], which moves a queue onto a [`Transport`] within that credit. No sockets, no clock
//! reads.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::codec::Parts;
use crate::config::Batching;
use crate::outbox::SendBudget;

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
    /// Only once the session is seen accepted: a node's client port grants a session it has
    /// not accepted yet a stranger's window first, whose bytes are a hard bound (a record
    /// beyond what is left is dropped, docs/CLIENT-PROTOCOL.md 5.1); until then a record goes
    /// out only if it fits. Later grants return credit (never more messages than were sent)
    /// or, with the acceptance, add the rest of the window: the session is accepted once the
    /// messages granted after the first grant exceed the messages sent.
    UntilAccepted {
        /// The first grant arrived.
        first: bool,
        /// Messages granted after the first grant.
        later: u64,
        /// Messages sent.
        sent: u64,
    },
}

impl SendCredit {
    /// No credit yet; a client of a node's client port: its records stay within what is left
    /// of its credit until the session is seen accepted ([`Overdraw::UntilAccepted`]).
    pub(crate) fn client() -> Self {
        Self {
            overdraw: Overdraw::UntilAccepted {
                first: false,
                later: 0,
                sent: 0,
            },
            ..Self::default()
        }
    }

    /// No credit, as at the start of a lifecycle, in the same [`Overdraw`] mode.
    pub(crate) fn fresh(&self) -> Self {
        match self.overdraw {
            Overdraw::Allowed => Self::default(),
            Overdraw::UntilAccepted { .. } => Self::client(),
        }
    }

    /// A FlowCredit arrived.
    #[inline]
    pub(crate) fn grant(&mut self, msgs: u32, bytes: u64) {
        self.msgs = self.msgs.saturating_add(u64::from(msgs));
        let paid = bytes.min(self.debt);
        self.debt -= paid;
        self.bytes = self.bytes.saturating_add(bytes - paid);
        if let Overdraw::UntilAccepted { first, later, sent } = &mut self.overdraw {
            if *first {
                *later = later.saturating_add(u64::from(msgs));
                if *later > *sent {
                    self.overdraw = Overdraw::Allowed;
                }
            } else {
                *first = true;
            }
        }
    }

    /// Whether a record must fit in the byte credit left (no overdraw yet).
    #[inline]
    fn exact(&self) -> bool {
        matches!(self.overdraw, Overdraw::UntilAccepted { .. })
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
        if let Overdraw::UntilAccepted { sent, .. } = &mut self.overdraw {
            *sent = sent.saturating_add(run.n as u64);
        }
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
    budget: &SendBudget,
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
pub(crate) fn release(budget: &SendBudget, out: &Out) {
    if let Some(b) = out.bytes {
        budget.release_n(out.records() as u64, b);
    }
}
