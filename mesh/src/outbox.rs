//! A peer's outbox: records queued by tokio callers for the I/O thread, framed into the batch
//! being filled ([`Outbox`], [`OutItem`], [`Enqueue`]), and the admission a send waits for.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

use crate::budget::Budget;
use crate::codec::Parts;
use crate::config::Batching;
use crate::conn::Framed;
use crate::error::SendError;
use crate::types::{NodeGeneration, NodeRid};

#[derive(Clone, Debug)]
pub(crate) struct PeerSlot {
    pub generation: NodeGeneration,
    pub budget: Arc<Budget>,
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
    pub budget: Arc<Budget>,
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
        budget: Arc<Budget>,
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
