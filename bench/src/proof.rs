//! `grantctl-bench proof`: the auditor's proof over a log of `events` events: the tree built,
//! a checkpoint signed, the whole log verified against it beside `grantctl check`'s chains
//! alone, and proofs' sizes and times.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Result;
use ledger::PgStore;
use ledger::proof::note::Signer;

use super::{Samples, Scratch};

pub async fn run(url: &str, events: u64, proofs: usize) -> Result<String> {
    let scratch = Scratch::create(url).await?;
    let result = measure(&scratch, events, proofs).await;
    scratch.drop_now().await?;
    result
}

async fn measure(scratch: &Scratch, events: u64, proofs: usize) -> Result<String> {
    let store = PgStore::new(ledger::postgres::pool(scratch.config.clone(), 4).map_err(anyhow::Error::msg)?);
    let written = super::rebuild::generate(&store, events).await?;
    let key = Signer::generate("bench.test/log")?;
    let signing = ops::proof::Signing { key, every_events: 1, every: Duration::ZERO, file: None };
    let mut out = String::new();

    // The tree over the first half, a checkpoint; then the rest, another.
    let t = Instant::now();
    let half = written / 2;
    let mut first = store.tree_head().await?.size;
    while first < half {
        let left = usize::try_from(half - first).unwrap_or(usize::MAX);
        first = store.extend_tree(left.min(ledger::READ_PAGE)).await?.size;
    }
    ops::proof::sign_head(&store, &signing, first, |l, s| s > l).await?;
    let size = ops::proof::extend(&store).await?;
    let built = t.elapsed();
    let t = Instant::now();
    ops::proof::sign_head(&store, &signing, size, |l, s| s > l).await?;
    let signed = t.elapsed();
    writeln!(
        out,
        "tree over {size} events built in {:.1} s ({:.0} events/s); a checkpoint signed in {:.1} ms",
        built.as_secs_f64(),
        size as f64 / built.as_secs_f64(),
        signed.as_secs_f64() * 1e3
    )?;

    let trust = ops::proof::Trust { log_key: signing.key.verifier(), witnesses: vec![] };
    let t = Instant::now();
    ops::proof::verify_log(&store, &trust, None).await?;
    let verified = t.elapsed();
    let t = Instant::now();
    ops::check::run(&scratch.config, ledger::READ_PAGE).await?;
    let chains = t.elapsed();
    writeln!(
        out,
        "verify {size} events against the signed checkpoints: {:.1} s ({:.0} events/s); `grantctl check` (the chains \
         alone) on the same log: {:.1} s; ratio {:.2}x",
        verified.as_secs_f64(),
        size as f64 / verified.as_secs_f64(),
        chains.as_secs_f64(),
        verified.as_secs_f64() / chains.as_secs_f64()
    )?;

    let client = ops::connect_config(&scratch.config).await?;
    let ids: Vec<uuid::Uuid> = client
        .query("SELECT event_id FROM events ORDER BY random() LIMIT $1", &[&i64::try_from(proofs)?])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut times = Samples::default();
    let mut bytes = 0usize;
    for id in &ids {
        let t = Instant::now();
        let p = ops::proof::prove_event(&store, *id).await?;
        times.latencies.push(t.elapsed());
        bytes = bytes.max(p["inclusion_proof"].as_array().map_or(0, Vec::len) * 32);
    }
    writeln!(
        out,
        "inclusion proof ({} events): p50 {:.2} ms, p99 {:.2} ms; at most {bytes} bytes of hashes (plus the {}-byte \
         checkpoint)",
        ids.len(),
        times.percentile(50).as_secs_f64() * 1e3,
        times.percentile(99).as_secs_f64() * 1e3,
        ops::proof::prove_event(&store, ids[0]).await?["checkpoint"].as_str().map_or(0, str::len)
    )?;
    let t = Instant::now();
    let c = ops::proof::prove_consistency(&store, first, size).await?;
    writeln!(
        out,
        "consistency proof {first} -> {size}: {:.2} ms, {} bytes of hashes",
        t.elapsed().as_secs_f64() * 1e3,
        c["consistency_proof"].as_array().map_or(0, Vec::len) * 32
    )?;
    Ok(out)
}
