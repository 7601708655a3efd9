//! `nanobot serve`: the bot behind the OpenAI-compatible API of `nanobot-serve`, on the same
//! configuration file as the CLI bot.

use std::net::SocketAddr;
use std::sync::Arc;

use nanobot_memory_scope::{ScopeKey, Subject};
use nanobot_serve::Server;

use crate::bot::{Bot, Storage};
use crate::error::AppError;

/// The model name the server lists and answers to.
pub const SERVED_MODEL: &str = "nanobot";

/// Serves `bot`'s memory (the scope it was opened in) to one MCP host on stdin and stdout
/// until the host leaves. Stdout carries the protocol alone: logs go to stderr.
pub async fn mcp_stdio(bot: Bot) -> Result<(), AppError> {
    let bot = Arc::new(bot);
    let mut server = nanobot_mcp::MemoryServer::new(
        bot.memory.clone(),
        bot.search.clone(),
        bot.agent.counter().clone(),
    )
    .with_options(bot.config.mcp.options());
    if bot.config.mcp.allow_forget {
        server = server.with_forget(Arc::new(ForgetInScope(bot.clone())));
    }
    let served = server.serve_stdio().await.map_err(AppError::Mcp);
    bot.finish().await?;
    served
}

/// `/mcp` for `bot` on `address`: the chat API's keys choose each request's memory; the
/// `Host` names answered are loopback, the configured ones and the listening address.
fn mcp_http(bot: &Arc<Bot>, address: SocketAddr) -> nanobot_mcp::McpHttpService {
    let config = &bot.config.mcp;
    let mut server =
        nanobot_mcp::HttpMemoryServer::new(bot.search.clone(), bot.agent.counter().clone())
            .with_options(config.options());
    if config.allow_forget {
        server = server.with_forget(Arc::new(ForgetInScope(bot.clone())));
    }
    let mut hosts = config.hosts();
    if !address.ip().is_unspecified() && !address.ip().is_loopback() {
        hosts.push(address.ip().to_string());
    }
    server.service(hosts)
}

/// `forget_session` for MCP hosts: the session forgotten in the served scope alone.
struct ForgetInScope(Arc<Bot>);

#[async_trait::async_trait]
impl nanobot_mcp::ForgetSession for ForgetInScope {
    async fn forget(
        &self,
        memory: &Arc<nanobot_turn::ScopeMemory>,
        key: &nanobot_session_store::SessionKey,
    ) -> Result<String, String> {
        self.0
            .assembled
            .forget_in_scope(memory, key)
            .await
            .map(|report| report.describe())
            .map_err(|e| e.to_string())
    }
}

/// Serves `bot` on `listen` (else the configured address) until Ctrl-C. A non-loopback
/// address without keys is refused: anyone who can reach it would use the bot's memory.
pub async fn serve(
    bot: Bot,
    listen: Option<&str>,
    out: &mut dyn std::io::Write,
) -> Result<(), AppError> {
    let config = &bot.config;
    let text = listen.unwrap_or(&config.serve.listen).to_owned();
    let address: SocketAddr = text.parse().map_err(|_| {
        AppError::Usage(format!(
            "--listen {text:?} is not an address and port, e.g. 127.0.0.1:8080"
        ))
    })?;
    let settings = config
        .serve
        .settings(SERVED_MODEL, &|var| config.serve_secret(var))
        .map_err(|e| config.invalid(e.within("serve")))?;
    if settings.keys.is_empty() && !address.ip().is_loopback() {
        return Err(AppError::Usage(format!(
            "refusing to listen on {address} without API keys: anyone who reaches it would talk to the bot and its memory. Add [[serve.keys]] to the configuration, or listen on 127.0.0.1"
        )));
    }
    let bot = Arc::new(bot);
    // Dream keeps curating every scope's memory on its schedule while the server runs.
    let stop = Arc::new(tokio::sync::Notify::new());
    crate::bot::spawn_dream_schedule(bot.clone(), stop.clone(), |scope, line| {
        // A scope names a person: logged as a hash.
        let scope = nanobot_serve::log_id(&scope.subject.to_string());
        tracing::info!(%scope, "dream: {line}");
    });
    if let Some(ttl) = bot.agent.settings().idle_ttl {
        let agent = bot.agent.clone();
        nanobot_memory::background::spawn_idle_sweeper(
            agent,
            ttl,
            stop.clone(),
            nanobot_serve::log_compaction,
        );
    }
    let server = server_of(&bot, settings, address)?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| AppError::Usage(format!("cannot listen on {address}: {e}")))?;
    let bound = listener.local_addr().unwrap_or(address);
    let _ = writeln!(
        out,
        "nanobot serve: http://{bound}/v1 (model {SERVED_MODEL:?}, {} key(s)){}; Ctrl-C stops",
        bot.config.serve.keys.len(),
        if bot.config.mcp.http {
            format!(", MCP at http://{bound}/mcp")
        } else {
            String::new()
        }
    );
    let _ = out.flush();
    // The peer's address decides who may read /metrics without its key.
    let app = server
        .router()
        .into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| AppError::Usage(format!("the server failed: {e}")))?;
    stop.notify_waiters();
    // Sessions written, background consolidations finished.
    bot.finish().await
}

/// The server of `bot`: its search, `/mcp`, `/metrics` and the inspector as configured, and
/// the database's readiness check.
fn server_of(
    bot: &Arc<Bot>,
    settings: nanobot_serve::ServeSettings,
    address: SocketAddr,
) -> Result<Server, AppError> {
    let mut server = Server::new(bot.agent.clone(), settings).with_search(bot.search.clone());
    if bot.config.mcp.http {
        server = server.with_mcp(mcp_http(bot, address));
    }
    if bot.config.serve.metrics {
        server = server.with_metrics(crate::metrics::renderer()?);
    }
    if bot.config.serve.inspector {
        server = server.with_inspector(Arc::new(Directory(bot.clone())));
    }
    if let Storage::Postgres(store) = &bot.storage {
        let store = store.clone();
        server = server.with_readiness(Arc::new(move || {
            let store = store.clone();
            Box::pin(async move {
                store
                    .meta("min_reader")
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("the database cannot be reached: {e}"))
            })
        }));
    }
    Ok(server)
}

/// The scopes the inspector lists: the agent's, then every scope the storage holds.
struct Directory(Arc<Bot>);

#[async_trait::async_trait]
impl nanobot_serve::ScopeDirectory for Directory {
    async fn scopes(&self) -> Result<Vec<ScopeKey>, String> {
        let others = self
            .0
            .assembled
            .storage()
            .scopes()
            .await
            .map_err(|e| e.to_string())?;
        let mut scopes = vec![ScopeKey::local(Subject::Agent)];
        scopes.extend(others.into_iter().map(|s| ScopeKey::local(s.subject)));
        Ok(scopes)
    }
}
