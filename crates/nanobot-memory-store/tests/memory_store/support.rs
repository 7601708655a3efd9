//! Helpers shared by the test modules.

pub(crate) use nanobot_bench_workload::testing::TempDir;
