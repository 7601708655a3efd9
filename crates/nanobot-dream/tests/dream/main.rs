//! Dream's integration tests: the spec's acceptance cases with a scripted model issuing real
//! tool calls, the sandbox, budgets and loops, versions, crash recovery, the schedule.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod declined;
mod facts;
mod killed;
mod plan;
mod repeats;
mod runs;
mod sandbox;
mod schedule;
mod scoped;
mod support;
mod versions;
