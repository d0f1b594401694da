//! The session owner's binds: a 38's record and completion as infrastructure work, the
//! tombstones a replaced or removed binding leaves, `remove`.

use super::*;

impl SessionOwner {
    fn fresh_generation(&self) -> BindingGeneration {
        BindingGeneration::new(self.next_generation.fetch_add(1, Ordering::Relaxed))
    }

    /// The 38 for binding identity `t` of session `rid`.
    fn bind_record(
        &self,
        rid: SessionRid,
        t: &Tombstone,
        owner_lease: OwnerLeaseGeneration,
        operation: BindOperation,
    ) -> BoundSessionBind {
        BoundSessionBind {
            actor: t.actor.clone(),
            object_generation: t.object_generation,
            target_node_generation: t.route.node_generation,
            authority_owner_generation: t.route.authority_owner_generation,
            owner_lease_generation: t.route.owner_lease_generation,
            session_lifecycle: self.cfg.lifecycle,
            session_owner: self.owner_id,
            session_owner_lease_generation: owner_lease,
            session: rid,
            binding_generation: t.generation,
            operation,
            deadline: Deadline::from_remaining(self.cfg.request_timeout),
        }
    }

    /// `session.actors().bind(actor)` (SB-5.1, SB-5.2, SB-5.7, SB-6.1). The 38 and its
    /// completion run as infrastructure work: the aggregate gets the terminal even if the
    /// caller's future is dropped.
    pub(crate) async fn bind(
        self: &Arc<Self>,
        entry: &Arc<SessionEntry>,
        actor: &ActorRef,
    ) -> Result<Binding, SessionError> {
        if !self.accepting.load(Ordering::Acquire) {
            self.flow
                .reject(FlowRecord::Bind, FlowReject::ShuttingDown, actor);
            return Err(SessionError::ShuttingDown);
        }
        let target = BindTarget {
            actor: actor.id().clone(),
            actor_type: actor.actor_type().into(),
            object_generation: actor.object_generation(),
            location: actor.wire_location(),
        };
        let generation = self.fresh_generation();
        let start = entry.agg().begin_bind(target, generation);
        let req = match start {
            Ok(BindStart::Current(b)) => return Ok(b),
            Ok(BindStart::Request(req)) => req,
            Err(r) => {
                self.flow.reject(FlowRecord::Bind, r, actor);
                return Err(SessionError::of_reject(FlowRecord::Bind, actor.id(), r));
            }
        };
        let owner_lease = self.host.owner_lease();
        let identity = Tombstone {
            actor: req.target.actor.clone(),
            object_generation: req.target.object_generation,
            route: req.target.location.clone(),
            generation: req.generation,
        };
        let rec = self.bind_record(entry.rid, &identity, owner_lease, BindOperation::Bind);
        let (tx, rx) = oneshot::channel();
        let owner = self.clone();
        let entry2 = entry.clone();
        let actor_id = req.target.actor.clone();
        let to = req.target.location.node.clone();
        tokio::spawn(async move {
            let (result, after) = owner
                .host
                .send_bind(&to, rec, owner.cfg.request_timeout)
                .await;
            let detail = result.as_ref().err().map(|(_, d)| d.clone());
            let completion = {
                let mut agg = entry2.agg();
                let completion = agg.complete_bind(
                    &actor_id,
                    generation,
                    owner_lease,
                    result.map_err(|(k, _)| k),
                );
                // Pushes that arrived before the terminal: sent now, before any later push of
                // the binding (SB-5.6, SB-5.7); refused with the bind otherwise.
                if matches!(completion, BindCompletion::Bound { .. }) {
                    owner.release_held(&entry2, &mut agg, &actor_id);
                } else {
                    for h in agg.take_held(&actor_id) {
                        owner
                            .flow
                            .reject(FlowRecord::Push, FlowReject::NotBound, &h.push.actor);
                    }
                }
                completion
            };
            // The route is stored: only now what the actor owner does after the terminal
            // (SB-6.1).
            if let Some(after) = after {
                tokio::spawn(after);
            }
            let out = match completion {
                BindCompletion::Bound { binding, .. } => Ok(binding),
                BindCompletion::Failed(kind) => {
                    // An outcome the actor owner may not have decided (the request timed out,
                    // the route failed) could have left the binding registered there: tombstone
                    // exactly this identity (a no-op when it never was, SB-6.6). A refusal the
                    // owner decided (another incarnation, no such actor) registered nothing.
                    if !matches!(kind, ErrorKind::InvalidOperation | ErrorKind::NotFound) {
                        owner.spawn_tombstone(entry2.rid, identity);
                    }
                    Err(SessionError::Remote {
                        kind,
                        detail: detail.unwrap_or_else(|| "bind refused".into()),
                    })
                }
                BindCompletion::Late { reason, tombstone } => {
                    owner.flow.reject(FlowRecord::Bind, reason, &actor_id);
                    if let Some(t) = tombstone {
                        owner.spawn_tombstone(entry2.rid, t);
                    }
                    Err(SessionError::Closed)
                }
            };
            let _ = tx.send(out);
        });
        rx.await.unwrap_or(Err(SessionError::Closed))
    }

    fn spawn_tombstone(self: &Arc<Self>, rid: SessionRid, t: Tombstone) {
        let owner = self.clone();
        tokio::spawn(async move {
            let rec = owner.bind_record(rid, &t, owner.host.owner_lease(), BindOperation::Unbind);
            if let (Err((kind, detail)), _) = owner
                .host
                .send_bind(&t.route.node, rec, owner.cfg.request_timeout)
                .await
            {
                tracing::debug!(actor = %t.actor, %kind, %detail, "tombstone of a late bind failed");
            }
        });
    }

    pub(super) async fn send_tombstone(
        &self,
        rid: SessionRid,
        b: &Binding,
        operation: BindOperation,
    ) -> Result<BindSnapshot, Refusal> {
        let identity = Tombstone {
            actor: b.actor.clone(),
            object_generation: b.object_generation,
            route: b.route.clone(),
            generation: b.generation,
        };
        let rec = self.bind_record(rid, &identity, b.owner_lease, operation);
        self.host
            .send_bind(&b.route.node, rec, self.cfg.request_timeout)
            .await
            .0
    }

    /// Unbind (`notify == false`) or `NotifyDisconnected` (`notify == true`) of one binding
    /// (SB-6.6, SB-7.5): removed from the aggregate at once (at most once per identity), then
    /// the 38 tombstone; waits for its terminal (the Spot callback's, for a notify).
    pub(crate) async fn remove(
        self: &Arc<Self>,
        entry: &Arc<SessionEntry>,
        actor: &ActorId,
        generation: BindingGeneration,
        notify: bool,
    ) -> Result<(), SessionError> {
        let b = {
            let mut agg = entry.agg();
            if notify {
                agg.begin_notify(actor, generation)
            } else {
                agg.remove(actor, generation)
            }
        }
        .map_err(|r| {
            self.flow.reject(FlowRecord::Bind, r, actor);
            SessionError::of_reject(FlowRecord::Bind, actor, r)
        })?;
        let op = if notify {
            BindOperation::Disconnect
        } else {
            BindOperation::Unbind
        };
        let owner = self.clone();
        let entry = entry.clone();
        // Infrastructure work: the tombstone is sent even if the caller stops waiting. A
        // notified binding stays for the actor's pushes until the Spot callback's terminal
        // (SB-7.5), then is tombstoned here too.
        let task = tokio::spawn(async move {
            let out = owner.send_tombstone(entry.rid, &b, op).await;
            if notify {
                entry.agg().finish_notify(&b.actor, b.generation);
            }
            out
        });
        match task.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((kind, detail))) => Err(SessionError::Remote { kind, detail }),
            Err(_) => Err(SessionError::Closed),
        }
    }
}
