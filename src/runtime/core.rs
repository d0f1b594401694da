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

    /// Whether an application record of `lane` with `payload_len` bytes may run at once in the
    /// caller's task instead of being queued (an *inline request*, see `docs/RUNTIME.md`, "Inline
    /// ask"): only when it overtakes and delays nothing — the gate is neither sealed nor ended, no
    /// batch is outstanding, the ready set is empty (no lane and no resume record waits for the
    /// right), and the lane is idle (no record in flight or yielded, both FIFOs and the Join
    /// results empty, no active barrier) — and when the record fits the application lane's
    /// limits (EG-7.1). The right itself is the caller's to take ([`GateCore::handle_inline_start`]).
    pub fn inline_admissible(&self, lane: LaneId, payload_len: usize) -> bool {
        if !self.inline_gate_quiet() {
            return false;
        }
        self.lane_ref(lane)
            .is_some_and(|state| state.inline_idle(&self.limits, payload_len))
    }

    /// The gate-wide half of [`GateCore::inline_admissible`]: not sealed, not ended, no batch
    /// outstanding, nothing in the ready set.
    fn inline_gate_quiet(&self) -> bool {
        !self.sealed && !self.ended && self.batch.is_none() && self.ready.is_empty()
    }

    /// Admit and start, in one step, an application record of `lane` that runs in the caller's
    /// task ([`GateCore::inline_admissible`] must hold, and the caller must hold the gate's
    /// right): the same state as [`GateCore::handle_submit`] followed by the
    /// [`GateCore::poll_turn`] that would pick it — the reservation taken (EG-7.1/7.2), the lane
    /// decision recorded (an application turn, EG-7.3–7.5), the lane claimed with a new
    /// invocation number, which is returned. The record ends with
    /// [`GateCore::handle_turn_finished`] (or [`GateCore::handle_yield`]) like any other turn.
    /// `None` if the record is not admissible.
    pub fn handle_inline_start(&mut self, lane: LaneId, payload_len: usize) -> Option<u64> {
        self.handle_inline_start_with(lane, payload_len, || Some(()))
            .map(|((), invocation)| invocation)
    }

    /// [`GateCore::handle_inline_start`] with the right taken in between: checks
    /// [`GateCore::inline_admissible`] (once), then calls `take_right` (the caller's acquisition
    /// of the gate's right, `None` if it is held), and only if it succeeded admits and starts the
    /// record. Returns what `take_right` gave and the record's invocation. One lane lookup and
    /// one check for the whole step (the driver's [`super::gate::GateShared::try_start_inline`]
    /// runs it under the core lock).
    pub fn handle_inline_start_with<R>(
        &mut self,
        lane: LaneId,
        payload_len: usize,
        take_right: impl FnOnce() -> Option<R>,
    ) -> Option<(R, u64)> {
        if !self.inline_gate_quiet() {
            return None;
        }
        let cap = self.limits.lifecycle_turn_cap;
        let bytes = payload_len as u64 + self.limits.per_work_overhead;
        let invocation = self.next_invocation;
        let state = lane_in(&mut self.lanes, lane)?;
        if !state.inline_idle(&self.limits, payload_len) {
            return None;
        }
        let right = take_right()?;
        state.application_reserved.items += 1;
        state.application_reserved.bytes += bytes;
        debug_assert_eq!(
            state.decision.choose(false, true),
            Some(LaneClass::Application)
        );
        state.decision.record(LaneClass::Application, cap);
        state.claim = Some(Claim::inline(invocation, bytes));
        self.next_invocation += 1;
        Some((right, invocation))
    }

    /// A *held inline run* (`docs/RUNTIME.md`, "Inline delivery"): the caller holds the gate's
    /// right after the inline record `finished` of `lane` reached its terminal (its claim and
    /// reservation still stand) and offers the next application record of the same lane, of
    /// `payload_len` bytes. In one step: the finished record ends as with
    /// [`GateCore::handle_turn_finished`] (reservation returned, claim dropped, the lane put in
    /// the ready set if work entered it meanwhile), then the new record starts exactly as
    /// [`GateCore::handle_inline_start`] would start it — only if nothing waits (the ready set
    /// empty: no record entered the lane meanwhile, no other lane or resume record waits for the
    /// right, EG-6.3, EG-6.4), the gate is neither sealed nor ended, and the record fits the
    /// lane's limits. [`Continued::Refused`]: the caller releases the right (and re-checks the
    /// ready set, as at any release) and submits the record behind what waits.
    pub fn handle_inline_continue(
        &mut self,
        lane: LaneId,
        finished: u64,
        payload_len: usize,
    ) -> Continued {
        // The common case in one lane lookup: nothing entered the lane and nothing waits, so the
        // finished record's end leaves the lane idle (no requeue) and the new record's start
        // is an inline start's. The idle lane's buffers are trimmed when the run ends instead.
        let quiet = self.inline_gate_quiet();
        let limits = &self.limits;
        let invocation = self.next_invocation;
        if quiet
            && let Some(state) = lane_in(&mut self.lanes, lane)
            && let Some(c) = state.claim
            && c.invocation == finished
            && c.state == ClaimState::Running
            && c.class == LaneClass::Application
            && !c.lifts_barrier
            && !state.in_ready
            && !state.has_work()
            && state.join_results.is_empty()
            && state.barriers_active == 0
        {
            let r = state.application_reserved;
            // the finished record's reservation returned (EG-7.2), then the new one's taken
            let items = r.items - 1;
            let held = r.bytes - c.bytes;
            let bytes = payload_len as u64 + limits.per_work_overhead;
            if items < limits.application_items && held + bytes <= limits.application_bytes {
                let room = items <= limits.application_items / 2
                    && state.lifecycle_reserved.items <= limits.lifecycle_items / 2;
                state.application_reserved.bytes = held + bytes;
                state
                    .decision
                    .record(LaneClass::Application, limits.lifecycle_turn_cap);
                state.claim = Some(Claim::inline(invocation, bytes));
                self.next_invocation += 1;
                return Continued::Started { invocation, room };
            }
        }
        let room = match self.handle_turn_finished(lane, finished) {
            Ok(room) => room,
            Err(StaleCompletion) => return Continued::Refused { room: false },
        };
        match self.handle_inline_start(lane, payload_len) {
            Some(invocation) => Continued::Started { invocation, room },
            None => Continued::Refused { room },
        }
    }

    /// Whether [`GateCore::poll_turn`] would return a turn.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// [`GateCore::poll_turn`], then, if the turn is an application record of a lane that the
    /// lane rules would pick again and again, take up to `max_extra` more of its application
    /// records (in FIFO order) into `extra`, so the holder runs them one by one without taking
    /// the core again: a *batch* (EG-9: several items per right, the budget still checked after
    /// each). A batch is formed only when the result is exactly the sequence of turns the one-by-one
    /// protocol would take if no input arrived meanwhile: nothing else is in the ready set, the
    /// lane's lifecycle FIFO and Join results are empty, no barrier is active, the gate is not
    /// sealed. Every input that could change that sequence ends the batch first (the driver's
    /// quiesced lock, or [`GateCore::batch_preempted`] after an application submission), which
    /// puts the records not started back at the front of the lane's application FIFO, where they
    /// were ([`GateCore::handle_batch_end`]): so the next turn boundary sees the input (EG-7.3),
    /// and seal, `return_pending` and end see every record not started (EG-4.1, EG-7.5).
    ///
    /// The extra records keep their reservations (EG-7.2) and are numbered `invocation + 1 ..`;
    /// while the batch is outstanding the lane's claim stands for the record running now.
    pub fn poll_turn_batch(
        &mut self,
        max_extra: usize,
        extra: &mut VecDeque<Queued<W>>,
    ) -> Option<Turn<W, L>> {
        debug_assert!(self.batch.is_none(), "a batch is still outstanding");
        let turn = self.poll_turn()?;
        if let Turn::Run {
            lane,
            class: LaneClass::Application,
            invocation,
            ..
        } = &turn
        {
            let (lane, first) = (*lane, *invocation);
            let quiet = self.ready.is_empty() && !self.sealed && !self.ended;
            if let Some(state) = self.lane_mut(lane).filter(|_| quiet && max_extra > 0) {
                let n = max_extra.min(state.application.len());
                if n > 0
                    && state.lifecycle.is_empty()
                    && state.join_results.is_empty()
                    && state.barriers_active == 0
                {
                    let first_bytes = state.claim.map_or(0, |c| c.bytes);
                    if n == state.application.len() && extra.is_empty() {
                        // the whole FIFO: hand the buffers over instead of moving each record
                        std::mem::swap(&mut state.application, extra);
                    } else {
                        extra.extend(state.application.drain(..n));
                    }
                    self.next_invocation += n as u64;
                    self.batch = Some(BatchInfo {
                        lane,
                        first,
                        first_bytes,
                        extra: n,
                    });
                    self.preempt = false;
                }
            }
        }
        Some(turn)
    }

    /// Whether a batch is outstanding.
    pub fn batch_active(&self) -> bool {
        self.batch.is_some()
    }

    /// The lane and the reservation bytes of the first record of the outstanding batch.
    pub fn batch_first(&self) -> Option<(LaneId, u64)> {
        self.batch.map(|b| (b.lane, b.first_bytes))
    }

    /// Whether an application or lifecycle submission since the batch was taken requires ending
    /// it now (another lane became ready, or a lifecycle record arrived for the batch's lane).
    pub fn batch_preempted(&self) -> bool {
        self.batch.is_some() && self.preempt
    }

    /// Records of the outstanding batch reached their terminal: release their reservations now
    /// (EG-7.2; `items` records, `bytes` reserved bytes), the batch goes on.
    pub fn handle_batch_released(&mut self, items: usize, bytes: u64) {
        let Some(b) = self.batch else { return };
        if let Some(state) = self.lane_mut(b.lane) {
            state.application_reserved.items -= items;
            state.application_reserved.bytes -= bytes;
        }
    }

    /// End the outstanding batch. `started` extra records were started (the last of them, or the
    /// first record if `started == 0`, may still run: it keeps the lane's claim, with reservation
    /// `current_bytes`); `released` = (count, bytes) of the records that reached their terminal
    /// and were not yet released; `untaken` = the records not started, in FIFO order: they go back
    /// to the front of the lane's application FIFO, where they were, and the invocation numbers
    /// they had are handed out again (so the numbering is the one-by-one protocol's).
    pub fn handle_batch_end(
        &mut self,
        started: usize,
        current_bytes: u64,
        released: (usize, u64),
        untaken: impl DoubleEndedIterator<Item = Queued<W>>,
    ) {
        let Some(b) = self.batch.take() else { return };
        self.preempt = false;
        let Some(state) = self.lane_mut(b.lane) else {
            return;
        };
        let mut back = 0;
        for q in untaken.rev() {
            state.application.push_front(q);
            back += 1;
        }
        debug_assert_eq!(back + started, b.extra, "batch records lost");
        state.application_reserved.items -= released.0;
        state.application_reserved.bytes -= released.1;
        let current = b.first + started as u64;
        if let Some(c) = &mut state.claim {
            if started > 0 {
                c.invocation = current;
                c.bytes = current_bytes;
            }
        }
        self.next_invocation = current + 1;
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

    fn refuse_queued_resumes(&mut self) -> Vec<(LaneId, u64)> {
        let mut refused = Vec::new();
        let entries: Vec<ReadyEntry> = self.ready.drain(..).collect();
        for e in entries {
            match e {
                ReadyEntry::Resume(lane, inv) => {
                    if let Some(state) = self.lane_mut(lane) {
                        if let Some(c) = state.claim.filter(|c| c.invocation == inv) {
                            state.claim = None;
                            state.finish_claim(c);
                        }
                    }
                    refused.push((lane, inv));
                }
                ReadyEntry::Lane(lane) => {
                    if let Some(state) = self.lane_mut(lane) {
                        state.in_ready = false;
                    }
                }
            }
        }
        refused
    }

    /// Seal the unit for relocation (EG-4.1): no record starts any more (queued work stays for
    /// [`GateCore::handle_return_pending`]); queued resume records are refused and returned.
    pub fn handle_seal(&mut self) -> Vec<(LaneId, u64)> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        self.sealed = true;
        self.refuse_queued_resumes()
    }

    /// Lift a seal (relocation aborted): lanes with work become ready again.
    pub fn handle_unseal(&mut self) {
        debug_assert!(self.batch.is_none(), "end the batch first");
        if !self.sealed {
            return;
        }
        self.sealed = false;
        let mut ready = std::mem::take(&mut self.ready);
        for (id, state) in self.lanes_mut() {
            if state.runnable() && state.claim.is_none() && !state.in_ready {
                state.in_ready = true;
                push_back_small(&mut ready, ReadyEntry::Lane(id));
            }
        }
        self.ready = ready;
    }

    /// Whether the unit is sealed.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Seal one object for relocation (EG-4.1): none of its records starts any more (queued work
    /// stays for [`GateCore::handle_return_pending_lane`]), its queued resume record is refused
    /// and returned, and a resume of its yielded record is refused when it arrives; a record
    /// running now finishes. The gate's other lanes are untouched (relocating one actor holds
    /// only that actor's records, also under a shared SpotWide gate).
    pub fn handle_seal_lane(&mut self, lane: LaneId) -> Vec<(LaneId, u64)> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let Some(state) = self.lane_mut(lane) else {
            return Vec::new();
        };
        state.sealed = true;
        state.in_ready = false;
        let mut refused = Vec::new();
        let mut kept = VecDeque::with_capacity(self.ready.len());
        for e in std::mem::take(&mut self.ready) {
            match e {
                ReadyEntry::Lane(l) if l == lane => {}
                ReadyEntry::Resume(l, inv) if l == lane => refused.push((l, inv)),
                other => kept.push_back(other),
            }
        }
        self.ready = kept;
        if let Some(state) = self.lane_mut(lane) {
            for (_, inv) in &refused {
                if let Some(c) = state.claim.filter(|c| c.invocation == *inv) {
                    state.claim = None;
                    state.finish_claim(c);
                }
            }
        }
        refused
    }

    /// Lift one object's seal (relocation aborted): it becomes ready again if it has work (and
    /// the unit is not sealed).
    pub fn handle_unseal_lane(&mut self, lane: LaneId) {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let unit_sealed = self.sealed;
        let Some(state) = self.lane_mut(lane) else {
            return;
        };
        if !state.sealed {
            return;
        }
        state.sealed = false;
        if !unit_sealed && state.runnable() && state.claim.is_none() && !state.in_ready {
            state.in_ready = true;
            push_back_small(&mut self.ready, ReadyEntry::Lane(lane));
        }
    }

    /// Whether `lane` is sealed on its own.
    pub fn is_lane_sealed(&self, lane: LaneId) -> bool {
        self.lane_ref(lane).is_some_and(|s| s.sealed)
    }

    /// [`GateCore::handle_return_pending`] for one object: its queued records (lifecycle FIFO,
    /// then application FIFO, each in FIFO order) with their reservations released; its lane
    /// decision counters and debt are dropped (the object moves, EG-7.5). Other lanes keep
    /// theirs.
    pub fn handle_return_pending_lane(&mut self, lane: LaneId) -> Vec<Returned<W>> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let overhead = self.limits.per_work_overhead;
        let Some(state) = self.lane_mut(lane) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for class in [LaneClass::Lifecycle, LaneClass::Application] {
            loop {
                let q = match class {
                    LaneClass::Lifecycle => state.lifecycle.pop_front(),
                    LaneClass::Application => state.application.pop_front(),
                };
                let Some(q) = q else { break };
                state.release(class, q.bytes);
                out.push(Returned {
                    lane,
                    class,
                    payload_len: q.bytes.saturating_sub(overhead) as usize,
                    item: q.item,
                });
            }
        }
        state.decision = LaneDecision::default();
        state.trim();
        let was_ready = std::mem::replace(&mut state.in_ready, false);
        if was_ready {
            self.ready.retain(|e| *e != ReadyEntry::Lane(lane));
        }
        out
    }

    /// Whether the gate ended.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Hand back every queued (not yet started) record, per lane in lane order: the lifecycle FIFO
    /// then the application FIFO, each in FIFO order; their reservations are released
    /// (relocation "return pending"). The objects move: their lane decision counters and debt are
    /// dropped (EG-7.5); per-object queues are what lets the leftover work be split per object
    /// (EG-1.4). Records in flight, barriers and Join results stay.
    pub fn handle_return_pending(&mut self) -> Vec<Returned<W>> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        let overhead = self.limits.per_work_overhead;
        let mut out = Vec::new();
        for (id, state) in self.lanes_mut() {
            for class in [LaneClass::Lifecycle, LaneClass::Application] {
                loop {
                    let q = match class {
                        LaneClass::Lifecycle => state.lifecycle.pop_front(),
                        LaneClass::Application => state.application.pop_front(),
                    };
                    let Some(q) = q else { break };
                    state.release(class, q.bytes);
                    out.push(Returned {
                        lane: id,
                        class,
                        payload_len: q.bytes.saturating_sub(overhead) as usize,
                        item: q.item,
                    });
                }
            }
            state.decision = LaneDecision::default();
            state.trim();
        }
        self.ready.retain(|e| matches!(e, ReadyEntry::Resume(..)));
        for state in self.states_mut() {
            state.in_ready = false;
        }
        out
    }

    /// End the gate (Spot ended, shutdown): refuse further work, refuse queued and future resumes,
    /// and remove every lane. Returns the queued work (to be failed by the driver), the refused
    /// resume records, and the removed lanes' ids and driver data (to be dropped by the driver
    /// outside its lock; a record in flight finds its lane gone and its terminal is stale).
    pub fn handle_end(&mut self) -> EndedGate<W, L> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        self.ended = true;
        let refused = self.refuse_queued_resumes();
        let mut items = Vec::new();
        let mut lanes = Vec::new();
        let slots = std::mem::take(&mut self.lanes);
        for (i, slot) in slots.into_iter().enumerate() {
            let Some(state) = slot.state else { continue };
            let id = LaneId {
                index: i as u32,
                generation: slot.generation,
            };
            items.extend(
                state
                    .join_results
                    .into_iter()
                    .chain(state.lifecycle)
                    .chain(state.application)
                    .map(|q| q.item),
            );
            lanes.push((id, state.data));
        }
        self.free = Vec::new();
        self.ready = VecDeque::new();
        self.live = 0;
        EndedGate {
            items,
            refused,
            lanes,
        }
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

    /// A handler registered a `defer()` barrier for the moving object `lane` (EG-5.1): inactive,
    /// it blocks nothing yet. `false` if the lane or the gate is gone.
    pub fn handle_barrier_register(&mut self, lane: LaneId) -> bool {
        if self.ended {
            return false;
        }
        match self.lane_mut(lane) {
            Some(s) => {
                s.barriers_inactive += 1;
                true
            }
            None => false,
        }
    }

    /// The registering handler ended normally (EG-5.2): the barrier activates, and no further
    /// record of `lane` starts until its Join result arrives ([`GateCore::handle_join_result`]).
    /// The record in flight, if any, finishes.
    pub fn handle_barrier_activate(&mut self, lane: LaneId) {
        debug_assert!(self.batch.is_none(), "end the batch first");
        if let Some(s) = self.lane_mut(lane) {
            s.barriers_inactive = s.barriers_inactive.saturating_sub(1);
            s.barriers_active += 1;
        }
    }

    /// The registering handler failed or was cancelled (EG-5.3): the inactive barrier is dropped.
    pub fn handle_barrier_discard(&mut self, lane: LaneId) {
        if let Some(s) = self.lane_mut(lane) {
            s.barriers_inactive = s.barriers_inactive.saturating_sub(1);
        }
    }

    /// The Join of an active barrier of `lane` completed (EG-5.4). With `Some(item)` (the moving
    /// object's completion callback) the item is queued as a Join result, which runs before any
    /// further record of the object and lifts the barrier at its terminal; it is never refused
    /// for capacity (at most one per active barrier) but is counted as a lifecycle reservation.
    /// With `None` the barrier lifts now. The item is handed back if no barrier is active (stale)
    /// or the lane is gone.
    pub fn handle_join_result(&mut self, lane: LaneId, item: Option<W>) -> Result<(), Option<W>> {
        debug_assert!(self.batch.is_none(), "end the batch first");
        if self.ended {
            return Err(item);
        }
        let overhead = self.limits.per_work_overhead;
        let sealed = self.sealed;
        let Some(state) = self.lane_mut(lane) else {
            return Err(item);
        };
        let pending = state.join_results.len() as u32;
        if state.barriers_active <= pending {
            return Err(item);
        }
        match item {
            Some(item) => {
                state.lifecycle_reserved.items += 1;
                state.lifecycle_reserved.bytes += overhead;
                state.join_results.push_back(Queued {
                    bytes: overhead,
                    item,
                });
            }
            None => state.barriers_active -= 1,
        }
        if state.runnable() && state.claim.is_none() && !state.in_ready && !sealed {
            state.in_ready = true;
            push_back_small(&mut self.ready, ReadyEntry::Lane(lane));
        }
        Ok(())
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    fn core() -> GateCore<u32, ()> {
        GateCore::new(LaneLimits::default())
    }

    fn run(c: &mut GateCore<u32, ()>) -> Option<(LaneId, LaneClass, u32)> {
        match c.poll_turn()? {
            Turn::Run {
                lane,
                class,
                invocation,
                item,
                ..
            } => {
                c.handle_turn_finished(lane, invocation).unwrap();
                Some((lane, class, item))
            }
            Turn::Resume { .. } => panic!("unexpected resume"),
        }
    }

    // spec: EG-7.3, EG-16.17
    #[test]
    fn lifecycle_first_when_both_ready() {
        let mut c = core();
        let l = c.add_lane(()).unwrap();
        c.handle_submit(l, LaneClass::Application, 0, 1).unwrap();
        c.handle_submit(l, LaneClass::Lifecycle, 0, 2).unwrap();
        assert_eq!(run(&mut c).unwrap().2, 2);
        assert_eq!(run(&mut c).unwrap().2, 1);
        assert!(run(&mut c).is_none());
    }

    // spec: EG-7.4, EG-7.5
    #[test]
    fn cap_then_debt_then_reset() {
        let mut c = core();
        let l = c.add_lane(()).unwrap();
        for i in 0..20 {
            c.handle_submit(l, LaneClass::Lifecycle, 0, 100 + i)
                .unwrap();
        }
        c.handle_submit(l, LaneClass::Application, 0, 1).unwrap();
        let classes: Vec<LaneClass> = (0..10).map(|_| run(&mut c).unwrap().1).collect();
        assert!(classes[..8].iter().all(|c| *c == LaneClass::Lifecycle));
        assert_eq!(classes[8], LaneClass::Application);
        assert_eq!(classes[9], LaneClass::Lifecycle);
        assert_eq!(c.lane_stats(l).unwrap().decision.consecutive_lifecycle, 1);
    }

    // spec: EG-6.1
    #[test]
    fn late_completion_is_stale() {
        let mut c = core();
        let l = c.add_lane(()).unwrap();
        c.handle_submit(l, LaneClass::Application, 0, 1).unwrap();
        let Some(Turn::Run { invocation, .. }) = c.poll_turn() else {
            panic!()
        };
        assert_eq!(
            c.handle_turn_finished(l, invocation + 1),
            Err(StaleCompletion)
        );
        c.handle_turn_finished(l, invocation).unwrap();
        assert_eq!(c.handle_turn_finished(l, invocation), Err(StaleCompletion));
    }

    // spec: EG-5.1, EG-5.2, EG-5.4 — the sans-IO barrier: inactive blocks nothing; active blocks
    // the object's FIFOs; the Join result runs first and lifts it at its terminal.
    #[test]
    fn active_barrier_blocks_fifo_records_until_the_join_result_ran() {
        let mut c = core();
        let l = c.add_lane(()).unwrap();
        assert!(c.handle_barrier_register(l));
        c.handle_submit(l, LaneClass::Application, 0, 1).unwrap();
        assert_eq!(
            run(&mut c).unwrap().2,
            1,
            "an inactive barrier blocks nothing"
        );
        c.handle_barrier_activate(l);
        c.handle_submit(l, LaneClass::Application, 0, 2).unwrap();
        c.handle_submit(l, LaneClass::Lifecycle, 0, 3).unwrap();
        assert!(
            c.poll_turn().is_none(),
            "active barrier: no FIFO record starts"
        );
        assert_eq!(c.handle_join_result(l, Some(99)), Ok(()));
        assert_eq!(c.lane_stats(l).unwrap().lifecycle_reserved_items, 2);
        assert_eq!(run(&mut c).unwrap(), (l, LaneClass::Lifecycle, 99));
        assert_eq!(c.lane_stats(l).unwrap().barriers_active, 0);
        assert_eq!(run(&mut c).unwrap().2, 3);
        assert_eq!(run(&mut c).unwrap().2, 2);
        // a stale Join result (no active barrier) is handed back
        assert_eq!(c.handle_join_result(l, Some(7)), Err(Some(7)));
        // discarded: nothing blocks
        assert!(c.handle_barrier_register(l));
        c.handle_barrier_discard(l);
        c.handle_submit(l, LaneClass::Application, 0, 4).unwrap();
        assert_eq!(run(&mut c).unwrap().2, 4);
    }

    // spec: EG-9, EG-7.2, EG-7.3, EG-6.4 — a batch is the one-by-one sequence of turns: the extra
    // records keep their reservations; ending it after one extra record started puts the others
    // back at the front of the FIFO in order, the claim names the record in flight, and the
    // invocation numbers continue as if no batch had been taken.
    #[test]
    fn batch_end_restores_the_one_by_one_state() {
        let mut c = core();
        let l = c.add_lane(()).unwrap();
        for i in 1..=5 {
            c.handle_submit(l, LaneClass::Application, 10, i).unwrap();
        }
        let mut extra = VecDeque::new();
        let Some(Turn::Run {
            invocation, item, ..
        }) = c.poll_turn_batch(3, &mut extra)
        else {
            panic!("no turn")
        };
        assert_eq!(item, 1);
        let taken: Vec<u32> = extra.iter().map(|q| q.item).collect();
        assert_eq!(taken, [2, 3, 4]);
        assert!(c.batch_active());
        // an application record of the batch's own lane does not end it; a lifecycle one does
        c.handle_submit(l, LaneClass::Application, 10, 6).unwrap();
        assert!(!c.batch_preempted());
        c.handle_submit(l, LaneClass::Lifecycle, 0, 100).unwrap();
        assert!(c.batch_preempted());
        // record 1 ended, record 2 started (in flight); 3 and 4 not started
        let two = extra.pop_front().unwrap();
        assert_eq!(two.item, 2);
        let b = two.bytes;
        c.handle_batch_end(1, b, (1, b), extra.drain(..));
        assert!(!c.batch_active());
        let s = c.lane_stats(l).unwrap();
        assert_eq!(s.application_queued, 4, "3, 4 back at the front, then 5, 6");
        assert_eq!(
            s.application_reserved_items, 5,
            "2 in flight, 3 to 6 queued"
        );
        assert!(s.claimed);
        assert_eq!(c.handle_turn_finished(l, invocation), Err(StaleCompletion));
        c.handle_turn_finished(l, invocation + 1).unwrap();
        // lifecycle first at the next boundary, then the FIFO in order, numbering continued
        let order: Vec<(u32, u64)> = std::iter::from_fn(|| match c.poll_turn()? {
            Turn::Run {
                lane,
                invocation,
                item,
                ..
            } => {
                c.handle_turn_finished(lane, invocation).unwrap();
                Some((item, invocation))
            }
            Turn::Resume { .. } => None,
        })
        .collect();
        let n = invocation;
        assert_eq!(
            order,
            [(100, n + 2), (3, n + 3), (4, n + 4), (5, n + 5), (6, n + 6)]
        );
        let s = c.lane_stats(l).unwrap();
        assert_eq!(
            (s.application_reserved_items, s.application_reserved_bytes),
            (0, 0)
        );
    }

    // spec: EG-4.1
    #[test]
    fn resume_after_seal_is_refused() {
        let mut c = core();
        let l = c.add_lane(()).unwrap();
        c.handle_submit(l, LaneClass::Application, 10, 1).unwrap();
        let Some(Turn::Run { invocation, .. }) = c.poll_turn() else {
            panic!()
        };
        c.handle_yield(l, invocation).unwrap();
        c.handle_seal();
        assert_eq!(c.handle_resume(l, invocation), Err(ResumeRefused::Sealed));
        assert_eq!(c.lane_stats(l).unwrap().application_reserved_items, 0);
    }

    // spec: EG-4.1, EG-2.1 — sealing one object of a shared gate (one actor of a SpotWide Spot)
    // holds only its records: the gate's other lanes keep running; its record in flight
    // finishes; unsealed, it runs again in FIFO order.
    #[test]
    fn sealing_one_lane_holds_only_that_lane() {
        let mut c = core();
        let a = c.add_lane(()).unwrap();
        let b = c.add_lane(()).unwrap();
        c.handle_submit(a, LaneClass::Application, 0, 1).unwrap();
        c.handle_submit(a, LaneClass::Application, 0, 2).unwrap();
        c.handle_submit(b, LaneClass::Application, 0, 10).unwrap();
        let Some(Turn::Run { invocation, .. }) = c.poll_turn() else {
            panic!()
        };
        // a's first record is running when a is sealed: it finishes
        assert!(c.handle_seal_lane(a).is_empty());
        assert!(c.is_lane_sealed(a) && !c.is_lane_sealed(b) && !c.is_sealed());
        c.handle_turn_finished(a, invocation).unwrap();
        c.handle_submit(a, LaneClass::Lifecycle, 0, 3).unwrap();
        c.handle_submit(b, LaneClass::Application, 0, 11).unwrap();
        assert_eq!(run(&mut c).unwrap(), (b, LaneClass::Application, 10));
        assert_eq!(run(&mut c).unwrap(), (b, LaneClass::Application, 11));
        assert!(run(&mut c).is_none(), "the sealed lane starts nothing");
        assert!(!c.inline_admissible(a, 0), "nor inline");
        c.handle_unseal_lane(a);
        assert_eq!(run(&mut c).unwrap(), (a, LaneClass::Lifecycle, 3));
        assert_eq!(run(&mut c).unwrap(), (a, LaneClass::Application, 2));
    }

    // spec: EG-4.1 — a pending Yield resume of a sealed object fails, whether its resume record
    // was already queued or arrives after the seal; the other lane's resume runs.
    #[test]
    fn resume_of_a_sealed_lane_is_refused() {
        let mut c = core();
        let a = c.add_lane(()).unwrap();
        let b = c.add_lane(()).unwrap();
        c.handle_submit(a, LaneClass::Application, 10, 1).unwrap();
        c.handle_submit(b, LaneClass::Application, 10, 2).unwrap();
        let Some(Turn::Run { invocation: ia, .. }) = c.poll_turn() else {
            panic!()
        };
        c.handle_yield(a, ia).unwrap();
        let Some(Turn::Run { invocation: ib, .. }) = c.poll_turn() else {
            panic!()
        };
        c.handle_yield(b, ib).unwrap();
        // a's resume is queued, then a is sealed: refused and returned
        c.handle_resume(a, ia).unwrap();
        c.handle_resume(b, ib).unwrap();
        assert_eq!(c.handle_seal_lane(a), vec![(a, ia)]);
        assert_eq!(c.lane_stats(a).unwrap().application_reserved_items, 0);
        assert!(!c.lane_stats(a).unwrap().claimed);
        let Some(Turn::Resume { lane, .. }) = c.poll_turn() else {
            panic!("b's resume runs")
        };
        assert_eq!(lane, b);
        // a resume arriving after the seal is refused too
        c.handle_unseal_lane(a);
        c.handle_submit(a, LaneClass::Application, 10, 3).unwrap();
        c.handle_turn_finished(b, ib).unwrap();
        let Some(Turn::Run { invocation, .. }) = c.poll_turn() else {
            panic!()
        };
        c.handle_yield(a, invocation).unwrap();
        c.handle_seal_lane(a);
        assert_eq!(c.handle_resume(a, invocation), Err(ResumeRefused::Sealed));
    }

    // spec: EG-7.5, EG-1.4 — the moving object's queued records come back alone, lifecycle then
    // application, each in FIFO order, reservations released; its decision counters and debt are
    // dropped, another object's stay.
    #[test]
    fn return_pending_of_one_lane_drops_only_its_debt() {
        let mut c = core();
        let a = c.add_lane(()).unwrap();
        let b = c.add_lane(()).unwrap();
        let cap = LaneLimits::default().lifecycle_turn_cap;
        for lane in [a, b] {
            for i in 0..cap {
                c.handle_submit(lane, LaneClass::Lifecycle, 0, 100 + i)
                    .unwrap();
            }
        }
        while run(&mut c).is_some() {}
        assert!(c.lane_stats(a).unwrap().decision.debt);
        assert!(c.lane_stats(b).unwrap().decision.debt);
        c.handle_submit(a, LaneClass::Application, 5, 1).unwrap();
        c.handle_submit(a, LaneClass::Lifecycle, 0, 2).unwrap();
        c.handle_submit(a, LaneClass::Application, 5, 3).unwrap();
        c.handle_seal_lane(a);
        let back: Vec<(LaneClass, u32, usize)> = c
            .handle_return_pending_lane(a)
            .into_iter()
            .map(|r| (r.class, r.item, r.payload_len))
            .collect();
        assert_eq!(
            back,
            [
                (LaneClass::Lifecycle, 2, 0),
                (LaneClass::Application, 1, 5),
                (LaneClass::Application, 3, 5)
            ]
        );
        let sa = c.lane_stats(a).unwrap();
        assert_eq!(
            sa.decision,
            LaneDecision::default(),
            "the mover's debt drops"
        );
        assert_eq!(
            (sa.application_reserved_items, sa.lifecycle_reserved_items),
            (0, 0)
        );
        assert!(c.lane_stats(b).unwrap().decision.debt, "b keeps its debt");
    }

    // Issue 12: a removed lane's slot is reused, a stale id never reaches the new lane, and an
    // emptied core keeps no table.
    #[test]
    fn removed_slot_is_reused_and_stale_ids_refused() {
        let mut c = core();
        let a = c.add_lane(()).unwrap();
        c.handle_submit(a, LaneClass::Application, 0, 1).unwrap();
        let (_, items) = c.remove_lane(a).unwrap();
        assert_eq!(items, vec![1]);
        assert!(!c.has_ready());
        assert_eq!(c.lane_count(), 0);
        let b = c.add_lane(()).unwrap();
        assert_eq!(b.index(), a.index());
        assert_ne!(b, a);
        assert!(c.handle_submit(a, LaneClass::Application, 0, 2).is_err());
        assert!(c.lane_stats(a).is_none());
        assert!(c.remove_lane(a).is_none());
        c.handle_submit(b, LaneClass::Application, 0, 3).unwrap();
        assert_eq!(run(&mut c).unwrap().2, 3);
    }

    // Issue 12: a FIFO that held a burst gives its buffer back when the lane goes idle.
    #[test]
    fn idle_lane_gives_big_buffers_back() {
        let mut c = core();
        let l = c.add_lane(()).unwrap();
        for i in 0..100 {
            c.handle_submit(l, LaneClass::Application, 0, i).unwrap();
        }
        while run(&mut c).is_some() {}
        let s = c.lane_ref(l).unwrap();
        assert!(s.application.capacity() <= IDLE_FIFO_KEEP);
    }

    // Issue 12: ending a gate removes every lane (their driver data is handed back).
    #[test]
    fn end_removes_every_lane() {
        let mut c = core();
        let a = c.add_lane(()).unwrap();
        let b = c.add_lane(()).unwrap();
        c.handle_submit(b, LaneClass::Lifecycle, 0, 7).unwrap();
        let ended = c.handle_end();
        assert_eq!(ended.items, vec![7]);
        assert_eq!(
            ended.lanes.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            vec![a, b]
        );
        assert_eq!(c.lane_count(), 0);
        assert!(c.add_lane(()).is_none());
    }

    // Inline request (docs/RUNTIME.md "Inline ask"): starting a record in the caller's task
    // leaves the core exactly as submit + poll_turn would (reservation, lane decision, claim,
    // invocation numbering), and its terminal is an ordinary one.
    // spec: EG-7.2, EG-7.3, EG-7.5, EG-6.1
    #[test]
    fn inline_start_is_submit_then_poll_turn() {
        let (mut inline, mut queued) = (core(), core());
        let (a, b) = (inline.add_lane(()).unwrap(), queued.add_lane(()).unwrap());
        for (c, l) in [(&mut inline, a), (&mut queued, b)] {
            for i in 0..9 {
                c.handle_submit(l, LaneClass::Lifecycle, 0, i).unwrap();
            }
            while run(c).is_some() {}
            assert!(c.lane_stats(l).unwrap().decision.debt);
        }
        let inv = inline.handle_inline_start(a, 10).unwrap();
        queued
            .handle_submit(b, LaneClass::Application, 10, 0)
            .unwrap();
        let Some(Turn::Run { invocation, .. }) = queued.poll_turn() else {
            panic!("no turn")
        };
        assert_eq!(inv, invocation);
        assert_eq!(inline.lane_stats(a), queued.lane_stats(b));
        assert!(!inline.lane_stats(a).unwrap().decision.debt);
        // a record submitted meanwhile waits behind the claim and runs after the terminal
        inline
            .handle_submit(a, LaneClass::Application, 0, 7)
            .unwrap();
        assert!(!inline.has_ready());
        inline.handle_turn_finished(a, inv).unwrap();
        assert_eq!(run(&mut inline).unwrap().2, 7);
        queued.handle_turn_finished(b, invocation).unwrap();
        assert_eq!(inline.lane_stats(a), queued.lane_stats(b));
        // numbering goes on as one-by-one
        assert_eq!(inline.handle_inline_start(a, 0), Some(invocation + 2));
    }

    // Nothing queued is ever overtaken: an inline start is refused whenever anything waits for
    // the right, the lane is not idle, the gate is sealed or ended, or the record would not fit.
    // spec: EG-6.4, EG-7.6, EG-3.1, EG-4.1, EG-5.2, EG-7.1
    #[test]
    fn inline_start_refused_unless_nothing_waits() {
        let mut c = core();
        let (a, b) = (c.add_lane(()).unwrap(), c.add_lane(()).unwrap());
        assert!(c.inline_admissible(a, 0));
        // another lane waits in the ready set
        c.handle_submit(b, LaneClass::Application, 0, 1).unwrap();
        assert!(!c.inline_admissible(a, 0));
        assert_eq!(c.handle_inline_start(a, 0), None);
        assert_eq!(run(&mut c).unwrap().2, 1);
        // the lane's own FIFOs hold work
        c.handle_submit(a, LaneClass::Lifecycle, 0, 2).unwrap();
        assert!(!c.inline_admissible(a, 0));
        assert_eq!(run(&mut c).unwrap().2, 2);
        // a record of the lane is in flight (or yielded)
        let inv = c.handle_inline_start(a, 0).unwrap();
        assert!(!c.inline_admissible(a, 0));
        c.handle_yield(a, inv).unwrap();
        assert!(!c.inline_admissible(a, 0));
        assert!(c.inline_admissible(b, 0), "another idle lane may still run");
        c.handle_resume(a, inv).unwrap();
        assert!(!c.inline_admissible(b, 0), "the resume record waits");
        let Some(Turn::Resume { .. }) = c.poll_turn() else {
            panic!("no resume")
        };
        c.handle_turn_finished(a, inv).unwrap();
        assert!(c.inline_admissible(a, 0));
        // an active barrier
        assert!(c.handle_barrier_register(a));
        c.handle_barrier_activate(a);
        assert!(!c.inline_admissible(a, 0));
        c.handle_join_result(a, None).unwrap();
        while run(&mut c).is_some() {}
        assert!(c.inline_admissible(a, 0));
        // too big for the application lane
        let max = c.limits().application_bytes as usize;
        assert!(!c.inline_admissible(a, max));
        // sealed, then ended
        c.handle_seal();
        assert!(!c.inline_admissible(a, 0));
        c.handle_unseal();
        assert!(c.inline_admissible(a, 0));
        let _ = c.handle_end();
        assert!(!c.inline_admissible(a, 0));
    }

    // A held inline run: the previous inline record's terminal and the next record's start in
    // one step leave exactly the state of `handle_turn_finished` then `handle_inline_start`.
    // spec: EG-7.2, EG-7.3
    #[test]
    fn inline_continue_is_finish_then_inline_start() {
        let (mut held, mut plain) = (core(), core());
        let (a, b) = (held.add_lane(()).unwrap(), plain.add_lane(()).unwrap());
        let (h0, p0) = (
            held.handle_inline_start(a, 10).unwrap(),
            plain.handle_inline_start(b, 10).unwrap(),
        );
        let (mut h, mut p) = (h0, p0);
        for len in [20, 0, 300, 7, 20] {
            let Continued::Started { invocation, room } = held.handle_inline_continue(a, h, len)
            else {
                panic!("nothing waits: the run continues")
            };
            assert!(room);
            assert!(plain.handle_turn_finished(b, p).unwrap());
            assert_eq!(plain.handle_inline_start(b, len), Some(invocation));
            assert_eq!(held.lane_stats(a), plain.lane_stats(b));
            (h, p) = (invocation, invocation);
        }
        let invocation = h;
        // the old invocation is over: its terminal is stale now
        assert_eq!(held.handle_turn_finished(a, h0), Err(StaleCompletion));
        assert_eq!(held.handle_turn_finished(a, invocation), Ok(true));
        assert!(held.inline_admissible(a, 0));
    }

    // Nothing overtakes what waits (EG-6.3, EG-6.4): a record that entered the lane while the
    // right was held, or another lane or resume record in the ready set, refuses the
    // continuation; the finished record has ended all the same, and what waits is ready.
    // spec: EG-6.3, EG-6.4, EG-7.2
    #[test]
    fn inline_continue_refused_when_something_waits() {
        let mut c = core();
        let (a, b) = (c.add_lane(()).unwrap(), c.add_lane(()).unwrap());
        // a record of the same lane queued meanwhile (another thread's submission)
        let inv = c.handle_inline_start(a, 0).unwrap();
        c.handle_submit(a, LaneClass::Application, 0, 1).unwrap();
        assert!(!c.has_ready(), "the claim stands while the right is held");
        assert_eq!(
            c.handle_inline_continue(a, inv, 0),
            Continued::Refused { room: true }
        );
        assert!(c.has_ready(), "the queued record waits for the right");
        assert_eq!(run(&mut c).unwrap().2, 1);
        assert_eq!(
            c.lane_stats(a).unwrap().application_reserved_items,
            0,
            "nothing left reserved"
        );
        // a lifecycle record of the same lane
        let inv = c.handle_inline_start(a, 0).unwrap();
        c.handle_submit(a, LaneClass::Lifecycle, 0, 2).unwrap();
        assert!(matches!(
            c.handle_inline_continue(a, inv, 0),
            Continued::Refused { .. }
        ));
        assert_eq!(run(&mut c).unwrap().2, 2);
        // another lane waits for the right
        let inv = c.handle_inline_start(a, 0).unwrap();
        c.handle_submit(b, LaneClass::Application, 0, 3).unwrap();
        assert!(matches!(
            c.handle_inline_continue(a, inv, 0),
            Continued::Refused { .. }
        ));
        assert_eq!(run(&mut c).unwrap().2, 3);
        assert!(c.inline_admissible(a, 0));
    }

    // The continuation is refused where an inline start would be: a record that does not fit
    // the lane's limits, a barrier activated by the finished record, a sealed or ended gate, a
    // stale invocation (the lane removed meanwhile).
    // spec: EG-7.1, EG-5.2, EG-4.1
    #[test]
    fn inline_continue_refused_at_limits_barriers_seal_and_end() {
        let mut c = core();
        let a = c.add_lane(()).unwrap();
        let max = c.limits().application_bytes as usize;
        let inv = c.handle_inline_start(a, 0).unwrap();
        assert!(matches!(
            c.handle_inline_continue(a, inv, max),
            Continued::Refused { .. }
        ));
        assert!(c.inline_admissible(a, 0), "the finished record ended");
        // the finished record's barrier was activated at its terminal
        let inv = c.handle_inline_start(a, 0).unwrap();
        assert!(c.handle_barrier_register(a));
        c.handle_barrier_activate(a);
        assert!(matches!(
            c.handle_inline_continue(a, inv, 0),
            Continued::Refused { .. }
        ));
        c.handle_join_result(a, None).unwrap();
        while run(&mut c).is_some() {}
        // sealed meanwhile
        let inv = c.handle_inline_start(a, 0).unwrap();
        c.handle_seal();
        assert!(matches!(
            c.handle_inline_continue(a, inv, 0),
            Continued::Refused { .. }
        ));
        c.handle_unseal();
        // a stale invocation
        let inv = c.handle_inline_start(a, 0).unwrap();
        assert_eq!(
            c.handle_inline_continue(a, inv + 7, 0),
            Continued::Refused { room: false }
        );
        assert!(!c.inline_admissible(a, 0), "the real record still runs");
        c.handle_turn_finished(a, inv).unwrap();
        // ended meanwhile
        let inv = c.handle_inline_start(a, 0).unwrap();
        let _ = c.handle_end();
        assert!(matches!(
            c.handle_inline_continue(a, inv, 0),
            Continued::Refused { .. }
        ));
    }
}
