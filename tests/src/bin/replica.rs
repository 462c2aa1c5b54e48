//! One authorizer replica for the replica tests, in a process of its own so that a test can kill
//! it: the production serving code (`ops::serve`), configured by the environment as
//! `grantctl serve authorizer` is, on plaintext loopback.

use anyhow::Context;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let config = ops::serve::AuthorizerConfig::parse(|k| std::env::var(k).ok(), true)?;
    let url = config.database_url.clone().context("DATABASE_URL is required")?;
    ops::serve::authorizer(config, url).await
}
