//! Owner-side validation of a call against the actor's current fences (sans-IO; SB-12, EG-14).
//!
//! Order of checks (the first failing one decides):
//! 1. the target NodeGeneration is this process' generation, else `Unavailable` (a ref from
//!    before a restart);
//! 2. the actor lives here; else `NotFound` if this node destroyed exactly that incarnation, or
//!    `Unavailable` (stale location, no Message Follow route);
//! 3. the ObjectGeneration is the current incarnation, else `InvalidOperation`;
//! 4. the AuthorityOwnerGeneration and OwnerLeaseGeneration equal the owner's, else
//!    `Unavailable` — never redirected.

use zlink_wire::{
    ActorCall, ActorId, AuthorityOwnerGeneration, NodeGeneration, ObjectGeneration,
    OwnerLeaseGeneration,
};

use super::error::ActorError;
use super::reference::ActorRef;

/// The fences a call presents (from the caller's [`ActorRef`]) or an owner holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallFence {
    /// Target actor.
    pub actor_id: ActorId,
    /// Incarnation.
    pub object_generation: ObjectGeneration,
    /// Owner authority.
    pub authority_owner_generation: AuthorityOwnerGeneration,
    /// Owner lease.
    pub owner_lease_generation: OwnerLeaseGeneration,
    /// The owner process' generation.
    pub node_generation: NodeGeneration,
}

impl CallFence {
    /// The fences of a ref.
    #[must_use]
    pub fn of_ref(r: &ActorRef) -> Self {
        Self {
            actor_id: r.id().clone(),
            object_generation: r.object_generation(),
            authority_owner_generation: r.location().authority_owner_generation,
            owner_lease_generation: r.location().owner_lease_generation,
            node_generation: r.location().node_generation,
        }
    }

    /// The fences carried by a 160 record.
    #[must_use]
    pub fn of_call(c: &ActorCall) -> Self {
        Self {
            actor_id: c.actor.clone(),
            object_generation: c.object_generation,
            authority_owner_generation: c.authority_owner_generation,
            owner_lease_generation: c.owner_lease_generation,
            node_generation: c.target_node_generation,
        }
    }
}

/// Validates `call` on the owner node of generation `node_generation`, whose current local
/// incarnation of the actor has fences `current` (if any) and which last destroyed incarnation
/// `retired` of it (if any).
///
/// # Errors
/// The [`ActorError`] of the first failing check (see the module docs).
pub fn check_call(
    node_generation: NodeGeneration,
    current: Option<&CallFence>,
    retired: Option<ObjectGeneration>,
    call: &CallFence,
) -> Result<(), ActorError> {
    let stale = |fence| ActorError::StaleFence {
        actor_id: call.actor_id.clone(),
        fence,
    };
    if call.node_generation != node_generation {
        return Err(stale("node generation"));
    }
    let Some(cur) = current else {
        return Err(if retired == Some(call.object_generation) {
            ActorError::ActorNotFound {
                actor_id: call.actor_id.clone(),
            }
        } else {
            stale("location")
        });
    };
    if cur.object_generation != call.object_generation {
        return Err(ActorError::GenerationMismatch {
            actor_id: call.actor_id.clone(),
            expected: call.object_generation,
            actual: cur.object_generation,
        });
    }
    if cur.authority_owner_generation != call.authority_owner_generation {
        return Err(stale("authority"));
    }
    if cur.owner_lease_generation != call.owner_lease_generation {
        return Err(stale("lease"));
    }
    Ok(())
}

/// The actor owner's bind approval (SB-5.2): ObjectGeneration, target NodeGeneration and
/// AuthorityOwnerGeneration only — never the lease. A caller's lease copy differing from the
/// owner's current lease never rejects a bind (it is checked by route-fence validation, SB-5.11).
///
/// # Errors
/// As [`check_call`] for the three values.
pub fn check_bind(
    node_generation: NodeGeneration,
    current: Option<&CallFence>,
    retired: Option<ObjectGeneration>,
    bind: &CallFence,
) -> Result<(), ActorError> {
    let mut b = bind.clone();
    if let Some(cur) = current {
        b.owner_lease_generation = cur.owner_lease_generation;
    }
    check_call(node_generation, current, retired, &b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlink_wire::ErrorKind;

    fn fence(obj: u64, auth: u64, lease: u64, node: u64) -> CallFence {
        CallFence {
            actor_id: ActorId::new("a").unwrap(),
            object_generation: ObjectGeneration::new(obj),
            authority_owner_generation: AuthorityOwnerGeneration::new(auth),
            owner_lease_generation: OwnerLeaseGeneration::new(lease),
            node_generation: NodeGeneration::new(node),
        }
    }

    fn kind(r: Result<(), ActorError>) -> Option<ErrorKind> {
        r.err().map(|e| e.kind())
    }

    // spec: SB-12 (each row of the failure table that the owner decides)
    #[test]
    fn owner_checks_follow_the_failure_table() {
        let node = NodeGeneration::new(7);
        let cur = fence(2, 3, 4, 7);
        assert_eq!(kind(check_call(node, Some(&cur), None, &cur)), None);
        // A ref from before a restart: stale node fence.
        assert_eq!(
            kind(check_call(node, Some(&cur), None, &fence(2, 3, 4, 6))),
            Some(ErrorKind::Unavailable)
        );
        // Another incarnation.
        assert_eq!(
            kind(check_call(node, Some(&cur), None, &fence(1, 3, 4, 7))),
            Some(ErrorKind::InvalidOperation)
        );
        // Stale authority or lease: Unavailable, never redirected.
        assert_eq!(
            kind(check_call(node, Some(&cur), None, &fence(2, 2, 4, 7))),
            Some(ErrorKind::Unavailable)
        );
        assert_eq!(
            kind(check_call(node, Some(&cur), None, &fence(2, 3, 5, 7))),
            Some(ErrorKind::Unavailable)
        );
        // Not here: stale location, or destroyed here.
        assert_eq!(
            kind(check_call(node, None, None, &cur)),
            Some(ErrorKind::Unavailable)
        );
        assert_eq!(
            kind(check_call(node, None, Some(ObjectGeneration::new(2)), &cur)),
            Some(ErrorKind::NotFound)
        );
    }

    // spec: SB-5.2
    #[test]
    fn bind_approval_ignores_the_lease() {
        let node = NodeGeneration::new(7);
        let cur = fence(2, 3, 4, 7);
        assert_eq!(
            kind(check_bind(node, Some(&cur), None, &fence(2, 3, 99, 7))),
            None
        );
        assert_eq!(
            kind(check_bind(node, Some(&cur), None, &fence(1, 3, 4, 7))),
            Some(ErrorKind::InvalidOperation)
        );
        assert_eq!(
            kind(check_bind(node, Some(&cur), None, &fence(2, 9, 4, 7))),
            Some(ErrorKind::Unavailable)
        );
        assert_eq!(
            kind(check_bind(node, Some(&cur), None, &fence(2, 3, 4, 6))),
            Some(ErrorKind::Unavailable)
        );
    }
}
