//! The demo applications hosted by the `zlink-node` binary, built on the public `zlink` API:
//! the demo actor types and session app ([`demo`]) and a multi-room chat ([`chat`]). The
//! examples (`examples/demo_workload.rs`, `examples/chat.rs`, the benchmarks) and the node tests
//! drive them; they are not part of the `zlink` library.

pub mod chat;
pub mod demo;
