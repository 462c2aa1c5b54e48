//! Faults between the authorizer and PostgreSQL, through the kit's fault proxy: connections cut
//! mid-request, every byte delayed, new connections refused. Under each, nothing is lost, no cap
//! is passed, no retry acts twice, and callers see only typed, retryable errors.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;
use tests::fault::{Fault, Proxy};

/// The database server's address, from its URL.
fn server_of(db: &TestDb) -> std::net::SocketAddr {
    let config: tokio_postgres::Config = db.url().parse().unwrap();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => format!("{h}:{port}").parse().unwrap(),
        other => panic!("the tests' server is on TCP: {other:?}"),
    }
}

/// Four workers spend one grant's 200 uses through two replicas, each reaching PostgreSQL
/// through a proxy doing `fault`: the uses run 1 to 200 once each, every allow heard is recorded
/// and was heard once, every use not heard was answered as ended, and the row equals its events.
async fn spend_under(fault: &str, session: &str) {
    let db = TestDb::new().await;
    let t = Tokens::register(&db, TENANT).await;
    apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
    let proxies = [Proxy::start(server_of(&db)).await, Proxy::start(server_of(&db)).await];
    let mut replicas = Vec::new();
    for p in &proxies {
        replicas.push(Replica::start(&db, &[("DATABASE_URL", &p.url_for(&db.url()))]).await);
    }
    let clients = vec![replicas[0].client().await, replicas[1].client().await];
    let (mut a, mut b) = (clients[0].clone(), clients[1].clone());
    let grant_id = grant_across(&mut a, &mut b, &t, session, "p1").await;

    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (mut clients, t, session) = (clients.clone(), t.clone(), session.to_owned());
            tokio::spawn(async move {
                let (mut allowed, mut codes, mut unheard) = (Vec::new(), Vec::new(), 0);
                loop {
                    let (decision, seen) = settled(&mut clients, w, &t, act(&session, "agent-7")).await;
                    codes.extend(seen);
                    match decision {
                        Some(Decision::Allow(a)) => allowed.push(a.use_ordinal),
                        Some(Decision::RequireApproval(_)) => return (allowed, codes, unheard),
                        None => unheard += 1,
                        other => panic!("a wrong answer: {other:?}"),
                    }
                }
            })
        })
        .collect();
    // The fault, on both replicas' links, while the workers spend.
    let mut ticks = 0u32;
    while !workers.iter().all(tokio::task::JoinHandle::is_finished) {
        match fault {
            "cut" if ticks.is_multiple_of(3) => proxies.iter().for_each(Proxy::cut),
            "delay" => proxies.iter().for_each(|p| p.set(Fault::Delay(Duration::from_millis(5)))),
            // Every connection cut and new ones refused for 160 ms, then open for 240 ms.
            "refuse" if ticks.is_multiple_of(10) => proxies.iter().for_each(|p| {
                p.set(Fault::Refuse);
                p.cut();
            }),
            "refuse" if ticks % 10 == 4 => proxies.iter().for_each(|p| p.set(Fault::None)),
            "cut" | "refuse" => {}
            other => panic!("no fault {other}"),
        }
        ticks += 1;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    proxies.iter().for_each(|p| p.set(Fault::None));
    let (mut heard, mut codes, mut unheard) = (Vec::new(), Vec::new(), 0);
    for w in workers {
        let (a, c, u) = w.await.unwrap();
        heard.extend(a.into_iter().map(i64::from));
        codes.extend(c);
        unheard += u;
    }
    if fault != "delay" {
        assert!(!codes.is_empty(), "{fault}: no call met the fault");
    }
    let uses = recorded_uses(&db, &grant_id).await;
    assert_eq!(uses, (1..=200).collect::<Vec<i64>>(), "{fault}: exactly 200 recorded uses, once each");
    heard.sort_unstable();
    let n = heard.len();
    heard.dedup();
    assert_eq!(heard.len(), n, "{fault}: a use was answered to two calls");
    // Every allow heard is recorded; a recorded use not heard is one whose call was answered
    // that its grant had ended (and so was never dispatched).
    assert!(heard.iter().all(|o| uses.contains(o)), "{fault}: an allow heard is not recorded");
    assert_eq!(heard.len() + unheard, uses.len(), "{fault}: a recorded use reached no caller");
    assert_eq!(actions_used(&db, grant_id.parse().unwrap()).await, 200, "{fault}: the row equals its events");
    drop(replicas);
    let (ok, said) = ops::authority::authority_verify(&db.config).await.unwrap();
    assert!(ok, "{fault}: {said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uses_hold_when_the_databases_connections_are_cut() {
    spend_under("cut", "s-cut").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uses_hold_when_the_database_is_slow() {
    spend_under("delay", "s-delay").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uses_hold_when_the_database_refuses_connections() {
    spend_under("refuse", "s-refuse").await;
}
