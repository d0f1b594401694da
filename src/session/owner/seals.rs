//! The session owner's relocation seals (SB-8): a 42 applied, the route switch (44), the
//! held relays released, the seal timer on the injected clock.

use super::*;

impl SessionOwner {
    /// What the relocation seals of this node's sessions hold now (0 once every seal ended).
    pub(crate) fn seal_gauges(&self) -> SealGauges {
        let entries: Vec<Arc<SessionEntry>> = lock(&self.sessions).values().cloned().collect();
        let mut g = SealGauges::default();
        for e in &entries {
            g += e.agg().seal_gauges();
        }
        g
    }

    /// A 42 from `sender` (SB-8.1): the seal is installed (or was, for a duplicate) and the
    /// 43 says `Installed`, else `Rejected` with the SB-12 kind (counted). The 43 is the 42's
    /// reply on its correlation (no sequence, no high-water: SB-8.2, SB-14.26).
    pub(crate) fn handle_seal(
        self: &Arc<Self>,
        sender: (&NodeRid, NodeGeneration),
        rec: &SessionRelocationSeal,
        reply: Option<ReplyHandle>,
    ) {
        let outcome = match self.entry(rec.seal.session) {
            None => {
                let reason = if rec.seal.session_lifecycle == self.cfg.lifecycle {
                    FlowReject::UnknownSession
                } else {
                    FlowReject::LifecycleMismatch
                };
                Err((reason, ErrorKind::Unavailable))
            }
            Some(entry) => {
                let now = self.cfg.clock.now();
                let out = entry.agg().handle_seal(now, sender, rec);
                if out.is_ok() {
                    tracing::debug!(session = %entry.rid, actor = %rec.actor, relocation = %rec.seal.relocation, "relocation seal installed");
                    self.arm_seal_timer(&entry);
                }
                out
            }
        };
        let outcome = match outcome {
            Ok(()) => SealOutcome::Installed,
            Err((reason, kind)) => {
                self.flow.reject(FlowRecord::Seal, reason, &rec.actor);
                SealOutcome::Rejected(kind)
            }
        };
        let Some(reply) = reply else {
            return;
        };
        let sealed = Record::SessionRelocationSealed(SessionRelocationSealed {
            seal: rec.seal.clone(),
            outcome,
        });
        if let Err(e) = reply.reply_record(sealed, None) {
            let (reply, e) = *e;
            reply.error(ErrorKind::Internal, e.to_string());
        }
    }

    /// A 44 from any mesh peer (SB-8.3, SB-8.7, SB-8.8); never answered (SB-8.4). Applied:
    /// the held pushes of the binding are checked again (after a commit against the target's
    /// values) and the held relays leave in order. A late or foreign one is a
    /// `late_session_route_update` Warning, counted, and changes nothing; a duplicate is a
    /// counted no-op.
    pub(crate) fn handle_route(self: &Arc<Self>, rec: &SessionRelocationRoute) {
        let (session, lifecycle) = match rec {
            SessionRelocationRoute::Commit(c) => (c.session, c.session_lifecycle),
            SessionRelocationRoute::Abort(a) => (a.seal.session, a.seal.session_lifecycle),
        };
        let late = |reason: FlowReject, detail: &dyn std::fmt::Display| {
            self.flow.reject(FlowRecord::Route, reason, detail);
            if reason == FlowReject::LateRouteUpdate {
                tracing::warn!(session = %session, %lifecycle, record = ?rec, "late_session_route_update: ignored");
            }
        };
        let Some(entry) = self.entry(session) else {
            late(FlowReject::LateRouteUpdate, &session);
            return;
        };
        let applied = {
            let mut agg = entry.agg();
            let applied = agg.handle_route(rec);
            if let Ok(a) = &applied {
                let actor = match a {
                    RouteApplied::Committed(b) | RouteApplied::Aborted(b) => b.actor.clone(),
                };
                // Target pushes that overtook the 44 pass now; after an abort they are refused.
                self.release_held(&entry, &mut agg, &actor);
            }
            applied
        };
        match applied {
            Err(reason) => late(reason, &session),
            Ok(RouteApplied::Committed(b)) => {
                tracing::debug!(session = %entry.rid, actor = %b.actor, to = %b.route.node, "relocation committed: route switched");
                self.release(&entry, b.actor.clone());
            }
            Ok(RouteApplied::Aborted(b)) => {
                tracing::debug!(session = %entry.rid, actor = %b.actor, "relocation aborted: held relays go to the source");
                self.release(&entry, b.actor.clone());
            }
        }
    }

    /// Sends the held relays of `actor`'s releasing seal in arrival order over the binding's
    /// route (infrastructure work): each one's admission before the next is taken; relays
    /// submitted meanwhile queue behind them; the seal ends with the last.
    fn release(self: &Arc<Self>, entry: &Arc<SessionEntry>, actor: ActorId) {
        let owner = self.clone();
        let entry = entry.clone();
        self.rt.spawn(async move {
            loop {
                let now = owner.cfg.clock.now();
                let step = entry.agg().next_released(now, &actor);
                let (ticket, relay) = match step {
                    Released::Done => return,
                    Released::Expired(r) => {
                        r.answer(Err((
                            ErrorKind::DeadlineExceeded,
                            "the deadline passed while a relocation seal held the relay".into(),
                        )));
                        continue;
                    }
                    Released::Send(t, r) => (t, r),
                };
                let HeldRelay {
                    key,
                    payload,
                    request,
                    admitted,
                } = relay;
                let timeout = request
                    .as_ref()
                    .map(|q| q.deadline.saturating_duration_since(now));
                let (tx, in_queue) = oneshot::channel();
                match owner
                    .host
                    .send_relay(ticket, key, payload, timeout, Some(tx))
                {
                    RelaySent::Now(out) => {
                        if let Some(q) = request {
                            let _ = q.waiter.send(out);
                        } else if let Err((kind, detail)) = out {
                            tracing::debug!(%actor, %kind, %detail, "released relay refused");
                        }
                    }
                    RelaySent::Later(wait) => match request {
                        // A one-way send's future ends at its admission.
                        None => {
                            if let Err((kind, detail)) = wait.await {
                                tracing::debug!(%actor, %kind, %detail, "released relay refused");
                            }
                        }
                        Some(q) => {
                            tokio::spawn(async move {
                                let _ = q.waiter.send(wait.await);
                            });
                            let _ = in_queue.await;
                        }
                    },
                }
                // In the actor owner's queue (or refused): its submitter goes on.
                drop(admitted);
            }
        });
    }

    /// Starts the session's seal timer unless it runs (then wakes it: a deadline moved).
    fn arm_seal_timer(self: &Arc<Self>, entry: &Arc<SessionEntry>) {
        {
            let _agg = entry.agg();
            if entry.seal_timer.load(Ordering::Acquire) {
                entry.seal_wake.notify_one();
                return;
            }
            entry.seal_timer.store(true, Ordering::Release);
        }
        let owner = self.clone();
        let entry = entry.clone();
        self.rt.spawn(async move {
            loop {
                let deadline = {
                    let agg = entry.agg();
                    match agg.poll_seal_timeout() {
                        Some(d) => d,
                        None => {
                            entry.seal_timer.store(false, Ordering::Release);
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = owner.cfg.clock.sleep_until(deadline) => {}
                    () = entry.seal_wake.notified() => continue,
                }
                let now = owner.cfg.clock.now();
                let fired = entry.agg().handle_seal_timeouts(now);
                for r in fired.expired {
                    r.answer(Err((
                        ErrorKind::DeadlineExceeded,
                        "the deadline passed while a relocation seal held the relay".into(),
                    )));
                }
                if let Some(dropped) = fired.closed {
                    tracing::warn!(session = %entry.rid, held = dropped.len(), "relocation seal timed out: closing the session");
                    for r in dropped {
                        owner
                            .flow
                            .reject(FlowRecord::Relay, FlowReject::RelocationTimeout, &entry.rid);
                        r.answer(Err((
                            ErrorKind::Unavailable,
                            "the relocation seal timed out: the session is closed".into(),
                        )));
                    }
                    {
                        let _agg = entry.agg();
                        entry.seal_timer.store(false, Ordering::Release);
                    }
                    owner
                        .host
                        .close(entry.rid, DisconnectReason::RelocationSealTimeout);
                    return;
                }
            }
        });
    }
}
