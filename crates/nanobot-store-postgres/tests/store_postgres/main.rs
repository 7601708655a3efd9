//! store-postgres's integration tests, one binary. They run against the database
//! `NANOBOT_TEST_PG_URL` names (`cargo xtask ci` sets it), each in a schema of its own that is
//! dropped afterwards; without it they print that they skip (and fail under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod children;
mod conformance;
mod durability;
mod migrations;
mod network;
mod races;
mod refusals;
mod search;
mod support;
