//! Sending from the API: admission against a peer's or session's outbound budget (at once
//! or waiting up to the send timeout), the outbox hand-off to the I/O thread, requests (with
//! their cancel guard) and pushes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::codec::{self, Parts, Record};
use crate::engine::{Command, Dest};
use crate::error::{RequestError, SendError};
use crate::types::{Deadline, DispatchKey, NodeRid, SessionRid};
use crate::{envelope::*, error::*, outbox::*};

use super::{MeshNode, Response, Shared};

impl MeshNode {
    /// Admits `n` records of `bytes` in total against `to`'s outbound budget (all or nothing,
    /// waiting at most `timeout`) and appends `items` to the peer's outbox, submitting a Flush
    /// when it was empty. A failed admission appends nothing, so it is never delivered later.
    /// Fast path (room in the budget): one read lock, no clone of the peer's slot.
    async fn enqueue<I: Enqueue>(
        &self,
        to: &NodeRid,
        n: u64,
        bytes: u64,
        timeout: Duration,
        items: I,
        keep: bool,
    ) -> Result<Option<Arc<Outbox>>, SendError> {
        match self.try_enqueue(to, n, bytes, items, keep)? {
            Admit::Queued(kept) => Ok(kept),
            // Boxed: the waiting path is rare, and inline it would make every send's future
            // (moved on each poll) several times larger.
            Admit::Wait(items, slot) => {
                Box::pin(self.enqueue_waiting(slot, n, bytes, timeout, items, keep)).await
            }
        }
    }

    /// The synchronous part of [`MeshNode::enqueue`]: admits and appends when the budget has
    /// room (one read lock, no clone of the peer's slot), else hands the items back with the
    /// slot to wait on.
    fn try_enqueue<I: Enqueue>(
        &self,
        to: &NodeRid,
        n: u64,
        bytes: u64,
        items: I,
        keep: bool,
    ) -> Result<Admit<I>, SendError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(SendError::Closed);
        }
        // Admission and append under the peers' read lock, as `Shared::with_peer` does, but
        // without a closure: the items (≈ 110 bytes each) are not copied into its captures.
        let (outbox, flush) = {
            let peers = self.shared.peers.read().unwrap_or_else(|e| e.into_inner());
            let slot = peers.get(to).ok_or(SendError::Unavailable)?;
            if !slot.budget.try_reserve_n(n, bytes) {
                return Ok(Admit::Wait(items, slot.clone()));
            }
            let flush = slot.outbox.push(items);
            ((flush || keep).then(|| slot.outbox.clone()), flush)
        };
        let Some(outbox) = outbox else {
            return Ok(Admit::Queued(None));
        };
        let kept = keep.then(|| outbox.clone());
        if flush {
            self.flush_outbox(outbox, n, bytes)?;
        }
        Ok(Admit::Queued(kept))
    }

    /// Admission when the budget is exhausted: waits at most `timeout` for room.
    async fn enqueue_waiting<I: Enqueue>(
        &self,
        slot: PeerSlot,
        n: u64,
        bytes: u64,
        timeout: Duration,
        items: I,
        keep: bool,
    ) -> Result<Option<Arc<Outbox>>, SendError> {
        slot.budget
            .reserve_n(n, bytes, timeout)
            .await
            .map_err(|e| SendError::DeadlineExceeded(e.waited))?;
        let kept = keep.then(|| slot.outbox.clone());
        if slot.outbox.push(items) {
            self.flush_outbox(slot.outbox, n, bytes)?;
        }
        Ok(kept)
    }

    /// Tells the I/O thread that `outbox` has records (it was empty before this send).
    fn flush_outbox(&self, outbox: Arc<Outbox>, n: u64, bytes: u64) -> Result<(), SendError> {
        let budget = outbox.budget.clone();
        self.shared
            .submit(Command::Flush(outbox))
            .inspect_err(|_| budget.release_n(n, bytes))
    }

    /// Sends a one-way application record (any spec record or 147/160 without correlation)
    /// to a peer on the relay connection. Waits at most the send timeout for admission
    /// (SB-6.5); a send that failed admission is never delivered.
    pub async fn send_record(
        &self,
        to: &NodeRid,
        record: Record,
        payload: Option<Bytes>,
    ) -> Result<(), SendError> {
        if !codec::is_app_record(&record) || record.is_reply() {
            return Err(SendError::Encode(format!(
                "{} is not an application record",
                record.command()
            )));
        }
        match self.try_send_record(to, record, payload) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(p)) => self.send_pending(to, p).await,
            Err(TrySendError::Failed(e)) => Err(e),
        }
    }

    /// [`MeshNode::send_record`] without waiting: the record is admitted now or handed back
    /// encoded ([`TrySendError::Full`]) to be waited for with [`MeshNode::send_pending`] (so
    /// the common case costs no future). Order: a record handed back is not queued; records
    /// admitted after it may overtake it unless the caller waits for it first.
    ///
    /// # Errors
    /// As [`MeshNode::send_record`], and [`TrySendError::Full`].
    pub fn try_send_record(
        &self,
        to: &NodeRid,
        record: Record,
        payload: Option<Bytes>,
    ) -> Result<(), TrySendError> {
        if !codec::is_app_record(&record) || record.is_reply() {
            return Err(TrySendError::Failed(SendError::Encode(format!(
                "{} is not an application record",
                record.command()
            ))));
        }
        let frames = codec::encode(&record, 0, payload)
            .map_err(|e| TrySendError::Failed(SendError::Encode(e.to_string())))?;
        self.try_send_parts(to, frames)
    }

    /// [`MeshNode::try_send_record`] for a record encoded already (a binding's one-way 24
    /// from its [`zlink_wire::ActorSendTemplate`], whose envelope repeats): the same rule on
    /// its header — an application record, not a reply, no correlation — and the same size
    /// check and admission.
    ///
    /// # Errors
    /// As [`MeshNode::try_send_record`].
    pub fn try_send_frames(
        &self,
        to: &NodeRid,
        frames: zlink_wire::Frames,
    ) -> Result<(), TrySendError> {
        // Frames are made only by `zlink_wire` (`encode`, a template), which knows the header
        // it wrote: no need to read it back.
        let header = frames.header();
        if !codec::is_app_command(header.command)
            || header.is_reply()
            || header.correlation.is_some()
        {
            return Err(TrySendError::Failed(SendError::Encode(format!(
                "{} is not a one-way application record",
                header.command
            ))));
        }
        let (envelope, payload) = frames.into_parts();
        self.try_send_parts(to, Parts::new(envelope, payload))
    }

    /// [`MeshNode::try_send_frames`] for a binding's one-way 24 not yet written
    /// ([`zlink_wire::ActorSendTemplate::record`]): the same size check and admission, and the
    /// record written by this thread straight into the peer's outbox as a batch sub-record (no
    /// envelope allocated for it) when it travels in a batch frame. A record handed back
    /// ([`TrySendError::Full`]) is encoded.
    ///
    /// # Errors
    /// As [`MeshNode::try_send_record`].
    pub fn try_send_template(
        &self,
        to: &NodeRid,
        record: zlink_wire::TemplateRecord<'_>,
    ) -> Result<(), TrySendError> {
        // A template's records are one-way 24s with a payload, no correlation (its header).
        debug_assert!(codec::is_app_command(record.header().command));
        let (envelope, payload) = (record.envelope_len(), record.payload().len());
        let bytes = self
            .shared
            .check_lens(envelope, Some(payload))
            .map_err(TrySendError::Failed)?;
        match self.try_enqueue(to, 1, bytes, SendTemplate { record, bytes }, false) {
            Ok(Admit::Queued(_)) => Ok(()),
            Ok(Admit::Wait(SendTemplate { record, bytes }, _)) => {
                let (envelope, payload) = record.into_frames().into_parts();
                Err(TrySendError::Full(PendingRecord {
                    frames: Parts::new(envelope, payload),
                    bytes,
                }))
            }
            Err(e) => Err(TrySendError::Failed(e)),
        }
    }

    /// Admits one encoded one-way record now, or hands it back.
    fn try_send_parts(&self, to: &NodeRid, frames: Parts) -> Result<(), TrySendError> {
        let bytes = self
            .shared
            .check_size(&frames)
            .map_err(TrySendError::Failed)?;
        match self.try_enqueue(to, 1, bytes, SendOne { frames, bytes }, false) {
            Ok(Admit::Queued(_)) => Ok(()),
            Ok(Admit::Wait(SendOne { frames, bytes }, _)) => {
                Err(TrySendError::Full(PendingRecord { frames, bytes }))
            }
            Err(e) => Err(TrySendError::Failed(e)),
        }
    }

    /// Waits (at most the send timeout) for the admission of a record
    /// [`MeshNode::try_send_record`] handed back.
    ///
    /// # Errors
    /// As [`MeshNode::send_record`].
    pub async fn send_pending(&self, to: &NodeRid, p: PendingRecord) -> Result<(), SendError> {
        let PendingRecord { frames, bytes } = p;
        match self.try_enqueue(to, 1, bytes, SendOne { frames, bytes }, false)? {
            Admit::Queued(_) => Ok(()),
            Admit::Wait(items, slot) => self
                .enqueue_waiting(slot, 1, bytes, self.shared.send_timeout, items, false)
                .await
                .map(drop),
        }
    }

    /// Sends several one-way 147 records to one peer with one admission (all or nothing,
    /// within the send timeout) and one hand-off to the I/O thread. Order is kept. A batch
    /// larger than the peer's budget can never be admitted: `SendError::TooLarge`.
    pub async fn send_batch(
        &self,
        to: &NodeRid,
        key: DispatchKey,
        payloads: impl IntoIterator<Item = Bytes>,
    ) -> Result<(), SendError> {
        let mut items = Vec::new();
        let mut total = 0u64;
        for p in payloads {
            let frames = one_way_parts(key, p)?;
            let bytes = self.shared.check_size(&frames)?;
            total += bytes;
            items.push(OutItem::Send { frames, bytes });
        }
        if items.is_empty() {
            return Ok(());
        }
        let n = items.len() as u64;
        let limit = self
            .shared
            .with_peer(to, |slot| slot.budget.limit())
            .ok_or(SendError::Unavailable)?;
        if n > limit.messages || (n > 1 && total > limit.bytes) {
            return Err(SendError::TooLarge {
                size: items.len(),
                max: limit.messages as usize,
            });
        }
        self.enqueue(to, n, total, self.shared.send_timeout, items, false)
            .await
            .map(drop)
    }

    /// Sends a one-way 147 record with `key` and `payload`.
    pub async fn send(
        &self,
        to: &NodeRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), SendError> {
        match self.admit_frames(to, one_way_parts(key, payload)?)? {
            None => Ok(()),
            Some(wait) => wait.await,
        }
    }

    /// Admits encoded one-way frames against the peer's outbound budget and hands them to the
    /// I/O thread. Admitted synchronously when the budget has room (`None`: no future holds the
    /// record, no async layer per send); otherwise the returned future waits at most the send
    /// timeout. The reservation is released if the hand-off fails, so a send that failed
    /// admission is never delivered later.
    fn admit_frames(
        &self,
        to: &NodeRid,
        frames: Parts,
    ) -> Result<Option<AdmitWait<'_>>, SendError> {
        let bytes = self.shared.check_size(&frames)?;
        match self.try_enqueue(to, 1, bytes, SendOne { frames, bytes }, false)? {
            Admit::Queued(_) => Ok(None),
            Admit::Wait(items, slot) => Ok(Some(Box::pin(async move {
                self.enqueue_waiting(slot, 1, bytes, self.shared.send_timeout, items, false)
                    .await
                    .map(drop)
            }))),
        }
    }

    /// Sends a request record (any record whose command takes a correlation: 38, 42, 144,
    /// 160, 24) on the relay connection; the terminal comes back on the completion
    /// connection. Exactly one terminal; never resent (SB-12).
    pub async fn request_record(
        &self,
        to: &NodeRid,
        record: Record,
        payload: Option<Bytes>,
        timeout: Duration,
    ) -> Result<Response, RequestError> {
        self.request_record_admitted(to, record, payload, timeout, || {})
            .await
    }

    /// [`MeshNode::request_record`] that calls `admitted` once the record is in the peer's
    /// send queue (past admission, so any record sent to that peer after this call leaves
    /// after it), before it waits for the terminal; not called when admission fails.
    pub async fn request_record_admitted(
        &self,
        to: &NodeRid,
        record: Record,
        payload: Option<Bytes>,
        timeout: Duration,
        admitted: impl FnOnce(),
    ) -> Result<Response, RequestError> {
        if !codec::is_app_record(&record) || record.is_reply() {
            return Err(SendError::Encode(format!(
                "{} is not an application record",
                record.command()
            ))
            .into());
        }
        let deadline = Instant::now() + timeout;
        let corr = self.shared.next_corr.fetch_add(1, Ordering::Relaxed);
        let frames =
            codec::encode(&record, corr, payload).map_err(|e| SendError::Encode(e.to_string()))?;
        let bytes = self.shared.check_size(&frames)?;
        let (tx, rx) = oneshot::channel();
        let item = OutItem::Request {
            corr,
            deadline,
            frames,
            bytes,
            waiter: tx,
        };
        let outbox = self
            .enqueue(
                to,
                1,
                bytes,
                self.shared.send_timeout.min(timeout),
                [item],
                true,
            )
            .await?;
        // `keep` asked for the outbox: always there.
        let Some(outbox) = outbox else {
            return Err(RequestError::Closed);
        };
        admitted();
        let mut guard = CancelGuard {
            shared: &self.shared,
            outbox,
            corr,
            armed: true,
        };
        let r = rx.await;
        guard.armed = false;
        r.unwrap_or(Err(RequestError::Closed))
    }

    /// Sends a 144 request with `key` and `payload`; its deadline field is `timeout`.
    pub async fn request(
        &self,
        to: &NodeRid,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Response, RequestError> {
        let record = Record::Request(zlink_wire::Request {
            key,
            deadline: Deadline::from_remaining(timeout),
        });
        self.request_record(to, record, Some(payload), timeout)
            .await
    }

    /// Pushes a 148 record to a ClientServer client (server push), with admission.
    pub async fn push(
        &self,
        session: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), SendError> {
        let frames = push_parts(key, payload)?;
        let bytes = self.shared.check_size(&frames)?;
        let budget = self
            .shared
            .client_budget(session.get())
            .ok_or(SendError::Unavailable)?;
        budget
            .reserve(bytes, self.shared.send_timeout)
            .await
            .map_err(|e| SendError::DeadlineExceeded(e.waited))?;
        self.submit_push(session, frames, bytes, &budget)
    }

    /// Hands a push admitted against `budget` to the I/O thread; its reservation goes back
    /// if the hand-off fails.
    fn submit_push(
        &self,
        session: SessionRid,
        frames: Parts,
        bytes: u64,
        budget: &SendBudget,
    ) -> Result<(), SendError> {
        self.shared
            .submit(Command::Send {
                dest: Dest::Client {
                    session: session.get(),
                },
                frames,
                bytes,
            })
            .inspect_err(|_| budget.release(bytes))
    }

    /// [`MeshNode::push`] without waiting: pushes only if the client's outbound budget has
    /// room now, else hands the payload back ([`TryPushError::Full`]) to be retried or waited
    /// for with [`MeshNode::push`].
    ///
    /// # Errors
    /// [`TryPushError::Full`] without room; [`TryPushError::Failed`] as [`MeshNode::push`]
    /// fails (no such session, too large, closed).
    pub fn try_push(
        &self,
        session: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), TryPushError> {
        // The payload moves into the parts (no clone: a payload read out of a batch frame
        // would be promoted to a shared one for it) and comes back out of them when full.
        let frames = push_parts(key, payload).map_err(TryPushError::Failed)?;
        let bytes = self
            .shared
            .check_size(&frames)
            .map_err(TryPushError::Failed)?;
        let budget = self
            .shared
            .client_budget(session.get())
            .ok_or(TryPushError::Failed(SendError::Unavailable))?;
        if !budget.try_reserve(bytes) {
            return Err(TryPushError::Full(frames.into_payload()));
        }
        self.submit_push(session, frames, bytes, &budget)
            .map_err(TryPushError::Failed)
    }
}

/// Cancels a request whose future is dropped before its terminal. The cancel travels through
/// the request's outbox, behind the request itself, so it can never overtake a request that
/// is still waiting there (a cancelled request is never sent, SB-12).
struct CancelGuard<'a> {
    shared: &'a Shared,
    outbox: Arc<Outbox>,
    corr: u64,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed && self.outbox.push([OutItem::Cancel { corr: self.corr }]) {
            let _ = self.shared.submit(Command::Flush(self.outbox.clone()));
        }
    }
}
