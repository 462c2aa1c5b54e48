//! A throwaway PostgreSQL cluster from the system's server binaries, for tests, the main job
//! and benchmarks when `DATABASE_URL` is unset. As root, `initdb` and `pg_ctl` run as the
//! `postgres` user, since PostgreSQL refuses to run as root.

use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const INSTALL_HINT: &str = "PostgreSQL's server binaries (initdb, pg_ctl) were not found. \
     On Debian: `apt-get install -y postgresql`; or set PG_BINDIR to their folder, \
     or DATABASE_URL to a server to use instead";

/// The folder holding `initdb` and `pg_ctl`: `PG_BINDIR`, then `pg_config --bindir`, then the
/// newest `/usr/lib/postgresql/*/bin`.
pub fn bindir() -> Result<PathBuf> {
    let has_tools = |p: &Path| p.join("initdb").is_file() && p.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("PG_BINDIR").map(PathBuf::from) {
        return if has_tools(&dir) { Ok(dir) } else { bail!("PG_BINDIR={}: {INSTALL_HINT}", dir.display()) };
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_tools(&dir) {
            return Ok(dir);
        }
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, p)| has_tools(p))
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p).context(INSTALL_HINT)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// Runs a server tool, as the `postgres` user when we are root.
fn run_tool(bin: &Path, tool: &str, args: &[&str]) -> Result<()> {
    let path = bin.join(tool);
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&path);
        c
    } else {
        Command::new(&path)
    };
    let out = cmd.args(args).output().with_context(|| format!("running {}", path.display()))?;
    if !out.status.success() {
        bail!(
            "{tool} {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// How durable the cluster is: tests trade crash safety for speed; benchmarks and the main job
/// keep PostgreSQL's defaults so their figures mean something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    Durable,
    Throwaway,
}

/// Marks a cluster folder as throwaway: its next start wipes it.
const THROWAWAY_MARKER: &str = "grantctl-throwaway";

/// A cluster in `dir`, started if it is not running, reused if it is. Safe to call from many
/// processes at once: they serialise on a lock file beside the folder.
pub fn ensure_started(dir: &Path, durability: Durability) -> Result<String> {
    fs::create_dir_all(dir)?;
    // The server resolves paths from its data folder, so hand it absolute ones.
    let dir = &dir.canonicalize()?;
    let parent = dir.parent().context("cluster folder has no parent")?;
    let lock =
        File::create(parent.join(format!(".{}.lock", dir.file_name().and_then(|n| n.to_str()).unwrap_or("cluster"))))?;
    lock.lock().context("locking the cluster folder")?;
    if let Some(url) = running_url(dir) {
        return Ok(url);
    }
    let bin = bindir()?;
    // A throwaway cluster starts empty: nothing of a past run (databases, used transaction ids)
    // carries into the next. Only a folder this code made as throwaway is wiped, and only with no
    // server's pid file in it, so a durable ledger is never lost to a mistyped `--dir`.
    let marker = dir.join(THROWAWAY_MARKER);
    if durability == Durability::Throwaway && marker.is_file() && !dir.join("postmaster.pid").exists() {
        fs::remove_dir_all(dir)?;
        fs::create_dir_all(dir)?;
    }
    if !dir.join("PG_VERSION").is_file() {
        if is_root() {
            let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status()?;
            if !status.success() {
                bail!("chown of {} to postgres failed", dir.display());
            }
        }
        let d = dir.to_str().context("cluster path is not UTF-8")?;
        run_tool(
            &bin,
            "initdb",
            &["-D", d, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"],
        )?;
        if durability == Durability::Throwaway {
            // Written after initdb, which wants an empty folder.
            fs::write(&marker, "made by grantctl db start --throwaway; wiped at its next start\n")?;
        }
    }
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let d = dir.to_str().context("cluster path is not UTF-8")?;
    let durability_opts = match durability {
        Durability::Durable => "",
        Durability::Throwaway => " -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
    };
    let opts = format!(
        "-p {port} -c listen_addresses=127.0.0.1 -k {d} -c max_connections=300 -c shared_buffers=256MB{durability_opts}"
    );
    let log = format!("{d}/server.log");
    run_tool(&bin, "pg_ctl", &["-D", d, "-o", &opts, "-l", &log, "-w", "-t", "60", "start"])?;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    fs::write(dir.join("grantctl-url"), &url)?;
    Ok(url)
}

/// The URL of the cluster in `dir` if its server is running.
pub fn running_url(dir: &Path) -> Option<String> {
    let url = fs::read_to_string(dir.join("grantctl-url")).ok()?;
    let pid_file = fs::read_to_string(dir.join("postmaster.pid")).ok()?;
    let pid = pid_file.lines().next()?.trim();
    Path::new("/proc").join(pid).exists().then_some(url)
}

/// Stops the cluster in `dir` if it runs. Its files stay; a throwaway cluster's are wiped at its
/// next start.
pub fn stop(dir: &Path) -> Result<()> {
    if running_url(dir).is_none() {
        return Ok(());
    }
    let d = dir.to_str().context("cluster path is not UTF-8")?;
    run_tool(&bindir()?, "pg_ctl", &["-D", d, "-m", "fast", "-w", "stop"])
}

/// A primary and a synchronous streaming standby of it, in `dir/primary` and `dir/standby`,
/// both started, for failover tests: answers their ports. A commit the primary acknowledges has
/// reached the standby's disk. The standby runs without a standby of its own, so once promoted it
/// commits alone. Whatever was in `dir` is wiped.
pub fn start_replicated(dir: &Path) -> Result<(u16, u16)> {
    if dir.exists() {
        for node in ["primary", "standby"] {
            let _ = stop_now(&dir.join(node));
        }
        fs::remove_dir_all(dir)?;
    }
    fs::create_dir_all(dir)?;
    let dir = &dir.canonicalize()?;
    let bin = bindir()?;
    if is_root() {
        let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status()?;
        if !status.success() {
            bail!("chown of {} to postgres failed", dir.display());
        }
    }
    let (primary, standby) = (dir.join("primary"), dir.join("standby"));
    let (p, s) = (primary.to_str().context("not UTF-8")?, standby.to_str().context("not UTF-8")?);
    run_tool(&bin, "initdb", &["-D", p, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"])?;
    let free_port = || -> Result<u16> { Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
    let node_opts = |port: u16, d: &str| {
        format!("-p {port} -c listen_addresses=127.0.0.1 -k {d} -c max_connections=200 -c fsync=off")
    };
    let primary_port = free_port()?;
    // Quoted for the shell pg_ctl starts the server with: `*` is any standby.
    let opts = format!("{} -c synchronous_commit=on -c \"synchronous_standby_names=*\"", node_opts(primary_port, p));
    let log = format!("{p}/server.log");
    run_tool(&bin, "pg_ctl", &["-D", p, "-o", &opts, "-l", &log, "-w", "-t", "60", "start"])?;
    let port = primary_port.to_string();
    run_tool(
        &bin,
        "pg_basebackup",
        &["-D", s, "-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-X", "stream", "-R"],
    )?;
    let standby_port = free_port()?;
    let log = format!("{s}/server.log");
    run_tool(&bin, "pg_ctl", &["-D", s, "-o", &node_opts(standby_port, s), "-l", &log, "-w", "-t", "60", "start"])?;
    Ok((primary_port, standby_port))
}

/// SIGKILL to the server of the cluster in `dir`: no shutdown, no last write.
pub fn kill(dir: &Path) -> Result<()> {
    let pid_file = fs::read_to_string(dir.join("postmaster.pid")).context("the server's pid file")?;
    let pid = pid_file.lines().next().context("an empty pid file")?.trim().to_owned();
    let status = Command::new("kill").args(["-KILL", &pid]).status()?;
    if !status.success() {
        bail!("kill -KILL {pid} failed");
    }
    Ok(())
}

/// Promotes the standby in `dir` to a primary, and waits until it takes writes.
pub fn promote(dir: &Path) -> Result<()> {
    let d = dir.to_str().context("cluster path is not UTF-8")?;
    run_tool(&bindir()?, "pg_ctl", &["-D", d, "-w", "-t", "60", "promote"])
}

/// Stops the server in `dir` at once, if it runs.
pub fn stop_now(dir: &Path) -> Result<()> {
    let d = dir.to_str().context("cluster path is not UTF-8")?;
    if !dir.join("postmaster.pid").exists() {
        return Ok(());
    }
    run_tool(&bindir()?, "pg_ctl", &["-D", d, "-m", "immediate", "-w", "stop"])
}
