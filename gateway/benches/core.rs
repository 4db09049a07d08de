//! Criterion benchmarks of the protocol core (filled in below).
fn main() {}
