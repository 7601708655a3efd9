//! The server's section of a configuration file (`[mcp]`): which optional tools it offers
//! and, on `nanobot serve`, whether `/mcp` is served and to which host names.

use crate::McpOptions;

/// What a user sets about the MCP server; every field has a default.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct McpConfig {
    /// Serve `/mcp` beside the chat API on `nanobot serve` (default true).
    pub http: bool,
    /// The `Host` names `/mcp` answers besides loopback (`localhost`, `127.0.0.1`, `::1`),
    /// e.g. the public name of a server behind a proxy. Others are refused, so a web page
    /// cannot reach a local server through DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// Offer `restore_memory` (default false).
    pub allow_restore: bool,
    /// Offer `forget_session` (default false).
    pub allow_forget: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            http: true,
            allowed_hosts: Vec::new(),
            allow_restore: false,
            allow_forget: false,
        }
    }
}

/// The host names `/mcp` always answers.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl McpConfig {
    /// The options of a server with this configuration (default limits).
    pub fn options(&self) -> McpOptions {
        McpOptions {
            allow_restore: self.allow_restore,
            ..McpOptions::default()
        }
    }

    /// The host names `/mcp` answers: loopback and [`McpConfig::allowed_hosts`].
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
        for host in &self.allowed_hosts {
            let host = host.trim().to_ascii_lowercase();
            if !host.is_empty() && !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        hosts
    }
}
