//! Location Store (spec glossary "Location Store", SB-2, SB-4.1, SB-12, EG-14).
//!
//! The Location Store is the shared record, per [`ActorId`], of where the current incarnation of
//! an actor lives and who may act as its owner. Several node processes read and change it; every
//! change is a compare-and-swap against a *fence* so that a node acting on stale knowledge is
//! refused instead of overwriting newer state.
//!
//! # Contract (every backend)
//!
//! - **Owner leases.** A node process registers an owner lease ([`LocationStore::register_owner`])
//!   for its ([`NodeRid`], [`NodeGeneration`]) and renews it before it expires. Each new lease
//!   lifecycle gets a fresh, never reused [`OwnerLeaseGeneration`]. A lease is *live* while it is
//!   the current lease of its node and its expiry lies in the future of the store's [`Clock`]. A
//!   newer `NodeGeneration` of the same node supersedes the old lease at once (a restarted process
//!   is a new owner); an older one is refused.
//! - **Reservation (EG-14).** [`LocationStore::reserve_activation`] is the only way to create an
//!   actor record. Exactly one concurrent caller gets [`Reservation::Won`]; only that caller runs
//!   the actor factory, then commits [`LocationStore::mark_ready`]. Every other caller gets
//!   [`Reservation::Held`] with the winner's location. A record whose owner lease is no longer
//!   live can be re-reserved (same `ObjectGeneration`, new `AuthorityOwnerGeneration`).
//! - **Fences.** [`AuthorityFence`] = (`ObjectGeneration`, `AuthorityOwnerGeneration`,
//!   [`StoreVersion`]). `mark_ready` and `cas_owner` succeed only when the caller's fence equals
//!   the stored one; otherwise [`StoreError::FenceMismatch`] (public kind `Unavailable`, never
//!   redirected, SB-12). `destroy` is fenced by the full owner authority [`OwnerFence`]
//!   (`ObjectGeneration`, `AuthorityOwnerGeneration`, the owner lease, which must be live);
//!   otherwise [`StoreError::OwnerMismatch`] or [`StoreError::LeaseNotLive`].
//! - **Monotonic counters per ActorId.** `ObjectGeneration`, `AuthorityOwnerGeneration` and
//!   `StoreVersion` of one `ActorId` only grow, also across [`LocationStore::destroy`]: a
//!   re-created actor gets a new `ObjectGeneration` and an old fence or ref can never match again
//!   (SB-4.1).
//! - **No SQLite assumption.** The trait speaks only in records, fences and leases; the decision
//!   rules live in one pure core (`core.rs`) that each backend runs inside its own atomic section
//!   (a SQLite `IMMEDIATE` transaction, a mutex, a Redis `MULTI` read + compare-and-set script). See
//!   `docs/STORE.md`.
//!
//! # Backends
//! - [`MemoryStore`]: one process, for unit tests.
//! - [`SqliteStore`]: the embedded default; one file shared by every node process of a machine.
//! - [`RedisStore`]: a Redis server shared by the nodes of a mesh on any number of machines.
//!
//! For tests (the feature `testing`): `CountingStore` wraps any store and counts every call per
//! operation (SB-14.6); `FaultStore` wraps any store and injects an outage (every call
//! `Unavailable`).
//!
//! [`open`] builds a backend from a [`StoreUrl`] (`memory:`, `sqlite:///path`,
//! `redis://HOST[:PORT][/DB][?prefix=NAME&lease_timeout_ms=N]`).

mod time;
// The contract suite is a test suite, not library API: built for the crate's own unit tests and
// for the `testing` feature (the backend tests in tests/ and node/tests/ enable it).
#[cfg(any(test, feature = "testing"))]
pub mod contract;
mod core;
// `StoreOp` is the metrics' vocabulary; the counting wrapper is for tests.
#[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
mod counting;
mod error;
#[cfg(any(test, feature = "testing"))]
mod fault;
mod memory;
mod redis;
mod renewal;
mod sqlite;
mod types;
mod url;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use counting::StoreOp;
#[cfg(any(test, feature = "testing"))]
pub use counting::{CountingStore, StoreCallCounts};
pub use error::StoreError;
#[cfg(any(test, feature = "testing"))]
pub use fault::FaultStore;
pub use memory::MemoryStore;
pub use redis::{RedisOptions, RedisStore};
pub use renewal::renewal_slack;
pub(crate) use renewal::{lease_margin, renewal_period};
pub use sqlite::{SqliteOptions, SqliteStore};
pub use time::StoreTime;
pub use types::{
    ActivationRequest, ActivationState, ActorLocation, ActorOwner, AuthorityFence, LeaseHolder,
    OwnerFence, OwnerLease, Reservation, StoreVersion,
};
pub use url::StoreUrl;
pub use zlink_wire::ids::{
    ActorId, AuthorityOwnerGeneration, MeshName, NodeGeneration, NodeRid, ObjectGeneration,
    OwnerLeaseGeneration,
};

/// The future every [`LocationStore`] operation returns: boxed so the trait stays object safe
/// (`Arc<dyn LocationStore>`) and `Send` so it can be awaited on any tokio worker.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The shared owner record of actors: leases, reservations and fenced compare-and-swap.
///
/// All operations are atomic with respect to each other, across every handle and process that
/// uses the same backing store. Time (lease expiry) is read from the store's own [`Clock`], so
/// every caller of one store agrees on it; tests inject a [`ManualClock`].
///
/// Call order of one node: `register_owner` once per process start, `renew_owner` periodically
/// (well before `ttl`), then any number of `reserve_activation` → (factory) → `mark_ready`,
/// `lookup`, `relocation_fence` → `cas_owner`, `destroy`; `release_owner` at graceful shutdown.
///
/// Cancellation: a future dropped before it is first polled does nothing; one dropped later may
/// or may not have been applied (a networked backend cannot know either). Every write is fenced,
/// so the caller re-reads (`lookup`) or repeats: a repeated `reserve_activation` answers
/// [`Reservation::Held`] with the caller itself as owner, a repeated `mark_ready` is idempotent.
pub trait LocationStore: Send + Sync + fmt::Debug {
    /// Registers (or idempotently renews) the owner lease of one node process.
    ///
    /// - no lease for `node`, or a lower recorded `NodeGeneration`, or the same generation whose
    ///   lease is no longer live → a new lease with a fresh [`OwnerLeaseGeneration`];
    /// - the same generation with a live lease → that lease, renewed to `now + ttl`;
    /// - a higher recorded `NodeGeneration` → [`StoreError::StaleNodeGeneration`].
    fn register_owner(
        &self,
        node: NodeRid,
        node_generation: NodeGeneration,
        ttl: Duration,
    ) -> StoreFuture<'_, OwnerLease>;

    /// Extends a live lease to `now + ttl`. A lease that expired, was released or was superseded
    /// is never revived: [`StoreError::LeaseNotLive`] (register again).
    fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease>;

    /// Ends a live lease now (graceful shutdown): its actors become re-reservable at once.
    /// Releasing a lease that is already not live is a no-op.
    fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()>;

    /// Reserves the activation of `request.actor_id` for the candidate owner (EG-14).
    ///
    /// Returns [`Reservation::Won`] with an `Activating` record when the candidate became the
    /// owner (no record, or the recorded owner's lease is not live), and [`Reservation::Held`]
    /// with the current record when another live owner holds it (or the candidate already does).
    ///
    /// # Errors
    /// [`StoreError::LeaseNotLive`] when the candidate's own lease is not live;
    /// [`StoreError::ActorTypeMismatch`] when a record of another actor type exists.
    fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation>;

    /// Commits `Ready` for the reservation identified by `fence` (the fence of the `Won`
    /// location). Idempotent when the record is already `Ready` with that fence.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::GenerationMismatch`],
    /// [`StoreError::FenceMismatch`] (the reservation was taken over),
    /// [`StoreError::LeaseNotLive`] (the owner's lease ended before Ready).
    fn mark_ready(
        &self,
        actor_id: ActorId,
        fence: AuthorityFence,
    ) -> StoreFuture<'_, ActorLocation>;

    /// The current record of `actor_id`, or `None` when there is none (never created or
    /// destroyed). A plain read: it does not check the owner's lease.
    fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>>;

    /// Moves the owner of a `Ready` actor to `new_owner` if the stored fence still equals
    /// `expected` (the relocation source fence, SB-8.9). Returns the new record, with a new
    /// `AuthorityOwnerGeneration` and version; `ObjectGeneration` is kept (SB-1.3).
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::GenerationMismatch`],
    /// [`StoreError::FenceMismatch`], [`StoreError::InvalidState`] (still `Activating`),
    /// [`StoreError::LeaseNotLive`] (the new owner's lease is not live).
    fn cas_owner(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        new_owner: ActorOwner,
    ) -> StoreFuture<'_, ActorLocation>;

    /// Moves the version of a `Ready` record forward and nothing else, by its owner: the
    /// *relocation fence* (SB-8.5, SB-8.9). The owner calls it with the current fence before a
    /// hand-off; the returned record's fence is the one the target's `cas_owner` presents. It
    /// calls it again with that fence for a **durable abort**: afterwards no `cas_owner` with the
    /// handed-out fence can succeed, so the owner may reopen. ObjectGeneration,
    /// AuthorityOwnerGeneration and the owner lease are unchanged (bound routes stay valid).
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::GenerationMismatch`],
    /// [`StoreError::FenceMismatch`] (another write came first: a racing relocation, or the
    /// target's CAS), [`StoreError::InvalidState`] (still `Activating`),
    /// [`StoreError::OwnerMismatch`] (`owner` is not the recorded owner),
    /// [`StoreError::LeaseNotLive`] (the owner's lease ended).
    fn relocation_fence(
        &self,
        actor_id: ActorId,
        expected: AuthorityFence,
        owner: OwnerFence,
    ) -> StoreFuture<'_, ActorLocation>;

    /// Replaces the incarnation `owner.object_generation` of a record (`Ready`, or `Activating`
    /// from an earlier replacement that was not committed) by a new one of the same owner, in
    /// one atomic write (SB-8.6's recovery after a failed relocation): the
    /// record must name exactly `owner` (AuthorityOwnerGeneration and owner lease) and that
    /// lease must be live. The returned record has a new `ObjectGeneration` (SB-4.1), a new
    /// AuthorityOwnerGeneration and version, and is `Activating`: the owner rehydrates the
    /// instance and commits it with `mark_ready`. The record never disappears, so no other node
    /// can reserve the actor in between, and no fence of the old incarnation succeeds afterwards
    /// (a relocation target's late `cas_owner` with the relocation fence among them).
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::GenerationMismatch`],
    /// [`StoreError::OwnerMismatch`] (taken over: a target's CAS won, or another lease),
    /// [`StoreError::LeaseNotLive`] (the caller's lease ended).
    fn reincarnate(&self, actor_id: ActorId, owner: OwnerFence) -> StoreFuture<'_, ActorLocation>;

    /// Removes the record of incarnation `fence.object_generation`, by its owner: the record
    /// must name exactly `fence` (AuthorityOwnerGeneration and owner lease) and that lease must
    /// be live. The per-ActorId counters survive, so a later reservation creates a new
    /// `ObjectGeneration` (SB-4.1). Every owner-side removal (destroy, a burnt reservation, the
    /// clearing of an orphan) goes through here.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::GenerationMismatch`],
    /// [`StoreError::OwnerMismatch`] (taken over, or another lease),
    /// [`StoreError::LeaseNotLive`] (the caller's lease ended).
    fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()>;

    /// The longest an owner lease operation — a renewal — can wait inside the backend before it
    /// answers (SQLite: the lease connection's busy timeout on another writer's lock,
    /// [`SqliteOptions::lease_busy_timeout`]); `None` when the backend never waits on other
    /// writers (memory). A node refuses an owner lease TTL whose renewal
    /// slack is not longer than this (`ConfigError::LeaseTtlTooShort`).
    fn write_wait_limit(&self) -> Option<Duration> {
        None
    }
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        impl<S: LocationStore + ?Sized> LocationStore for $ty {
            fn register_owner(
                &self,
                node: NodeRid,
                node_generation: NodeGeneration,
                ttl: Duration,
            ) -> StoreFuture<'_, OwnerLease> {
                (**self).register_owner(node, node_generation, ttl)
            }
            fn renew_owner(&self, holder: LeaseHolder, ttl: Duration) -> StoreFuture<'_, OwnerLease> {
                (**self).renew_owner(holder, ttl)
            }
            fn release_owner(&self, holder: LeaseHolder) -> StoreFuture<'_, ()> {
                (**self).release_owner(holder)
            }
            fn reserve_activation(&self, request: ActivationRequest) -> StoreFuture<'_, Reservation> {
                (**self).reserve_activation(request)
            }
            fn mark_ready(
                &self,
                actor_id: ActorId,
                fence: AuthorityFence,
            ) -> StoreFuture<'_, ActorLocation> {
                (**self).mark_ready(actor_id, fence)
            }
            fn lookup(&self, actor_id: ActorId) -> StoreFuture<'_, Option<ActorLocation>> {
                (**self).lookup(actor_id)
            }
            fn cas_owner(
                &self,
                actor_id: ActorId,
                expected: AuthorityFence,
                new_owner: ActorOwner,
            ) -> StoreFuture<'_, ActorLocation> {
                (**self).cas_owner(actor_id, expected, new_owner)
            }
            fn relocation_fence(
                &self,
                actor_id: ActorId,
                expected: AuthorityFence,
                owner: OwnerFence,
            ) -> StoreFuture<'_, ActorLocation> {
                (**self).relocation_fence(actor_id, expected, owner)
            }
            fn reincarnate(
                &self,
                actor_id: ActorId,
                owner: OwnerFence,
            ) -> StoreFuture<'_, ActorLocation> {
                (**self).reincarnate(actor_id, owner)
            }
            fn destroy(&self, actor_id: ActorId, fence: OwnerFence) -> StoreFuture<'_, ()> {
                (**self).destroy(actor_id, fence)
            }
            fn write_wait_limit(&self) -> Option<Duration> {
                (**self).write_wait_limit()
            }
        }
    )*};
}

forward_store!(Arc<S>, Box<S>, &S);

/// Opens the backend named by `url` with the system clock.
///
/// `sqlite://` opens (creating if needed) the file and starts its store thread; this blocks
/// briefly on file I/O, so call it at startup, not from a latency-sensitive task.
///
/// `redis://` builds a handle that connects on its first call (a server that cannot be reached
/// fails that call `Unavailable`, not the open); its store time is the Redis server's `TIME`, so
/// every node of a multi-machine mesh judges leases by one clock.
///
/// # Errors
/// [`StoreError::InvalidUrl`] for a Redis URL the driver refuses;
/// [`StoreError::Unavailable`] when the SQLite file cannot be opened or initialised.
pub fn open(url: &StoreUrl) -> Result<Arc<dyn LocationStore>, StoreError> {
    match url {
        StoreUrl::Redis(redis_url) => Ok(Arc::new(RedisStore::open(
            redis_url,
            RedisOptions::default(),
        )?)),
        _ => open_with_clock(url, Arc::new(SystemClock)),
    }
}

/// As [`open`], with an injected clock (tests); for `redis://` the clock replaces the server's
/// `TIME`.
///
/// # Errors
/// As [`open`].
pub fn open_with_clock(
    url: &StoreUrl,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn LocationStore>, StoreError> {
    match url {
        StoreUrl::Memory => Ok(Arc::new(MemoryStore::with_clock(clock))),
        StoreUrl::Sqlite(path, options) => Ok(Arc::new(SqliteStore::open_with(
            path,
            options.clone(),
            clock,
        )?)),
        StoreUrl::Redis(redis_url) => Ok(Arc::new(RedisStore::open_with_clock(
            redis_url,
            RedisOptions::default(),
            clock,
        )?)),
    }
}
