//! Identity types used by the mesh (from `zlink-wire`) and the mesh's connection vocabulary.

pub use zlink_wire::{
    CorrelationId, Deadline, DispatchKey, MeshName, NodeGeneration, NodeRid, SessionRid,
};

/// The kind of a physical connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LinkKind {
    /// RouteMesh relay connection (ROUTER-ROUTER): requests and one-way records.
    Relay = 1,
    /// RouteMesh completion connection (ROUTER-ROUTER): replies and control records.
    Completion = 2,
    /// ClientServer connection (client DEALER ↔ node ROUTER).
    Client = 3,
}

/// A fresh NodeGeneration for this process start: wall-clock nanoseconds, so a restarted
/// process normally gets a larger value (used to reject an older generation's late Hello).
pub fn fresh_generation() -> NodeGeneration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    NodeGeneration::new(nanos.max(1))
}
