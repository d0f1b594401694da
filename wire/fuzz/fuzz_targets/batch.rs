//! `cargo fuzz run batch` (from `wire/`): the 139 batch walker on arbitrary bytes — the
//! validated parse, the unvalidated walker and every sub-record's decode. The harness lives in
//! `zlink_wire::fuzz_harness::batch_any` and is unit-tested in the main crate.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    zlink_wire::fuzz_harness::batch_any(data);
});
