//! A tiny table of named rows, with probes: `#[usdt::provider]` in a library
//! crate.
//!
//! A provider's macros are usable only in the crate that declares it, so the
//! library fires its probes inside its own functions. Every program that
//! uses the library links the probe sites: `usdt list target/debug/minidb`
//! shows `minidb:insert(id: u64, name: &str)` and `minidb:select(prefix:
//! &str, rows: u64)`.
//!
//! The provider has the crate's name, so its probes are called by the path
//! `crate::minidb::insert!`: `cargo test` passes a library's doc tests the
//! crate itself by that name too, and a bare `minidb::` would be ambiguous
//! there.

#[usdt::provider]
mod minidb {
    /// A row was inserted.
    fn insert(id: u64, name: &str) {}
    /// A query for the names that start with `prefix` found `rows` rows.
    fn select(prefix: &str, rows: u64) {}
}

/// Rows of an id and a name.
#[derive(Default)]
pub struct Table {
    rows: Vec<(u64, String)>,
}

impl Table {
    /// Adds a row.
    pub fn insert(&mut self, id: u64, name: &str) {
        crate::minidb::insert!(id, name);
        self.rows.push((id, name.to_string()));
    }

    /// The ids of the rows whose name starts with `prefix`.
    pub fn select(&self, prefix: &str) -> Vec<u64> {
        let ids: Vec<u64> = self
            .rows
            .iter()
            .filter(|(_, name)| name.starts_with(prefix))
            .map(|(id, _)| *id)
            .collect();
        crate::minidb::select!(prefix, ids.len() as u64);
        ids
    }
}
