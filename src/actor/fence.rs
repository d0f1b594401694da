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
//!
//! Before any of these, the owner's own standing ([`OwnerStanding`], read from the
//! [`OwnerGate`]) decides: past the local lease deadline (SB-5.11) or while shutting down
//! (SB-10) nothing is admitted (`Unavailable`), whatever the fences say.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zlink_wire::{
    ActorCall, ActorId, AuthorityOwnerGeneration, NodeGeneration, ObjectGeneration,
    OwnerLeaseGeneration,
};

use super::error::ActorError;
use super::reference::ActorRef;
use crate::clock::Clock;
use crate::clock::{CycleDeadline, CycleStamp};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether the owner node may act as owner now (its own view, on its monotonic clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerStanding {
    /// Within the local lease deadline and accepting work.
    Serving,
    /// Shutting down (SB-10): no new work of any origin is admitted; accepted work still runs.
    Draining,
    /// Past the local lease deadline without a successful renewal (SB-5.11): nothing is
    /// admitted and no turn starts until a renewal of the same lease succeeds.
    Lapsed,
}

impl OwnerStanding {
    /// Admission of new work (calls, sends, relays, binds, timer ticks, activations).
    ///
    /// # Errors
    /// [`ActorError::LeaseLapsed`] or [`ActorError::ShuttingDown`] (both `Unavailable`).
    pub fn admit(self) -> Result<(), ActorError> {
        match self {
            OwnerStanding::Serving => Ok(()),
            OwnerStanding::Draining => Err(ActorError::ShuttingDown),
            OwnerStanding::Lapsed => Err(ActorError::LeaseLapsed),
        }
    }

    /// The start of a turn of already accepted work: refused only past the lease deadline.
    ///
    /// # Errors
    /// [`ActorError::LeaseLapsed`].
    pub fn run_turn(self) -> Result<(), ActorError> {
        match self {
            OwnerStanding::Lapsed => Err(ActorError::LeaseLapsed),
            _ => Ok(()),
        }
    }
}

/// The shared, lock-free view of the owner's standing read on every admission and turn start:
/// the local monotonic lease deadline (written by the lease driver, `node::lease`) and the
/// shutdown flag. Reading it costs two atomic loads and, on the system clock, one cycle counter
/// read while the deadline is far enough ahead ([`CycleDeadline`]: exact, the clock is read
/// whenever the counter's upper bound of now reaches the deadline); on any other clock, one
/// clock read.
#[derive(Debug)]
pub struct OwnerGate {
    clock: Arc<dyn Clock>,
    base: Instant,
    /// The deadline as nanoseconds after `base` (0 = lapsed from the start).
    deadline_ns: AtomicU64,
    draining: AtomicBool,
    /// The cycle-counter guard of the deadline when `clock` is the system clock.
    cycles: Option<CycleDeadline>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl OwnerGate {
    /// A gate on `clock` whose lease deadline is `deadline`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>, deadline: Instant) -> Self {
        let base = clock.now();
        let cycles = if clock.is_system() {
            CycleDeadline::new()
        } else {
            None
        };
        let gate = Self {
            clock,
            base,
            deadline_ns: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            cycles,
        };
        gate.set_deadline(deadline);
        gate
    }

    /// The monotonic clock the deadline is read on.
    #[must_use]
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Publishes a new local lease deadline.
    pub fn set_deadline(&self, deadline: Instant) {
        let ns = nanos(deadline.saturating_duration_since(self.base));
        let publish = || self.deadline_ns.store(ns, Ordering::Release);
        match &self.cycles {
            // No check uses a cycle limit of the old deadline once this returns.
            Some(c) => c.disarm(publish),
            None => publish(),
        }
    }

    /// The local lease deadline.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.deadline_ns.load(Ordering::Acquire))
    }

    /// Time left before the local lease deadline (zero once past it).
    #[must_use]
    pub fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(self.clock.now())
    }

    /// Marks the node as shutting down: from now on nothing new is admitted.
    pub fn close(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// A reading of the cycle counter for [`OwnerGate::standing_at`] ([`CycleStamp::NONE`]
    /// when this gate's clock is not the system clock or the counter cannot be used).
    #[inline]
    #[must_use]
    pub fn stamp(&self) -> CycleStamp {
        match &self.cycles {
            Some(_) => CycleStamp::now(),
            None => CycleStamp::NONE,
        }
    }

    /// The standing at the instant `at` was read ([`OwnerGate::stamp`] or the runtime's
    /// reading of the same counter, taken by the caller at this check's place: after what the
    /// check must follow, before what it guards). Exact as [`OwnerGate::standing`]: never
    /// `Serving` or `Draining` past the deadline; when the reading cannot decide (no reading,
    /// no armed limit, at or past the limit) this reads anew as [`OwnerGate::standing`] does.
    #[must_use]
    pub fn standing_at(&self, at: CycleStamp) -> OwnerStanding {
        match &self.cycles {
            Some(c) if c.certainly_before_at(at) => self.unlapsed(),
            _ => self.standing(),
        }
    }

    fn unlapsed(&self) -> OwnerStanding {
        if self.draining.load(Ordering::Acquire) {
            OwnerStanding::Draining
        } else {
            OwnerStanding::Serving
        }
    }

    /// The standing now.
    #[must_use]
    pub fn standing(&self) -> OwnerStanding {
        let lapsed = match &self.cycles {
            Some(c) => {
                !c.certainly_before()
                    && !c
                        .read_before(|| self.clock.now(), || self.deadline())
                        .before
            }
            None => self.clock.now() >= self.deadline(),
        };
        if lapsed {
            OwnerStanding::Lapsed
        } else if self.draining.load(Ordering::Acquire) {
            OwnerStanding::Draining
        } else {
            OwnerStanding::Serving
        }
    }
}

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

/// Validates `call` on the owner node of generation `node_generation` and standing
/// `standing`, whose current local incarnation of the actor has fences `current` (if any) and
/// which last destroyed incarnation `retired` of it (if any).
///
/// # Errors
/// The [`ActorError`] of the first failing check (see the module docs).
pub fn check_call(
    standing: OwnerStanding,
    node_generation: NodeGeneration,
    current: Option<&CallFence>,
    retired: Option<ObjectGeneration>,
    call: &CallFence,
) -> Result<(), ActorError> {
    standing.admit()?;
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
/// The owner's standing is checked first, as for every admission (a bind past the local lease
/// deadline or during shutdown is `Unavailable`).
///
/// # Errors
/// As [`check_call`] for the standing and the three values.
pub fn check_bind(
    standing: OwnerStanding,
    node_generation: NodeGeneration,
    current: Option<&CallFence>,
    retired: Option<ObjectGeneration>,
    bind: &CallFence,
) -> Result<(), ActorError> {
    let mut b = bind.clone();
    if let Some(cur) = current {
        b.owner_lease_generation = cur.owner_lease_generation;
    }
    check_call(standing, node_generation, current, retired, &b)
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

    const S: OwnerStanding = OwnerStanding::Serving;

    fn kind(r: Result<(), ActorError>) -> Option<ErrorKind> {
        r.err().map(|e| e.kind())
    }

    // spec: SB-12 (each row of the failure table that the owner decides)
    #[test]
    fn owner_checks_follow_the_failure_table() {
        let node = NodeGeneration::new(7);
        let cur = fence(2, 3, 4, 7);
        assert_eq!(kind(check_call(S, node, Some(&cur), None, &cur)), None);
        // A ref from before a restart: stale node fence.
        assert_eq!(
            kind(check_call(S, node, Some(&cur), None, &fence(2, 3, 4, 6))),
            Some(ErrorKind::Unavailable)
        );
        // Another incarnation.
        assert_eq!(
            kind(check_call(S, node, Some(&cur), None, &fence(1, 3, 4, 7))),
            Some(ErrorKind::InvalidOperation)
        );
        // Stale authority or lease: Unavailable, never redirected.
        assert_eq!(
            kind(check_call(S, node, Some(&cur), None, &fence(2, 2, 4, 7))),
            Some(ErrorKind::Unavailable)
        );
        assert_eq!(
            kind(check_call(S, node, Some(&cur), None, &fence(2, 3, 5, 7))),
            Some(ErrorKind::Unavailable)
        );
        // Not here: stale location, or destroyed here.
        assert_eq!(
            kind(check_call(S, node, None, None, &cur)),
            Some(ErrorKind::Unavailable)
        );
        assert_eq!(
            kind(check_call(
                S,
                node,
                None,
                Some(ObjectGeneration::new(2)),
                &cur
            )),
            Some(ErrorKind::NotFound)
        );
    }

    // spec: SB-5.2
    #[test]
    fn bind_approval_ignores_the_lease() {
        let node = NodeGeneration::new(7);
        let cur = fence(2, 3, 4, 7);
        assert_eq!(
            kind(check_bind(S, node, Some(&cur), None, &fence(2, 3, 99, 7))),
            None
        );
        assert_eq!(
            kind(check_bind(S, node, Some(&cur), None, &fence(1, 3, 4, 7))),
            Some(ErrorKind::InvalidOperation)
        );
        assert_eq!(
            kind(check_bind(S, node, Some(&cur), None, &fence(2, 9, 4, 7))),
            Some(ErrorKind::Unavailable)
        );
        assert_eq!(
            kind(check_bind(S, node, Some(&cur), None, &fence(2, 3, 4, 6))),
            Some(ErrorKind::Unavailable)
        );
    }

    // spec: SB-5.11 — past the local lease deadline nothing is admitted, binds included.
    #[test]
    fn a_lapsed_or_draining_owner_admits_nothing() {
        let node = NodeGeneration::new(7);
        let cur = fence(2, 3, 4, 7);
        for standing in [OwnerStanding::Lapsed, OwnerStanding::Draining] {
            assert_eq!(
                kind(check_call(standing, node, Some(&cur), None, &cur)),
                Some(ErrorKind::Unavailable)
            );
            assert_eq!(
                kind(check_bind(standing, node, Some(&cur), None, &cur)),
                Some(ErrorKind::Unavailable)
            );
        }
        assert!(OwnerStanding::Draining.run_turn().is_ok());
        assert!(OwnerStanding::Lapsed.run_turn().is_err());
    }

    /// Asks `gate` its standing around deadlines placed just ahead of now, where the cycle
    /// limit has to give way to the clock, for 30 ms (the first millisecond teaches a rate):
    /// whenever the clock had passed the deadline before `ask` the answer is Lapsed (never a
    /// stale Serving), and whenever it had not after `ask`, Serving. `ask` reads the counter
    /// itself or takes a reading first (`standing_at`); a reading taken before the deadline was
    /// moved back to the past never answers Serving. Whether a cycle limit got armed.
    fn exact_around_deadlines(ask: impl Fn(&OwnerGate) -> OwnerStanding) -> bool {
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
        let start = Instant::now();
        let gate = OwnerGate::new(clock, start + Duration::from_secs(3600));
        let mut armed = false;
        let mut checks = 0u32;
        while start.elapsed() < Duration::from_millis(30) {
            // Far deadline: a limit gets armed (the rate is learned from the gate's own reads).
            gate.set_deadline(Instant::now() + Duration::from_secs(3600));
            for _ in 0..50 {
                assert_eq!(ask(&gate), OwnerStanding::Serving);
            }
            armed |= gate.cycles.as_ref().is_some_and(CycleDeadline::armed);
            for delta in [0u64, 1, 5, 20, 100] {
                let deadline = Instant::now() + Duration::from_micros(delta);
                gate.set_deadline(deadline);
                loop {
                    let before = Instant::now();
                    let standing = ask(&gate);
                    let after = Instant::now();
                    if before >= deadline {
                        assert_eq!(standing, OwnerStanding::Lapsed, "passed, not reported");
                        break;
                    }
                    if after < deadline {
                        assert_eq!(standing, OwnerStanding::Serving, "reported early");
                    }
                    checks += 1;
                }
            }
            // A deadline moved back to the past lapses at once, whatever limit was armed, and
            // a reading from before the move proves nothing after it.
            gate.set_deadline(Instant::now() + Duration::from_secs(3600));
            assert_eq!(ask(&gate), OwnerStanding::Serving);
            let at = gate.stamp();
            gate.set_deadline(Instant::now());
            assert_eq!(ask(&gate), OwnerStanding::Lapsed);
            assert_eq!(gate.standing_at(at), OwnerStanding::Lapsed);
            assert_eq!(gate.standing_at(CycleStamp::NONE), OwnerStanding::Lapsed);
        }
        assert!(checks > 0);
        armed
    }

    // spec: SB-5.11 — on the system clock the gate mostly reads only the cycle counter, and its
    // answer is still the clock's, at its deadline.
    #[test]
    fn the_gate_on_the_system_clock_is_exact_at_its_deadline() {
        let armed = exact_around_deadlines(OwnerGate::standing);
        if CycleDeadline::new().is_some() {
            assert!(armed, "the cycle limit was never armed");
        }
    }

    /// The system clock plus a step a test makes, which the cycle counter does not see (a
    /// suspend on a clock that counts it, where the counter stopped).
    #[derive(Debug)]
    struct SteppedClock(crate::sync::atomic::AtomicU64);

    impl Clock for SteppedClock {
        fn now(&self) -> Instant {
            Instant::now() + Duration::from_nanos(self.0.load(Ordering::SeqCst))
        }
        fn sleep_until(&self, _deadline: Instant) -> crate::clock::Sleep {
            Box::pin(std::future::pending())
        }
        fn wall(&self) -> std::time::SystemTime {
            std::time::SystemTime::now()
        }
        fn is_system(&self) -> bool {
            true
        }
    }

    // spec: SB-5.11 — a step of the lease clock that the cycle counter does not see (a suspend
    // on the boot clock) lapses a far deadline within the guard's horizon, not at the deadline
    // the counter alone would reach.
    #[test]
    fn a_clock_step_the_counter_misses_lapses_the_gate_within_the_horizon() {
        let clock = Arc::new(SteppedClock(crate::sync::atomic::AtomicU64::new(0)));
        let gate = OwnerGate::new(clock.clone(), clock.now() + Duration::from_secs(3600));
        // Arm a limit (the first millisecond teaches a rate).
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(5) {
            assert_eq!(gate.standing(), OwnerStanding::Serving);
        }
        clock.0.store(7_200_000_000_000, Ordering::SeqCst); // two hours later
        let stepped = Instant::now();
        while gate.standing() == OwnerStanding::Serving {
            assert!(
                stepped.elapsed() < Duration::from_secs(20),
                "served past the lease after the step"
            );
        }
        // Within the horizon plus the rate's margin (generous for a loaded machine).
        assert!(
            stepped.elapsed() < CycleDeadline::HORIZON * 100,
            "lapsed only after {:?}",
            stepped.elapsed()
        );
    }

    /// A boot-time source a test moves: the monotonic clock plus `SUSPENDED` nanoseconds.
    static SUSPENDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    fn fake_boot() -> Duration {
        let start = *START.get_or_init(Instant::now);
        start.elapsed() + Duration::from_nanos(SUSPENDED.load(std::sync::atomic::Ordering::SeqCst))
    }

    // spec: SB-5.11 — a lease deadline on the boot clock counts suspended time: after a
    // "suspend" longer than the lease the owner gate sees its deadline passed at once.
    #[test]
    fn the_boot_clock_counts_suspended_time_and_the_lease_gate_sees_it() {
        let clock = crate::clock::BootClock::with_source(fake_boot);
        let t0 = clock.now();
        let gate = OwnerGate::new(Arc::new(clock), t0 + Duration::from_secs(10));
        assert_eq!(gate.standing(), OwnerStanding::Serving);
        SUSPENDED.store(3_600_000_000_000, std::sync::atomic::Ordering::SeqCst);
        assert!(clock.now() >= t0 + Duration::from_secs(3_600));
        assert_eq!(
            gate.standing(),
            OwnerStanding::Lapsed,
            "served past the lease after a suspend"
        );
    }

    // spec: SB-5.11 — a standing asked with a cycle reading the caller took (`standing_at`) is
    // the clock's answer at that reading's instant.
    #[test]
    fn a_standing_at_a_callers_reading_is_exact() {
        exact_around_deadlines(|gate| gate.standing_at(gate.stamp()));
    }

    #[test]
    fn the_gate_lapses_at_its_deadline_on_the_injected_clock() {
        let clock = crate::clock::ManualClock::new();
        let now = clock.now();
        let gate = OwnerGate::new(Arc::new(clock.clone()), now + Duration::from_secs(2));
        assert_eq!(gate.standing(), OwnerStanding::Serving);
        assert_eq!(gate.remaining(), Duration::from_secs(2));
        clock.advance(Duration::from_secs(2));
        assert_eq!(gate.standing(), OwnerStanding::Lapsed);
        assert_eq!(gate.remaining(), Duration::ZERO);
        gate.set_deadline(clock.now() + Duration::from_secs(1));
        assert_eq!(gate.standing(), OwnerStanding::Serving);
        gate.close();
        assert_eq!(gate.standing(), OwnerStanding::Draining);
    }
}
