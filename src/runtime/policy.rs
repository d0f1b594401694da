//! Lane policy types (SB-11.2): the differences between Spot lanes, session lanes and
//! actor-delivery lanes are *types*, so an invalid combination does not compile.
//!
//! | policy | return pending | relocation seal | connection closed |
//! |---|---|---|---|
//! | [`SpotLane`] | yes ([`ReturnPending`]) | yes ([`RelocationSeal`]) | — |
//! | [`SessionLane`] | — | — | yes ([`ConnectionClosed`]) |
//! | [`ActorDeliveryLane`] | — | — | — |
//!
//! The capability traits are sealed, so no other crate can add a capability to a policy; a
//! [`SerialLane`] offers a capability's methods only when its policy implements the trait
//! (`tests/ui/session_lane_seal.rs` is the compile-fail proof). All three use the same
//! serial-execution primitive (SB-11.1): a lane behind a gate of `core::GateCore`.

use std::marker::PhantomData;
use std::sync::{Arc, Weak};

use crate::sync::Mutex;

use super::context::{Ctx, NoYield, YieldMode};
use super::core::{LaneClass, LaneStats};
use super::error::RuntimeError;
use super::handled::Handled;
use super::job::Job;
use super::lane::{GateInner, LaneHandle};
use super::spot::{ActorRef, lane_stats};

#[allow(unnameable_types)] // sealed: nameable inside the crate only, by design
mod sealed {
    pub trait Sealed {}
}

/// A lane policy. Sealed: exactly [`SpotLane`], [`SessionLane`], [`ActorDeliveryLane`].
pub trait LanePolicy: sealed::Sealed + Send + Sync + 'static {
    /// Name for diagnostics.
    const NAME: &'static str;
}

/// Capability: hand back the queued, not yet started work (relocation).
pub trait ReturnPending: LanePolicy {}
/// Capability: seal the unit for relocation (EG-4.1).
pub trait RelocationSeal: LanePolicy {}
/// Capability: the client connection closed; queued work fails and new work is refused.
pub trait ConnectionClosed: LanePolicy {}

/// Policy of a Spot's lanes: {return-pending, relocation-seal}.
#[derive(Debug)]
pub enum SpotLane {}
/// Policy of a session's lane: {connection-closed}.
#[derive(Debug)]
pub enum SessionLane {}
/// Policy of an actor-delivery lane (also Node and Channel handler lanes): no extras.
#[derive(Debug)]
pub enum ActorDeliveryLane {}

impl sealed::Sealed for SpotLane {}
impl sealed::Sealed for SessionLane {}
impl sealed::Sealed for ActorDeliveryLane {}
impl LanePolicy for SpotLane {
    const NAME: &'static str = "spot";
}
impl LanePolicy for SessionLane {
    const NAME: &'static str = "session";
}
impl LanePolicy for ActorDeliveryLane {
    const NAME: &'static str = "actor-delivery";
}
impl ReturnPending for SpotLane {}
impl RelocationSeal for SpotLane {}
impl ConnectionClosed for SessionLane {}

/// The gates of one unit (a Spot and everything behind its gates; a session; a handler lane).
///
/// The unit's own gate is held; the extra gates (one per Entry/PerActor actor or PerActor timer)
/// are listed weakly, each gate taking its entry out when it is dropped (a destroyed actor's gate
/// is not pinned by its Spot).
pub(crate) struct Unit {
    own: Arc<GateInner>,
    extra: Mutex<slab::Slab<Weak<GateInner>>>,
    /// End the gates when the last handle of the unit is dropped (sessions, handler lanes).
    end_on_drop: bool,
}

impl Drop for Unit {
    fn drop(&mut self) {
        if self.end_on_drop {
            self.end();
        }
    }
}

impl Unit {
    /// A Spot's unit: ended by [`Unit::end`] only.
    pub fn new(gate: Arc<GateInner>) -> Unit {
        Unit {
            own: gate,
            extra: Mutex::new(slab::Slab::new()),
            end_on_drop: false,
        }
    }

    /// A session's or handler's unit: ended by [`Unit::end`] or when its last handle is dropped.
    pub fn standalone(gate: Arc<GateInner>) -> Unit {
        Unit {
            own: gate,
            extra: Mutex::new(slab::Slab::new()),
            end_on_drop: true,
        }
    }

    pub fn add_gate(self: &Arc<Self>, g: &Arc<GateInner>) {
        let key = self.extra.lock().unwrap().insert(Arc::downgrade(g));
        let _ = g.unit.set((Arc::downgrade(self), key));
    }

    /// A listed gate was dropped: take its entry out.
    pub fn forget_gate(&self, key: usize) {
        if let Ok(mut extra) = self.extra.lock() {
            extra.try_remove(key);
        }
    }

    pub(crate) fn gates(&self) -> Vec<Arc<GateInner>> {
        let mut out = vec![self.own.clone()];
        {
            let extra = self.extra.lock().unwrap();
            out.extend(extra.iter().filter_map(|(_, w)| w.upgrade()));
        }
        // the upgraded handles are dropped by the caller, outside the lock (a gate's drop takes
        // its entry out under it)
        out
    }

    pub fn seal(&self) {
        for g in self.gates() {
            let refused = g.gate.lock().handle_seal();
            g.refuse_resumes(&refused);
        }
    }

    pub fn unseal(&self) {
        for g in self.gates() {
            g.gate.lock().handle_unseal();
            if g.gate.lock().has_ready() {
                if let Some(f) = g.gate.word.try_acquire() {
                    g.kick(f);
                }
            }
        }
    }

    pub fn return_pending(&self) -> Vec<PendingRecord> {
        let mut out = Vec::new();
        for g in self.gates() {
            let mut core = g.gate.lock();
            let items = core.handle_return_pending();
            out.extend(items.into_iter().map(|r| PendingRecord {
                object: core.lane_data(r.lane).map_or(0, |l| l.object),
                class: r.class,
                payload_len: r.payload_len,
                job: r.item,
            }));
        }
        out
    }

    pub fn end(&self) {
        for g in self.gates() {
            g.end();
        }
    }
}

/// [`Unit::return_pending`] for one lane: its queued records, owned (the object moves, EG-7.5).
pub(crate) fn return_pending_lane(lane: &LaneHandle) -> Vec<PendingRecord> {
    let mut core = lane.gate.gate.lock();
    let items = core.handle_return_pending_lane(lane.lane);
    items
        .into_iter()
        .map(|r| PendingRecord {
            object: lane.object,
            class: r.class,
            payload_len: r.payload_len,
            job: r.item,
        })
        .collect()
}

/// A serial execution object with lane policy `P`, handing contexts of mode `Y` to its records.
pub struct SerialLane<P: LanePolicy, Y: YieldMode = NoYield> {
    lane: Arc<LaneHandle>,
    unit: Arc<Unit>,
    _p: PhantomData<fn() -> (P, Y)>,
}

impl<P: LanePolicy, Y: YieldMode> Clone for SerialLane<P, Y> {
    fn clone(&self) -> Self {
        SerialLane {
            lane: self.lane.clone(),
            unit: self.unit.clone(),
            _p: PhantomData,
        }
    }
}

impl<P: LanePolicy, Y: YieldMode> SerialLane<P, Y> {
    pub(crate) fn new(lane: Arc<LaneHandle>, unit: Arc<Unit>) -> Self {
        SerialLane {
            lane,
            unit,
            _p: PhantomData,
        }
    }

    /// The policy's name.
    pub fn policy(&self) -> &'static str {
        P::NAME
    }

    /// Submit an application record of `payload_len` bytes.
    pub fn submit<F>(&self, payload_len: usize, f: F) -> Result<(), RuntimeError>
    where
        F: FnOnce(Ctx<Y>) -> Handled<()> + Send + 'static,
    {
        self.lane.submit(
            LaneClass::Application,
            payload_len,
            Job::new(move |env| f(Ctx::new(env))),
        )
    }

    /// Submit an application record of `payload_len` bytes, waiting while the lane is full
    /// (backpressure; the record never runs inline, EG-6.3).
    pub async fn submit_wait<F>(&self, payload_len: usize, f: F) -> Result<(), RuntimeError>
    where
        F: FnOnce(Ctx<Y>) -> Handled<()> + Send + 'static,
    {
        self.lane
            .submit_wait(
                LaneClass::Application,
                payload_len,
                Job::new(move |env| f(Ctx::new(env))),
            )
            .await
    }

    /// An application record of `payload_len` bytes, prepared but not submitted: the caller
    /// submits it with [`PendingSubmit::retry`](super::PendingSubmit::retry) (a full lane hands
    /// it back, never dropped, never run inline) or waits for space.
    pub fn prepare<F>(&self, payload_len: usize, f: F) -> super::PendingSubmit
    where
        F: FnOnce(Ctx<Y>) -> Handled<()> + Send + 'static,
    {
        super::PendingSubmit::new(
            &self.lane,
            LaneClass::Application,
            payload_len,
            Job::new(move |env| f(Ctx::new(env))),
        )
    }

    /// [`SerialLane::prepare`] with the work unboxed until it must enter the lane
    /// ([`super::pending::Prepared`]: a record that runs inline is never boxed).
    pub(crate) fn prepare_unboxed<F>(
        &self,
        payload_len: usize,
        f: F,
    ) -> impl super::pending::Submission + use<'_, P, Y, F>
    where
        F: FnOnce(Ctx<Y>) -> Handled<()> + Send + 'static,
    {
        super::pending::Prepared::new(
            &self.lane,
            LaneClass::Application,
            payload_len,
            super::pending::Closure(move |env, _lane: &LaneHandle| f(Ctx::new(env))),
        )
    }

    /// Submit a lifecycle record.
    pub fn submit_lifecycle<F>(&self, f: F) -> Result<(), RuntimeError>
    where
        F: FnOnce(Ctx<Y>) -> Handled<()> + Send + 'static,
    {
        self.lane.submit(
            LaneClass::Lifecycle,
            0,
            Job::new(move |env| f(Ctx::new(env))),
        )
    }

    /// Counters of this lane.
    pub fn stats(&self) -> LaneStats {
        lane_stats(&self.lane)
    }

    /// This lane's queue lengths now, read from its FIFOs without ending a drain's batch (see
    /// [`super::LaneDepths`]): for an operator's snapshot.
    pub fn lane_depths(&self) -> super::LaneDepths {
        super::depth::of_lane(&self.lane)
    }
}

impl<P: RelocationSeal, Y: YieldMode> SerialLane<P, Y> {
    /// Seal the unit for relocation (EG-4.1).
    pub fn seal(&self) {
        self.unit.seal();
    }

    /// Lift the seal (relocation aborted).
    pub fn unseal(&self) {
        self.unit.unseal();
    }
}

impl<P: ReturnPending, Y: YieldMode> SerialLane<P, Y> {
    /// Take back all queued, not yet started records of the unit, owned: per object (gate and
    /// lane order), its lifecycle FIFO then its application FIFO, each in FIFO order. Their
    /// reservations are released and the objects' lane decision counters are dropped (the objects
    /// move, EG-7.5). Because every actor has its own queue, the leftover work comes back split
    /// per object (EG-1.4): a relocation driver carries each record to its target with
    /// [`PendingRecord::resubmit_to`]. Dropping a record fails a request waiting on it
    /// (`Unavailable`).
    pub fn return_pending(&self) -> Vec<PendingRecord> {
        self.unit.return_pending()
    }
}

/// A queued, not yet started record handed back by [`SerialLane::return_pending`].
pub struct PendingRecord {
    object: u64,
    class: LaneClass,
    payload_len: usize,
    job: Job,
}

impl std::fmt::Debug for PendingRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingRecord")
            .field("object", &self.object)
            .field("class", &self.class)
            .field("payload_len", &self.payload_len)
            .finish_non_exhaustive()
    }
}

impl PendingRecord {
    /// Runtime-local id of the object whose queue held the record (`ActorRef::object_id`).
    pub fn object(&self) -> u64 {
        self.object
    }

    /// The FIFO it was queued in.
    pub fn class(&self) -> LaneClass {
        self.class
    }

    /// The payload length it was admitted with.
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// The message of a send queued to an actor of message type `M` and reply type `R`
    /// (`tell`, `send`, `prepare_send`), taken out unrun so a relocation can carry it to its
    /// target in arrival order; any other record (a request, a lifecycle record, Spot work) is
    /// handed back.
    pub fn into_message<M: Send + 'static, R: Send + 'static>(self) -> Result<M, Self> {
        if !self.job.captures::<super::spot::SendRecord<M, R>>() {
            return Err(self);
        }
        let any = self
            .job
            .into_captured()
            .unwrap_or_else(|_| unreachable!("checked: a captured record"));
        match any.downcast::<super::spot::SendRecord<M, R>>() {
            Ok(r) => Ok(r.into_message()),
            Err(_) => unreachable!("checked: its type"),
        }
    }

    /// Admit the record at the back of `target`'s queue, in the same FIFO and with the same
    /// reservation (the target must take the same message type `M`). Refused like any submission
    /// (full lane, ended: never run inline, EG-6.3); the record is then handed back.
    pub fn resubmit_to<M, R>(self, target: &ActorRef<M, R>) -> Result<(), (RuntimeError, Self)> {
        let PendingRecord {
            object,
            class,
            payload_len,
            job,
        } = self;
        target
            .lane_handle()
            .try_submit(class, payload_len, job)
            .map_err(|(e, job)| {
                (
                    e,
                    PendingRecord {
                        object,
                        class,
                        payload_len,
                        job,
                    },
                )
            })
    }
}

impl<P: ConnectionClosed, Y: YieldMode> SerialLane<P, Y> {
    /// The client connection closed: queued records fail, new ones are refused.
    pub fn connection_closed(&self) {
        self.unit.end();
    }
}
