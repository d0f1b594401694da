//! Sans-IO scheduling core of the one serial-execution primitive (SB-11.1).
//!
//! A [`GateCore`] is everything that waits behind one execution gate: a set of *serial execution
//! objects* ("lanes", EG-7.4: a Spot's own work, one actor's queue, one timer, one session), each
//! with two FIFOs (application and lifecycle, EG-7.1), plus the gate's *ready set* (the order in
//! which lanes and resume records get the right). It does no IO, owns no clock and no thread: the
//! driver feeds inputs and asks for the next turn.
//!
//! Call order (the driver in `driver.rs` follows it):
//! 1. inputs: [`GateCore::handle_submit`], [`GateCore::handle_resume`], [`GateCore::handle_seal`],
//!    [`GateCore::handle_unseal`], [`GateCore::handle_end`];
//! 2. while holding the right: [`GateCore::poll_turn`] → run the work → exactly one of
//!    [`GateCore::handle_turn_finished`] or [`GateCore::handle_yield`] for that turn; or, for an
//!    inline request, [`GateCore::handle_inline_start_with`] (check
//!    [`GateCore::inline_admissible`], take the right, admit and start in one step) → the same
//!    terminal; in a held inline run the terminal of one inline record and the start of the
//!    next of its lane are one step, [`GateCore::handle_inline_continue`];
//! 3. before dropping the right: [`GateCore::has_ready`] (the driver re-checks it after releasing).
//!
//! Invariants:
//! - a lane appears at most once in the ready set and never while it holds a claim (one record of
//!   a lane in flight at a time, EG-3.1);
//! - reservations (count and bytes, per lane and per FIFO) are taken at admission and returned only
//!   at the record's terminal (EG-7.2); the two FIFOs share nothing (EG-7.1, EG-7.6);
//! - the lane decision is made once per turn, inside `poll_turn` (EG-7.3), with the rules of
//!   EG-7.4/7.5 implemented by [`LaneDecision`];
//! - FIFO inside each lane, no front insertion anywhere (EG-6.4); a resume record goes to the back
//!   of the ready set (EG-3, EG-16.8).

use std::collections::VecDeque;
use std::sync::Arc;

use super::config::LaneLimits;
use super::error::{AdmissionError, ApplicationLaneFull, LaneLimitKind, LifecycleLaneFull};

mod barrier;
mod batch;
mod inline;
mod seal;

/// A lane inside one [`GateCore`]: its slot index and the slot's generation. A removed lane's
/// slot is reused by the next lane with a new generation, so a stale id never reaches another
/// object's lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneId {
    index: u32,
    generation: u32,
}

impl LaneId {
    /// The raw slot index (diagnostics only; reused after the lane is removed).
    pub fn index(self) -> u32 {
        self.index
    }

    /// The generation of the slot this lane occupies (diagnostics only).
    pub fn generation(self) -> u32 {
        self.generation
    }
}

/// One slot of [`GateCore`]'s lane table: a lane, or a free slot remembering its generation.
struct LaneSlot<W, L> {
    generation: u32,
    state: Option<LaneState<W, L>>,
}

/// An idle FIFO whose buffer holds more than this many records is given back to the allocator
/// (a burst does not keep its buffer for the lane's lifetime); smaller buffers are kept, so a
/// request/reply lane does not allocate per record.
const IDLE_FIFO_KEEP: usize = 8;

/// `q.push_back(item)`, but a first push reserves room for one item, not four: an idle lane
/// (one request at a time) or a gate with one lane keeps a buffer of one.
fn push_back_small<T>(q: &mut VecDeque<T>, item: T) {
    if q.capacity() == 0 {
        q.reserve_exact(1);
    }
    q.push_back(item);
}

#[inline]
fn trim_fifo<T>(q: &mut VecDeque<T>) {
    if q.is_empty() && q.capacity() > IDLE_FIFO_KEEP {
        free_fifo(q);
    }
}

/// Out of line: an idle lane's terminal checks [`trim_fifo`], a burst's end frees.
#[inline(never)]
fn free_fifo<T>(q: &mut VecDeque<T>) {
    *q = VecDeque::new();
}

/// Which of a lane's two FIFOs a record belongs to (EG-7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaneClass {
    /// Business payloads and timer callbacks.
    Application,
    /// Join, leave, relocation and lifecycle control.
    Lifecycle,
}

/// The per-object lane decision state of EG-7.3–7.5: consecutive lifecycle turns and yield debt.
///
/// Kept per serial execution object, across occupancy hand-offs; dropped with the object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneDecision {
    /// Lifecycle turns chosen since the last application turn.
    pub consecutive_lifecycle: u32,
    /// Yield debt: set when `consecutive_lifecycle` reached the cap; cleared by an application turn.
    pub debt: bool,
}

impl LaneDecision {
    /// Choose the lane for the next turn (EG-7.3): lifecycle first, unless a yield debt stands and
    /// the application lane is ready (EG-7.4). Returns `None` when neither lane is ready.
    #[must_use]
    pub fn choose(&self, lifecycle_ready: bool, application_ready: bool) -> Option<LaneClass> {
        match (lifecycle_ready, application_ready) {
            (true, true) if self.debt => Some(LaneClass::Application),
            (true, _) => Some(LaneClass::Lifecycle),
            (false, true) => Some(LaneClass::Application),
            (false, false) => None,
        }
    }

    /// Record that `class` was chosen (EG-7.4/7.5): a lifecycle turn counts towards the cap and
    /// sets the debt on reaching it; an application turn (because lifecycle was empty, or to pay
    /// the debt) resets the counter and clears the debt.
    pub fn record(&mut self, class: LaneClass, cap: u32) {
        match class {
            LaneClass::Lifecycle => {
                self.consecutive_lifecycle = self.consecutive_lifecycle.saturating_add(1);
                if self.consecutive_lifecycle >= cap {
                    self.debt = true;
                }
            }
            LaneClass::Application => {
                self.consecutive_lifecycle = 0;
                self.debt = false;
            }
        }
    }
}

/// Counters of one lane, for introspection and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Records waiting in the application FIFO.
    pub application_queued: usize,
    /// Records waiting in the lifecycle FIFO.
    pub lifecycle_queued: usize,
    /// Application reservations (queued + in flight): count.
    pub application_reserved_items: usize,
    /// Application reservations (queued + in flight): bytes (payload + fixed cost per work).
    pub application_reserved_bytes: u64,
    /// Lifecycle reservations (queued + in flight): count.
    pub lifecycle_reserved_items: usize,
    /// Lifecycle reservations (queued + in flight): bytes.
    pub lifecycle_reserved_bytes: u64,
    /// Lane decision state (EG-7.4).
    pub decision: LaneDecision,
    /// Whether a record of this lane is in flight (running or yielded).
    pub claimed: bool,
    /// `defer()` barriers registered for this (moving) object whose handler has not ended yet
    /// (EG-5.1): they do not block anything.
    pub barriers_inactive: u32,
    /// Active barriers (EG-5.2): while any stands, no record of this object starts except the
    /// Join results that lift them.
    pub barriers_active: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Reservation {
    items: usize,
    bytes: u64,
}

/// A queued record: its work and the bytes it reserved (payload + fixed cost, EG-7.1).
#[derive(Debug)]
pub struct Queued<W> {
    /// Reserved bytes, returned at the record's terminal (EG-7.2).
    pub bytes: u64,
    /// The work.
    pub item: W,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClaimState {
    Running,
    Yielded,
    ResumeQueued,
}

#[derive(Clone, Copy, Debug)]
struct Claim {
    invocation: u64,
    class: LaneClass,
    bytes: u64,
    state: ClaimState,
    /// The record is a Join result: its terminal lifts one active barrier (EG-5.4).
    lifts_barrier: bool,
}

impl Claim {
    /// An application record started inline (or continuing a held inline run): running, not a
    /// Join result.
    fn inline(invocation: u64, bytes: u64) -> Self {
        Self {
            invocation,
            class: LaneClass::Application,
            bytes,
            state: ClaimState::Running,
            lifts_barrier: false,
        }
    }
}

struct LaneState<W, L> {
    data: L,
    application: VecDeque<Queued<W>>,
    lifecycle: VecDeque<Queued<W>>,
    application_reserved: Reservation,
    lifecycle_reserved: Reservation,
    decision: LaneDecision,
    claim: Option<Claim>,
    in_ready: bool,
    /// `defer()` barriers registered, handler not ended yet (EG-5.1).
    barriers_inactive: u32,
    /// Activated barriers whose Join result has not finished yet (EG-5.2).
    barriers_active: u32,
    /// Join results waiting to run: the explicit queue that lifts the barriers (no front
    /// insertion into the FIFOs, EG-6.4). At most `barriers_active` entries.
    join_results: JoinQueue<W>,
    /// This object alone is sealed for relocation ([`GateCore::handle_seal_lane`]): none of its
    /// records starts, the gate's other lanes run on (EG-4.1).
    sealed: bool,
}

/// A lane's Join-result queue, allocated only while it holds results (they are rare: a lane
/// that never is the moving object of a `defer()` does not carry a queue).
// the box is the point: 8 bytes per idle lane instead of the 32 of an empty `VecDeque`
#[allow(clippy::box_collection)]
struct JoinQueue<W>(Option<Box<VecDeque<Queued<W>>>>);

impl<W> JoinQueue<W> {
    fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|q| q.is_empty())
    }

    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |q| q.len())
    }

    fn push_back(&mut self, q: Queued<W>) {
        self.0.get_or_insert_default().push_back(q);
    }

    fn pop_front(&mut self) -> Option<Queued<W>> {
        let q = self.0.as_mut()?;
        let item = q.pop_front();
        if q.is_empty() {
            self.0 = None;
        }
        item
    }

    fn into_iter(self) -> impl Iterator<Item = Queued<W>> {
        self.0.into_iter().flat_map(|q| *q)
    }
}

impl<W, L> LaneState<W, L> {
    fn has_work(&self) -> bool {
        !self.application.is_empty() || !self.lifecycle.is_empty()
    }

    /// Whether a record of this lane may start now: a Join result always; FIFO records only while
    /// no barrier is active (EG-5.1/5.2).
    fn runnable(&self) -> bool {
        !self.sealed
            && (!self.join_results.is_empty() || (self.barriers_active == 0 && self.has_work()))
    }

    /// The lane half of [`GateCore::inline_admissible`]: no record in flight or yielded, not in
    /// the ready set, both FIFOs and the Join results empty, no active barrier, and an
    /// application record of `payload_len` bytes fits the lane's limits (EG-7.1).
    fn inline_idle(&self, limits: &LaneLimits, payload_len: usize) -> bool {
        let r = self.application_reserved;
        self.claim.is_none()
            && !self.sealed
            && !self.in_ready
            && !self.has_work()
            && self.join_results.is_empty()
            && self.barriers_active == 0
            && r.items < limits.application_items
            && r.bytes + payload_len as u64 + limits.per_work_overhead <= limits.application_bytes
    }

    /// Drop the claim's reservation (its terminal); a Join result also lifts its barrier.
    fn finish_claim(&mut self, c: Claim) {
        self.release(c.class, c.bytes);
        if c.lifts_barrier {
            self.barriers_active = self.barriers_active.saturating_sub(1);
        }
    }

    /// The lane went idle: give big FIFO buffers back (see [`IDLE_FIFO_KEEP`]).
    fn trim(&mut self) {
        trim_fifo(&mut self.application);
        trim_fifo(&mut self.lifecycle);
    }

    fn release(&mut self, class: LaneClass, bytes: u64) {
        let r = match class {
            LaneClass::Application => &mut self.application_reserved,
            LaneClass::Lifecycle => &mut self.lifecycle_reserved,
        };
        r.items -= 1;
        r.bytes -= bytes;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadyEntry {
    Lane(LaneId),
    Resume(LaneId, u64),
}

/// One turn chosen by [`GateCore::poll_turn`].
#[derive(Debug)]
pub enum Turn<W, L> {
    /// Run a new record of `lane`.
    Run {
        /// The lane.
        lane: LaneId,
        /// The lane's driver data.
        data: L,
        /// The FIFO the record came from.
        class: LaneClass,
        /// Never-reused identity of this record's processing (its registration scope).
        invocation: u64,
        /// The work.
        item: W,
    },
    /// Continue the yielded record `invocation` of `lane` in a new turn.
    Resume {
        /// The lane.
        lane: LaneId,
        /// The lane's driver data.
        data: L,
        /// The yielded record.
        invocation: u64,
    },
}

/// Why a resume record was not accepted (EG-4.1): the continuation must fail instead of running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeRefused {
    /// The unit was sealed for relocation while the record waited.
    Sealed,
    /// The Spot (or the lane) ended while the record waited.
    Ended,
    /// No yielded record with that invocation exists (late or duplicate completion, EG-6.1).
    Stale,
}

/// A queued record handed back by [`GateCore::handle_return_pending`].
#[derive(Debug)]
pub struct Returned<W> {
    /// The lane it was queued in.
    pub lane: LaneId,
    /// The FIFO it was queued in.
    pub class: LaneClass,
    /// The payload length it was admitted with (its reservation was `payload_len` + fixed cost).
    pub payload_len: usize,
    /// The work.
    pub item: W,
}

/// What [`GateCore::handle_end`] took out of an ended gate.
#[derive(Debug)]
pub struct EndedGate<W, L> {
    /// Queued work, never to run.
    pub items: Vec<W>,
    /// Resume records refused (lane, invocation).
    pub refused: Vec<(LaneId, u64)>,
    /// The removed lanes and their driver data.
    pub lanes: Vec<(LaneId, L)>,
}

/// A completion that does not belong to the current claim of the lane (EG-6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleCompletion;

/// What [`GateCore::handle_inline_continue`] did. `room`: whether the lane had room after the
/// finished record's terminal (as [`GateCore::handle_turn_finished`] returns it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continued {
    /// The finished record ended and the new record started under the same right, with this
    /// invocation.
    Started {
        /// The new record's invocation.
        invocation: u64,
        /// See the type's doc.
        room: bool,
    },
    /// The finished record ended; the new record did not start (something waits, or it does not
    /// fit): the caller releases the right.
    Refused {
        /// See the type's doc.
        room: bool,
    },
}

/// Why a submission was refused (the work is handed back, never run inline: EG-6.3).
#[derive(Debug)]
pub struct SubmitRefused<W> {
    /// The reason.
    pub reason: SubmitRefusal,
    /// The work, handed back to the caller.
    pub item: W,
}

/// Reason of a [`SubmitRefused`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitRefusal {
    /// A lane limit (distinct types per lane, EG-1.2).
    Admission(AdmissionError),
    /// The gate or the lane ended.
    Ended,
}

fn lane_in<W, L>(lanes: &mut [LaneSlot<W, L>], lane: LaneId) -> Option<&mut LaneState<W, L>> {
    let slot = lanes.get_mut(lane.index as usize)?;
    if slot.generation != lane.generation {
        return None;
    }
    slot.state.as_mut()
}

/// The sans-IO scheduling core of one gate. `W` is the work type, `L` per-lane driver data.
pub struct GateCore<W, L> {
    /// Shared by the runtime's gates (one allocation, not 48 bytes per gate).
    limits: Arc<LaneLimits>,
    lanes: Vec<LaneSlot<W, L>>,
    free: Vec<u32>,
    /// Lanes present (not removed).
    live: usize,
    /// Generation of the next lane added (a slot's lanes never share one: stale ids are
    /// recognised, [`LaneId`]).
    next_generation: u32,
    ready: VecDeque<ReadyEntry>,
    next_invocation: u64,
    sealed: bool,
    ended: bool,
    /// The batch taken by the right's holder, if one is outstanding (see [`GateCore::poll_turn_batch`]).
    batch: Option<BatchInfo>,
    /// An input arrived that the batch must not run ahead of (see [`GateCore::batch_preempted`]).
    preempt: bool,
}

/// The outstanding batch: `extra` application records of `lane` taken behind the record with
/// invocation `first`, which numbered `first + 1 ..= first + extra` in FIFO order.
#[derive(Clone, Copy, Debug)]
struct BatchInfo {
    lane: LaneId,
    first: u64,
    first_bytes: u64,
    extra: usize,
}

impl<W, L: Clone> GateCore<W, L> {
    /// An empty core with the given admission limits.
    pub fn new(limits: impl Into<Arc<LaneLimits>>) -> Self {
        GateCore {
            limits: limits.into(),
            lanes: Vec::new(),
            free: Vec::new(),
            live: 0,
            next_generation: 0,
            ready: VecDeque::new(),
            next_invocation: 1,
            sealed: false,
            ended: false,
            batch: None,
            preempt: false,
        }
    }

    /// The admission limits.
    pub fn limits(&self) -> &LaneLimits {
        &self.limits
    }

    /// Add a serial execution object behind this gate. `None` once the gate ended.
    pub fn add_lane(&mut self, data: L) -> Option<LaneId> {
        if self.ended {
            return None;
        }
        let state = LaneState {
            data,
            application: VecDeque::new(),
            lifecycle: VecDeque::new(),
            application_reserved: Reservation::default(),
            lifecycle_reserved: Reservation::default(),
            decision: LaneDecision::default(),
            claim: None,
            in_ready: false,
            barriers_inactive: 0,
            barriers_active: 0,
            join_results: JoinQueue(None),
            sealed: false,
        };
        self.live += 1;
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1);
        let slot = LaneSlot {
            generation,
            state: Some(state),
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.lanes[i as usize] = slot;
                i
            }
            None => {
                if self.lanes.capacity() == 0 {
                    // most gates serve one lane (an Entry/PerActor actor, a timer, a session):
                    // a table of one, not the four slots a first push would reserve
                    self.lanes.reserve_exact(1);
                }
                self.lanes.push(slot);
                (self.lanes.len() - 1) as u32
            }
        };
        Some(LaneId { index, generation })
    }

    /// The id the next [`GateCore::add_lane`] will return.
    pub fn peek_next_lane(&self) -> LaneId {
        match self.free.last() {
            Some(i) => LaneId {
                index: *i,
                generation: self.next_generation,
            },
            None => LaneId {
                index: self.lanes.len() as u32,
                generation: self.next_generation,
            },
        }
    }

    /// Lanes present behind this gate (added, not removed).
    pub fn lane_count(&self) -> usize {
        self.live
    }

    /// The driver data of a lane.
    pub fn lane_data(&self, lane: LaneId) -> Option<L> {
        self.lane_ref(lane).map(|s| s.data.clone())
    }

    /// The driver data of `lane`, borrowed (nothing cloned).
    pub fn lane_data_ref(&self, lane: LaneId) -> Option<&L> {
        self.lane_ref(lane).map(|s| &s.data)
    }

    /// Remove a lane (the object ended or moved): its driver data and queued work are returned
    /// (to be dropped outside the caller's lock), its counters and debt are dropped (EG-7.5). A
    /// yielded record of it can no longer resume. The slot is reused with a new generation, so
    /// a stale [`LaneId`] never reaches the next lane in it.
    pub fn remove_lane(&mut self, lane: LaneId) -> Option<(L, Vec<W>)> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let slot = self.lanes.get_mut(lane.index as usize)?;
        if slot.generation != lane.generation {
            return None;
        }
        let state = slot.state.take()?;
        self.free.push(lane.index);
        self.live -= 1;
        self.ready.retain(|e| match e {
            ReadyEntry::Lane(l) | ReadyEntry::Resume(l, _) => *l != lane,
        });
        let items = state
            .join_results
            .into_iter()
            .chain(state.lifecycle)
            .chain(state.application)
            .map(|q| q.item)
            .collect();
        if self.live == 0 {
            // nothing left behind this gate: the table's memory goes back too
            self.lanes = Vec::new();
            self.free = Vec::new();
        }
        Some((state.data, items))
    }

    fn lane_ref(&self, lane: LaneId) -> Option<&LaneState<W, L>> {
        let slot = self.lanes.get(lane.index as usize)?;
        if slot.generation != lane.generation {
            return None;
        }
        slot.state.as_ref()
    }

    fn lane_mut(&mut self, lane: LaneId) -> Option<&mut LaneState<W, L>> {
        lane_in(&mut self.lanes, lane)
    }

    /// Every present lane.
    fn states_mut(&mut self) -> impl Iterator<Item = &mut LaneState<W, L>> {
        self.lanes.iter_mut().filter_map(|slot| slot.state.as_mut())
    }

    /// Every present lane with its id.
    fn lanes_mut(&mut self) -> impl Iterator<Item = (LaneId, &mut LaneState<W, L>)> {
        self.lanes.iter_mut().enumerate().filter_map(|(i, slot)| {
            let generation = slot.generation;
            slot.state.as_mut().map(|s| {
                (
                    LaneId {
                        index: i as u32,
                        generation,
                    },
                    s,
                )
            })
        })
    }

    /// Admit one record into `lane`'s `class` FIFO, reserving count and `payload_len` + fixed
    /// cost bytes (EG-7.1). A full lane refuses and hands the work back (EG-6.3); a full
    /// application lane never blocks lifecycle admission (EG-7.6).
    pub fn handle_submit(
        &mut self,
        lane: LaneId,
        class: LaneClass,
        payload_len: usize,
        item: W,
    ) -> Result<(), SubmitRefused<W>> {
        if self.ended {
            return Err(SubmitRefused {
                reason: SubmitRefusal::Ended,
                item,
            });
        }
        let limits = &self.limits;
        let sealed = self.sealed;
        // field-level borrows: `limits` and the lane are disjoint
        let Some(state) = lane_in(&mut self.lanes, lane) else {
            return Err(SubmitRefused {
                reason: SubmitRefusal::Ended,
                item,
            });
        };
        let bytes = payload_len as u64 + limits.per_work_overhead;
        let refusal = match class {
            LaneClass::Application => {
                let r = state.application_reserved;
                if r.items >= limits.application_items {
                    Some(AdmissionError::Application(ApplicationLaneFull {
                        limit: LaneLimitKind::Count,
                    }))
                } else if r.bytes + bytes > limits.application_bytes {
                    Some(AdmissionError::Application(ApplicationLaneFull {
                        limit: LaneLimitKind::Bytes,
                    }))
                } else {
                    None
                }
            }
            LaneClass::Lifecycle => {
                let r = state.lifecycle_reserved;
                if r.items >= limits.lifecycle_items {
                    Some(AdmissionError::Lifecycle(LifecycleLaneFull {
                        limit: LaneLimitKind::Count,
                    }))
                } else if r.bytes + bytes > limits.lifecycle_bytes {
                    Some(AdmissionError::Lifecycle(LifecycleLaneFull {
                        limit: LaneLimitKind::Bytes,
                    }))
                } else {
                    None
                }
            }
        };
        if let Some(reason) = refusal {
            return Err(SubmitRefused {
                reason: SubmitRefusal::Admission(reason),
                item,
            });
        }
        let (fifo, res) = match class {
            LaneClass::Application => (&mut state.application, &mut state.application_reserved),
            LaneClass::Lifecycle => (&mut state.lifecycle, &mut state.lifecycle_reserved),
        };
        res.items += 1;
        res.bytes += bytes;
        push_back_small(fifo, Queued { bytes, item });
        let mut readied = false;
        if !state.in_ready && state.claim.is_none() && !sealed && state.runnable() {
            state.in_ready = true;
            push_back_small(&mut self.ready, ReadyEntry::Lane(lane));
            readied = true;
        }
        if let Some(b) = &self.batch {
            // EG-7.3: the next turn boundary must see this input. Another lane now waits in the
            // ready set (it runs after the current record, as without a batch), or a lifecycle
            // record of the batch's own lane must win the next lane decision.
            if readied || (class == LaneClass::Lifecycle && b.lane == lane) {
                self.preempt = true;
            }
        }
        Ok(())
    }

    /// Whether [`GateCore::poll_turn`] would return a turn.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The one atomic lane decision at a turn boundary (EG-7.3): take the next ready entry; for a
    /// lane, choose its FIFO by [`LaneDecision`], pop the front record and claim the lane.
    pub fn poll_turn(&mut self) -> Option<Turn<W, L>> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let cap = self.limits.lifecycle_turn_cap;
        while let Some(entry) = self.ready.pop_front() {
            match entry {
                ReadyEntry::Lane(lane) => {
                    let invocation = self.next_invocation;
                    let Some(state) = self.lane_mut(lane) else {
                        continue;
                    };
                    state.in_ready = false;
                    if state.sealed {
                        // sealed alone while it waited (made ready again by its unseal)
                        continue;
                    }
                    if let Some(q) = state.join_results.pop_front() {
                        // a Join result runs while its barrier stands (EG-5.4); outside the lane
                        // decision, which stays with the object's two FIFOs
                        state.claim = Some(Claim {
                            invocation,
                            class: LaneClass::Lifecycle,
                            bytes: q.bytes,
                            state: ClaimState::Running,
                            lifts_barrier: true,
                        });
                        let data = state.data.clone();
                        self.next_invocation += 1;
                        return Some(Turn::Run {
                            lane,
                            data,
                            class: LaneClass::Lifecycle,
                            invocation,
                            item: q.item,
                        });
                    }
                    if state.barriers_active > 0 {
                        // blocked by an active barrier (EG-5.2): made ready again when it lifts
                        continue;
                    }
                    let Some(class) = state
                        .decision
                        .choose(!state.lifecycle.is_empty(), !state.application.is_empty())
                    else {
                        continue;
                    };
                    state.decision.record(class, cap);
                    let q = match class {
                        LaneClass::Application => state.application.pop_front(),
                        LaneClass::Lifecycle => state.lifecycle.pop_front(),
                    }
                    .expect("chosen lane is non-empty");
                    state.claim = Some(Claim {
                        invocation,
                        class,
                        bytes: q.bytes,
                        state: ClaimState::Running,
                        lifts_barrier: false,
                    });
                    let data = state.data.clone();
                    self.next_invocation += 1;
                    return Some(Turn::Run {
                        lane,
                        data,
                        class,
                        invocation,
                        item: q.item,
                    });
                }
                ReadyEntry::Resume(lane, invocation) => {
                    let Some(state) = self.lane_mut(lane) else {
                        continue;
                    };
                    match &mut state.claim {
                        Some(c)
                            if c.invocation == invocation
                                && c.state == ClaimState::ResumeQueued =>
                        {
                            c.state = ClaimState::Running;
                        }
                        _ => continue,
                    }
                    return Some(Turn::Resume {
                        lane,
                        data: state.data.clone(),
                        invocation,
                    });
                }
            }
        }
        None
    }

    /// The record `invocation` of `lane` reached its terminal: return its reservation (EG-7.2),
    /// drop the claim, and put the lane at the back of the ready set if it has more work.
    /// Returns whether the lane now has room in both FIFOs (at most half of each count limit
    /// reserved): the driver wakes senders waiting for space only then, so a full lane does not
    /// wake a waiting sender once per freed slot.
    pub fn handle_turn_finished(
        &mut self,
        lane: LaneId,
        invocation: u64,
    ) -> Result<bool, StaleCompletion> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let limits = (self.limits.application_items, self.limits.lifecycle_items);
        let sealed = self.sealed;
        let state = self.lane_mut(lane).ok_or(StaleCompletion)?;
        match state.claim {
            Some(c) if c.invocation == invocation && c.state == ClaimState::Running => {
                state.claim = None;
                state.finish_claim(c);
            }
            _ => return Err(StaleCompletion),
        }
        let requeue = state.runnable() && !state.in_ready && !sealed;
        let room = state.application_reserved.items <= limits.0 / 2
            && state.lifecycle_reserved.items <= limits.1 / 2;
        if requeue {
            state.in_ready = true;
            push_back_small(&mut self.ready, ReadyEntry::Lane(lane));
        } else if !state.has_work() {
            state.trim();
        }
        Ok(room)
    }

    /// The running record yielded (EG-3): the gate's turn ends, the lane keeps its claim and its
    /// reservation, so its next record does not run (EG-3.1).
    pub fn handle_yield(&mut self, lane: LaneId, invocation: u64) -> Result<(), StaleCompletion> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let state = self.lane_mut(lane).ok_or(StaleCompletion)?;
        match &mut state.claim {
            Some(c) if c.invocation == invocation && c.state == ClaimState::Running => {
                c.state = ClaimState::Yielded;
                Ok(())
            }
            _ => Err(StaleCompletion),
        }
    }

    /// The awaited result of a yielded record arrived: append one resume record at the back of the
    /// ready set (EG-3, EG-16.8). Refused if the unit ended or was sealed meanwhile (EG-4.1); then
    /// the record's claim and reservation are released here and it must not run.
    pub fn handle_resume(&mut self, lane: LaneId, invocation: u64) -> Result<(), ResumeRefused> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let (sealed, ended) = (self.sealed, self.ended);
        let state = self.lane_mut(lane).ok_or(ResumeRefused::Ended)?;
        let claim = match state.claim {
            Some(c) if c.invocation == invocation && c.state == ClaimState::Yielded => c,
            _ => return Err(ResumeRefused::Stale),
        };
        let sealed = sealed || state.sealed;
        if sealed || ended {
            state.claim = None;
            state.finish_claim(claim);
            return Err(if ended {
                ResumeRefused::Ended
            } else {
                ResumeRefused::Sealed
            });
        }
        if let Some(c) = &mut state.claim {
            c.state = ClaimState::ResumeQueued;
        }
        push_back_small(&mut self.ready, ReadyEntry::Resume(lane, invocation));
        Ok(())
    }

    /// Counters of one lane.
    pub fn lane_stats(&self, lane: LaneId) -> Option<LaneStats> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let s = self.lane_ref(lane)?;
        Some(LaneStats {
            application_queued: s.application.len(),
            lifecycle_queued: s.lifecycle.len(),
            application_reserved_items: s.application_reserved.items,
            application_reserved_bytes: s.application_reserved.bytes,
            lifecycle_reserved_items: s.lifecycle_reserved.items,
            lifecycle_reserved_bytes: s.lifecycle_reserved.bytes,
            decision: s.decision,
            claimed: s.claim.is_some(),
            barriers_inactive: s.barriers_inactive,
            barriers_active: s.barriers_active,
        })
    }

    /// Every present lane's data with its application and lifecycle FIFO lengths (records a
    /// batch has taken out are not in them).
    pub fn queue_lengths(&self) -> impl Iterator<Item = (&L, usize, usize)> {
        self.lanes
            .iter()
            .filter_map(|slot| slot.state.as_ref())
            .map(|s| (&s.data, s.application.len(), s.lifecycle.len()))
    }

    /// One lane's application and lifecycle FIFO lengths (`None` if the lane is gone).
    pub fn queue_length(&self, lane: LaneId) -> Option<(usize, usize)> {
        self.lane_ref(lane)
            .map(|s| (s.application.len(), s.lifecycle.len()))
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests;
