//! A peer's outbox: records queued by tokio callers for the I/O thread, framed into the batch
//! being filled ([`Outbox`], [`OutItem`], [`Enqueue`]), and the admission a send waits for
//! ([`SendBudget`]: a destination's [`Budget`] and the senders waiting for room in it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::budget::{Budget, Reserve};
use crate::codec::Parts;
use crate::config::Batching;
use crate::config::OutboundBudget;
use crate::conn::Framed;
use crate::error::SendError;
use crate::types::{NodeGeneration, NodeRid};

/// Admission failed: the budget stayed exhausted for the whole send timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("outbound admission: budget exhausted for {waited:?}")]
pub(crate) struct AdmissionTimeout {
    /// How long admission waited.
    pub waited: Duration,
}

/// One destination's outbound budget as its senders and the I/O thread share it: the counter
/// ([`Budget`], which decides) and the senders waiting for room in it (a tokio [`Notify`],
/// woken when the budget says so). Held by the destination's [`crate::conn::Conn`] (the I/O
/// thread releases what libzmq took) and by the API handles that send to it.
#[derive(Debug)]
pub(crate) struct SendBudget {
    budget: Budget,
    waiters: AtomicUsize,
    room: Notify,
}

impl SendBudget {
    /// A budget with the given limits, nothing reserved, nobody waiting.
    pub(crate) fn new(limit: OutboundBudget) -> Self {
        Self {
            budget: Budget::new(limit),
            waiters: AtomicUsize::new(0),
            room: Notify::new(),
        }
    }

    /// Tries to reserve one message of `bytes`; never waits.
    #[inline]
    pub(crate) fn try_reserve(&self, bytes: u64) -> bool {
        self.try_reserve_n(1, bytes)
    }

    /// Tries to reserve `n` messages totalling `bytes` at once (all or nothing); never waits.
    #[inline]
    pub(crate) fn try_reserve_n(&self, n: u64, bytes: u64) -> bool {
        match self.budget.try_reserve_n(n, bytes) {
            Reserve::Reserved => true,
            Reserve::Full => false,
            Reserve::Rolledback => {
                self.wake();
                false
            }
        }
    }

    /// Reserves one message of `bytes` whatever is reserved already (see
    /// [`Budget::force_reserve`]).
    pub(crate) fn force_reserve(&self, bytes: u64) {
        self.budget.force_reserve(bytes);
    }

    /// The configured limits.
    pub(crate) fn limit(&self) -> OutboundBudget {
        self.budget.limit()
    }

    /// Reserves one message of `bytes`, waiting at most `timeout` for room.
    pub(crate) async fn reserve(
        &self,
        bytes: u64,
        timeout: Duration,
    ) -> Result<(), AdmissionTimeout> {
        self.reserve_n(1, bytes, timeout).await
    }

    /// Reserves `n` messages totalling `bytes` (all or nothing), waiting at most `timeout`.
    pub(crate) async fn reserve_n(
        &self,
        n: u64,
        bytes: u64,
        timeout: Duration,
    ) -> Result<(), AdmissionTimeout> {
        if self.try_reserve_n(n, bytes) {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + timeout;
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let _guard = WaiterGuard(&self.waiters);
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_reserve_n(n, bytes) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                // One last attempt: room may have appeared exactly at the deadline.
                return if self.try_reserve_n(n, bytes) {
                    Ok(())
                } else {
                    Err(AdmissionTimeout { waited: timeout })
                };
            }
        }
    }

    /// Releases one message of `bytes` (the I/O thread, once libzmq took it).
    #[inline]
    pub(crate) fn release(&self, bytes: u64) {
        self.release_n(1, bytes);
    }

    /// Releases `n` messages totalling `bytes`, waking the waiting senders when the budget
    /// says so ([`Budget::release_n`]).
    #[inline]
    pub(crate) fn release_n(&self, n: u64, bytes: u64) {
        if self.budget.release_n(n, bytes) {
            self.wake();
        }
    }

    /// Messages currently reserved.
    #[cfg(test)]
    pub(crate) fn reserved_messages(&self) -> u64 {
        self.budget.reserved_messages()
    }

    /// Bytes currently reserved.
    pub(crate) fn reserved_bytes(&self) -> u64 {
        self.budget.reserved_bytes()
    }

    fn wake(&self) {
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.room.notify_waiters();
        }
    }
}

struct WaiterGuard<'a>(&'a AtomicUsize);

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Clone, Debug)]
pub(crate) struct PeerSlot {
    pub generation: NodeGeneration,
    pub budget: Arc<SendBudget>,
    /// Relay data of this lifecycle on its way to the I/O thread.
    pub outbox: Arc<Outbox>,
}

/// Outcome of the synchronous admission attempt.
/// The rest of an admission that has to wait for budget (see `MeshNode::admit_frames`).
pub(crate) type AdmitWait<'a> =
    std::pin::Pin<Box<dyn Future<Output = Result<(), SendError>> + Send + 'a>>;

pub(crate) enum Admit<I> {
    /// Admitted and appended (the outbox if it was asked for).
    Queued(Option<Arc<Outbox>>),
    /// The budget is full: the items back, and the slot to wait on.
    Wait(I, PeerSlot),
}

/// One admitted relay record on its way to the I/O thread.
pub(crate) enum OutItem {
    /// A one-way record (one that does not travel in a batch frame: its payload is large, or
    /// batching is off).
    Send { frames: Parts, bytes: u64 },
    /// One-way records framed as the sub-records of one 139 batch frame by the threads that
    /// sent them ([`Outbox::push`]).
    Framed(Box<Framed>),
    /// The cancellation of an earlier request of this outbox (its future was dropped).
    Cancel { corr: u64 },
    /// A request: registered in the correlation table when the I/O thread takes it.
    Request {
        corr: u64,
        deadline: Instant,
        frames: Parts,
        bytes: u64,
        waiter: crate::engine::Waiter,
    },
}

/// The relay records of one peer lifecycle, admitted and waiting for the I/O thread, in send
/// order. A sender appends under a short lock and submits [`Command::Flush`] only when the
/// outbox was empty, so a burst of sends costs one command and one doorbell check instead of
/// one per record; the I/O thread takes everything at once. One outbox carries one-way
/// records and requests alike, so the order of a peer's relay records is the order in which
/// their sends were admitted (EG-4).
///
/// Small one-way records are framed here, by the sending thread while their bytes are in its
/// cache: appended as sub-records to the run being filled at the end of the outbox (a
/// [`Framed`] 139 frame, cut where the batching rule cuts a run: `max_records`, `max_bytes`),
/// so the I/O thread sends each run as one message without copying its records. The memory
/// this holds is what the records reserved against the peer's budget (which still counts each
/// record's bytes) plus the framing (9 bytes a record, 16 a frame); a run's buffer is handed
/// to libzmq with the frame, never kept, and a new run's buffer is sized by the last run's
/// frame, so a burst's size is not kept either.
pub(crate) struct Outbox {
    pub node: Arc<NodeRid>,
    pub generation: NodeGeneration,
    /// The peer's outbound budget (the same as its slot's).
    pub budget: Arc<SendBudget>,
    /// How runs are cut (the node's [`Batching`]).
    pub(crate) batching: Batching,
    pub(crate) pending: Mutex<Pending>,
}

/// What an [`Outbox`] holds.
pub(crate) struct Pending {
    pub(crate) items: Vec<OutItem>,
    /// The capacity a new run's frame buffer starts with: the size of the last run's frame
    /// (closed full or taken), so a flood's frames are not regrown record by record and a
    /// trickle's are small again after one run.
    pub(crate) run_capacity: usize,
}

impl Pending {
    /// Appends one item: a small one-way record into the run being filled, anything else as
    /// it is.
    pub(crate) fn append(&mut self, item: OutItem, batching: &Batching) {
        match item {
            OutItem::Send { frames, bytes } if self.frame(&frames, bytes, batching) => {}
            item => self.items.push(item),
        }
    }

    /// Frames one one-way record of `bytes` into the run being filled at the end (a new one
    /// when the last item is not a run with room for it); `false` (nothing appended) for a
    /// record that does not travel in a batch frame (a large payload, batching off).
    #[inline]
    pub(crate) fn frame(&mut self, frames: &[Bytes], bytes: u64, batching: &Batching) -> bool {
        let payload = frames.get(1).map(|p| &p[..]);
        let envelope = &frames[0][..];
        debug_assert_eq!(
            (envelope.len() + payload.map_or(0, <[u8]>::len)) as u64,
            bytes,
            "a record's reservation is its bytes"
        );
        self.frame_with(
            envelope.len(),
            payload.map(<[u8]>::len),
            bytes,
            batching,
            |f| zlink_wire::batch::push_sub_record(f, envelope, payload),
        )
    }

    /// [`Pending::frame`] for a record of an `envelope` and a `payload` of these lengths
    /// (`bytes` in all) that `write` appends as a sub-record.
    #[inline]
    pub(crate) fn frame_with(
        &mut self,
        envelope: usize,
        payload: Option<usize>,
        bytes: u64,
        batching: &Batching,
        write: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> bool {
        if !Framed::batchable(batching, payload.unwrap_or(0)) {
            return false;
        }
        let sub = zlink_wire::batch::sub_record_len(envelope, payload);
        let fresh = match self.items.last() {
            Some(OutItem::Framed(run)) if run.has_room(batching, sub) => false,
            Some(OutItem::Framed(full)) => {
                self.run_capacity = full.frame_len();
                true
            }
            _ => true,
        };
        if fresh {
            let capacity = self
                .run_capacity
                .max(zlink_wire::batch::BATCH_PREFIX_LEN + sub);
            self.items
                .push(OutItem::Framed(Box::new(Framed::new(capacity))));
        }
        if let Some(OutItem::Framed(run)) = self.items.last_mut()
            && run.push_with(bytes, write)
        {
            return true;
        }
        // Never for the records the mesh sends (an envelope that is a batch, a part longer
        // than `u32::MAX`): sent as it is.
        if fresh {
            self.items.pop();
        }
        false
    }
}

/// What one admission appends to an [`Outbox`] ([`Outbox::push`]).
pub(crate) trait Enqueue {
    /// What is left to drop once the outbox's lock is released.
    type Spent;
    /// Appends in order.
    fn append_to(self, pending: &mut Pending, batching: &Batching) -> Self::Spent;
}

impl<I: IntoIterator<Item = OutItem>> Enqueue for I {
    type Spent = ();

    fn append_to(self, pending: &mut Pending, batching: &Batching) {
        for item in self {
            pending.append(item, batching);
        }
    }
}

/// One admitted one-way record ([`OutItem::Send`] without building the item, so its parts are
/// read in place and dropped after the lock when they were framed).
pub(crate) struct SendOne {
    pub(crate) frames: Parts,
    pub(crate) bytes: u64,
}

/// One admitted one-way 24 of a binding's template ([`MeshNode::try_send_template`]): framed
/// straight from the template, its envelope never written anywhere else (when it does not
/// travel in a batch frame: encoded as its frames then).
pub(crate) struct SendTemplate<'a> {
    pub(crate) record: zlink_wire::TemplateRecord<'a>,
    pub(crate) bytes: u64,
}

impl Enqueue for SendTemplate<'_> {
    type Spent = Option<Bytes>;

    #[inline]
    fn append_to(self, pending: &mut Pending, batching: &Batching) -> Option<Bytes> {
        let SendTemplate { record, bytes } = self;
        let (envelope, payload) = (record.envelope_len(), record.payload().len());
        if pending.frame_with(envelope, Some(payload), bytes, batching, |f| {
            record.push_sub_record(f)
        }) {
            // The payload is dropped after the lock.
            return Some(record.into_payload());
        }
        let (envelope, payload) = record.into_frames().into_parts();
        pending.items.push(OutItem::Send {
            frames: Parts::new(envelope, payload),
            bytes,
        });
        None
    }
}

impl Enqueue for SendOne {
    type Spent = Option<Parts>;

    #[inline]
    fn append_to(self, pending: &mut Pending, batching: &Batching) -> Option<Parts> {
        let SendOne { frames, bytes } = self;
        if pending.frame(&frames, bytes, batching) {
            return Some(frames);
        }
        pending.items.push(OutItem::Send { frames, bytes });
        None
    }
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("node", &self.node)
            .field("generation", &self.generation)
            .finish()
    }
}

impl Outbox {
    pub(crate) fn new(
        node: Arc<NodeRid>,
        generation: NodeGeneration,
        budget: Arc<SendBudget>,
        batching: Batching,
    ) -> Self {
        Self {
            node,
            generation,
            budget,
            batching,
            pending: Mutex::new(Pending {
                items: Vec::new(),
                run_capacity: 0,
            }),
        }
    }

    /// Appends `items` in order (small one-way records framed, [`Outbox`]); true if the
    /// outbox was empty (the caller submits a Flush).
    #[inline]
    pub(crate) fn push(&self, items: impl Enqueue) -> bool {
        let mut g = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = g.items.is_empty();
        let spent = items.append_to(&mut g, &self.batching);
        drop(g);
        drop(spent);
        was_empty
    }

    /// Takes everything (I/O thread): swaps with `into`, which must be empty, so both
    /// vectors keep their capacity. The run being filled is taken too (later records start
    /// a new one).
    pub(crate) fn take_into(&self, into: &mut Vec<OutItem>) {
        let mut g = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(OutItem::Framed(run)) = g.items.last() {
            g.run_capacity = run.frame_len();
        }
        std::mem::swap(&mut g.items, into);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // spec: SB-6.5 (admission waits at most the send timeout), EG-1.2 (own limit type)
    #[tokio::test]
    async fn admission_times_out_then_succeeds_after_release() {
        let b = Arc::new(SendBudget::new(OutboundBudget {
            messages: 2,
            bytes: 100,
        }));
        assert!(b.try_reserve(10));
        assert!(b.try_reserve(10));
        assert!(!b.try_reserve(1));
        let err = b.reserve(1, Duration::from_millis(20)).await.unwrap_err();
        assert_eq!(err.waited, Duration::from_millis(20));
        assert_eq!(b.reserved_messages(), 2);

        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.reserve(5, Duration::from_secs(30)).await });
        tokio::task::yield_now().await;
        b.release(10);
        waiter.await.unwrap().unwrap();
        assert_eq!(b.reserved_messages(), 2);
        assert_eq!(b.reserved_bytes(), 15);
    }
}
