//! Fires every probe of the library and says what happened, and which site
//! layout the build emits (`none` where it emits no site).

fn main() {
    let _layer = platforms::layer();
    let fired = platforms::fire(1);
    println!(
        "layout {} evaluated {} lazy {} enabled {}",
        usdt::SITE_LAYOUT,
        fired.evaluated,
        fired.lazy,
        fired.enabled
    );
}
