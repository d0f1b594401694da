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

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

use crate::node::Inbound;

/// Records per batch: small enough that a batch stays well below malloc's 64 KiB
/// consolidation threshold (an `Inbound` is ~300 bytes), large enough to amortise wake-ups.
const BATCH: usize = 64;

/// Sending half (I/O thread).
pub(crate) struct InboundSender {
    tx: mpsc::UnboundedSender<Vec<Inbound>>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
    batch: Vec<Inbound>,
    /// Records that may still be pushed according to the last read of `queued` (stale on the
    /// safe side: the receiver only ever lowers `queued`).
    room: usize,
}

/// Receiving half: the records for the layer above, in arrival order.
#[derive(Debug)]
pub struct InboundReceiver {
    rx: mpsc::UnboundedReceiver<Vec<Inbound>>,
    /// The batch being taken: records are moved out once, in order (no re-queueing copy).
    buf: std::vec::IntoIter<Inbound>,
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
            room: capacity,
        },
        InboundReceiver {
            rx,
            buf: Vec::new().into_iter(),
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
        self.batch.push(inb);
        if self.batch.len() >= BATCH {
            self.flush();
        }
        Ok(())
    }

    /// True when a record can be pushed now (the channel is not full). Checked before the
    /// record is built, so that [`InboundSender::push`] moves it once, straight into the batch.
    #[inline]
    pub(crate) fn has_room(&mut self) -> bool {
        if self.room == 0 {
            let queued = self.queued.load(Ordering::Acquire) + self.batch.len();
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
        self.batch.push(inb);
        if self.batch.len() >= BATCH {
            self.flush();
        }
    }

    /// Hands the current batch over (one wake-up).
    pub(crate) fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.queued.fetch_add(batch.len(), Ordering::AcqRel);
        if let Err(e) = self.tx.send(batch) {
            self.queued.fetch_sub(e.0.len(), Ordering::AcqRel);
        }
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
            self.buf_len = batch.len();
            self.buf = batch.into_iter();
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
                Ok(batch) => {
                    self.buf_len = batch.len();
                    self.buf = batch.into_iter();
                }
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
