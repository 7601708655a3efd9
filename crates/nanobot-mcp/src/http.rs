//! The server over streamable HTTP (`/mcp` on `nanobot serve`): one service for every
//! caller, each request's memory chosen in front of it by whoever authenticated the
//! request (its API key) and handed over as a [`RequestScope`]. Neither the MCP session nor
//! a tool argument chooses a scope, so an MCP session id presented with another key reaches
//! that key's memory only.

use std::sync::Arc;

use nanobot_llm_port::tokens::TokenCounter;
use nanobot_turn::{ScopeMemory, SearchMemory};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};

use crate::{ForgetSession, McpOptions, MemoryServer, Shared};

/// The memory one HTTP request may use: the server in front puts it in the request's
/// extensions once it knows who is calling.
#[derive(Clone)]
pub struct RequestScope(pub Arc<ScopeMemory>);

/// A memory server whose scope is each request's [`RequestScope`].
#[derive(Clone)]
pub struct HttpMemoryServer {
    shared: Shared,
}

/// The service `/mcp` routes to.
pub type McpHttpService = StreamableHttpService<HttpMemoryServer, LocalSessionManager>;

impl HttpMemoryServer {
    /// A server searching with `search` (results counted with `counter`).
    pub fn new(search: Arc<SearchMemory>, counter: Arc<dyn TokenCounter>) -> Self {
        HttpMemoryServer {
            shared: Shared::new(search, counter),
        }
    }

    /// Other limits.
    pub fn with_options(mut self, options: McpOptions) -> Self {
        self.shared.options = options;
        self
    }

    /// Offers `forget_session`, forgetting with `forget`.
    pub fn with_forget(mut self, forget: Arc<dyn ForgetSession>) -> Self {
        self.shared.forget = Some(forget);
        self
    }

    /// The streamable HTTP service (a tower service for any router), answering requests
    /// whose `Host` is one of `hosts` (host names, or `host:port`); others are refused, so
    /// a web page cannot reach a local server through DNS rebinding.
    pub fn service(self, hosts: Vec<String>) -> McpHttpService {
        let config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts);
        StreamableHttpService::new(
            move || Ok(self.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    }

    /// The server of the scope the request was given.
    fn scoped(&self, context: &RequestContext<RoleServer>) -> Result<MemoryServer, ErrorData> {
        let scope = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<RequestScope>())
            .ok_or_else(|| {
                ErrorData::internal_error(
                    "this request reached the memory server without a scope: the server in front of it must choose one",
                    None,
                )
            })?;
        Ok(MemoryServer {
            memory: scope.0.clone(),
            shared: self.shared.clone(),
        })
    }
}

impl ServerHandler for HttpMemoryServer {
    fn get_info(&self) -> ServerConfig {
        crate::server_info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.scoped(&context)?.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.scoped(&context)?.call_tool(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.scoped(&context)?
            .list_resources(request, context)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.scoped(&context)?.read_resource(request, context).await
    }
}
