//! Misuse the types forbid, checked with trybuild (host test).

#[test]
fn misuse_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    // The async API exists only with its feature (trybuild builds with the same features).
    #[cfg(feature = "tokio")]
    t.compile_fail("tests/ui-async/*.rs");
}
