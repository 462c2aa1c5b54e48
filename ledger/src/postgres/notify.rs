//! Wake-ups across processes: a coalesced NOTIFY after commits, and a listener for others'.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_postgres::{AsyncMessage, NoTls};

/// The channel appends are announced on.
pub const WAKE_CHANNEL: &str = "grant_ledger_events";

/// The least time between two NOTIFYs: each takes PostgreSQL's global notify lock at commit, and
/// a wake-up hint needs no finer grain.
pub(super) const NOTIFY_EVERY: Duration = Duration::from_millis(50);

/// Announces local commits to other processes: at most one NOTIFY per `NOTIFY_EVERY`, covering
/// every commit made since the previous one.
pub(super) async fn notify_on_commit(pool: Pool, mut local: watch::Receiver<u64>) {
    while local.changed().await.is_ok() {
        if let Ok(client) = pool.get().await {
            // A lost hint costs a reader one poll interval, never an event.
            let _ = client.batch_execute(&format!("NOTIFY {WAKE_CHANNEL}")).await;
        }
        tokio::time::sleep(NOTIFY_EVERY).await;
    }
}

pub(super) async fn listen(config: tokio_postgres::Config, wake: Arc<watch::Sender<u64>>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Ok((client, mut connection)) = config.connect(NoTls).await {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            let driver = async {
                while let Some(Ok(message)) = messages.next().await {
                    if let AsyncMessage::Notification(_) = message {
                        wake.send_modify(|n| *n += 1);
                    }
                }
            };
            let subscribe = async {
                let ok = client.batch_execute(&format!("LISTEN {WAKE_CHANNEL}")).await.is_ok();
                if ok {
                    wake.send_modify(|n| *n += 1);
                }
                ok
            };
            // The connection must be driven while LISTEN runs, so run both and keep driving.
            tokio::pin!(driver);
            tokio::select! {
                () = &mut driver => {}
                ok = subscribe => if ok { (&mut driver).await },
            }
            backoff = Duration::from_millis(50);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
