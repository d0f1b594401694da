//! `cargo fuzz run handshake` (from `mesh/`): the handshake transcript — an honest initiator and
//! acceptor with attacker bytes, tampered and replayed messages and time in between. The harness
//! lives in `zlink_mesh::fuzz_harness::handshake_transcript` and runs as a normal test over the
//! committed corpus and generated transcripts (docs/RELIABILITY.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zlink_mesh::fuzz_harness::handshake_transcript(data);
});
