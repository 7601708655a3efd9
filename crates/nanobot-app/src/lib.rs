#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod bot;
pub mod cli;
pub mod commands;
pub mod config;
pub mod demo;
mod error;
pub mod logging;
pub mod metrics;
pub mod pg;
pub mod scopes;
pub mod serve;

pub use bot::{Bot, TurnReport, model_client};
pub use config::Config;
pub use error::{AppError, Saved};
