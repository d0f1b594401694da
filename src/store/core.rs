//! The decision rules of the Location Store, free of I/O (sans-IO core).
//!
//! Every backend loads the rows an operation touches, calls one function here with them and the
//! store time, and writes back what it returns — all inside its own atomic section. Because all
//! backends share these functions, they cannot disagree on a rule; the contract suite
//! (`contract.rs`) checks the atomic sections around them.
//!
//! Invariants enforced here:
//! - per ActorId, `ObjectGeneration`, `AuthorityOwnerGeneration` and `StoreVersion` only grow,
//!   across destroy + re-create ([`ActorCounters`] survive the record);
//! - a lease is live iff it is the node's current lease row and `now < expires_at`;
//! - only a live lease can become or stay an owner through a write, and every owner-side write
//!   (`mark_ready`, `destroy`) is fenced by the authority and lease the record names: a stale
//!   owner's write is refused, whatever the backend.

use std::time::Duration;

use super::error::StoreError;
use super::time::StoreTime;
use super::types::{
    ActivationRequest, ActivationState, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder,
    OwnerFence, OwnerLease, StoreVersion,
};
use super::{
    ActorId, AuthorityOwnerGeneration, NodeGeneration, NodeRid, ObjectGeneration,
    OwnerLeaseGeneration,
};

/// Per-ActorId counters; they outlive the actor record (SB-4.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ActorCounters {
    /// Last `ObjectGeneration` handed out.
    pub object_generation: u64,
    /// Last `AuthorityOwnerGeneration` handed out.
    pub authority: u64,
    /// Last record version written.
    pub version: u64,
}

fn bump(value: u64, what: &'static str) -> Result<u64, StoreError> {
    value.checked_add(1).ok_or(StoreError::Exhausted { what })
}

/// Whether `holder` is the live lease of its node, given that node's lease row.
pub(crate) fn lease_is_live(
    row: Option<&OwnerLease>,
    holder: &LeaseHolder,
    now: StoreTime,
) -> bool {
    row.is_some_and(|l| l.holder == *holder && l.is_live_at(now))
}

fn require_live(
    row: Option<&OwnerLease>,
    holder: &LeaseHolder,
    now: StoreTime,
) -> Result<(), StoreError> {
    if lease_is_live(row, holder, now) {
        Ok(())
    } else {
        Err(StoreError::LeaseNotLive {
            node: holder.node.clone(),
            lease_generation: holder.lease_generation,
        })
    }
}

/// Result of [`register`]: the lease row to write and the new value of the global lease
/// generation counter.
#[derive(Debug)]
pub(crate) struct Registered {
    pub lease: OwnerLease,
    pub last_lease_generation: u64,
}

/// `register_owner`.
pub(crate) fn register(
    row: Option<&OwnerLease>,
    node: NodeRid,
    node_generation: NodeGeneration,
    ttl: Duration,
    now: StoreTime,
    last_lease_generation: u64,
) -> Result<Registered, StoreError> {
    let expires_at = now.saturating_add(ttl);
    if let Some(current) = row {
        let registered = current.holder.node_generation;
        if registered > node_generation {
            return Err(StoreError::StaleNodeGeneration {
                node,
                registered,
                offered: node_generation,
            });
        }
        if registered == node_generation && current.is_live_at(now) {
            // Idempotent: the same process registering again keeps its lease lifecycle.
            return Ok(Registered {
                lease: OwnerLease {
                    holder: current.holder.clone(),
                    expires_at: expires_at.max(current.expires_at),
                },
                last_lease_generation,
            });
        }
    }
    let next = bump(last_lease_generation, "owner lease generation")?;
    Ok(Registered {
        lease: OwnerLease {
            holder: LeaseHolder {
                node,
                node_generation,
                lease_generation: OwnerLeaseGeneration::new(next),
            },
            expires_at,
        },
        last_lease_generation: next,
    })
}

/// `renew_owner`: the updated row.
pub(crate) fn renew(
    row: Option<&OwnerLease>,
    holder: &LeaseHolder,
    ttl: Duration,
    now: StoreTime,
) -> Result<OwnerLease, StoreError> {
    require_live(row, holder, now)?;
    let current = row.map_or(now, |l| l.expires_at);
    Ok(OwnerLease {
        holder: holder.clone(),
        expires_at: now.saturating_add(ttl).max(current),
    })
}

/// `release_owner`: the row to write, or `None` when nothing changes.
pub(crate) fn release(
    row: Option<&OwnerLease>,
    holder: &LeaseHolder,
    now: StoreTime,
) -> Option<OwnerLease> {
    if lease_is_live(row, holder, now) {
        Some(OwnerLease {
            holder: holder.clone(),
            expires_at: now,
        })
    } else {
        None
    }
}

/// What a backend writes for an actor: the record and the counters.
#[derive(Debug)]
pub(crate) struct ActorWrite {
    pub location: ActorLocation,
    pub counters: ActorCounters,
}

/// Decision of [`reserve`].
#[derive(Debug)]
pub(crate) enum ReserveDecision {
    /// Nothing to write; a live owner holds the record.
    Held(ActorLocation),
    /// Write this record: the candidate won.
    Won(ActorWrite),
}

/// `reserve_activation`. `candidate_lease` is the lease row of the candidate's node,
/// `owner_lease` the lease row of the recorded owner's node (if a record exists).
pub(crate) fn reserve(
    record: Option<&ActorLocation>,
    counters: ActorCounters,
    candidate_lease: Option<&OwnerLease>,
    owner_lease: Option<&OwnerLease>,
    request: &ActivationRequest,
    now: StoreTime,
) -> Result<ReserveDecision, StoreError> {
    require_live(candidate_lease, &request.owner.holder, now)?;
    let object_generation = match record {
        Some(current) => {
            if current.actor_type != request.actor_type {
                return Err(StoreError::ActorTypeMismatch {
                    actor_id: request.actor_id.clone(),
                    stored: current.actor_type.clone(),
                    requested: request.actor_type.clone(),
                });
            }
            if lease_is_live(owner_lease, &current.holder(), now) {
                return Ok(ReserveDecision::Held(current.clone()));
            }
            // The owner's lease ended: take over the same incarnation (failover keeps the
            // ObjectGeneration; only destroy + re-create makes a new one).
            current.object_generation.get()
        }
        None => bump(counters.object_generation, "object generation")?,
    };
    let next = ActorCounters {
        object_generation: counters.object_generation.max(object_generation),
        authority: bump(counters.authority, "authority owner generation")?,
        version: bump(counters.version, "record version")?,
    };
    Ok(ReserveDecision::Won(ActorWrite {
        location: located(
            request.actor_id.clone(),
            request.actor_type.clone(),
            ObjectGeneration::new(object_generation),
            &request.owner,
            next,
            ActivationState::Activating,
        ),
        counters: next,
    }))
}

fn located(
    actor_id: ActorId,
    actor_type: String,
    object_generation: ObjectGeneration,
    owner: &ActorOwner,
    counters: ActorCounters,
    state: ActivationState,
) -> ActorLocation {
    ActorLocation {
        actor_id,
        actor_type,
        object_generation,
        mesh: owner.mesh.clone(),
        owner_node: owner.holder.node.clone(),
        node_generation: owner.holder.node_generation,
        authority_owner_generation: AuthorityOwnerGeneration::new(counters.authority),
        owner_lease_generation: owner.holder.lease_generation,
        state,
        version: StoreVersion::new(counters.version),
    }
}

fn existing<'a>(
    record: Option<&'a ActorLocation>,
    actor_id: &ActorId,
    object_generation: ObjectGeneration,
) -> Result<&'a ActorLocation, StoreError> {
    let current = record.ok_or_else(|| StoreError::NotFound {
        actor_id: actor_id.clone(),
    })?;
    if current.object_generation != object_generation {
        return Err(StoreError::GenerationMismatch {
            actor_id: actor_id.clone(),
            expected: object_generation,
            actual: current.object_generation,
        });
    }
    Ok(current)
}

/// The record of `actor_id` at exactly `expected` (incarnation, AuthorityOwnerGeneration,
/// version) and Ready: what `cas_owner` and `relocation_fence` act on.
fn ready_at<'a>(
    record: Option<&'a ActorLocation>,
    actor_id: &ActorId,
    expected: AuthorityFence,
) -> Result<&'a ActorLocation, StoreError> {
    let current = existing(record, actor_id, expected.object_generation)?;
    if current.fence() != expected {
        return Err(fence_mismatch(actor_id, expected, current));
    }
    if current.state != ActivationState::Ready {
        return Err(StoreError::InvalidState {
            actor_id: actor_id.clone(),
            state: current.state,
        });
    }
    Ok(current)
}

/// `current` names exactly the owner authority `presented` (incarnation,
/// AuthorityOwnerGeneration, owner lease), else `OwnerMismatch`.
fn owned_by(
    current: &ActorLocation,
    actor_id: &ActorId,
    presented: &OwnerFence,
) -> Result<(), StoreError> {
    let stored = current.owner_fence();
    if stored != *presented {
        return Err(StoreError::OwnerMismatch {
            actor_id: actor_id.clone(),
            presented: Box::new(presented.clone()),
            stored: Box::new(stored),
        });
    }
    Ok(())
}

fn fence_mismatch(
    actor_id: &ActorId,
    expected: AuthorityFence,
    current: &ActorLocation,
) -> StoreError {
    StoreError::FenceMismatch {
        actor_id: actor_id.clone(),
        expected,
        actual: current.fence(),
    }
}

/// `mark_ready`: `Ok(None)` when the record is already `Ready` under the same authority
/// (idempotent repeat), `Ok(Some(write))` otherwise. `owner_lease` is the lease row of the
/// recorded owner's node.
pub(crate) fn mark_ready(
    record: Option<&ActorLocation>,
    counters: ActorCounters,
    owner_lease: Option<&OwnerLease>,
    actor_id: &ActorId,
    fence: AuthorityFence,
    now: StoreTime,
) -> Result<Option<ActorWrite>, StoreError> {
    let current = existing(record, actor_id, fence.object_generation)?;
    if current.authority_owner_generation != fence.authority_owner_generation {
        return Err(fence_mismatch(actor_id, fence, current));
    }
    if current.state == ActivationState::Ready {
        return Ok(None);
    }
    if current.version != fence.version {
        return Err(fence_mismatch(actor_id, fence, current));
    }
    require_live(owner_lease, &current.holder(), now)?;
    let next = ActorCounters {
        version: bump(counters.version, "record version")?,
        ..counters
    };
    let mut location = current.clone();
    location.state = ActivationState::Ready;
    location.version = StoreVersion::new(next.version);
    Ok(Some(ActorWrite {
        location,
        counters: next,
    }))
}

/// `cas_owner`. `new_owner_lease` is the lease row of the new owner's node.
pub(crate) fn cas_owner(
    record: Option<&ActorLocation>,
    counters: ActorCounters,
    new_owner_lease: Option<&OwnerLease>,
    actor_id: &ActorId,
    expected: AuthorityFence,
    new_owner: &ActorOwner,
    now: StoreTime,
) -> Result<ActorWrite, StoreError> {
    let current = ready_at(record, actor_id, expected)?;
    require_live(new_owner_lease, &new_owner.holder, now)?;
    let next = ActorCounters {
        object_generation: counters.object_generation,
        authority: bump(counters.authority, "authority owner generation")?,
        version: bump(counters.version, "record version")?,
    };
    Ok(ActorWrite {
        location: located(
            current.actor_id.clone(),
            current.actor_type.clone(),
            current.object_generation,
            new_owner,
            next,
            ActivationState::Ready,
        ),
        counters: next,
    })
}

/// `relocation_fence`: moves the record's version forward, nothing else (no owner change: the
/// ObjectGeneration, AuthorityOwnerGeneration and owner lease stay, so bound routes stay valid).
/// The owner takes a relocation fence with it before a hand-off (the fence the target's
/// `cas_owner` must present) and retires it the same way for a durable abort (SB-8.5): after the
/// retirement no `cas_owner` with the old fence can succeed. Fenced by both the exact record
/// fence `expected` and the full owner authority `owner` (whose lease must be live), so only the
/// current owner moves it, and two relocations of one actor cannot both hold a fence.
pub(crate) fn relocation_fence(
    record: Option<&ActorLocation>,
    counters: ActorCounters,
    owner_lease: Option<&OwnerLease>,
    actor_id: &ActorId,
    expected: AuthorityFence,
    owner: &OwnerFence,
    now: StoreTime,
) -> Result<ActorWrite, StoreError> {
    let current = ready_at(record, actor_id, expected)?;
    owned_by(current, actor_id, owner)?;
    require_live(owner_lease, &owner.holder, now)?;
    let next = ActorCounters {
        version: bump(counters.version, "record version")?,
        ..counters
    };
    let mut location = current.clone();
    location.version = StoreVersion::new(next.version);
    Ok(ActorWrite {
        location,
        counters: next,
    })
}

/// `reincarnate`: the owner replaces the incarnation of its record (`Ready`, or `Activating`
/// when an earlier replacement was not committed) with a new one of its own in one write — a
/// new `ObjectGeneration` (SB-4.1), a new AuthorityOwnerGeneration and version, `Activating`
/// (committed with `mark_ready`). Fenced as [`destroy`] (the incarnation,
/// authority and owner lease the record names, that lease live). The record never disappears,
/// so no other node can reserve the actor meanwhile, and every fence of the old incarnation
/// (a relocation target's `cas_owner` among them) is refused afterwards.
pub(crate) fn reincarnate(
    record: Option<&ActorLocation>,
    counters: ActorCounters,
    owner_lease: Option<&OwnerLease>,
    actor_id: &ActorId,
    owner: &OwnerFence,
    now: StoreTime,
) -> Result<ActorWrite, StoreError> {
    let current = existing(record, actor_id, owner.object_generation)?;
    owned_by(current, actor_id, owner)?;
    require_live(owner_lease, &owner.holder, now)?;
    let object_generation = bump(
        counters
            .object_generation
            .max(current.object_generation.get()),
        "object generation",
    )?;
    let next = ActorCounters {
        object_generation,
        authority: bump(counters.authority, "authority owner generation")?,
        version: bump(counters.version, "record version")?,
    };
    Ok(ActorWrite {
        location: located(
            current.actor_id.clone(),
            current.actor_type.clone(),
            ObjectGeneration::new(object_generation),
            &ActorOwner {
                mesh: current.mesh.clone(),
                holder: owner.holder.clone(),
            },
            next,
            ActivationState::Activating,
        ),
        counters: next,
    })
}

/// `destroy`: `Ok(())` means "delete the record, keep the counters". Fenced by the full owner
/// authority: the incarnation, the AuthorityOwnerGeneration and the owner lease the record
/// names, which must be live (`owner_lease` is the lease row of `fence.holder`'s node). A stale
/// owner can therefore never remove a record another node took over.
pub(crate) fn destroy(
    record: Option<&ActorLocation>,
    owner_lease: Option<&OwnerLease>,
    actor_id: &ActorId,
    fence: &OwnerFence,
    now: StoreTime,
) -> Result<(), StoreError> {
    let current = existing(record, actor_id, fence.object_generation)?;
    owned_by(current, actor_id, fence)?;
    require_live(owner_lease, &fence.holder, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MeshName;

    fn holder(node: &str, generation: u64, lease: u64) -> LeaseHolder {
        LeaseHolder {
            node: NodeRid::new(node).unwrap(),
            node_generation: NodeGeneration::new(generation),
            lease_generation: OwnerLeaseGeneration::new(lease),
        }
    }

    fn t(ms: u64) -> StoreTime {
        StoreTime::from_millis(ms)
    }

    #[test]
    fn register_supersedes_older_generation_and_refuses_stale_one() {
        let ttl = Duration::from_secs(10);
        let first = register(
            None,
            NodeRid::new("n").unwrap(),
            NodeGeneration::new(5),
            ttl,
            t(0),
            0,
        )
        .unwrap();
        assert_eq!(first.lease.holder.lease_generation.get(), 1);
        let again = register(
            Some(&first.lease),
            NodeRid::new("n").unwrap(),
            NodeGeneration::new(5),
            ttl,
            t(1),
            first.last_lease_generation,
        )
        .unwrap();
        assert_eq!(
            again.lease.holder, first.lease.holder,
            "idempotent while live"
        );
        let restarted = register(
            Some(&first.lease),
            NodeRid::new("n").unwrap(),
            NodeGeneration::new(6),
            ttl,
            t(2),
            first.last_lease_generation,
        )
        .unwrap();
        assert_eq!(restarted.lease.holder.lease_generation.get(), 2);
        let stale = register(
            Some(&restarted.lease),
            NodeRid::new("n").unwrap(),
            NodeGeneration::new(5),
            ttl,
            t(3),
            restarted.last_lease_generation,
        );
        assert!(matches!(stale, Err(StoreError::StaleNodeGeneration { .. })));
    }

    #[test]
    fn lease_liveness_is_exclusive_of_expiry() {
        let lease = OwnerLease {
            holder: holder("n", 1, 1),
            expires_at: t(100),
        };
        assert!(lease_is_live(Some(&lease), &holder("n", 1, 1), t(99)));
        assert!(!lease_is_live(Some(&lease), &holder("n", 1, 1), t(100)));
        assert!(!lease_is_live(Some(&lease), &holder("n", 1, 2), t(0)));
        assert!(!lease_is_live(None, &holder("n", 1, 1), t(0)));
    }

    #[test]
    fn reserve_new_record_bumps_all_counters() {
        let lease = OwnerLease {
            holder: holder("n", 1, 1),
            expires_at: t(100),
        };
        let request = ActivationRequest {
            actor_id: ActorId::new("a").unwrap(),
            actor_type: "T".into(),
            owner: ActorOwner {
                mesh: MeshName::new("m").unwrap(),
                holder: lease.holder.clone(),
            },
        };
        let counters = ActorCounters {
            object_generation: 3,
            authority: 7,
            version: 9,
        };
        let ReserveDecision::Won(write) =
            reserve(None, counters, Some(&lease), None, &request, t(0)).unwrap()
        else {
            panic!("expected a win");
        };
        assert_eq!(write.location.object_generation.get(), 4);
        assert_eq!(write.location.authority_owner_generation.get(), 8);
        assert_eq!(write.location.version.get(), 10);
        assert_eq!(write.location.state, ActivationState::Activating);
    }

    #[test]
    fn counters_exhaust_instead_of_wrapping() {
        assert!(matches!(
            bump(u64::MAX, "x"),
            Err(StoreError::Exhausted { what: "x" })
        ));
    }
}
