//! A model provider on loopback, over HTTPS under a throwaway CA: each request is answered by a
//! script (status, headers, body, delay), and every request is kept as it arrived (path, headers,
//! body) so a test can read what the harness sent. And a CONNECT proxy that counts the tunnels
//! it opened.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One answer of the stub.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
    pub delay: Duration,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Self { status: 200, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
    }

    pub fn status(status: u16, body: Value) -> Self {
        Self { status, ..Self::ok(body) }
    }

    pub fn with_header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }

    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A request as the stub got it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When it arrived.
    pub at: std::time::Instant,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

type Script = Box<dyn FnMut(usize, &Seen) -> Reply + Send>;

/// A running stub; it stops when dropped.
pub struct Stub {
    /// `https://localhost:<port>/v1`.
    pub base_url: String,
    /// The CA (PEM) its certificate chains to.
    pub ca_pem: String,
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Stub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stub").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Stub {
    /// Serves HTTPS on a loopback port, answering request `i` with `script(i, &seen)`.
    pub async fn start(script: impl FnMut(usize, &Seen) -> Reply + Send + 'static) -> Self {
        let (acceptor, ca_pem) = browser_runtime::fixture::tls(&["localhost"]).expect("a throwaway CA");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script: Arc<tokio::sync::Mutex<Script>> = Arc::new(tokio::sync::Mutex::new(Box::new(script)));
        let kept = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, seen, script) = (acceptor.clone(), Arc::clone(&kept), Arc::clone(&script));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (seen, script) = (Arc::clone(&seen), Arc::clone(&script));
                        async move { Ok::<_, Infallible>(answer(req, &seen, &script).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Self { base_url: format!("https://localhost:{port}/v1"), ca_pem, port, seen, task }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.seen).clone()
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: &Mutex<Vec<Seen>>,
    script: &tokio::sync::Mutex<Script>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let headers =
        req.headers().iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned())).collect();
    let bytes = req.into_body().collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default();
    let got = Seen {
        at: std::time::Instant::now(),
        path,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    let i = {
        let mut s = lock(seen);
        s.push(got.clone());
        s.len() - 1
    };
    let reply = (script.lock().await)(i, &got);
    tokio::time::sleep(reply.delay).await;
    let mut r = Response::builder().status(reply.status).header("content-type", "application/json");
    for (k, v) in &reply.headers {
        r = r.header(*k, v);
    }
    r.body(Full::new(Bytes::from(reply.body))).expect("a response")
}

/// An OpenAI chat-completions answer: each call `(name, arguments)` and the text.
pub fn openai(calls: &[(&str, Value)], text: &str) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({ "id": format!("call_{i}"), "type": "function",
                    "function": { "name": name, "arguments": args.to_string() } })
        })
        .collect();
    let mut message = json!({ "role": "assistant", "content": text });
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    json!({ "id": "chatcmpl-1", "object": "chat.completion", "model": "stub",
            "choices": [{ "index": 0, "message": message, "finish_reason": "tool_calls" }] })
}

/// An Anthropic Messages answer: the text, then each call as a `tool_use` block.
pub fn anthropic(calls: &[(&str, Value)], text: &str) -> Value {
    let mut content = vec![json!({ "type": "text", "text": text })];
    for (i, (name, input)) in calls.iter().enumerate() {
        content.push(json!({ "type": "tool_use", "id": format!("toolu_{i}"), "name": name, "input": input }));
    }
    json!({ "id": "msg_1", "type": "message", "role": "assistant", "model": "stub", "content": content,
            "stop_reason": "tool_use" })
}

/// A CONNECT proxy on loopback; it counts the tunnels it opened, by target.
#[derive(Debug)]
pub struct Proxy {
    pub url: String,
    pub tunnels: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let tunnels: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = Arc::clone(&tunnels);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let tunnels = Arc::clone(&kept);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                        if client.read_exact(&mut byte).await.is_err() {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let Some(target) = head.strip_prefix("CONNECT ").and_then(|r| r.split_whitespace().next()) else {
                        return;
                    };
                    lock(&tunnels).push(target.to_owned());
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else { return };
                    if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        Self { url: format!("http://127.0.0.1:{port}"), tunnels, task }
    }
}
