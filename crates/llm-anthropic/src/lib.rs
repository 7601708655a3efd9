#![doc = include_str!("../README.md")]

mod client;
mod wire;

pub use client::{ANTHROPIC_VERSION, AnthropicClient, AnthropicConfig};
