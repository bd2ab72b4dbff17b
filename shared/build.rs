//! The migrations are embedded by `refinery::embed_migrations!`, which reads `migrations/` at
//! compile time without telling Cargo: a new migration alone would not rebuild this crate, and
//! a process built from a warm target directory would silently lack it. Rebuild when it changes.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
