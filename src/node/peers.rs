//! The actor owner's watch over the session owners it holds bindings for: when a session
//! owner's lifecycle (its NodeGeneration, which is the lifecycle generation of its sessions) is
//! gone, the bindings it registered here end as a physical disconnect ends them — the current
//! Spot's `OnDisconnectActor` once, then the tombstone (SB-7.3, SB-7.4, SB-7.6) — instead of
//! staying bound to a route nobody serves (SB-6.5, SB-9 leave this to liveness).
//!
//! A lifecycle is gone when the mesh says so (a [`PeerEvent::Down`]):
//! - at once for [`DownReason::Timeout`] (silent past the peer timeout), [`DownReason::Remote`]
//!   (the peer announced its shutdown) and [`DownReason::Restarted`] (a new NodeGeneration
//!   began); a [`PeerEvent::Up`] with a newer generation ends every older one too;
//! - for the other reasons (our connection to it was closed, it re-ran the handshake) only if
//!   the same lifecycle is not up again one peer timeout later.
//!
//! [`OwnerWatch`] is the sans-IO core (inputs with `now`, `poll_timeout`); [`watch`] the thin
//! driver on the mesh's peer events. A lagging event stream (the broadcast is bounded) is
//! answered by a check of every session owner the bindings name.

use std::sync::Weak;
use std::time::{Duration, Instant};

use tokio::sync::broadcast;
use zlink_mesh::{DownReason, PeerEvent};
use zlink_wire::{
    BindOperation, BoundSessionBind, Deadline, NodeGeneration, NodeRid, SessionLifecycleGeneration,
};

use super::follow::Arrival;
use super::{Inner, Node, lock};
use crate::actor::fence::CallFence;
use crate::session::RegisteredBinding;
use crate::sync::atomic::Ordering;

/// Which lifecycles of a session owner ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Exactly this one.
    Exactly(NodeGeneration),
    /// Every one older than this (the peer is up with this generation).
    Before(NodeGeneration),
}

impl Ended {
    fn covers(self, lifecycle: SessionLifecycleGeneration) -> bool {
        match self {
            Ended::Exactly(g) => lifecycle.get() == g.get(),
            Ended::Before(g) => lifecycle.get() < g.get(),
        }
    }
}

/// A session owner lifecycle that is gone: its bindings here end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gone {
    /// The session owner.
    pub(crate) node: NodeRid,
    /// Which of its lifecycles.
    pub(crate) ended: Ended,
}

/// A lifecycle that went down for a reason that does not prove it gone: checked at `due`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pending {
    node: NodeRid,
    generation: NodeGeneration,
    due: Instant,
}

/// The sans-IO core of the watch: which peer lifecycles are gone, and when to look again.
#[derive(Debug)]
pub(crate) struct OwnerWatch {
    /// How long a lifecycle that went down without proof may take to come back (the peer
    /// timeout).
    grace: Duration,
    pending: Vec<Pending>,
}

impl OwnerWatch {
    pub(crate) fn new(grace: Duration) -> Self {
        Self {
            grace,
            pending: Vec::new(),
        }
    }

    /// A peer lifecycle ended ([`PeerEvent::Down`]).
    #[must_use]
    pub(crate) fn handle_down(
        &mut self,
        now: Instant,
        node: &NodeRid,
        generation: NodeGeneration,
        reason: DownReason,
    ) -> Option<Gone> {
        match reason {
            DownReason::Timeout | DownReason::Remote | DownReason::Restarted => {
                self.pending
                    .retain(|p| !(p.node == *node && p.generation == generation));
                Some(Gone {
                    node: node.clone(),
                    ended: Ended::Exactly(generation),
                })
            }
            _ => {
                self.suspect(now, node, generation);
                None
            }
        }
    }

    /// `node`'s lifecycle `generation` may be gone (down without proof, or a lagging event
    /// stream): checked one grace period from now.
    pub(crate) fn suspect(&mut self, now: Instant, node: &NodeRid, generation: NodeGeneration) {
        if !self
            .pending
            .iter()
            .any(|p| p.node == *node && p.generation == generation)
        {
            self.pending.push(Pending {
                node: node.clone(),
                generation,
                due: now + self.grace,
            });
        }
    }

    /// A peer lifecycle is up ([`PeerEvent::Up`]): the same one came back (nothing ends), and
    /// every older one of that node is gone.
    #[must_use]
    pub(crate) fn handle_up(&mut self, node: &NodeRid, generation: NodeGeneration) -> Gone {
        self.pending
            .retain(|p| !(p.node == *node && p.generation.get() <= generation.get()));
        Gone {
            node: node.clone(),
            ended: Ended::Before(generation),
        }
    }

    /// When [`OwnerWatch::handle_timeout`] has something to check.
    #[must_use]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.pending.iter().map(|p| p.due).min()
    }

    /// The checks due at `now`: a lifecycle that is not up again (`up` = the generation up now,
    /// if any) is gone.
    #[must_use]
    pub(crate) fn handle_timeout(
        &mut self,
        now: Instant,
        up: impl Fn(&NodeRid) -> Option<NodeGeneration>,
    ) -> Vec<Gone> {
        let mut gone = Vec::new();
        self.pending.retain(|p| {
            if p.due > now {
                return true;
            }
            if up(&p.node) != Some(p.generation) {
                gone.push(Gone {
                    node: p.node.clone(),
                    ended: Ended::Exactly(p.generation),
                });
            }
            false
        });
        gone
    }
}

impl Node {
    /// Ends every binding registered here by a session owner lifecycle that is gone: each
    /// begins its disconnect notification once (SB-7.3: a 38 Disconnect racing it does not run
    /// the callback twice), runs the current Spot's `OnDisconnectActor` and is tombstoned after
    /// its terminal (SB-7.4), each on its own (SB-7.2). Returns how many began.
    ///
    /// Each is stepped as a 38 Disconnect from its session owner is
    /// ([`Node::step_tombstone`], `relocation::tombstone`): a binding whose incarnation a
    /// relocation has sealed travels in the Restore, so its end waits for the relocation's end
    /// — applied here after an abort, forwarded once to the new owner after a commit (which
    /// runs the hook unless it ran here) — and the hook runs once, on the side that holds the
    /// binding, even when the source and the target both see the lifecycle end.
    pub(crate) fn end_bindings_of(&self, gone: &Gone) -> usize {
        let ended: Vec<(RegisteredBinding, BoundSessionBind)> = {
            let mut actors = lock(&self.inner.actors);
            actors
                .live
                .values_mut()
                .filter_map(|a| {
                    let c = a.binding.current()?.clone();
                    if c.session_owner != gone.node || !gone.ended.covers(c.lifecycle) {
                        return None;
                    }
                    a.binding
                        .begin_disconnect(&c.session_owner, c.lifecycle, c.generation)
                        .then(|| {
                            let record = self.disconnect_record(&a.fence, &c);
                            (c, record)
                        })
                })
                .collect()
        };
        if ended.is_empty() {
            return 0;
        }
        self.inner
            .bindings_owner_lost
            .fetch_add(ended.len() as u64, Ordering::Relaxed);
        tracing::info!(
            session_owner = %gone.node,
            ended = ?gone.ended,
            bindings = ended.len(),
            "session owner gone: its bindings end"
        );
        let n = ended.len();
        for (b, record) in ended {
            let node = self.clone();
            let guard = self.inner.inflight.enter();
            tokio::spawn(async move {
                let _guard = guard;
                if let Err((kind, detail)) = node
                    .step_tombstone(&b.session_owner, &record, Arrival::Direct, true)
                    .await
                {
                    tracing::info!(actor = %record.actor, ?kind, %detail, "binding of a gone session owner not ended here");
                }
            });
        }
        n
    }

    /// The 38 Disconnect the session owner of `b` would send for it to the incarnation whose
    /// fences here are `fence` (the route it stored).
    fn disconnect_record(&self, fence: &CallFence, b: &RegisteredBinding) -> BoundSessionBind {
        BoundSessionBind {
            actor: fence.actor_id.clone(),
            object_generation: fence.object_generation,
            target_node_generation: fence.node_generation,
            authority_owner_generation: fence.authority_owner_generation,
            owner_lease_generation: fence.owner_lease_generation,
            session_lifecycle: b.lifecycle,
            session_owner: b.owner_id,
            session_owner_lease_generation: b.owner_lease,
            session: b.session,
            binding_generation: b.generation,
            operation: BindOperation::Disconnect,
            deadline: Deadline::from_remaining(self.inner.request_timeout),
        }
    }

    /// The session owners (other nodes) of the bindings held here, each lifecycle once.
    fn binding_owners(&self) -> Vec<(NodeRid, NodeGeneration)> {
        let me = self.node_rid();
        let mut owners: Vec<(NodeRid, NodeGeneration)> = lock(&self.inner.actors)
            .live
            .values()
            .filter_map(|a| a.binding.current())
            .filter(|b| b.session_owner != *me)
            .map(|b| {
                (
                    b.session_owner.clone(),
                    NodeGeneration::new(b.lifecycle.get()),
                )
            })
            .collect();
        owners.sort_by(|a, b| (a.0.as_str(), a.1.get()).cmp(&(b.0.as_str(), b.1.get())));
        owners.dedup();
        owners
    }
}

/// The driver of [`OwnerWatch`]: the mesh's peer events in, [`Node::end_bindings_of`] out. Holds
/// the node weakly; ends with the event stream or the node.
pub(crate) async fn watch(
    node: Weak<Inner>,
    mut events: broadcast::Receiver<PeerEvent>,
    grace: Duration,
) {
    let mut core = OwnerWatch::new(grace);
    loop {
        let due = core.poll_timeout();
        let event = tokio::select! {
            e = events.recv() => Some(e),
            () = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => None,
        };
        let Some(inner) = node.upgrade() else {
            return;
        };
        let node_now = Node { inner };
        let now = Instant::now();
        let gone: Vec<Gone> = match event {
            Some(Ok(PeerEvent::Down {
                node,
                generation,
                reason,
            })) => core
                .handle_down(now, &node, generation, reason)
                .into_iter()
                .collect(),
            Some(Ok(PeerEvent::Up { node, generation })) => vec![core.handle_up(&node, generation)],
            Some(Ok(_)) => Vec::new(),
            Some(Err(broadcast::error::RecvError::Lagged(missed))) => {
                tracing::debug!(missed, "peer events lagged: checking every session owner");
                for (owner, generation) in node_now.binding_owners() {
                    core.suspect(now, &owner, generation);
                }
                Vec::new()
            }
            Some(Err(broadcast::error::RecvError::Closed)) => return,
            None => {
                let mesh = &node_now.inner.mesh;
                core.handle_timeout(now, |n| mesh.peer_generation(n))
            }
        };
        for g in &gone {
            node_now.end_bindings_of(g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rid(s: &str) -> NodeRid {
        NodeRid::new(s).unwrap()
    }

    fn g(n: u64) -> NodeGeneration {
        NodeGeneration::new(n)
    }

    #[test]
    fn a_timeout_a_goodbye_and_a_restart_end_the_lifecycle_at_once() {
        let now = Instant::now();
        let mut w = OwnerWatch::new(Duration::from_secs(3));
        for reason in [
            DownReason::Timeout,
            DownReason::Remote,
            DownReason::Restarted,
        ] {
            assert_eq!(
                w.handle_down(now, &rid("a"), g(7), reason),
                Some(Gone {
                    node: rid("a"),
                    ended: Ended::Exactly(g(7)),
                })
            );
        }
        assert_eq!(w.poll_timeout(), None);
    }

    #[test]
    fn a_lost_connection_ends_the_lifecycle_only_if_it_is_not_back_within_the_grace() {
        let now = Instant::now();
        let grace = Duration::from_secs(3);
        let mut w = OwnerWatch::new(grace);
        assert_eq!(
            w.handle_down(now, &rid("a"), g(7), DownReason::Disconnected),
            None
        );
        assert_eq!(
            w.handle_down(now, &rid("a"), g(7), DownReason::Reconnected),
            None
        );
        assert_eq!(w.poll_timeout(), Some(now + grace));
        // Not due yet.
        assert!(w.handle_timeout(now, |_| None).is_empty());
        // Due, and the same lifecycle is up again: nothing ends.
        assert!(w.handle_timeout(now + grace, |_| Some(g(7))).is_empty());
        assert_eq!(w.poll_timeout(), None);
        // Down again, not back by then: gone.
        let _ = w.handle_down(now, &rid("a"), g(7), DownReason::Disconnected);
        assert_eq!(
            w.handle_timeout(now + grace, |_| None),
            vec![Gone {
                node: rid("a"),
                ended: Ended::Exactly(g(7)),
            }]
        );
    }

    #[test]
    fn an_up_with_a_newer_generation_ends_the_older_ones_and_clears_their_checks() {
        let now = Instant::now();
        let mut w = OwnerWatch::new(Duration::from_secs(3));
        let _ = w.handle_down(now, &rid("a"), g(7), DownReason::Disconnected);
        let _ = w.handle_down(now, &rid("b"), g(1), DownReason::Disconnected);
        let gone = w.handle_up(&rid("a"), g(9));
        assert_eq!(gone.ended, Ended::Before(g(9)));
        assert!(gone.ended.covers(SessionLifecycleGeneration::new(7)));
        assert!(!gone.ended.covers(SessionLifecycleGeneration::new(9)));
        // Only b's check is left.
        assert_eq!(w.pending.len(), 1);
        assert_eq!(w.pending[0].node, rid("b"));
    }
}
