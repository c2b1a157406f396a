//! Nothing here: the crate is its tests (`tests/`) and benchmarks (`benches/`).
