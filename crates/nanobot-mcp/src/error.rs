//! What can go wrong serving: the transport, before or after the handshake.

/// Why the server stopped with an error.
#[derive(Debug)]
#[non_exhaustive]
pub enum McpServerError {
    /// The client never completed the handshake (it went away, or spoke no MCP).
    Handshake {
        /// What the protocol layer said.
        reason: String,
    },
    /// The connection's task ended abnormally.
    Connection {
        /// What ended it.
        reason: String,
    },
}

impl std::fmt::Display for McpServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpServerError::Handshake { reason } => {
                write!(f, "the MCP client did not complete the handshake: {reason}")
            }
            McpServerError::Connection { reason } => {
                write!(f, "the MCP connection ended abnormally: {reason}")
            }
        }
    }
}

impl std::error::Error for McpServerError {}
