//! `grantctl serve mcp` in process on the kit's stack, and the ecosystem's MCP clients
//! (`mcp-client`) that drive it.

use std::time::Duration;

pub use mcp_client::*;

/// `grantctl serve mcp` in process on loopback, to `authorizer_port` and `runtime_port`, linking
/// cards to `console`; its URL (`http://127.0.0.1:<port>/mcp`).
pub async fn serve(
    authorizer_port: u16,
    runtime_port: u16,
    console: &str,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    serve_on(authorizer_port, runtime_port, console, None).await
}

/// [`serve`] over TLS with a throwaway CA written to `dir`: its URL
/// (`https://localhost:<port>/mcp`) and the CA's file, for the client to trust.
pub async fn serve_tls(
    authorizer_port: u16,
    runtime_port: u16,
    console: &str,
    dir: &std::path::Path,
) -> (String, std::path::PathBuf, tokio::sync::oneshot::Sender<()>) {
    let pki = ops::tls::DevPki::generate().expect("a throwaway CA");
    pki.write(dir).expect("the CA's files");
    let (ca, cert, key) = ops::tls::DevPki::paths(dir);
    let tls = transport::tls_config_http1(&std::fs::read(cert).unwrap(), &std::fs::read(key).unwrap()).unwrap();
    let (url, stop) = serve_on(authorizer_port, runtime_port, console, Some(tls)).await;
    (url.replace("http://127.0.0.1", "https://localhost"), ca, stop)
}

async fn serve_on(
    authorizer_port: u16,
    runtime_port: u16,
    console: &str,
    tls: Option<std::sync::Arc<transport::ServerConfig>>,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let channel = |port: u16| {
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}")).expect("url").connect_lazy()
    };
    let server = mcp::Server::new(mcp::Config {
        authorizer: channel(authorizer_port),
        runtime: channel(runtime_port),
        console_url: console.to_owned(),
        agent_version: "mcp-test".into(),
        max_steps: 50,
        approval_wait: Duration::from_secs(90),
        idle: Duration::from_secs(300),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let hosts = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    tokio::spawn(mcp::serve_http(listener, server, tls, hosts, async {
        let _ = stopped.await;
    }));
    (format!("http://127.0.0.1:{port}/mcp"), stop)
}
