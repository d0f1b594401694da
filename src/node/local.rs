//! The node's table of local incarnations: [`LocalActor`] (fence, mailbox, timers, activation
//! barrier, bound-session slot), [`Actors`] (live and retired, under the actors lock) and
//! [`SpotState`] (one runtime Spot per `SpotSpec` name with its member count).

use std::collections::{HashMap, VecDeque};

use tokio::task::JoinHandle;
use zlink_wire::{ActorId, ObjectGeneration};

use crate::actor::exec::{EndReason, Mailbox, RtSpot, Work};
use crate::actor::fence::CallFence;
use crate::actor::{ActorRef, SpotKind};
use crate::session::BindingSlot;

pub(super) struct LocalActor {
    pub(super) actor_ref: ActorRef,
    pub(super) fence: CallFence,
    pub(super) mailbox: Mailbox,
    pub(super) spot: String,
    pub(super) timers: Vec<JoinHandle<()>>,
    /// `Some` while the activation barrier is closed (EG-14 (4)): records admitted by the fence
    /// wait here in arrival order and enter the lane after the first record.
    pub(super) held: Option<VecDeque<Work>>,
    /// The incarnation's bound session (SB-5.6): written and read under the actors lock, the
    /// same lock as submission. Dropped with the incarnation (destroy, lease loss: SB-4.1).
    pub(super) binding: BindingSlot,
}

impl LocalActor {
    /// Ends the incarnation: its timers stop and its lane ends for `reason` (work that finds
    /// it ended answers `NotFound` after a destroy, `Unavailable` otherwise).
    pub(super) fn end(&mut self, reason: EndReason) {
        for t in self.timers.drain(..) {
            t.abort();
        }
        self.mailbox.end(reason);
    }
}

#[derive(Default)]
pub(super) struct Actors {
    pub(super) live: HashMap<ActorId, LocalActor>,
    /// Last incarnation destroyed here per actor (answers `NotFound` instead of `Unavailable`).
    pub(super) retired: HashMap<ActorId, ObjectGeneration>,
}

pub(super) struct SpotState {
    pub(super) kind: SpotKind,
    pub(super) spot: RtSpot,
    pub(super) members: usize,
}
