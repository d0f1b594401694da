//! The relocation seal of one binding on its session owner (SB-8): what the aggregate keeps
//! between a 42 that installed it and the 44 (commit or abort) or the seal timeout that ends it.
//! Plain data; the rules that change it are [`super::aggregate::SessionBindingAggregate`]'s
//! `handle_seal` / `handle_route` / `handle_seal_timeouts` / `next_released`.
//!
//! Held relays keep their own limits (SB-8.2): no numeric high-water, no per-message ack
//! journal, no capacity of the relocation's own. A held request keeps its deadline (it gets
//! `DeadlineExceeded` when it passes while held) and its caller's cancellation (a request
//! nobody waits for any more is dropped at release). What a session holds counts against the
//! session's own lane limits: past them a relay's admission waits for the release, as a relay
//! waits for a full peer queue without a seal.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::oneshot;
use zlink_wire::{DispatchKey, ErrorKind, RelocationId, SealIdentity};

/// The terminal a held request's caller waits for: the reply payload or the refusal.
pub(crate) type HeldOutcome = Result<Option<Bytes>, (ErrorKind, String)>;

/// A request relay held by a seal: its caller's terminal and the instant (session owner's
/// clock) its deadline passes.
#[derive(Debug)]
pub struct HeldRequest {
    /// When its deadline passes (then `DeadlineExceeded`, held or not).
    pub deadline: Instant,
    /// Where its terminal goes; closed when the caller stopped waiting (cancelled).
    pub(crate) waiter: oneshot::Sender<HeldOutcome>,
}

/// One relay (24) of a sealed binding, held in arrival order until the 44 (SB-8.2).
#[derive(Debug)]
pub struct HeldRelay {
    /// Dispatch key.
    pub key: DispatchKey,
    /// Payload.
    pub payload: Bytes,
    /// `Some` for a request relay.
    pub request: Option<HeldRequest>,
    /// The submitter's admission signal, kept (not dropped) while the session holds more than
    /// its lane limits: the submitter waits for the release as for a full peer queue.
    pub(crate) admitted: Option<oneshot::Sender<()>>,
}

impl HeldRelay {
    /// A held relay with no one waiting (a one-way send, or a test's).
    #[must_use]
    pub fn one_way(key: DispatchKey, payload: Bytes) -> Self {
        Self {
            key,
            payload,
            request: None,
            admitted: None,
        }
    }

    /// Whether its caller stopped waiting for it (a cancelled request): dropped at release.
    #[must_use]
    pub fn cancelled(&self) -> bool {
        self.request.as_ref().is_some_and(|r| r.waiter.is_closed())
    }

    /// Bytes it holds (its payload).
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.payload.len()
    }

    /// Answers its caller (a request) with `out`; a one-way relay has no one to answer.
    pub(crate) fn answer(self, out: HeldOutcome) {
        if let Some(r) = self.request {
            let _ = r.waiter.send(out);
        }
    }
}

/// Where a seal is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealPhase {
    /// Installed by a 42 at `since`: the binding's relays are held until a 44 or the seal
    /// timeout (SB-8.3), whichever the serial section processes first.
    Installed {
        /// When the 42 installed it (the seal timeout counts from here).
        since: Instant,
    },
    /// A 44 was applied (commit: the route already switched; abort: the source route kept):
    /// the held relays leave in order over the binding's route, and relays submitted meanwhile
    /// queue behind them; the seal ends when the queue is empty.
    Releasing,
}

/// The seal of one binding.
#[derive(Debug)]
pub struct Seal {
    /// The identity a 44 must match (SB-8.1, SB-8.8).
    pub identity: SealIdentity,
    /// Installed or releasing.
    pub phase: SealPhase,
    /// Held relays, in arrival order.
    pub(crate) held: VecDeque<HeldRelay>,
}

impl Seal {
    /// A seal installed now.
    #[must_use]
    pub fn new(identity: SealIdentity, now: Instant) -> Self {
        Self {
            identity,
            phase: SealPhase::Installed { since: now },
            held: VecDeque::new(),
        }
    }

    /// The relocation that installed it.
    #[must_use]
    pub fn relocation(&self) -> RelocationId {
        self.identity.relocation
    }

    /// Relays held now.
    #[must_use]
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Payload bytes held now.
    #[must_use]
    pub fn held_bytes(&self) -> usize {
        self.held.iter().map(HeldRelay::bytes).sum()
    }
}

/// What a session's seals hold now (the operator's gauges; all 0 once every seal ended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SealGauges {
    /// Seals installed or releasing.
    pub seals: u64,
    /// Relays held.
    pub held: u64,
    /// Payload bytes held.
    pub held_bytes: u64,
}

impl std::ops::AddAssign for SealGauges {
    fn add_assign(&mut self, o: Self) {
        self.seals += o.seals;
        self.held += o.held;
        self.held_bytes += o.held_bytes;
    }
}
