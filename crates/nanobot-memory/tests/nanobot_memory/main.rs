//! The builder as a bot builder uses it: what it refuses, the bots it assembles on each
//! backend, whose memory a turn uses, and errors that keep their sources.

mod background;
mod builder;
#[cfg(feature = "files")]
mod files;
#[cfg(feature = "files")]
mod operator;
#[cfg(feature = "files")]
mod stall;
