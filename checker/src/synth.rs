//! Synthetic histories from a reference lock, for benchmarks and tests.
