//! The session owner's relays: 24s over a binding's stored route (tickets, held while sealed,
//! forwarded), and the actor lookups a session makes.

use super::*;

impl SessionOwner {
    /// `BoundActor::relay` (SB-5.3, SB-5.10): a 24 over the stored route with the bound-session
    /// tail.
    pub(crate) async fn relay(
        self: &Arc<Self>,
        entry: &Arc<SessionEntry>,
        actor: &ActorId,
        generation: BindingGeneration,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
    ) -> Result<Option<Bytes>, SessionError> {
        let out = match self.relay_start(entry, actor, generation, key, payload, timeout)? {
            RelaySent::Now(out) => out,
            RelaySent::Later(wait) => wait.await,
        };
        out.map_err(remote)
    }

    /// [`SessionOwner::relay`] up to the 24's hand-off: the aggregate's ticket (a refusal is
    /// counted) and the send, which either completed at once or waits.
    pub(crate) fn relay_start(
        &self,
        entry: &Arc<SessionEntry>,
        actor: &ActorId,
        generation: BindingGeneration,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
    ) -> Result<RelaySent, SessionError> {
        let ticket = entry.agg().relay(actor, generation).map_err(|r| {
            self.flow.reject(FlowRecord::Relay, r, actor);
            SessionError::of_reject(FlowRecord::Relay, actor, r)
        })?;
        Ok(self.send_ticket(entry, ticket, key, payload, timeout))
    }

    /// [`SessionOwner::relay_start`] of a one-way relay to the actor whose id has these bytes,
    /// found and stepped under one lock of the aggregate (`relay_bytes`); `None` when no
    /// binding has these bytes (nothing counted: the caller decides what that is).
    pub(crate) fn relay_bytes_start(
        &self,
        entry: &Arc<SessionEntry>,
        actor: &[u8],
        key: DispatchKey,
        payload: Bytes,
    ) -> Option<Result<RelaySent, SessionError>> {
        let step = entry.agg().relay_bytes(actor)?;
        Some(match step {
            Ok(ticket) => Ok(self.send_ticket(entry, ticket, key, payload, None)),
            Err((r, actor)) => {
                self.flow.reject(FlowRecord::Relay, r, &actor);
                Err(SessionError::of_reject(FlowRecord::Relay, &actor, r))
            }
        })
    }

    /// The 24 of a relay ticket, handed to the host: [`SessionOwner::relay_start`] after the
    /// aggregate's step. A ticket of a sealed binding is held by the aggregate instead
    /// ([`SessionOwner::hold`]).
    pub(crate) fn send_ticket(
        &self,
        entry: &Arc<SessionEntry>,
        ticket: RelayTicket,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
    ) -> RelaySent {
        if ticket.held() {
            return self.hold(entry, &ticket, key, payload, timeout, None);
        }
        self.host.send_relay(ticket, key, payload, timeout, None)
    }

    /// A relay of a binding sealed by a relocation (SB-8.2): held in the aggregate in arrival
    /// order with its own deadline, until the 44 releases it over the binding's route then (or
    /// the session ends: then it is answered `Unavailable`). A one-way relay is done once
    /// held; a request waits for its terminal. While the session's seals hold more than the
    /// session lane's limits, the submitter's admission waits for the release. If the seal
    /// ended meanwhile the relay goes over the route as any.
    fn hold(
        &self,
        entry: &Arc<SessionEntry>,
        ticket: &RelayTicket,
        key: DispatchKey,
        payload: Bytes,
        timeout: Option<Duration>,
        admitted: Option<oneshot::Sender<()>>,
    ) -> RelaySent {
        let now = self.cfg.clock.now();
        let (request, reply) = match timeout {
            Some(t) => {
                let (tx, rx) = oneshot::channel();
                (
                    Some(HeldRequest {
                        deadline: now + t,
                        waiter: tx,
                    }),
                    Some(rx),
                )
            }
            None => (None, None),
        };
        // A one-way relay's submitter waits for its admission only past the session's limits.
        let (admitted, own) = match (admitted, timeout) {
            (Some(a), _) => (Some(a), None),
            (None, None) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            (None, Some(_)) => (None, None),
        };
        let relay = HeldRelay {
            key,
            payload,
            request,
            admitted,
        };
        let actor = &ticket.binding.actor;
        let mut agg = entry.agg();
        let within = match agg.hold_relay(actor, ticket.binding.generation, relay) {
            Ok(within) => within,
            Err(relay) => {
                // The seal ended between the ticket and now: the route as it is now.
                let fresh = agg.relay(actor, ticket.binding.generation);
                drop(agg);
                let HeldRelay {
                    key,
                    payload,
                    request,
                    admitted,
                } = relay;
                return match fresh {
                    Err(r) => {
                        self.flow.reject(FlowRecord::Relay, r, actor);
                        let e = SessionError::of_reject(FlowRecord::Relay, actor, r);
                        RelaySent::Now(Err((e.kind(), e.to_string())))
                    }
                    Ok(t) if t.held() => RelaySent::Now(Err((
                        ErrorKind::Unavailable,
                        "the binding was sealed again".into(),
                    ))),
                    Ok(t) => {
                        drop(request);
                        self.host.send_relay(t, key, payload, timeout, admitted)
                    }
                };
            }
        };
        drop(agg);
        if timeout.is_some() {
            // Its deadline may be the seal timer's next.
            entry.seal_wake.notify_one();
        }
        match (reply, own) {
            (Some(rx), _) => RelaySent::Later(Box::pin(async move {
                rx.await.unwrap_or_else(|_| {
                    Err((
                        ErrorKind::Unavailable,
                        "the session ended while a relocation seal held the relay".into(),
                    ))
                })
            })),
            (None, Some(_)) if within => RelaySent::Now(Ok(None)),
            (None, Some(rx)) => RelaySent::Later(Box::pin(async move {
                let _ = rx.await;
                Ok(None)
            })),
            (None, None) => RelaySent::Now(Ok(None)),
        }
    }

    /// [`SessionOwner::relay_start`] of a forwarded request ([`crate::session::BoundActor::forward`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward_start(
        &self,
        entry: &Arc<SessionEntry>,
        actor: &ActorId,
        generation: BindingGeneration,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
        map: crate::session::ReplyMap,
    ) -> Result<Forwarded, SessionError> {
        let ticket = entry.agg().relay(actor, generation).map_err(|r| {
            self.flow.reject(FlowRecord::Relay, r, actor);
            SessionError::of_reject(FlowRecord::Relay, actor, r)
        })?;
        Ok(self.forward_ticket(entry, ticket, key, payload, timeout, map))
    }

    /// [`SessionOwner::forward_start`] to the actor whose id has these bytes, found and
    /// stepped under one lock of the aggregate (`relay_bytes`); `None` when no binding has
    /// these bytes (nothing counted: the caller decides what that is).
    pub(crate) fn forward_bytes_start(
        &self,
        entry: &Arc<SessionEntry>,
        actor: &[u8],
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
        map: crate::session::ReplyMap,
    ) -> Option<Result<Forwarded, SessionError>> {
        let step = entry.agg().relay_bytes(actor)?;
        Some(match step {
            Ok(ticket) => Ok(self.forward_ticket(entry, ticket, key, payload, timeout, map)),
            Err((r, actor)) => {
                self.flow.reject(FlowRecord::Relay, r, &actor);
                Err(SessionError::of_reject(FlowRecord::Relay, &actor, r))
            }
        })
    }

    /// The 24 request of a relay ticket whose reply answers the client's packet on its own.
    /// A held one (sealed binding) ends the packet's turn once held: the seal keeps its order.
    pub(crate) fn forward_ticket(
        &self,
        entry: &Arc<SessionEntry>,
        ticket: RelayTicket,
        key: DispatchKey,
        payload: Bytes,
        timeout: Duration,
        map: crate::session::ReplyMap,
    ) -> Forwarded {
        let (tx, admitted) = oneshot::channel();
        let sent = if ticket.held() {
            self.hold(entry, &ticket, key, payload, Some(timeout), Some(tx))
        } else {
            self.host
                .send_relay(ticket, key, payload, Some(timeout), Some(tx))
        };
        Forwarded {
            sent,
            admitted,
            map,
        }
    }

    pub(crate) async fn get_actor(&self, actor: ActorId) -> Result<ActorRef, SessionError> {
        Ok(self.host.get_actor(actor).await?)
    }

    pub(crate) async fn create_actor(
        &self,
        create: crate::actor::Create,
        or_get: bool,
    ) -> Result<ActorRef, SessionError> {
        if !self.accepting.load(Ordering::Acquire) {
            return Err(SessionError::ShuttingDown);
        }
        Ok(self.host.create_actor(create, or_get).await?)
    }
}
