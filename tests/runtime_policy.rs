//! Static guarantees: lane policy types (SB-11.2) and Yield offered only by SpotWide User and
//! Instance Spot contexts (EG-16.1–16.4), proven with compile-pass and compile-fail cases.

// spec: EG-16, SB-11, SB-11.2, EG-16.3, EG-16.4 — invalid lane policy combinations and Yield where it is not
// offered do not compile.
#[test]
fn invalid_combinations_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail_*.rs");
}

// spec: EG-16.1, EG-16.2, SB-11.2 — the valid combinations compile.
#[test]
fn valid_combinations_compile() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass_*.rs");
}
