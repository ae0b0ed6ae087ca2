//! The red-zone test: with a uprobe at Location + 1 the kernel optimizes the
//! nop5 into a `call` to its trampoline, which writes below the stack pointer.
//! A leaf function with many live values must compute exactly what it
//! computes untraced.

mod common;

use common::Shape;

fn check(shape: Shape) {
    let bin = common::example("redzone", shape);
    common::check_redzone(&bin, &format!("{shape:?}"));
}

#[test]
fn red_zone_survives_optimized_uprobe_debug() {
    if !common::ready(&[common::ROOT]) {
        return;
    }
    check(Shape::Debug);
}

#[test]
fn red_zone_survives_optimized_uprobe_release() {
    if !common::ready(&[common::ROOT]) {
        return;
    }
    check(Shape::Release);
}

#[test]
fn red_zone_survives_optimized_uprobe_fat_lto() {
    if !common::ready(&[common::ROOT]) {
        return;
    }
    check(Shape::O3Fat);
}
