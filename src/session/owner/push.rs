//! The session owner's push queue: pushes to a session's client (its own and an actor's 36),
//! checked, held while sealed, queued behind a full client budget.

use super::*;

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

    /// [`SessionOwner::handle_push`] after its checks.
    fn send_accepted(
        self: &Arc<Self>,
        entry: Arc<SessionEntry>,
        push: &BoundSessionSend,
        payload: Bytes,
        release: Option<impl FnOnce() -> Done>,
    ) -> Admitted {
        let (session, key) = (push.session, push.key);
        let owner = self.clone();
        let mut payload = Some(payload);
        let mut release = Some(release);
        let limit = if matches!(release, Some(Some(_))) {
            usize::MAX
        } else {
            PUSH_BACKLOG
        };
        let attempt = |try_now: bool| -> Option<BoxFuture<()>> {
            let mut payload = payload.take().expect("one attempt");
            if try_now {
                match owner.host.try_push(session, key, payload) {
                    Ok(()) => {
                        entry.push_sent();
                        return None;
                    }
                    Err(zlink_mesh::TryPushError::Full(p)) => payload = p,
                    Err(zlink_mesh::TryPushError::Failed(e)) => {
                        owner
                            .flow
                            .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
                        return None;
                    }
                    // A refusal this version does not know: not sent, as a failure.
                    Err(_) => {
                        let e = zlink_mesh::SendError::Unavailable;
                        owner
                            .flow
                            .reject(FlowRecord::Push, FlowReject::SessionClosed, &e);
                        return None;
                    }
                }
            }
            let owner = owner.clone();
            let entry = entry.clone();
            let done = release.take().flatten().map(|r| r());
            Some(Box::pin(async move {
                owner.push_waiting(&entry, key, payload).await;
                if let Some(done) = done {
                    // The session backlogs' place for credit: this node's mesh.
                    owner.backlogs.release(done);
                }
            }))
        };
        match self.pushes.run(&session, limit, attempt, &self.rt) {
            Ok(a) => a,
            Err(_) => {
                self.flow
                    .reject(FlowRecord::Push, FlowReject::ClientBacklogFull, &push.actor);
                Admitted::Now
            }
        }
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
