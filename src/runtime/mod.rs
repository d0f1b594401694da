//! Lane runtime (spec EG, SB-10, SB-11): one serial-execution primitive with gates, two FIFO
//! lanes per serial execution object, Yield, Defer/Join, budgets and progress domains.
//!
//! Layers (see `docs/RUNTIME.md`):
//! * `core` — the sans-IO scheduling core: lanes, ready set, lane decision, reservations;
//! * `gate` — the right to run: one atomic word, fencing numbers, the acquire/release protocol
//!   (loom-modelled);
//! * `driver` — the thin async layer on tokio: drain tasks, inline handlers, Yield detachment,
//!   budgets, progress domains;
//! * `policy` — lane policy types ([`LanePolicy`], SB-11.2); `spot` — Spots, actors, timers and their gate
//!   layout (EG-1.3, EG-2); `context` — handler contexts (Yield by type, EG-16.1–16.4);
//!   `status` — bounded coalescing status subscribers (EG-13).
//!
//! Call order for a user: build a [`Runtime`], create Spots ([`Runtime::create_spot`]), spawn
//! actors and timers on them ([`SpotRef::spawn_actor`], [`SpotRef::add_timer`]), then
//! [`ActorRef::tell`] / [`ActorRef::ask`]; handlers receive a [`Ctx`] typed by the Spot kind.

mod barrier;
pub(crate) mod config;
mod context;
#[cfg(feature = "testing")]
pub mod core;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)] // the accessors only tests read
pub(crate) mod core;
mod depth;
mod domain;
mod driver;
pub(crate) mod error;
#[cfg(feature = "testing")]
pub mod gate;
#[cfg(not(feature = "testing"))]
pub(crate) mod gate;
mod handled;
mod held;
mod job;
mod lane;
mod metrics;
mod park;
mod pending;
pub(crate) mod policy;
mod slot;
mod spot;
pub(crate) mod status;

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use crate::clock::{BudgetStart, Clock, CycleStamp, ManualClock, SystemClock};
pub use config::{LaneLimits, RuntimeConfig};
pub use context::{
    CallFuture, CanYield, Ctx, Join, NoYield, PendingCall, SerialCtx, SpotWideCtx, YieldMode,
};
pub use core::{LaneClass, LaneDecision, LaneStats};
pub use depth::{LaneDepths, LaneDepthsByKind};
pub use domain::{Domain, current_domain, require_domain};
#[cfg(all(test, not(feature = "loom")))]
pub(crate) use driver::{TurnEnv, test_lane_in};
pub use error::{
    AdmissionError, ApplicationLaneFull, ErrorKind, HandlerError, InvalidOperation, LaneLimitKind,
    LifecycleLaneFull, RuntimeError, Unavailable,
};
pub use handled::{BoxFuture, Handled};
pub(crate) use held::HeldRun;
#[cfg(all(test, not(feature = "loom")))]
pub(crate) use job::Job;
pub(crate) use lane::LaneHandle;
pub use lane::{CompletionEvent, LaneKind};
pub use metrics::MetricsSnapshot;
pub(crate) use pending::{Inline, Offered, Submission};
pub use pending::{PendingSubmit, TrySubmitError};
pub use policy::{
    ActorDeliveryLane, ConnectionClosed, LanePolicy, PendingRecord, RelocationSeal, ReturnPending,
    SerialLane, SessionLane, SpotLane,
};
pub use spot::{
    ActorRef, EntrySpot, GateLayout, InstanceSpot, Payload, PerActorUser, SpotKind, SpotRef,
    SpotWideUser, TimerRef,
};
pub use status::{StatusBus, StatusEvent, StatusSubscriber};

use lane::{GateInner, RtShared};
use metrics::Metrics;
use policy::Unit;

struct Owner {
    app: Option<tokio::runtime::Runtime>,
    infra: Option<tokio::runtime::Runtime>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(rt) = self.app.take() {
            rt.shutdown_background();
        }
        if let Some(rt) = self.infra.take() {
            rt.shutdown_background();
        }
    }
}

/// What [`Runtime::shutdown`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Gates ended (queued work failed, waiting resumes refused).
    pub gates_ended: usize,
}

/// The lane runtime of one node: an application worker pool (fixed size, EG-10) and a separate
/// infrastructure progress domain (EG-1.1). Cheap to clone; the pools stop when the last clone
/// is dropped.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<RtShared>,
    _owner: Arc<Owner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Start the two progress domains.
    pub fn new(config: RuntimeConfig) -> std::io::Result<Runtime> {
        // the system clock's one-time probe (it reads /proc/cpuinfo) runs here, on the caller's
        // thread, not in the first drain on a worker
        let _ = config.clock.budget_start();
        let app = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.application_workers.max(1))
            .thread_name("zlink-app")
            .enable_all()
            .build()?;
        let infra = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.infrastructure_workers.max(1))
            .thread_name("zlink-infra")
            .enable_all()
            .build()?;
        let shared = Arc::new(RtShared {
            app: app.handle().clone(),
            infra: infra.handle().clone(),
            limits: Arc::new(config.limits.clone()),
            config,
            metrics: Metrics::default(),
            status: StatusBus::new(),
            shutting_down: AtomicBool::new(false),
            gates: Mutex::new(slab::Slab::new()),
            next_object: AtomicU64::new(1),
        });
        Ok(Runtime {
            shared,
            _owner: Arc::new(Owner {
                app: Some(app),
                infra: Some(infra),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    /// Create a Spot of kind `K` whose own handler is `handler`.
    pub fn create_spot<K, H>(&self, handler: H) -> Result<SpotRef<K>, RuntimeError>
    where
        K: SpotKind,
        H: Fn(Ctx<K::Yield>, Bytes) -> Handled<Bytes> + Send + Sync + 'static,
    {
        self.check_running()?;
        SpotRef::create(&self.shared, handler)
    }

    fn check_running(&self) -> Result<(), RuntimeError> {
        if self.shared.shutting_down.load(Ordering::Acquire) {
            Err(Unavailable::ShutDown.into())
        } else {
            Ok(())
        }
    }

    fn standalone_lane<P: LanePolicy>(
        &self,
        kind: LaneKind,
    ) -> Result<SerialLane<P>, RuntimeError> {
        self.check_running()?;
        let gate = GateInner::new(&self.shared);
        let lane = gate.add_lane(kind, false)?;
        // a session's or handler's lane ends when its last handle is dropped
        Ok(SerialLane::new(lane, Arc::new(Unit::standalone(gate))))
    }

    /// A session's serial lane (SB-10.1): its callbacks never overlap; contexts offer no Yield.
    pub fn session_lane(&self) -> Result<SerialLane<SessionLane>, RuntimeError> {
        self.standalone_lane(LaneKind::Session)
    }

    /// A Node or Channel handler lane: own gate, no Yield (EG-16.3).
    pub fn handler_lane(&self) -> Result<SerialLane<ActorDeliveryLane>, RuntimeError> {
        self.standalone_lane(LaneKind::Handler)
    }

    /// Run infrastructure work (peer accept, completions, owner updates, relocation steps) in the
    /// infrastructure domain, which progresses while every application handler waits (EG-10).
    /// The hook for the mesh (EG-16.25).
    pub fn spawn_infrastructure<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        domain::spawn_infrastructure(&self.shared, fut)
    }

    /// Block the calling thread on `fut` (tests, `main`). Called from inside either domain it
    /// fails immediately instead of waiting (EG-13).
    pub fn block_on<F: Future>(&self, fut: F) -> Result<F::Output, RuntimeError> {
        if current_domain().is_some() || tokio::runtime::Handle::try_current().is_ok() {
            return Err(InvalidOperation::CrossDomain.into());
        }
        Ok(self.shared.app.block_on(fut))
    }

    /// Shut down as infrastructure work (EG-13): refuse new work, end every gate (queued work and
    /// waiting resumes fail). Proceeds while application handlers are blocked (EG-16.22).
    pub fn shutdown(&self) -> impl Future<Output = ShutdownReport> + Send + 'static {
        let shared = self.shared.clone();
        let h = self.spawn_infrastructure(async move {
            shared.shutting_down.store(true, Ordering::Release);
            let gates: Vec<Arc<GateInner>> = shared
                .gates
                .lock()
                .unwrap()
                .iter()
                .filter_map(|(_, w)| w.upgrade())
                .collect();
            for g in &gates {
                g.end();
            }
            shared.status.publish("runtime", "shut down");
            ShutdownReport {
                gates_ended: gates.len(),
            }
        });
        async move { h.await.unwrap_or_default() }
    }

    /// The status bus (EG-13).
    pub fn status(&self) -> &StatusBus {
        &self.shared.status
    }

    /// Subscribe to status changes with a bounded, coalescing buffer.
    pub fn subscribe_status(&self, capacity: usize) -> StatusSubscriber {
        self.shared.status.subscribe(capacity)
    }

    /// Counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        let m = &self.shared.metrics;
        MetricsSnapshot {
            handler_errors: m.handler_errors.load(Ordering::Relaxed),
            deadlines_fired: m.deadlines_fired.load(Ordering::Relaxed),
            barriers_activated: m.barriers_activated.load(Ordering::Relaxed),
            barriers_discarded: m.barriers_discarded.load(Ordering::Relaxed),
            resumes_refused: m.resumes_refused.load(Ordering::Relaxed),
            gates_live: m.gates_live.load(Ordering::Relaxed),
            lanes_live: m.lanes_live.load(Ordering::Relaxed),
        }
    }

    /// Queue lengths of every live lane now, by [`LaneKind`] (read from the lanes' FIFOs, one
    /// gate at a time; see [`LaneDepths`]). Costs one short lock per live gate: for a scrape, not
    /// for the message path.
    pub fn lane_depths(&self) -> LaneDepthsByKind {
        let gates: Vec<Arc<GateInner>> = self
            .shared
            .gates
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        let mut d = LaneDepthsByKind::default();
        d.add_gates(&gates);
        // the upgraded handles are dropped here, outside the registry's lock (a gate's drop
        // takes its entry out under it)
        drop(gates);
        d
    }

    /// Handle of the application worker pool (for bridging; never spawn per Spot on it).
    pub fn application_handle(&self) -> &tokio::runtime::Handle {
        &self.shared.app
    }

    /// Handle of the infrastructure domain.
    pub fn infrastructure_handle(&self) -> &tokio::runtime::Handle {
        &self.shared.infra
    }
}
