//! The session aggregate's input sequences (`zlink::session::fuzz_harness`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    zlink::session::fuzz_harness::aggregate_ops(data);
});
