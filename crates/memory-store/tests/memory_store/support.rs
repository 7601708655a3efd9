//! Helpers shared by the test modules.

pub(crate) use bench_workload::testing::TempDir;
