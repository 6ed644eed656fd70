//! `sqlx::migrate!` embeds the migrations but does not tell cargo to watch
//! their folder: without this, a new migration would not rebuild the crate.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
