//! The session owner's push queue: pushes to a session's client (its own and an actor's 36),
//! checked, held while sealed, queued behind a full client budget.

use super::*;
use crate::hashing::SeededMap;
use crate::sync::atomic::AtomicUsize;
use std::collections::VecDeque;

impl SessionOwner {
    /// Pushes straight to a session's client (the session's own sends).
    pub(crate) async fn push_to_client(
        &self,
        rid: SessionRid,
        key: DispatchKey,
        payload: Bytes,
    ) -> Result<(), SessionError> {
        if self.entry(rid).is_none() {
            return Err(SessionError::Closed);
        }
        self.host
            .push(rid, key, payload)
            .await
            .map_err(|_| SessionError::Closed)
    }

    /// The checks of a 36 (or the same-node push): the session must be known and the four
    /// SB-5.5 values current (SB-5.8); otherwise counted with its reason (SB-5.9). A 36 with
    /// [`CLOSE_SESSION_KEY`] closes the connection instead (SB-5.14). `Some` when the payload
    /// goes to the client.
    fn accept_push(
        self: &Arc<Self>,
        push: &BoundSessionSend,
        payload: &mut Option<Bytes>,
    ) -> Option<Arc<SessionEntry>> {
        let Some(entry) = self.entry(push.session) else {
            let reason = if push.session_lifecycle == self.cfg.lifecycle {
                FlowReject::UnknownSession
            } else {
                FlowReject::LifecycleMismatch
            };
            self.flow.reject(FlowRecord::Push, reason, &push.actor);
            return None;
        };
        let mut agg = entry.agg();
        match agg.check_push(push).map(|_| ()) {
            Ok(()) => {}
            // A bind of exactly this identity may be in flight: its terminal (on the
            // completion connection) can arrive after this push (on the relay connection).
            Err(FlowReject::NotBound) if payload.is_some() => {
                let held = crate::session::aggregate::HeldPush {
                    push: push.clone(),
                    payload: payload.take().unwrap_or_default(),
                };
                if let Err((r, _)) = agg.hold_push(held) {
                    self.flow.reject(FlowRecord::Push, r, &push.actor);
                }
                return None;
            }
            // The binding is sealed: the push may be the target's, ahead of its 44.
            Err(FlowReject::NodeGenerationMismatch | FlowReject::AuthorityMismatch)
                if payload.is_some() && agg.is_sealed(&push.actor) =>
            {
                let held = crate::session::aggregate::HeldPush {
                    push: push.clone(),
                    payload: payload.take().unwrap_or_default(),
                };
                if let Err((r, h)) = agg.hold_sealed_push(held) {
                    let reason = if r == FlowReject::NotBound {
                        // Not of the sealed identity: the push check's own reason.
                        agg.check_push(&h.push).err().unwrap_or(r)
                    } else {
                        r
                    };
                    self.flow.reject(FlowRecord::Push, reason, &push.actor);
                }
                return None;
            }
            Err(r) => {
                self.flow.reject(FlowRecord::Push, r, &push.actor);
                return None;
            }
        }
        drop(agg);
        if push.key == CLOSE_SESSION_KEY {
            tracing::debug!(session = %push.session, actor = %push.actor, "bound actor closed the session");
            self.host.close(push.session, DisconnectReason::Closed);
            return None;
        }
        Some(entry)
    }

    /// A push from a bound actor on this node: checked as a 36, then sent, waiting for the
    /// client's credit (the pushing handler is held back, as a remote one is by its window).
    pub(crate) async fn handle_local_push(
        self: &Arc<Self>,
        push: BoundSessionSend,
        payload: Bytes,
    ) {
        let mut payload = Some(payload);
        if self.accept_push(&push, &mut payload).is_none() {
            return;
        }
        let payload = payload.unwrap_or_default();
        if let Err(e) = self.host.push(push.session, push.key, payload).await {
            self.flow
                .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
        }
    }

    /// A 36 from a peer (see [`SessionOwner::accept_push`] for the checks). Never waits: a
    /// client without credit (its outbound budget full) holds up only its own pushes, which
    /// wait in order in the session's push queue, each at most the send timeout; once one timed
    /// out the session is *stalled* and its pushes are sent only if there is room at once
    /// (else refused, counted `ClientBacklogFull`) until the client takes one again. With
    /// `release` the sender's credit for a waiting push stays charged until it left the queue
    /// (its window bounds the queue); without, at most [`PUSH_BACKLOG`] wait (more are
    /// refused, counted).
    pub(crate) fn handle_push(
        self: &Arc<Self>,
        push: BoundSessionSend,
        payload: Bytes,
        release: Option<impl FnOnce() -> Done>,
    ) -> Admitted {
        let mut payload = Some(payload);
        let Some(entry) = self.accept_push(&push, &mut payload) else {
            return Admitted::Now;
        };
        self.send_accepted(entry, &push, payload.unwrap_or_default(), release)
    }

    /// The pushes held for a bind that just completed (in arrival order), checked against the
    /// published binding and sent, under the aggregate's lock `agg` (so no later push of the
    /// binding overtakes them); refused ones counted.
    pub(super) fn release_held(
        self: &Arc<Self>,
        entry: &Arc<SessionEntry>,
        agg: &mut AggGuard<'_>,
        actor: &ActorId,
    ) {
        for h in agg.take_held(actor) {
            if let Err(r) = agg.check_push(&h.push) {
                self.flow.reject(FlowRecord::Push, r, &h.push.actor);
                continue;
            }
            if h.push.key == CLOSE_SESSION_KEY {
                self.host.close(h.push.session, DisconnectReason::Closed);
                continue;
            }
            let _ = self.send_accepted(entry.clone(), &h.push, h.payload, None::<fn() -> Done>);
        }
    }

    /// [`SessionOwner::handle_push`] after its checks: sent now when the client's budget has
    /// room and none of the session's pushes waits (on whatever thread delivered it, the mesh
    /// I/O thread for a 36), else queued behind those that wait ([`PushQueues`]).
    pub(super) fn send_accepted(
        self: &Arc<Self>,
        entry: Arc<SessionEntry>,
        push: &BoundSessionSend,
        payload: Bytes,
        release: Option<impl FnOnce() -> Done>,
    ) -> Admitted {
        let (session, key) = (push.session, push.key);
        let limit = if release.is_some() {
            usize::MAX
        } else {
            PUSH_BACKLOG
        };
        let q = &self.pushes;
        // Nothing waits for any session (the common case): try at once without the map. What
        // one submitter queued is seen by its own next call (`open` is raised under the lock
        // before it returns), so its push never overtakes its own queued ones.
        let (mut map, payload) = if q.open.load(Ordering::Acquire) == 0 {
            let Some(payload) = self.try_push_now(&entry, key, payload) else {
                return Admitted::Now;
            };
            (lock(&q.map), payload)
        } else {
            (lock(&q.map), payload)
        };
        if let Some(waiting) = map.get_mut(&session) {
            // Behind what waits (for credit, or to be sent by the push that waited).
            if waiting.items.len() + waiting.sending >= limit {
                q.refused.fetch_add(1, Ordering::Relaxed);
                drop(map);
                self.flow
                    .reject(FlowRecord::Push, FlowReject::ClientBacklogFull, &push.actor);
                return Admitted::Now;
            }
            waiting.items.push_back(QueuedPush {
                key,
                payload,
                done: release.map(|r| r()),
            });
            q.waited.fetch_add(1, Ordering::Relaxed);
            q.waiting_now.fetch_add(1, Ordering::Relaxed);
            return Admitted::Queued;
        }
        // No queue for this session: tried now (again, under the lock, when another
        // session's queue sent us here), else this push opens it and waits for credit.
        let payload = if q.open.load(Ordering::Relaxed) == 0 {
            payload
        } else {
            match self.try_push_now(&entry, key, payload) {
                None => return Admitted::Now,
                Some(p) => p,
            }
        };
        map.insert(
            session,
            WaitingPushes {
                items: VecDeque::new(),
                sending: 0,
            },
        );
        q.open.fetch_add(1, Ordering::AcqRel);
        q.opened.fetch_add(1, Ordering::Relaxed);
        q.waited.fetch_add(1, Ordering::Relaxed);
        q.waiting_now.fetch_add(1, Ordering::Relaxed);
        drop(map);
        let first = QueuedPush {
            key,
            payload,
            done: release.map(|r| r()),
        };
        let owner = self.clone();
        self.rt
            .spawn(async move { owner.drain_pushes(entry, first).await });
        Admitted::Queued
    }

    /// A push the client's budget may take now: `None` when it went (or failed for good,
    /// counted), else the payload back (the budget is full).
    fn try_push_now(
        &self,
        entry: &SessionEntry,
        key: DispatchKey,
        payload: Bytes,
    ) -> Option<Bytes> {
        match self.host.try_push(entry.rid, key, payload) {
            Ok(()) => {
                entry.push_sent();
                None
            }
            Err(zlink_mesh::TryPushError::Full(p)) => Some(p),
            Err(zlink_mesh::TryPushError::Failed(e)) => {
                self.flow
                    .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
                None
            }
            // A refusal this version does not know: not sent, as a failure.
            Err(_) => {
                let e = zlink_mesh::SendError::Unavailable;
                self.flow
                    .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
                None
            }
        }
    }

    /// The one task of a session's push queue: waits for the client's credit for `next` (the
    /// push that found the budget full), then sends what queued behind it meanwhile, in
    /// order, while the budget has room ([`SessionOwner::send_queued`]): it takes what is
    /// queued out under the lock and sends it without the lock (later pushes queue behind
    /// meanwhile, so the thread delivering them never waits for these sends), until the queue
    /// is empty; a push that finds the budget full again is the next to wait, and what is
    /// left of its run goes back in front of the queue. Ends, closing the queue, once nothing
    /// is queued: the session's later pushes go out at once again.
    async fn drain_pushes(self: Arc<Self>, entry: Arc<SessionEntry>, mut next: QueuedPush) {
        let mut run = VecDeque::new();
        loop {
            self.push_waiting(&entry, next.key, next.payload).await;
            self.pushes.waiting_now.fetch_sub(1, Ordering::Relaxed);
            let mut credit = next.done;
            let waits = loop {
                {
                    let mut map = lock(&self.pushes.map);
                    let q = map.get_mut(&entry.rid).expect("open push queue");
                    // The previous run (if any) went.
                    q.sending = 0;
                    if q.items.is_empty() {
                        map.remove(&entry.rid);
                        self.pushes.open.fetch_sub(1, Ordering::AcqRel);
                        break None;
                    }
                    // `run` is empty: the queue keeps its buffer for what arrives meanwhile.
                    std::mem::swap(&mut q.items, &mut run);
                    q.sending = run.len();
                }
                if let Some(w) = self.send_queued(&entry, &mut run, &mut credit) {
                    let mut map = lock(&self.pushes.map);
                    let q = map.get_mut(&entry.rid).expect("open push queue");
                    // What is left of the run goes before what queued meanwhile.
                    run.append(&mut q.items);
                    std::mem::swap(&mut q.items, &mut run);
                    q.sending = 0;
                    break Some(w);
                }
            };
            if let Some(done) = credit {
                // The session backlogs' place for credit: this node's mesh.
                self.backlogs.release(done);
            }
            match waits {
                Some(w) => next = w,
                None => return,
            }
        }
    }

    /// Sends the queued pushes of `entry`'s session in order while the client's budget has
    /// room (a stalled session's push that finds it full is refused, counted, as
    /// [`SessionOwner::push_waiting`] does); the first that finds it full is taken out and
    /// returned, to wait for credit. The credit of those that left the queue is added to
    /// `credit` (one release per run of one sender; an earlier sender's is returned here).
    fn send_queued(
        &self,
        entry: &SessionEntry,
        queued: &mut VecDeque<QueuedPush>,
        credit: &mut Option<Done>,
    ) -> Option<QueuedPush> {
        while let Some(QueuedPush { key, payload, done }) = queued.pop_front() {
            if let Some(payload) = self.try_push_now(entry, key, payload) {
                if !entry.push_stalled.load(Ordering::Acquire) {
                    return Some(QueuedPush { key, payload, done });
                }
                self.flow
                    .reject(FlowRecord::Push, FlowReject::ClientBacklogFull, &entry.rid);
            }
            self.pushes.waiting_now.fetch_sub(1, Ordering::Relaxed);
            if let Some(done) = done {
                match credit {
                    None => *credit = Some(done),
                    Some(acc) => {
                        if let Err(other) = acc.absorb(done) {
                            if let Some(prev) = credit.replace(other) {
                                self.backlogs.release(prev);
                            }
                        }
                    }
                }
            }
        }
        None
    }
    /// A push that waits for the client's credit, unless the session is stalled (a push of it
    /// timed out and none went through since): then only if there is room at once.
    async fn push_waiting(&self, entry: &SessionEntry, key: DispatchKey, payload: Bytes) {
        let session = entry.rid;
        let out = if entry.push_stalled.load(Ordering::Acquire) {
            match self.host.try_push(session, key, payload) {
                Ok(()) => Ok(()),
                Err(zlink_mesh::TryPushError::Full(_)) => {
                    self.flow
                        .reject(FlowRecord::Push, FlowReject::ClientBacklogFull, &session);
                    return;
                }
                Err(zlink_mesh::TryPushError::Failed(e)) => Err(e),
                Err(_) => Err(zlink_mesh::SendError::Unavailable),
            }
        } else {
            // Room comes back in batches: most waiting pushes find it at once.
            match self.host.try_push(session, key, payload) {
                Ok(()) => Ok(()),
                Err(zlink_mesh::TryPushError::Full(p)) => self.host.push(session, key, p).await,
                Err(zlink_mesh::TryPushError::Failed(e)) => Err(e),
                Err(_) => Err(zlink_mesh::SendError::Unavailable),
            }
        };
        match out {
            Ok(()) => entry.push_sent(),
            Err(e) => {
                if matches!(e, SendError::DeadlineExceeded(_)) {
                    entry.push_stalled.store(true, Ordering::Release);
                }
                self.flow
                    .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
            }
        }
    }

    /// Counters of the session push queues (pushes that waited for a client's credit).
    pub(crate) fn push_backlog_stats(&self) -> BacklogStats {
        self.pushes.stats()
    }
}

/// Per-session FIFOs of pushes that could not go to the client at once: a session's queue
/// exists exactly while its one drain task ([`SessionOwner::drain_pushes`]) waits for the
/// client's credit for the push at its head (taken out of the queue) or sends what queued
/// behind it. While it exists, the session's later pushes queue behind, as plain data (no
/// future per push); once its push went, the drain sends what queued, in runs taken out
/// under the lock, while the budget has room, and closes the queue when it is empty. A queue is bounded by the
/// caller's limit (the sender's window, or [`PUSH_BACKLOG`]; refused over it, counted).
#[derive(Default)]
pub(crate) struct PushQueues {
    /// Sessions with a queue: zero on the fast path, which then skips the map.
    pub(super) open: AtomicUsize,
    map: Mutex<SeededMap<SessionRid, WaitingPushes>>,
    waited: AtomicU64,
    opened: AtomicU64,
    refused: AtomicU64,
    waiting_now: AtomicU64,
}

impl PushQueues {
    /// The counters.
    pub(crate) fn stats(&self) -> BacklogStats {
        BacklogStats {
            waited: self.waited.load(Ordering::Relaxed),
            opened: self.opened.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            waiting_now: self.waiting_now.load(Ordering::Relaxed),
        }
    }
}

/// What queued behind a session's push that waits for credit.
pub(crate) struct WaitingPushes {
    items: VecDeque<QueuedPush>,
    /// Pushes the queue's task took out to send (counted against the limit meanwhile).
    sending: usize,
}

/// A push in a session's queue; `done` returns its sender's credit once it left the queue.
pub(crate) struct QueuedPush {
    key: DispatchKey,
    payload: Bytes,
    done: Option<Done>,
}
