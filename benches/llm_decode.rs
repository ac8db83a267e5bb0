//! Benchmark: llm_decode (see BENCHMARKS.md for how to run it).

fn main() {}
