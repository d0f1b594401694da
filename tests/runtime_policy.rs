//! Static guarantees: lane policy types (SB-11.2) and Yield offered only by SpotWide User and
//! Instance Spot contexts (EG-16.1–16.4), proven with compile-pass and compile-fail cases.
//!
//! Both kinds of case share one `TestCases`, so trybuild builds its project (and every
//! dependency) once, not once per kind.

// spec: EG-16, SB-11, SB-11.2, EG-16.3, EG-16.4 — invalid lane policy combinations and Yield where it is not
// offered do not compile.
// spec: EG-16.1, EG-16.2, SB-11.2 — the valid combinations compile.
#[test]
fn valid_combinations_compile_and_invalid_ones_do_not() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass_*.rs");
    t.compile_fail("tests/ui/fail_*.rs");
}
