//! The inbound channel to the layer above: bounded in records, delivered in batches.
//!
//! The I/O thread pushes a whole read pass as one batch (one wake-up of the receiving task per
//! batch instead of per record). The bound is a shared record count: the I/O thread never
//! hands over more than `capacity` records that the receiver has not taken yet; beyond that
//! the application queue is PAUSED (relay records wait in the peers' windows, client records
//! in the clients' windows).
//!
//! The shared count is touched per batch, not per record (one cache line bounced between the
//! I/O thread and the receiving task per batch): the receiver subtracts a batch once it has
//! taken all of it, and the sender reads the count only when the room it last saw is used up.
//! Both err on the full side, so the bound holds.
//!
//! Plain one-way records (147 without correlation, reply or deadline) cross in a compact form
//! (`OneWayIn`, ~72 bytes: origin, key, payload) and become an [`Inbound`] (~280 bytes) only in
//! the receiving task: the bytes written on the I/O thread's core and read on the receiver's
//! are a quarter of the full record. A batch holds one form only (a change of form hands the
//! current batch over first), so arrival order is kept.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::codec::Record;
use crate::reply::ReplyHandle;
use crate::types::DispatchKey;
use crate::types::{CorrelationId, NodeGeneration, NodeRid, SessionRid};

/// Where an inbound record came from (authenticated at the transport boundary, SB-2.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// An authenticated mesh peer in its current lifecycle.
    Peer {
        /// Proved NodeRid.
        node: NodeRid,
        /// Proved NodeGeneration.
        generation: NodeGeneration,
    },
    /// A ClientServer client connection.
    Client {
        /// The connection's session id.
        session: SessionRid,
    },
}

/// One application record for the layer above. Control records never appear here (SB-5.4).
#[derive(Debug)]
pub struct Inbound {
    /// Sender.
    pub origin: Origin,
    /// Correlation id (`NONE` for one-way).
    pub correlation: CorrelationId,
    /// The decoded record.
    pub record: Record,
    /// The payload frame, never copied after receipt.
    pub payload: Option<Bytes>,
    /// Local deadline of a request (receipt time + the remaining time it carried).
    pub deadline: Option<Instant>,
    /// Present for requests: answer exactly once through it.
    pub reply: Option<ReplyHandle>,
}

impl Inbound {
    /// A plain one-way 147 record (no correlation, deadline or reply handle) from `origin`.
    #[must_use]
    #[inline]
    pub fn one_way(origin: Origin, key: DispatchKey, payload: Bytes) -> Self {
        Inbound {
            origin,
            correlation: CorrelationId::NONE,
            record: Record::OneWay(zlink_wire::OneWay { key }),
            payload: Some(payload),
            deadline: None,
            reply: None,
        }
    }
}

/// Records per batch: small enough that a batch stays well below malloc's 64 KiB
/// consolidation threshold (an `Inbound` is ~300 bytes), large enough to amortise wake-ups.
const BATCH: usize = 64;

/// A one-way 147 record on its way up, before it is expanded into an [`Inbound`].
pub(crate) struct OneWayIn {
    pub(crate) origin: Origin,
    pub(crate) key: DispatchKey,
    pub(crate) payload: Bytes,
}

impl OneWayIn {
    #[inline]
    fn expand(self) -> Inbound {
        Inbound::one_way(self.origin, self.key, self.payload)
    }
}

/// What crosses the channel: a batch of one form.
enum Batch {
    Full(Vec<Inbound>),
    OneWay(Vec<OneWayIn>),
}

/// The batch being taken by the receiver.
enum Taking {
    Full(std::vec::IntoIter<Inbound>),
    OneWay(std::vec::IntoIter<OneWayIn>),
}

impl Taking {
    #[inline]
    fn next(&mut self) -> Option<Inbound> {
        match self {
            Taking::Full(it) => it.next(),
            Taking::OneWay(it) => it.next().map(OneWayIn::expand),
        }
    }

    fn len(&self) -> usize {
        match self {
            Taking::Full(it) => it.len(),
            Taking::OneWay(it) => it.len(),
        }
    }
}

impl std::fmt::Debug for Taking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Taking({} left)", self.len())
    }
}

/// Sending half (I/O thread).
pub(crate) struct InboundSender {
    tx: mpsc::UnboundedSender<Batch>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
    /// The current batch: at most one of `batch` and `one_way` is non-empty.
    batch: Vec<Inbound>,
    one_way: Vec<OneWayIn>,
    /// Records that may still be pushed according to the last read of `queued` (stale on the
    /// safe side: the receiver only ever lowers `queued`).
    room: usize,
}

/// Receiving half: the records for the layer above, in arrival order.
pub struct InboundReceiver {
    rx: mpsc::UnboundedReceiver<Batch>,
    /// The batch being taken: records are moved out once, in order (no re-queueing copy).
    buf: Taking,
    /// Length of the batch in `buf`, subtracted from `queued` once it is all taken.
    buf_len: usize,
    queued: Arc<AtomicUsize>,
}

pub(crate) fn channel(capacity: usize) -> (InboundSender, InboundReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (
        InboundSender {
            tx,
            queued: queued.clone(),
            capacity,
            batch: Vec::with_capacity(BATCH),
            one_way: Vec::with_capacity(BATCH),
            room: capacity,
        },
        InboundReceiver {
            rx,
            buf: Taking::Full(Vec::new().into_iter()),
            buf_len: 0,
            queued,
        },
    )
}

impl InboundSender {
    /// Adds a record to the current batch, or gives it back when the channel is full.
    #[allow(clippy::result_large_err)] // hands the record back by value, no allocation
    #[inline]
    pub(crate) fn try_push(&mut self, inb: Inbound) -> Result<(), Inbound> {
        if self.tx.is_closed() {
            // Nobody listens: dropping the record answers requests with an error reply.
            return Ok(());
        }
        if !self.has_room() {
            return Err(inb);
        }
        self.room -= 1;
        self.add(inb);
        Ok(())
    }

    #[inline(always)]
    fn add(&mut self, inb: Inbound) {
        if !self.one_way.is_empty() {
            self.flush();
        }
        self.batch.push(inb);
        if self.batch.len() >= BATCH {
            self.flush();
        }
    }

    /// True when a record can be pushed now (the channel is not full). Checked before the
    /// record is built, so that [`InboundSender::push`] moves it once, straight into the batch.
    #[inline]
    pub(crate) fn has_room(&mut self) -> bool {
        if self.room == 0 {
            let queued =
                self.queued.load(Ordering::Acquire) + self.batch.len() + self.one_way.len();
            self.room = self.capacity.saturating_sub(queued);
        }
        self.room > 0 || self.tx.is_closed()
    }

    /// Adds a record after [`InboundSender::has_room`] returned true.
    #[inline(always)]
    pub(crate) fn push(&mut self, inb: Inbound) {
        if self.tx.is_closed() {
            // Nobody listens: dropping the record answers requests with an error reply.
            return;
        }
        self.room = self.room.saturating_sub(1);
        self.add(inb);
    }

    /// Adds a plain one-way 147 record (no correlation, reply or deadline) after
    /// [`InboundSender::has_room`] returned true; it crosses in the compact form.
    #[inline(always)]
    pub(crate) fn push_one_way(&mut self, origin: Origin, key: DispatchKey, payload: Bytes) {
        if self.tx.is_closed() {
            return;
        }
        self.room = self.room.saturating_sub(1);
        if !self.batch.is_empty() {
            self.flush();
        }
        self.one_way.push(OneWayIn {
            origin,
            key,
            payload,
        });
        if self.one_way.len() >= BATCH {
            self.flush();
        }
    }

    /// Hands the current batch over (one wake-up). The next batch of that form is allocated
    /// after the hand-over, off the path of the next record (a request's latency).
    pub(crate) fn flush(&mut self) {
        if !self.batch.is_empty() {
            let b = std::mem::take(&mut self.batch);
            self.send(b.len(), Batch::Full(b));
            self.batch = Vec::with_capacity(BATCH);
        } else if !self.one_way.is_empty() {
            let b = std::mem::take(&mut self.one_way);
            self.send(b.len(), Batch::OneWay(b));
            self.one_way = Vec::with_capacity(BATCH);
        }
    }

    fn send(&mut self, n: usize, batch: Batch) {
        self.queued.fetch_add(n, Ordering::AcqRel);
        if self.tx.send(batch).is_err() {
            self.queued.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for InboundReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundReceiver")
            .field("len", &self.len())
            .finish()
    }
}

fn taking(batch: Batch) -> (usize, Taking) {
    match batch {
        Batch::Full(b) => (b.len(), Taking::Full(b.into_iter())),
        Batch::OneWay(b) => (b.len(), Taking::OneWay(b.into_iter())),
    }
}

impl InboundReceiver {
    /// The next record; `None` once the node has shut down and everything was taken.
    pub async fn recv(&mut self) -> Option<Inbound> {
        loop {
            if let Some(x) = self.buf.next() {
                return Some(x);
            }
            self.batch_taken();
            let batch = self.rx.recv().await?;
            (self.buf_len, self.buf) = taking(batch);
        }
    }

    /// The batch in `buf` was all taken: its records leave the shared count.
    #[inline]
    fn batch_taken(&mut self) {
        if self.buf_len > 0 {
            self.queued.fetch_sub(self.buf_len, Ordering::AcqRel);
            self.buf_len = 0;
        }
    }

    /// The next record if one is ready, without waiting.
    pub fn try_recv(&mut self) -> Option<Inbound> {
        loop {
            if let Some(x) = self.buf.next() {
                return Some(x);
            }
            self.batch_taken();
            match self.rx.try_recv() {
                Ok(batch) => (self.buf_len, self.buf) = taking(batch),
                Err(_) => return None,
            }
        }
    }

    /// Records handed over and not yet taken.
    pub fn len(&self) -> usize {
        self.queued.load(Ordering::Acquire) - (self.buf_len - self.buf.len())
    }

    /// True when nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
