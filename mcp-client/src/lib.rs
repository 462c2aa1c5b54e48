//! An MCP client of the ecosystem's own, the official TypeScript SDK run by Node
//! (`driver.mjs`), driven line by line from Rust: the tests' and the benchmark's client of the MCP
//! server. It knows nothing of the project's crates, so a benchmark can use it without the test
//! kit's hooks.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The SDK version `scripts/test` installs into `target/tools`.
pub const SDK_VERSION: &str = "1.32.2";

/// The workspace's root (where `target/tools` is).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// The SDK's ESM folder, or a failure that says how to get it.
fn sdk() -> PathBuf {
    let dir = root().join("target/tools/node_modules/@modelcontextprotocol/sdk/dist/esm");
    assert!(
        dir.join("client/index.js").exists() && which("node"),
        "the MCP client library is missing: scripts/test installs it (npm install --prefix target/tools \
         @modelcontextprotocol/sdk@{SDK_VERSION}; Node from Debian's nodejs)"
    );
    dir
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// The client: its process, its answers in order, and the server's elicitations it accepted.
#[derive(Debug)]
pub struct Client {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    answers: mpsc::UnboundedReceiver<Value>,
    pub elicitations: Arc<Mutex<Vec<Value>>>,
    next: u64,
}

/// How long a test waits for one answer (a card's answer included).
const WAIT: Duration = Duration::from_secs(120);

impl Client {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// A client whose Node process has `env` besides (`NODE_EXTRA_CA_CERTS` to trust a CA).
    pub async fn start_with(env: &[(&str, String)]) -> Self {
        let mut child = tokio::process::Command::new("node")
            .arg(root().join("mcp-client/driver.mjs"))
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("MCP_SDK", sdk())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, answers) = mpsc::unbounded_channel();
        let elicitations = Arc::new(Mutex::new(Vec::new()));
        let seen = elicitations.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|_| json!({ "unparsed": line }));
                if v.get("event").is_some() {
                    seen.lock().unwrap().push(v);
                } else if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Self { child, stdin, answers, elicitations, next: 0 }
    }

    /// Sends `request`; its answer (`{ok, result | error}`).
    pub async fn ask(&mut self, mut request: Value) -> Value {
        self.next += 1;
        request["id"] = json!(self.next);
        let line = format!("{request}\n");
        self.stdin.write_all(line.as_bytes()).await.expect("the driver reads");
        let answer = tokio::time::timeout(WAIT, self.answers.recv())
            .await
            .unwrap_or_else(|_| panic!("no answer to {request} in {WAIT:?}"))
            .expect("the driver answers");
        assert_eq!(answer["id"], json!(self.next), "answers come in order: {answer}");
        answer
    }

    /// Connects over Streamable HTTP to `url` with `key`; the protocol revision agreed.
    pub async fn connect_http(&mut self, url: &str, key: &str) -> Value {
        let a = self.ask(json!({ "op": "connect", "http": { "url": url, "key": key } })).await;
        assert_eq!(a["ok"], json!(true), "connecting: {a}");
        a["result"].clone()
    }

    /// Spawns `command` as its server over stdio, with `env`.
    pub async fn connect_stdio(&mut self, command: &str, args: &[&str], env: &[(&str, String)]) -> Value {
        let env: serde_json::Map<String, Value> = env.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
        let a = self.ask(json!({ "op": "connect", "stdio": { "command": command, "args": args, "env": env } })).await;
        assert_eq!(a["ok"], json!(true), "connecting: {a}");
        a["result"].clone()
    }

    pub async fn list(&mut self) -> Vec<Value> {
        let a = self.ask(json!({ "op": "list" })).await;
        assert_eq!(a["ok"], json!(true), "listing: {a}");
        a["result"].as_array().cloned().unwrap_or_default()
    }

    /// Calls `tool`: the result's text and whether it is an error result.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Called {
        let a = self.ask(json!({ "op": "call", "name": tool, "arguments": arguments })).await;
        assert_eq!(a["ok"], json!(true), "calling {tool}: {a}");
        let r = &a["result"];
        let text = r["content"]
            .as_array()
            .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"))
            .unwrap_or_default();
        Called { text, error: r["isError"] == json!(true), ms: a["ms"].as_f64().unwrap_or_default() }
    }

    pub async fn close(mut self) {
        let _ = self.ask(json!({ "op": "close" })).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}

/// A tool call's result as the client read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Called {
    pub text: String,
    pub error: bool,
    /// How long the client library took over the call, in milliseconds.
    pub ms: f64,
}

impl Called {
    /// The result's JSON line (the first line), parsed.
    pub fn json(&self) -> Value {
        self.text.lines().next().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null)
    }

    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }

    /// The snapshot id the result's untrusted block names.
    pub fn snapshot_id(&self) -> String {
        let at = self.text.find("<<<UNTRUSTED_SNAPSHOT ").unwrap_or_else(|| panic!("no snapshot in {}", self.text));
        self.text[at + 22..].split_whitespace().next().unwrap_or_default().to_owned()
    }

    /// The ref and role of the node named `name` in the result's snapshot.
    pub fn node(&self, name: &str) -> (String, String) {
        let quoted = serde_json::to_string(name).expect("json");
        let line = self
            .text
            .lines()
            .find(|l| {
                l.split_once(' ')
                    .is_some_and(|(_, rest)| rest.split_once(' ').is_some_and(|(_, n)| n.starts_with(&quoted)))
            })
            .unwrap_or_else(|| panic!("no node {quoted} in {}", self.text));
        let mut parts = line.split(' ');
        (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned())
    }
}

/// The arguments of an act on the node named `name` of `snapshot`, with its evidence line.
pub fn on(snapshot: &Called, name: &str, consequential: bool) -> Value {
    let (node_ref, role) = snapshot.node(name);
    let id = snapshot.snapshot_id();
    let quoted = serde_json::to_string(name).expect("json");
    json!({
        "snapshot_id": id, "ref": node_ref, "expected_role": role, "expected_name": name,
        "consequential": consequential,
        "evidence": format!("SUBGOAL 1 | evidence: {role} {quoted} ref={node_ref} from snapshot {id} | intent: act on it"),
    })
}

/// A snapshot's arguments.
pub fn look() -> Value {
    json!({ "evidence": "SUBGOAL 1 | evidence: none | intent: observe the page" })
}

/// The Python SDK's client at the current protocol revision (`modern.py`), run with
/// `url` and `key`: it observes, the test reads the snapshot and names the click, it clicks.
/// Its lines (`{what, value}`) in order.
pub async fn modern_client(url: &str, key: &str, click: impl FnOnce(&Called) -> Value) -> Vec<Value> {
    let python = root().join("target/tools/py/bin/python");
    assert!(
        python.exists(),
        "the Python MCP client is missing: scripts/test installs it (python3 -m venv target/tools/py; \
         target/tools/py/bin/pip install mcp=={PY_SDK_VERSION})"
    );
    let mut child = tokio::process::Command::new(python)
        .arg(root().join("mcp-client/modern.py"))
        .env("MCP_URL", url)
        .env("MCP_KEY", key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("python starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let mut click = Some(click);
    while let Ok(Ok(Some(line))) = tokio::time::timeout(WAIT, lines.next_line()).await {
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|_| json!({ "unparsed": line }));
        if v["what"] == "snapshot"
            && let Some(click) = click.take()
        {
            let shown = Called {
                text: v["value"]["text"].as_str().unwrap_or_default().to_owned(),
                error: v["value"]["error"] == json!(true),
                ms: 0.0,
            };
            let args = format!("{}\n", click(&shown));
            stdin.write_all(args.as_bytes()).await.expect("python reads");
        }
        seen.push(v);
    }
    let status = tokio::time::timeout(WAIT, child.wait()).await.expect("python ends").expect("python ran");
    assert!(status.success(), "the Python client failed: {seen:?}");
    seen
}

/// The Python SDK version `scripts/test` installs into `target/tools/py`.
pub const PY_SDK_VERSION: &str = "2.3.0";
