//! Lazy probes: arguments that cost something to build are built only while a
//! tracer is attached. `lazy N` looks up the keys 0 to N - 1 in a cache that
//! holds the even ones, and prints how many times it built a probe's
//! arguments: 0 when nothing traces it.

use std::collections::BTreeMap;

#[usdt::provider]
mod cache {
    /// A lookup: the key, whether the cache held it, and every key it holds
    /// (a `String`, which the closure builds).
    fn lookup(key: u64, hit: bool, keys: String) {}
    /// How many entries the cache holds, and the sum of their values.
    fn summary(entries: u64, total: u64) {}
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4);
    let entries: BTreeMap<u64, u64> = (0..n).filter(|k| k % 2 == 0).map(|k| (k, k * 10)).collect();
    let mut built = 0;
    for key in 0..n {
        let hit = entries.contains_key(&key);
        // The closure runs only while a tracer is attached to cache:lookup.
        cache::lookup!(|| {
            built += 1;
            let keys: Vec<String> = entries.keys().map(u64::to_string).collect();
            (key, hit, keys.join(","))
        });
    }
    // Preparation that does not fit in a closure: ask first.
    if cache::summary_enabled() {
        built += 1;
        let total = entries.values().sum();
        cache::summary!(entries.len() as u64, total);
    }
    println!("looked up {n} keys, built arguments {built} times");
}
