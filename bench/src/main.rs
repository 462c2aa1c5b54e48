//! `grantctl-bench`: the benchmarks, each a measurement beside its floor in one run. It drives the
//! services as `grantctl` serves them (the `grantctl` binary beside it), so build both:
//! `cargo build --release -p ops -p bench`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use ops::pgcluster::{self, Durability};

#[derive(Debug, Parser)]
#[command(name = "grantctl-bench", about = "grant-ledger's benchmarks: each figure beside its floor, in one run")]
struct Cli {
    /// The PostgreSQL server; unset, the local cluster in `.pgdata/main` is started.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: BenchCmd,
}

#[derive(Debug, Subcommand)]
enum BenchCmd {
    /// Authorize-and-consume over loopback gRPC against a bare insert-and-commit, side by side.
    Authorize {
        #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
        clients: Vec<usize>,
        /// Seconds per client count, split between the two kinds.
        #[arg(long, default_value_t = 8.0)]
        seconds: f64,
        /// Also run the projection workers beside the server and report their lag (they share
        /// the machine's cores, so the ratios are then not comparable with runs without them).
        #[arg(long)]
        with_projections: bool,
        /// Filler events written to the log before the replicas start (not chains anyone
        /// reads): start-up time and memory must not grow with it.
        #[arg(long, default_value_t = 0, conflicts_with = "with_projections")]
        log_events: u64,
        /// After each quiet round, open this many idle connections (and one slow handshake) to
        /// each replica and measure again beside it.
        #[arg(long, default_value_t = 0)]
        flood: usize,
        /// Also measure with every replica's /metrics scraped this often (ms), beside a quiet
        /// measurement; 0: not measured.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
        scrape_ms: u64,
        /// Send each client's calls to the replicas in turn (a load balancer's round robin per
        /// call), not every call of a client to one replica.
        #[arg(long)]
        spread: bool,
    },
    /// The same steps (snapshot, click, snapshot, type) on one page through `grantctl mcp stdio`
    /// and through Playwright's MCP server on the same Chromium, interleaved (needs Node, and
    /// `npm install --prefix target/tools @playwright/mcp@0.0.86 @modelcontextprotocol/sdk@1.32.2`).
    /// Each round spends two acts of the task permission's 200.
    Mcp {
        #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=95))]
        rounds: u64,
    },
    /// Every projection rebuilt from a generated ledger, beside a plain COPY of the same events.
    Rebuild {
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1_000..=20_000_000))]
        events: u64,
    },
    /// A covered click through the browser runtime beside a plain WebDriver click on the same
    /// fixture page, and observe on a large page (needs Chromium and chromedriver; no database).
    Act {
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(10..=100_000))]
        iterations: u64,
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=9_000))]
        nodes: u64,
    },
    /// The owner's Stop against acts in flight: two browser sessions click as fast as they may
    /// while the Stop goes to the other authorizer replica; the time from its answer to the last
    /// request the site sees (needs Chromium, chromedriver and the database).
    Stop {
        #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        rounds: u64,
    },
    /// The agent harness's own work for one step (the snapshot taken in, the prompt, the answer
    /// checked), without the model, the runtime or the authorizer.
    Harness {
        #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
        iterations: u64,
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=9_000))]
        nodes: u64,
    },
    /// The gateway's routes (list grants, list pending approvals, resolve) beside the gRPC call
    /// each wraps, over TLS, at each connection count.
    Gateway {
        #[arg(long, value_delimiter = ',', default_value = "1,32")]
        connections: Vec<usize>,
        /// Seconds per route and connection count, split between the two kinds.
        #[arg(long, default_value_t = 8.0)]
        seconds: f64,
    },
    /// Another client's Authorize while this many workers' waits for an owner's answer are held
    /// open over two replicas, beside the same client with none, and each wait's cost.
    Waits {
        #[arg(long, value_delimiter = ',', default_value = "500,5000")]
        waits: Vec<usize>,
        #[arg(long, default_value_t = 1)]
        clients: usize,
        /// Seconds per wait count, half with the waits held and half without.
        #[arg(long, default_value_t = 8.0)]
        seconds: f64,
    },
    /// The auditor's proof over a log of EVENTS events: the tree built, a checkpoint signed,
    /// the log verified (beside the chains alone), proofs' sizes and times.
    Proof {
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        #[arg(long, default_value_t = 200)]
        proofs: usize,
    },
    /// Ledger append against a bare insert-and-commit, side by side.
    Append {
        #[arg(long, value_delimiter = ',', default_value = "1,32")]
        writers: Vec<usize>,
        /// Seconds per writer count, split between the two kinds.
        #[arg(long, default_value_t = 8.0)]
        seconds: f64,
    },
}

fn database_url(cli: &Option<String>) -> Result<String> {
    match cli {
        Some(url) => Ok(url.clone()),
        None => pgcluster::ensure_started(&PathBuf::from(".pgdata/main"), Durability::Durable),
    }
}

/// One benchmark, its report printed.
async fn run(database: &Option<String>, command: BenchCmd) -> Result<()> {
    match command {
        BenchCmd::Gateway { connections, seconds } => {
            if connections.is_empty() || connections.contains(&0) || !seconds.is_finite() || seconds <= 0.0 {
                bail!("--connections takes positive counts and --seconds a positive number");
            }
            let url = database_url(database)?;
            println!("{}", bench::gateway::run(&url, &connections, Duration::from_secs_f64(seconds)).await?);
        }
        BenchCmd::Authorize { clients, seconds, with_projections, log_events, flood, scrape_ms, spread } => {
            if clients.is_empty() || clients.contains(&0) || !seconds.is_finite() || seconds <= 0.0 {
                bail!("--clients takes positive counts and --seconds a positive number");
            }
            let url = database_url(database)?;
            println!(
                "{}",
                bench::authorize::run(
                    &url,
                    &clients,
                    Duration::from_secs_f64(seconds),
                    bench::authorize::Extras {
                        with_projections,
                        log_events,
                        flood,
                        scrape_every: (scrape_ms > 0).then(|| Duration::from_millis(scrape_ms)),
                        spread,
                    },
                )
                .await?
            );
        }
        BenchCmd::Harness { iterations, nodes } => {
            println!("{}", bench::harness::run(usize::try_from(iterations)?, usize::try_from(nodes)?).await?);
        }
        BenchCmd::Act { iterations, nodes } => {
            println!("{}", bench::act::run(usize::try_from(iterations)?, usize::try_from(nodes)?).await?);
        }
        BenchCmd::Stop { rounds } => {
            let url = database_url(database)?;
            println!("{}", bench::stop::run(&url, usize::try_from(rounds)?).await?);
        }
        BenchCmd::Mcp { rounds } => {
            let url = database_url(database)?;
            println!("{}", bench::mcp::run(&url, usize::try_from(rounds)?).await?);
        }
        BenchCmd::Rebuild { events } => {
            let url = database_url(database)?;
            println!("{}", bench::rebuild::run(&url, events).await?);
        }
        BenchCmd::Waits { waits, clients, seconds } => {
            if waits.is_empty() || waits.contains(&0) || clients == 0 || !seconds.is_finite() || seconds <= 0.0 {
                bail!("--waits and --clients take positive counts and --seconds a positive number");
            }
            let url = database_url(database)?;
            println!("{}", bench::waits::run(&url, &waits, clients, Duration::from_secs_f64(seconds)).await?);
        }
        BenchCmd::Proof { events, proofs } => {
            if events < 2 || proofs == 0 {
                bail!("--events takes at least 2 and --proofs at least 1");
            }
            let url = database_url(database)?;
            println!("{}", bench::proof::run(&url, events, proofs).await?);
        }
        BenchCmd::Append { writers, seconds } => {
            if writers.is_empty() || writers.contains(&0) || !seconds.is_finite() || seconds <= 0.0 {
                bail!("--writers takes positive counts and --seconds a positive number");
            }
            let url = database_url(database)?;
            println!("{}", bench::append(&url, &writers, Duration::from_secs_f64(seconds)).await?);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    telemetry::init_logs();
    let cli = Cli::parse();
    ops::run_main("grantctl-bench", run(&cli.database_url, cli.command))
}
