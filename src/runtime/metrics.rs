//! The runtime's counters (white box) and their public snapshot.

use crate::sync::atomic::AtomicU64;

/// Counters of the runtime (white box; cheap, not touched on the per-message fast path).
#[derive(Default)]
pub(crate) struct Metrics {
    pub handler_errors: AtomicU64,
    pub deadlines_fired: AtomicU64,
    pub barriers_activated: AtomicU64,
    pub barriers_discarded: AtomicU64,
    pub resumes_refused: AtomicU64,
    /// Gates present (created, not yet dropped).
    pub gates_live: AtomicU64,
    /// Lanes present (`LaneHandle`s created, not yet dropped).
    pub lanes_live: AtomicU64,
}

/// A snapshot of the runtime's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Handlers that ended with an error (EG-15: logged and metered; a request handler's error
    /// also became the request's error reply).
    pub handler_errors: u64,
    /// Call deadlines fired by the infrastructure domain.
    pub deadlines_fired: u64,
    /// `defer()` barriers activated (handler ended normally).
    pub barriers_activated: u64,
    /// `defer()` barriers discarded (handler failed or was cancelled).
    pub barriers_discarded: u64,
    /// Resume records refused because the unit ended or was sealed (EG-4.1).
    pub resumes_refused: u64,
    /// Gates whose memory is still held (created and not yet freed): an ended Spot, session or
    /// destroyed Entry/PerActor actor gives its gate back once no handle and no task holds it.
    pub gates_live: u64,
    /// Lanes whose memory is still held (created and not yet freed).
    pub lanes_live: u64,
}
