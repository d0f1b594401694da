//! The inbound channel to the layer above: bounded in records, delivered in batches.
//!
//! The I/O thread pushes a whole read pass as one batch (one wake-up of the receiving task per
//! batch instead of per record). The bound is a shared record count: the I/O thread never
//! hands over more than `capacity` records that the receiver has not taken yet; beyond that
//! the application queue is PAUSED (relay records wait in the peers' windows, client records
//! in the clients' windows).

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
}

/// Receiving half: the records for the layer above, in arrival order.
#[derive(Debug)]
pub struct InboundReceiver {
    rx: mpsc::UnboundedReceiver<Vec<Inbound>>,
    /// The batch being taken: records are moved out once, in order (no re-queueing copy).
    buf: std::vec::IntoIter<Inbound>,
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
        },
        InboundReceiver {
            rx,
            buf: Vec::new().into_iter(),
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
        if self.queued.load(Ordering::Acquire) + self.batch.len() >= self.capacity {
            return Err(inb);
        }
        self.batch.push(inb);
        if self.batch.len() >= BATCH {
            self.flush();
        }
        Ok(())
    }

    /// True when a record can be pushed now (the channel is not full). Checked before the
    /// record is built, so that [`InboundSender::push`] moves it once, straight into the batch.
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        self.tx.is_closed()
            || self.queued.load(Ordering::Acquire) + self.batch.len() < self.capacity
    }

    /// Adds a record after [`InboundSender::has_room`] returned true.
    #[inline(always)]
    pub(crate) fn push(&mut self, inb: Inbound) {
        if self.tx.is_closed() {
            // Nobody listens: dropping the record answers requests with an error reply.
            return;
        }
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
                self.queued.fetch_sub(1, Ordering::AcqRel);
                return Some(x);
            }
            self.buf = self.rx.recv().await?.into_iter();
        }
    }

    /// The next record if one is ready, without waiting.
    pub fn try_recv(&mut self) -> Option<Inbound> {
        loop {
            if let Some(x) = self.buf.next() {
                self.queued.fetch_sub(1, Ordering::AcqRel);
                return Some(x);
            }
            match self.rx.try_recv() {
                Ok(batch) => self.buf = batch.into_iter(),
                Err(_) => return None,
            }
        }
    }

    /// Records handed over and not yet taken.
    pub fn len(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// True when nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
