//! The owner lease of this process on its own clock (SB-5.11, EG-14 fencing).
//!
//! [`LeaseState`] is the sans-IO state machine: it is told when a renewal (or registration) was
//! *sent* and what the store answered, and derives the **local lease deadline** on the node's
//! monotonic clock: `sent + TTL − margin` ([`crate::store::lease_margin`]) of the last renewal that
//! succeeded. The store computed its own expiry as (its time at commit) + TTL, which is never
//! earlier than the send time, so the local deadline passes before the store lease can expire
//! as long as the two clocks advance at rates within the margin of each other. Past the local
//! deadline the node serves nothing for its actors ([`crate::actor::fence::OwnerGate`]); a
//! renewal of the same lease that succeeds restores service; `LeaseNotLive` ends every local
//! incarnation and registers a new lease. A store outage never extends the deadline: only a
//! successful renewal does.
//!
//! The renewal task (`Node::spawn_lease_renewal`) is the thin driver: it sleeps on the injected
//! clock until [`LeaseState::next_renewal`], calls the store, feeds the answer back and
//! publishes the deadline to the gate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::local::LocalActor;
use super::{Node, lock};
use crate::actor::exec::EndReason;
use crate::store::{LeaseHolder, OwnerLease, StoreError, lease_margin, renewal_period};

/// After a failed renewal the next attempt follows after a tenth of the TTL.
#[must_use]
fn retry_period(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(1))
}

/// What the renewal driver does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseStep {
    /// Renew this lease.
    Renew(LeaseHolder),
    /// The lease was lost: register a new one.
    Register,
}

/// The owner lease and its local deadline (sans-IO; every input carries its `now`).
#[derive(Debug)]
pub struct LeaseState {
    lease: OwnerLease,
    ttl: Duration,
    deadline: Instant,
    next: Instant,
    /// When the renewal or registration in flight was sent.
    sent: Option<Instant>,
    lost: bool,
}

impl LeaseState {
    /// The lease just registered by a call sent at `sent`.
    pub fn new(lease: OwnerLease, ttl: Duration, sent: Instant) -> Self {
        Self {
            lease,
            ttl,
            deadline: Self::deadline_of(ttl, sent),
            next: sent + renewal_period(ttl),
            sent: None,
            lost: false,
        }
    }

    fn deadline_of(ttl: Duration, sent: Instant) -> Instant {
        sent + ttl.saturating_sub(lease_margin(ttl))
    }

    /// The current lease.
    pub fn lease(&self) -> &OwnerLease {
        &self.lease
    }

    /// Whether `holder` is this node's lease and not lost: what opens under it may serve.
    pub fn holds(&self, holder: &LeaseHolder) -> bool {
        !self.lost && self.lease.holder == *holder
    }

    /// The local lease deadline: past it the node acts as no owner.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// When the driver sends the next renewal (or registration).
    pub fn next_renewal(&self) -> Instant {
        self.next
    }

    /// The renewal timer fired at `now`: the call the driver sends now.
    pub fn handle_timer(&mut self, now: Instant) -> LeaseStep {
        self.sent = Some(now);
        if self.lost {
            LeaseStep::Register
        } else {
            LeaseStep::Renew(self.lease.holder.clone())
        }
    }

    /// The store renewed `lease`. Only the lease this state holds is extended, from the send
    /// time of the renewal.
    pub fn handle_renewed(&mut self, lease: OwnerLease) {
        if self.lost || lease.holder != self.lease.holder {
            return;
        }
        let sent = self.sent.take();
        if let Some(sent) = sent {
            self.deadline = self.deadline.max(Self::deadline_of(self.ttl, sent));
            self.next = sent + renewal_period(self.ttl);
        }
        self.lease = lease;
    }

    /// A new lease was registered after a loss.
    pub fn handle_registered(&mut self, lease: OwnerLease) {
        let sent = self.sent.take();
        self.lost = false;
        self.lease = lease;
        if let Some(sent) = sent {
            self.deadline = Self::deadline_of(self.ttl, sent);
            self.next = sent + renewal_period(self.ttl);
        }
    }

    /// The renewal (or registration) failed at `now`. `not_live`: the store says the lease
    /// ended (expired, released or superseded). Returns `true` when the lease was lost by this
    /// failure, so every local incarnation must end (and a new lease is registered at once).
    /// The deadline never moves forward here; other failures are retried after a tenth of the
    /// TTL.
    pub fn handle_failed(&mut self, now: Instant, not_live: bool) -> bool {
        self.sent = None;
        self.next = now + retry_period(self.ttl);
        if not_live && !self.lost {
            // Register a new lease at once.
            self.lost = true;
            self.next = now;
            self.deadline = self.deadline.min(now);
            return true;
        }
        false
    }
}

impl Node {
    /// Spawns the owner lease driver: renewals on the injected clock (see the module docs).
    pub(super) fn spawn_lease_renewal(&self) -> JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        let gate = self.inner.gate.clone();
        let ttl = self.inner.lease_ttl;
        tokio::spawn(async move {
            loop {
                let next = {
                    let Some(inner) = weak.upgrade() else { return };
                    lock(&inner.lease).next_renewal()
                };
                gate.clock().sleep_until(next).await;
                let Some(inner) = weak.upgrade() else { return };
                let step = lock(&inner.lease).handle_timer(gate.clock().now());
                let node = Node { inner };
                match step {
                    LeaseStep::Renew(holder) => {
                        match node.inner.store.renew_owner(holder, ttl).await {
                            Ok(l) => lock(&node.inner.lease).handle_renewed(l),
                            Err(e) => {
                                let not_live = matches!(e, StoreError::LeaseNotLive { .. });
                                let lost = lock(&node.inner.lease)
                                    .handle_failed(gate.clock().now(), not_live);
                                tracing::error!(
                                    error = %e,
                                    left_ms = gate.remaining().as_millis(),
                                    "owner lease renewal failed"
                                );
                                if lost {
                                    gate.set_deadline(lock(&node.inner.lease).deadline());
                                    node.end_every_incarnation();
                                }
                            }
                        }
                    }
                    LeaseStep::Register => {
                        let registered = node
                            .inner
                            .store
                            .register_owner(node.node_rid().clone(), node.generation(), ttl)
                            .await;
                        match registered {
                            Ok(l) => {
                                tracing::warn!(lease = %l.holder.lease_generation, "new owner lease registered");
                                lock(&node.inner.lease).handle_registered(l);
                            }
                            Err(e) => {
                                lock(&node.inner.lease).handle_failed(gate.clock().now(), false);
                                tracing::error!(error = %e, "registering a new owner lease failed");
                            }
                        }
                    }
                }
                gate.set_deadline(lock(&node.inner.lease).deadline());
            }
        })
    }

    /// The owner lease ended (expired or superseded) before it was renewed: other nodes may
    /// already own this node's actors. The lease fences the runtime (EG-14): every local
    /// incarnation ends at once (later calls with their refs are `Unavailable`); the driver
    /// then registers a new lease — a new OwnerLeaseGeneration — for future activations.
    fn end_every_incarnation(&self) {
        let ended: Vec<LocalActor> = lock(&self.inner.actors)
            .live
            .drain()
            .map(|(_, a)| a)
            .collect();
        tracing::error!(
            actors = ended.len(),
            "owner lease lost: ending every local actor"
        );
        for mut a in ended {
            a.end(EndReason::Fenced);
            self.leave_spot(&a.spot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NodeGeneration, NodeRid, OwnerLeaseGeneration, StoreTime};

    const TTL: Duration = Duration::from_secs(3);

    fn lease(generation: u64) -> OwnerLease {
        OwnerLease {
            holder: LeaseHolder {
                node: NodeRid::new("n").unwrap(),
                node_generation: NodeGeneration::new(1),
                lease_generation: OwnerLeaseGeneration::new(generation),
            },
            expires_at: StoreTime::from_millis(0),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    // spec: SB-5.11 — a node's lease deadlines are on the boot clock unless a test injects
    // another (docs/STORE.md, "The owner lease across a suspend").
    #[test]
    fn the_default_lease_clock_counts_suspended_time() {
        let mesh = zlink_mesh::MeshConfig::new(
            zlink_wire::MeshName::new("m").unwrap(),
            NodeRid::new("n").unwrap(),
        );
        let options = crate::node::NodeOptions::new(
            mesh,
            std::sync::Arc::new(crate::store::MemoryStore::new()),
            crate::actor::ActorRegistry::default(),
        );
        assert_eq!(format!("{:?}", options.lease_clock), "BootClock");
    }

    // spec: SB-5.11 — a store outage never extends the owner lease: the deadline moves only
    // with a successful renewal, from the time it was sent.
    #[test]
    fn the_deadline_counts_from_the_send_time_of_the_last_successful_renewal() {
        let t0 = Instant::now();
        let mut s = LeaseState::new(lease(1), TTL, t0);
        assert_eq!(s.deadline(), t0 + ms(2_700));
        assert_eq!(s.next_renewal(), t0 + ms(1_000));
        // A renewal sent at 1 s that answers at 2.5 s counts from 1 s.
        assert_eq!(
            s.handle_timer(t0 + ms(1_000)),
            LeaseStep::Renew(lease(1).holder)
        );
        s.handle_renewed(lease(1));
        assert_eq!(s.deadline(), t0 + ms(3_700));
        assert_eq!(s.next_renewal(), t0 + ms(2_000));
        // Outage: failures never move the deadline.
        s.handle_timer(t0 + ms(2_000));
        assert!(!s.handle_failed(t0 + ms(2_100), false));
        assert_eq!(s.deadline(), t0 + ms(3_700));
        assert_eq!(s.next_renewal(), t0 + ms(2_400));
        s.handle_timer(t0 + ms(2_400));
        s.handle_failed(t0 + ms(6_000), false);
        assert_eq!(s.deadline(), t0 + ms(3_700));
        // Recovery: the same lease renewed restores a deadline in the future.
        s.handle_timer(t0 + ms(6_300));
        s.handle_renewed(lease(1));
        assert_eq!(s.deadline(), t0 + ms(9_000));
    }

    // spec: EG-14 — a lost lease ends the incarnations; a renewal answer for another lease
    // never extends the deadline.
    #[test]
    fn a_lost_lease_lapses_at_once_and_is_registered_again() {
        let t0 = Instant::now();
        let mut s = LeaseState::new(lease(1), TTL, t0);
        s.handle_timer(t0 + ms(1_000));
        assert!(s.handle_failed(t0 + ms(1_100), true));
        assert_eq!(s.deadline(), t0 + ms(1_100));
        assert_eq!(s.handle_timer(t0 + ms(1_400)), LeaseStep::Register);
        s.handle_renewed(lease(1));
        assert_eq!(
            s.deadline(),
            t0 + ms(1_100),
            "a stale answer extends nothing"
        );
        s.handle_registered(lease(2));
        assert_eq!(s.lease().holder.lease_generation.get(), 2);
        assert_eq!(s.deadline(), t0 + ms(1_400) + ms(2_700));
        s.handle_timer(t0 + ms(2_400));
        s.handle_renewed(lease(1));
        assert_eq!(
            s.deadline(),
            t0 + ms(4_100),
            "another lease's renewal is ignored"
        );
    }
}
