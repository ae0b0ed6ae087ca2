//! Note inspection: build the examples in several shapes and check every field
//! of every stapsdt note against what the sources declare, the bytes at each
//! site, `.stapsdt.base`, and the semaphores (`check_notes`, which
//! `tests/shapes.rs` runs in more build shapes).

use usdt_test_support::notes::{check_notes, expected, DEFAULT_LAYOUT};
use usdt_test_support::shapes::{self, Shape, EXAMPLES};

use usdt_trace::SiteLayout;

fn check(shape: Shape) {
    let layout = if shape == Shape::Nop10 {
        SiteLayout::NopNop10
    } else {
        DEFAULT_LAYOUT
    };
    for example in EXAMPLES {
        let path = shapes::example(example, shape);
        let what = format!("{example} ({shape:?})");
        check_notes(&path, &expected(example), layout, &what);
    }
}

#[test]
fn notes_debug() {
    check(Shape::Debug);
}

#[test]
fn notes_release() {
    check(Shape::Release);
}

#[test]
fn notes_fat_lto_one_codegen_unit() {
    check(Shape::O3Fat);
}

#[test]
fn notes_nop10() {
    check(Shape::Nop10);
}
