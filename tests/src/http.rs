//! A plain HTTP/1.1 client over a real socket, for the gateway's boundary tests: it sends
//! exactly the bytes a test writes (a malformed body, a forged header, two cookies) and reads the
//! status, headers and body as a browser would receive them.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// A problem's stable `code`.
    pub fn code(&self) -> String {
        assert_eq!(self.header("content-type"), Some("application/problem+json"), "{self:?}");
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }
}

/// A request being built.
#[derive(Debug, Clone)]
pub struct Call {
    port: u16,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Call {
    pub fn new(port: u16, method: &str, path: &str) -> Self {
        Self { port, method: method.into(), path: path.into(), headers: Vec::new(), body: Vec::new() }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", &format!("Bearer {token}"))
    }

    /// A JSON body, with its content type.
    pub fn json(self, body: &serde_json::Value) -> Self {
        self.raw("application/json", body.to_string().as_bytes())
    }

    pub fn raw(mut self, content_type: &str, body: &[u8]) -> Self {
        self.headers.push(("content-type".into(), content_type.into()));
        self.body = body.to_vec();
        self
    }

    /// Sends it on a connection of its own and reads the whole reply.
    pub async fn send(self) -> Reply {
        let mut stream = self.open().await;
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
            .await
            .expect("the gateway answers within 30 s")
            .expect("the reply is read");
        parse(&raw)
    }

    /// Sends it and returns the reader positioned after the headers: for an event stream.
    pub async fn stream(self) -> (u16, BufReader<TcpStream>) {
        let stream = self.open().await;
        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        reader.read_line(&mut status_line).await.expect("a status line");
        let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).await.expect("a header line");
            if line.trim().is_empty() {
                break;
            }
        }
        (status, reader)
    }

    async fn open(&self) -> TcpStream {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).await.expect("the gateway listens");
        let mut head =
            format!("{} {} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\nconnection: close\r\n", self.method, self.path, self.port);
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !self.body.is_empty() || self.method == "POST" {
            head.push_str(&format!("content-length: {}\r\n", self.body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.expect("the request is sent");
        stream.write_all(&self.body).await.expect("the body is sent");
        stream
    }
}

/// The next server-sent event on `reader`: its name and data (comments and keep-alives skipped).
pub async fn next_event(reader: &mut BufReader<TcpStream>, within: Duration) -> Option<(String, serde_json::Value)> {
    tokio::time::timeout(within, async {
        let (mut name, mut data) = (String::new(), String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if let Some(n) = line.strip_prefix("event:") {
                name = n.trim().to_owned();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.trim());
            } else if line.is_empty() && !name.is_empty() {
                return Some((name, serde_json::from_str(&data).ok()?));
            }
            // Anything else is chunk framing or a keep-alive comment.
        }
    })
    .await
    .ok()
    .flatten()
}

fn parse(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    Reply { status, headers, body }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}
