//! Benchmark: store (see BENCHMARKS.md for how to run it).

fn main() {}
