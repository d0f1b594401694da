//! The actor owner's side of a binding (SB-5.2, SB-5.3, SB-5.6, SB-6.1, SB-6.6, SB-7.3): one
//! [`BindingSlot`] beside each local incarnation, read and written under the same lock as the
//! actor's submission path, so a binding is registered — including what the push path reads —
//! in one owning step before the 38 reply leaves. Plain data, no IO.

use zlink_wire::{
    BindingGeneration, BoundSessionBind, NodeRid, OwnerId, OwnerLeaseGeneration,
    SessionLifecycleGeneration, SessionRid,
};

use super::flow::FlowReject;

/// A binding identity as the actor owner registers it: the session owner (authenticated
/// sender), its lifecycle and host values, the session and the binding generation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RegisteredBinding {
    /// Session owner node (the transport-authenticated sender of the 38).
    pub session_owner: NodeRid,
    /// Session owner lifecycle generation.
    pub lifecycle: SessionLifecycleGeneration,
    /// Session owner host id.
    pub owner_id: OwnerId,
    /// Session owner's lease generation at bind.
    pub owner_lease: OwnerLeaseGeneration,
    /// The bound session.
    pub session: SessionRid,
    /// Binding generation (unique within one session owner lifecycle).
    pub generation: BindingGeneration,
}

impl RegisteredBinding {
    /// The identity a 38 from `sender` asks for.
    #[must_use]
    pub fn of_bind(sender: &NodeRid, req: &BoundSessionBind) -> Self {
        Self {
            session_owner: sender.clone(),
            lifecycle: req.session_lifecycle,
            owner_id: req.session_owner,
            owner_lease: req.session_owner_lease_generation,
            session: req.session,
            generation: req.binding_generation,
        }
    }

    /// Same binding identity: session owner, lifecycle and binding generation (SB-4).
    #[must_use]
    pub fn same_identity(
        &self,
        node: &NodeRid,
        lifecycle: SessionLifecycleGeneration,
        generation: BindingGeneration,
    ) -> bool {
        self.session_owner == *node && self.lifecycle == lifecycle && self.generation == generation
    }

    /// Same physical session (owner, lifecycle, SessionRid), whatever the binding generation.
    #[must_use]
    pub fn same_session(&self, other: &RegisteredBinding) -> bool {
        self.session_owner == other.session_owner
            && self.lifecycle == other.lifecycle
            && self.session == other.session
    }
}

/// What registering a bind did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotBind {
    /// The identity is now current. `replaced` is the previous binding of another session,
    /// which gets a 51 after the reply (SB-6.1); `None` when there was none or it was the same
    /// physical session (SB-6.7: no 51, no close).
    Registered {
        /// The binding that this one replaced, to notify with 51.
        replaced: Option<RegisteredBinding>,
    },
    /// The same identity was already current: idempotent success.
    Unchanged,
}

/// The binding state of one local incarnation: at most one current binding (SB-1.1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingSlot {
    current: Option<RegisteredBinding>,
    /// The current binding's disconnect notification has begun: its Spot callback runs (at
    /// most once, SB-7.3), and the tombstone follows the callback terminal (SB-7.4).
    notifying: bool,
}

impl BindingSlot {
    /// The current binding.
    #[must_use]
    pub fn current(&self) -> Option<&RegisteredBinding> {
        self.current.as_ref()
    }

    /// Registers `b` as the current binding (SB-5.2 after `check_bind`, SB-6.1): from this
    /// step on only `b` is current.
    pub fn bind(&mut self, b: RegisteredBinding) -> SlotBind {
        if self.current.as_ref() == Some(&b) {
            return SlotBind::Unchanged;
        }
        self.notifying = false;
        let previous = self.current.replace(b);
        let replaced = match (previous, self.current.as_ref()) {
            (Some(p), Some(now)) if !p.same_session(now) => Some(p),
            _ => None,
        };
        SlotBind::Registered { replaced }
    }

    /// The 38 tombstone transition (unbind, disconnect, SB-6.6): removes exactly this identity.
    /// Returns the removed binding; `None` when it was not current (already retired: a late or
    /// duplicate tombstone changes nothing, SB-7.3).
    pub fn tombstone(
        &mut self,
        node: &NodeRid,
        lifecycle: SessionLifecycleGeneration,
        generation: BindingGeneration,
    ) -> Option<RegisteredBinding> {
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.same_identity(node, lifecycle, generation))
        {
            self.notifying = false;
            self.current.take()
        } else {
            None
        }
    }

    /// Starts the disconnect notification of exactly this identity (SB-7.3, SB-7.4): `true`
    /// the first time (run the Spot callback, then [`BindingSlot::tombstone`]); `false` when
    /// the identity is not current or its notification already began. The binding stays
    /// current until the tombstone.
    pub fn begin_disconnect(
        &mut self,
        node: &NodeRid,
        lifecycle: SessionLifecycleGeneration,
        generation: BindingGeneration,
    ) -> bool {
        let current = self
            .current
            .as_ref()
            .is_some_and(|c| c.same_identity(node, lifecycle, generation));
        if current && !self.notifying {
            self.notifying = true;
            true
        } else {
            false
        }
    }

    /// Whether a 24 of this identity may enter the actor's queue (SB-5.3: retired generations
    /// are rejected here even if the 51 never arrived).
    ///
    /// # Errors
    /// [`FlowReject::BindingRetired`] when the identity is not the current binding.
    pub fn check_relay(
        &self,
        node: &NodeRid,
        lifecycle: SessionLifecycleGeneration,
        generation: BindingGeneration,
    ) -> Result<(), FlowReject> {
        match &self.current {
            Some(c) if c.same_identity(node, lifecycle, generation) => Ok(()),
            Some(c) if c.session_owner == *node && c.lifecycle != lifecycle => {
                Err(FlowReject::LifecycleMismatch)
            }
            _ => Err(FlowReject::BindingRetired),
        }
    }

    /// Ends every binding of the incarnation (destroy, lease loss: SB-4.1).
    pub fn clear(&mut self) -> Option<RegisteredBinding> {
        self.notifying = false;
        self.current.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(node: &str, lifecycle: u64, session: u64, generation: u64) -> RegisteredBinding {
        RegisteredBinding {
            session_owner: NodeRid::new(node).unwrap(),
            lifecycle: SessionLifecycleGeneration::new(lifecycle),
            owner_id: OwnerId::new(1),
            owner_lease: OwnerLeaseGeneration::new(1),
            session: SessionRid::new(session),
            generation: BindingGeneration::new(generation),
        }
    }

    // spec: SB-6.1
    // spec: SB-5.3
    #[test]
    fn a_new_session_replaces_and_the_old_generation_is_rejected() {
        let mut s = BindingSlot::default();
        assert_eq!(
            s.bind(b("a", 1, 1, 1)),
            SlotBind::Registered { replaced: None }
        );
        assert_eq!(
            s.bind(b("c", 1, 9, 4)),
            SlotBind::Registered {
                replaced: Some(b("a", 1, 1, 1))
            }
        );
        let a = NodeRid::new("a").unwrap();
        assert_eq!(
            s.check_relay(
                &a,
                SessionLifecycleGeneration::new(1),
                BindingGeneration::new(1)
            ),
            Err(FlowReject::BindingRetired)
        );
        let c = NodeRid::new("c").unwrap();
        assert!(
            s.check_relay(
                &c,
                SessionLifecycleGeneration::new(1),
                BindingGeneration::new(4)
            )
            .is_ok()
        );
    }

    // spec: SB-6.7
    #[test]
    fn the_same_session_rebinding_sends_no_51() {
        let mut s = BindingSlot::default();
        s.bind(b("a", 1, 1, 1));
        assert_eq!(s.bind(b("a", 1, 1, 1)), SlotBind::Unchanged);
        assert_eq!(
            s.bind(b("a", 1, 1, 2)),
            SlotBind::Registered { replaced: None }
        );
    }

    // spec: SB-6.6
    // spec: SB-7.3
    #[test]
    fn a_tombstone_removes_exactly_its_identity_once() {
        let mut s = BindingSlot::default();
        s.bind(b("a", 1, 1, 1));
        s.bind(b("c", 1, 9, 4));
        let a = NodeRid::new("a").unwrap();
        let c = NodeRid::new("c").unwrap();
        let l = SessionLifecycleGeneration::new(1);
        assert_eq!(s.tombstone(&a, l, BindingGeneration::new(1)), None);
        assert!(s.current().is_some());
        assert_eq!(
            s.tombstone(&c, l, BindingGeneration::new(4)),
            Some(b("c", 1, 9, 4))
        );
        assert_eq!(s.tombstone(&c, l, BindingGeneration::new(4)), None);
    }

    // spec: SB-7.4
    // spec: SB-7.3
    #[test]
    fn a_disconnect_notifies_once_and_tombstones_after() {
        let mut s = BindingSlot::default();
        s.bind(b("a", 1, 1, 1));
        let a = NodeRid::new("a").unwrap();
        let l = SessionLifecycleGeneration::new(1);
        let g = BindingGeneration::new(1);
        assert!(s.begin_disconnect(&a, l, g));
        assert!(!s.begin_disconnect(&a, l, g), "at most once");
        assert!(
            s.check_relay(&a, l, g).is_ok(),
            "current until the tombstone"
        );
        assert!(s.tombstone(&a, l, g).is_some());
        assert!(!s.begin_disconnect(&a, l, g));
    }
}
