//! Note inspection: build the examples in several shapes and check every field
//! of every stapsdt note against what the sources declare, the bytes at each
//! site, `.stapsdt.base`, and the semaphores (`common::check_notes`, which
//! `tests/shapes.rs` runs in more build shapes).

mod common;

use common::Shape;
use usdt_trace::SiteLayout;

fn check(shape: Shape) {
    let layout = if shape == Shape::Nop10 {
        SiteLayout::NopNop10
    } else {
        SiteLayout::NopNop5
    };
    for example in common::EXAMPLES {
        let path = common::example(example, shape);
        let what = format!("{example} ({shape:?})");
        common::check_notes(&path, &common::expected(example), layout, &what);
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
