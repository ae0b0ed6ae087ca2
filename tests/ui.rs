//! Compile tests: the accepted forms build, and every mistake is a compile
//! error spanning the offending token (snapshots in tests/ui/fail/*.stderr).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
