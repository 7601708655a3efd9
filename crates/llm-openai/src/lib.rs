#![doc = include_str!("../README.md")]

mod client;
mod wire;

pub use client::{OpenAiClient, OpenAiConfig};
