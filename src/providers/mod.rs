//! Paid model providers. For now this holds the mock provider server that
//! tests and benchmarks call over HTTP; the `Provider` trait, the attempt
//! runner and the `local` and `http` providers arrive with execution.

pub mod local;
pub mod mock;
