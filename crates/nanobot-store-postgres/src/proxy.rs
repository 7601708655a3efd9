//! A loopback TCP fault proxy for PostgreSQL (feature `test-util`): the store connects
//! through it instead of to the server, and a test makes the network misbehave under the
//! store: added latency, a blackhole (nothing passes; the server keeps the connection),
//! a half-open connection (the server's side is gone, the client's is silent), a reset
//! partway through the bytes of a statement, or every connection reset at once.
//! Test code only.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the network does to the bytes passing through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetFault {
    /// Bytes pass.
    None,
    /// Each chunk waits this long before it is passed on (both ways).
    Latency(Duration),
    /// Nothing passes either way; connections stay open on both sides (a partition). What
    /// was held back passes when the fault is lifted.
    Blackhole,
    /// The server's side of every connection is closed, the client's stays open and
    /// hears nothing (the server or a middlebox went away without a word).
    HalfOpen,
    /// After this many more bytes from the client, its connection is reset (TCP RST on
    /// both sides), in the middle of whatever statement those bytes carry.
    ResetAfter(u64),
}

struct Shared {
    fault: Mutex<NetFault>,
    /// Bytes from clients since the fault was set (for `ResetAfter`).
    sent: AtomicU64,
    connections: AtomicU64,
    resets: AtomicU64,
    /// Writes passed on from clients to the server, in all (a test waits on it to stall a
    /// call at a known point instead of at a guessed time).
    forwarded: AtomicU64,
    /// A fault to set once `forwarded` reaches a count (see `set_after_writes`).
    armed: Mutex<Option<(u64, NetFault)>>,
    /// Bumped to reset every connection.
    generation: watch::Sender<u64>,
}

impl Shared {
    fn set(&self, fault: NetFault) {
        self.sent.store(0, Ordering::SeqCst);
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = fault;
    }

    /// Counts a write passed on to the server, and sets the armed fault when it is due.
    fn forwarded_one(&self) {
        let count = self.forwarded.fetch_add(1, Ordering::SeqCst) + 1;
        let mut armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, fault)) = *armed
            && count >= at
        {
            *armed = None;
            drop(armed);
            self.set(fault);
        }
    }

    fn fault(&self) -> NetFault {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The proxy; it stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.reset_all();
    }
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (generation, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            fault: Mutex::new(NetFault::None),
            sent: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            armed: Mutex::new(None),
            generation,
        });
        let accepting = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let shared = accepting.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        shared.connections.fetch_add(1, Ordering::Relaxed);
                        connection(client, server, shared).await;
                    }
                });
            }
        });
        Ok(FaultProxy { addr, shared, task })
    }

    /// The server address in `database_url` (`postgres://user@host:port/db`; port 5432
    /// when it names none).
    pub fn upstream_of(database_url: &str) -> Option<SocketAddr> {
        use std::net::ToSocketAddrs;
        let rest = database_url.split_once("://")?.1;
        let authority = rest.split('/').next()?;
        let host = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let host = if host.contains(':') {
            host.to_owned()
        } else {
            format!("{host}:5432")
        };
        host.to_socket_addrs().ok()?.next()
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `database_url` with its host and port replaced by the proxy's.
    pub fn url(&self, database_url: &str) -> String {
        let (scheme, rest) = database_url
            .split_once("://")
            .unwrap_or(("postgres", database_url));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let user = authority
            .rsplit_once('@')
            .map(|(user, _)| format!("{user}@"));
        format!(
            "{scheme}://{}{}/{path}",
            user.unwrap_or_default(),
            self.addr
        )
    }

    /// From now on the network does `fault`.
    pub fn set(&self, fault: NetFault) {
        *self
            .shared
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.shared.set(fault);
    }

    /// Sets `fault` the moment the `writes`-th write from clients (counted as
    /// [`FaultProxy::forwarded_upstream`] counts) has reached the server: a call can be
    /// stalled at a known point of its exchange, whatever the machine's load.
    pub fn set_after_writes(&self, writes: u64, fault: NetFault) {
        *self
            .shared
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((writes, fault));
    }

    /// Resets every open connection now.
    pub fn reset_all(&self) {
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// Connections made through it so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Connections it reset (by `ResetAfter` or `reset_all`).
    pub fn resets(&self) -> u64 {
        self.shared.resets.load(Ordering::Relaxed)
    }

    /// Writes it has passed on from clients to the server so far.
    pub fn forwarded_upstream(&self) -> u64 {
        self.shared.forwarded.load(Ordering::SeqCst)
    }
}

async fn connection(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    // Closing with a zero linger sends RST, as a reset connection does.
    #[allow(deprecated)]
    {
        let _ = client.set_linger(Some(Duration::ZERO));
        let _ = server.set_linger(Some(Duration::ZERO));
    }
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let mut generation = shared.generation.subscribe();
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, shared.clone(), true);
    let down = pump(server_read, client_write, shared.clone(), false);
    tokio::select! {
        // Either direction ending ends the connection (the other side is then closed).
        _ = up => {}
        _ = down => {}
        _ = generation.changed() => {
            shared.resets.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Moves bytes one way until the source closes or a fault ends the connection. Returns
/// (dropping both halves, which resets them) when the connection is over.
async fn pump(mut from: OwnedReadHalf, to: OwnedWriteHalf, shared: Arc<Shared>, upstream: bool) {
    let mut to = Some(to);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                if shared.fault() == NetFault::HalfOpen && !upstream {
                    // The server closed; the client must not hear of it.
                    std::future::pending::<()>().await;
                }
                return;
            }
            Ok(n) => n,
        };
        let mut chunk = &buf[..n];
        loop {
            match shared.fault() {
                NetFault::None => break,
                NetFault::Latency(delay) => {
                    tokio::time::sleep(delay).await;
                    break;
                }
                NetFault::Blackhole => tokio::time::sleep(Duration::from_millis(10)).await,
                NetFault::HalfOpen => {
                    if upstream {
                        // The server's side goes; what the client sends is swallowed.
                        to = None;
                        chunk = &[];
                        break;
                    }
                    std::future::pending::<()>().await;
                }
                NetFault::ResetAfter(limit) => {
                    if !upstream {
                        break;
                    }
                    let before = shared.sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                    if before + chunk.len() as u64 > limit {
                        let keep = limit.saturating_sub(before) as usize;
                        if let Some(writer) = to.as_mut() {
                            let _ = writer.write_all(&chunk[..keep.min(chunk.len())]).await;
                            let _ = writer.flush().await;
                        }
                        shared.resets.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    break;
                }
            }
        }
        if let Some(writer) = to.as_mut()
            && !chunk.is_empty()
        {
            if writer.write_all(chunk).await.is_err() {
                return;
            }
            if upstream {
                shared.forwarded_one();
            }
        }
    }
}
