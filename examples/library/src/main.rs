//! A program that uses the library `minidb`: its binary carries the
//! library's probes (`minidb:insert`, `minidb:select`).

fn main() {
    let mut table = minidb::Table::default();
    for (id, name) in [(1, "ada"), (2, "alan"), (3, "grace")] {
        table.insert(id, name);
    }
    for prefix in ["a", "g", "x"] {
        println!("{prefix}: {:?}", table.select(prefix));
    }
}
