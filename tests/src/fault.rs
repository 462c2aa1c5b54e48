//! A TCP proxy the kit puts between a service and what it calls (PostgreSQL, another service):
//! on command it delays every byte, cuts every open connection with a reset, or refuses new
//! ones, as a network and its middleboxes do.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to traffic from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Passes bytes as they come.
    None,
    /// Holds each chunk this long before passing it on, both ways.
    Delay(Duration),
    /// Accepts a new connection and resets it at once; open ones go on.
    Refuse,
}

#[derive(Debug)]
struct State {
    fault: Mutex<Fault>,
    /// Bumped by each cut: every pump started before it ends.
    cuts: tokio::sync::watch::Sender<u64>,
}

/// The proxy: listening on `port`, forwarding to its upstream until dropped.
#[derive(Debug)]
pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.cut();
    }
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State { fault: Mutex::new(Fault::None), cuts: tokio::sync::watch::channel(0).0 });
        let shared = Arc::clone(&state);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let fault = *shared.fault.lock().unwrap();
                if fault == Fault::Refuse {
                    reset(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream).await else {
                    reset(client);
                    continue;
                };
                tokio::spawn(pump(client, server, Arc::clone(&shared)));
            }
        });
        Self { port, state, accepting }
    }

    /// From now on, `fault`.
    pub fn set(&self, fault: Fault) {
        *self.state.fault.lock().unwrap() = fault;
    }

    /// Resets every open connection now.
    pub fn cut(&self) {
        self.state.cuts.send_modify(|n| *n += 1);
    }

    /// `url` with its host and port replaced by the proxy's (one host; query kept).
    pub fn url_for(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let user = authority.rsplit_once('@').map(|(u, _)| format!("{u}@")).unwrap_or_default();
        format!("{scheme}://{user}127.0.0.1:{}/{path}", self.port)
    }
}

/// Closes `s` with a reset, not a goodbye.
fn reset(s: TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

/// Both ways until either side closes or a cut comes.
async fn pump(client: TcpStream, server: TcpStream, state: Arc<State>) {
    let mut cuts = state.cuts.subscribe();
    cuts.mark_unchanged();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let delay = |state: &State| match *state.fault.lock().unwrap() {
        Fault::Delay(d) => Some(d),
        _ => None,
    };
    loop {
        tokio::select! {
            _ = cuts.changed() => break,
            n = cr.read(&mut up) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some(d) = delay(&state) { tokio::time::sleep(d).await; }
                    if sw.write_all(&up[..n]).await.is_err() { break; }
                }
            },
            n = sr.read(&mut down) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some(d) = delay(&state) { tokio::time::sleep(d).await; }
                    if cw.write_all(&down[..n]).await.is_err() { break; }
                }
            },
        }
    }
    if let (Ok(c), Ok(s)) = (cr.reunite(cw), sr.reunite(sw)) {
        reset(c);
        reset(s);
    }
}
