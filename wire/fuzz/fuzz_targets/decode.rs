//! `cargo fuzz run decode` (from `wire/`): feeds arbitrary bytes to the frame decoder.
//! The harness (input format, round-trip property) lives in `zlink_wire::fuzz_harness` and is
//! unit-tested in the main crate.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = zlink_wire::fuzz_harness::decode_any(data);
});
