//! The red-zone test: with a uprobe at Location + 1 the kernel optimizes the
//! nop5 into a `call` to its trampoline, which writes below the stack pointer.
//! A leaf function with many live values must compute exactly what it
//! computes untraced.

use usdt_test_support::counting::check_redzone;
use usdt_test_support::shapes::{example, Shape};
use usdt_test_support::{ready, ROOT};

fn check(shape: Shape) {
    if !ready(&[ROOT]) {
        return;
    }
    let bin = example("redzone", shape);
    check_redzone(&bin, &format!("{shape:?}"));
}

#[test]
fn red_zone_survives_optimized_uprobe_debug() {
    check(Shape::Debug);
}

#[test]
fn red_zone_survives_optimized_uprobe_release() {
    check(Shape::Release);
}

#[test]
fn red_zone_survives_optimized_uprobe_fat_lto() {
    check(Shape::O3Fat);
}
