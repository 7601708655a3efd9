//! A loopback HTTP/1.1 server that replays scripted answers and records each request, so
//! backend tests can assert what was sent as well as what was parsed. Test code: failures
//! panic.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A whole response.
    Full {
        /// Status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// The body.
        body: Vec<u8>,
    },
    /// A streamed body (server-sent events), each piece sent after its delay, then the
    /// connection closes.
    Stream {
        /// The pieces.
        chunks: Vec<(Vec<u8>, Duration)>,
    },
    /// Declares `declared` bytes, sends `body`, then closes: a body cut mid-way.
    Cut {
        /// What is sent.
        body: Vec<u8>,
        /// The length announced.
        declared: usize,
    },
    /// Sends the head and part of a stream, then says nothing more for `silence`.
    Stall {
        /// What is sent before the silence.
        sent: Vec<u8>,
        /// How long it stays silent.
        silence: Duration,
    },
}

impl Reply {
    /// A JSON answer.
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply::Full {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// A JSON answer with extra headers.
    pub fn json_with(status: u16, body: &Value, headers: &[(&str, &str)]) -> Reply {
        let mut headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        headers.push(("content-type".into(), "application/json".into()));
        Reply::Full {
            status,
            headers,
            body: body.to_string().into_bytes(),
        }
    }

    /// Server-sent events from the lines of `text` (as recorded), in pieces of `piece` bytes.
    pub fn sse(text: &str, piece: usize) -> Reply {
        Reply::Stream {
            chunks: text
                .as_bytes()
                .chunks(piece.max(1))
                .map(|c| (c.to_vec(), Duration::ZERO))
                .collect(),
        }
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`.
    pub method: String,
    /// `/v1/chat/completions`.
    pub path: String,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Recorded {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The server; it stops when dropped.
#[derive(Debug)]
pub struct FakeServer {
    url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

/// A scripted model: the reply to each request, computed from the request.
pub type Responder = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

impl FakeServer {
    /// Listens on `127.0.0.1` and answers every request with what `responder` makes of it,
    /// as many requests as come (a scripted model for whole-program tests).
    pub async fn respond_with(responder: Responder) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let recorded = recorded.clone();
                let responder = responder.clone();
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut stream).await else {
                        return;
                    };
                    let reply = responder(&request);
                    recorded.lock().unwrap().push(request);
                    write_reply(&mut stream, reply).await;
                });
            }
        });
        FakeServer {
            url,
            requests,
            task,
        }
    }

    /// A scripted OpenAI-compatible chat model on `127.0.0.1`: each request is answered,
    /// whole (never streamed), with what `answer` makes of the text of its last message.
    pub async fn chat_model(answer: Arc<dyn Fn(&str) -> String + Send + Sync>) -> FakeServer {
        FakeServer::respond_with(Arc::new(move |request: &Recorded| {
            let body = request.json();
            let last = body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default()
                .to_owned();
            Reply::json(
                200,
                &serde_json::json!({
                    "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": answer(&last)}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 5}
                }),
            )
        }))
        .await
    }

    /// Listens on `127.0.0.1` and answers each connection with the next reply.
    pub async fn start(replies: Vec<Reply>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let reply = replies.lock().unwrap().pop_front();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    serve(stream, reply, recorded).await;
                });
            }
        });
        FakeServer {
            url,
            requests,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, reply: Option<Reply>, recorded: Arc<Mutex<Vec<Recorded>>>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    recorded.lock().unwrap().push(request);
    let Some(reply) = reply else {
        let _ = stream
            .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 31\r\nconnection: close\r\n\r\nno reply scripted for this call")
            .await;
        return;
    };
    write_reply(&mut stream, reply).await;
}

async fn write_reply(stream: &mut TcpStream, reply: Reply) {
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(&body).await;
        }
        Reply::Stream { chunks } => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                .await;
            for (chunk, delay) in chunks {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if stream.write_all(&chunk).await.is_err() {
                    return;
                }
                let _ = stream.flush().await;
            }
        }
        Reply::Cut { body, declared } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\nconnection: close\r\n\r\n"
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(&body).await;
        }
        Reply::Stall { sent, silence } => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                .await;
            let _ = stream.write_all(&sent).await;
            let _ = stream.flush().await;
            tokio::time::sleep(silence).await;
        }
    }
    let _ = stream.shutdown().await;
}

async fn read_request(stream: &mut TcpStream) -> Option<Recorded> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}
