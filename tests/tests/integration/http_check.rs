//! HTTP health checks (`check = "http"`): each node asks every replica for
//! the route's `check_path` with its `check_host`, and judges the status.
//! A replica that accepts connections but fails its check is kept out; a
//! lone replica ejected for failing traffic, and a circuit past its
//! cool-down, come back by the check alone, with no client to try them,
//! within two check intervals. Over HTTP/1.1 and h2c alike.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use picket_proto::{BreakerState, Heart};
use picket_tests::client;
use picket_tests::node::{TestNode, route};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// What a check request carried.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    method: String,
    target: String,
    host: String,
    agent: String,
    version: http::Version,
}

/// A replica whose health path and other paths answer the statuses the
/// test sets; it writes down every check request and counts the others.
#[derive(Clone)]
struct Replica {
    addr: SocketAddr,
    health: Arc<AtomicU16>,
    traffic: Arc<AtomicU16>,
    checks: Arc<Mutex<Vec<Seen>>>,
    requests: Arc<AtomicUsize>,
}

impl Replica {
    /// Serves HTTP/1.1, or HTTP/2 with prior knowledge when `h2c`.
    async fn start(h2c: bool) -> Replica {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let replica = Replica {
            addr: listener.local_addr().unwrap(),
            health: Arc::new(AtomicU16::new(200)),
            traffic: Arc::new(AtomicU16::new(200)),
            checks: Arc::default(),
            requests: Arc::default(),
        };
        let me = replica.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: http::Request<_>| {
                        let me = me.clone();
                        async move {
                            let status = if req.uri().path() == "/healthz" {
                                let header = |name| {
                                    req.headers()
                                        .get(name)
                                        .and_then(|v: &http::HeaderValue| v.to_str().ok())
                                        .unwrap_or_default()
                                        .to_string()
                                };
                                let host = match req.version() {
                                    http::Version::HTTP_2 => {
                                        req.uri().authority().map(|a| a.to_string())
                                    }
                                    _ => None,
                                }
                                .unwrap_or_else(|| header(http::header::HOST));
                                me.checks.lock().unwrap().push(Seen {
                                    method: req.method().to_string(),
                                    target: req
                                        .uri()
                                        .path_and_query()
                                        .map(|p| p.to_string())
                                        .unwrap_or_default(),
                                    host,
                                    agent: header(http::header::USER_AGENT),
                                    version: req.version(),
                                });
                                me.health.load(Ordering::SeqCst)
                            } else {
                                me.requests.fetch_add(1, Ordering::SeqCst);
                                me.traffic.load(Ordering::SeqCst)
                            };
                            let mut answer =
                                http::Response::new(Full::new(Bytes::from_static(b"answer")));
                            *answer.status_mut() = http::StatusCode::from_u16(status).unwrap();
                            Ok::<_, Infallible>(answer)
                        }
                    });
                    let io = TokioIo::new(tcp);
                    let _ = match h2c {
                        true => {
                            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .serve_connection(io, service)
                                .await
                        }
                        false => {
                            hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service)
                                .await
                        }
                    };
                });
            }
        });
        replica
    }

    fn set(&self, health: u16, traffic: u16) {
        self.health.store(health, Ordering::SeqCst);
        self.traffic.store(traffic, Ordering::SeqCst);
    }

    fn checks_seen(&self) -> Vec<Seen> {
        self.checks.lock().unwrap().clone()
    }
}

/// A route's check settings, every second.
const HTTP_CHECK: &str = "check = \"http\"\ncheck_path = \"/healthz?deep=1\"\ncheck_host = \"app.internal\"\ncheck_every = \"1s\"\ncheck_timeout = \"500ms\"";

fn protocol(h2c: bool) -> &'static str {
    match h2c {
        true => "protocol = \"h2c\"\n",
        false => "",
    }
}

/// A lone replica fails traffic and its check: ejected, and kept out by
/// the check (its ejection period is a minute: no probe looks sooner).
/// It recovers while no client asks: green within two check intervals,
/// by the check alone.
async fn a_lone_replica_recovers_by_its_check(h2c: bool) {
    let replica = Replica::start(h2c).await;
    replica.set(503, 503);
    let node = TestNode::start(&route(
        "app",
        "/",
        &[replica.addr],
        &format!(
            "{}{HTTP_CHECK}\nconsecutive_gateway_errors = 2\neject_for = \"60s\"\ntries = 1",
            protocol(h2c)
        ),
    ));
    node.verdict_until("app", "red by its check", Duration::from_secs(3), |v| {
        v.heart == Heart::Red && v.reason.contains("HTTP check: answered 503")
    })
    .await;
    // Its traffic fails too.
    for _ in 0..2 {
        let answer = client::get(node.proxy, "app.test", "/x").await.unwrap();
        assert_eq!(answer.status, 503);
    }
    // The check keeps it out while it fails: three intervals, red each.
    node.verdicts_hold_for("app", "kept out", Duration::from_secs(3), |v| {
        v.heart == Heart::Red && v.ready == 0
    })
    .await;
    let seen = replica.checks_seen();
    assert!(seen.len() >= 3, "a check every second: {seen:?}");
    let version = match h2c {
        true => http::Version::HTTP_2,
        false => http::Version::HTTP_11,
    };
    for check in &seen {
        assert_eq!(
            *check,
            Seen {
                method: "GET".into(),
                target: "/healthz?deep=1".into(),
                host: "app.internal".into(),
                agent: "picket-health-check".into(),
                version,
            }
        );
    }
    // It recovers, and no client comes.
    let requests = replica.requests.load(Ordering::SeqCst);
    replica.set(200, 200);
    let recovered = Instant::now();
    node.verdict_until("app", "green again", Duration::from_secs(2), |v| {
        v.heart == Heart::Green && v.ready == 1
    })
    .await;
    let took = recovered.elapsed();
    eprintln!(
        "FIGURE | lone replica ({}) green {took:.1?} after it recovered, check every 1 s, no traffic",
        if h2c { "h2c" } else { "HTTP/1.1" }
    );
    assert_eq!(
        replica.requests.load(Ordering::SeqCst),
        requests,
        "no request was its trial"
    );
    let answer = client::get(node.proxy, "app.test", "/x").await.unwrap();
    assert_eq!(answer.status, 200);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_replica_recovers_by_its_check_over_http1() {
    a_lone_replica_recovers_by_its_check(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_replica_recovers_by_its_check_over_h2c() {
    a_lone_replica_recovers_by_its_check(true).await;
}

/// A replica that accepts connections and serves requests but fails its
/// check is out of rotation: every request goes to the other one. Its
/// statuses are the route's: with `check_statuses` admitting 500, it is
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_failing_its_check_is_kept_out_though_it_accepts() {
    let (good, failing) = (Replica::start(false).await, Replica::start(false).await);
    failing.set(500, 200);
    let text = |statuses: &str| {
        route(
            "app",
            "/",
            &[good.addr, failing.addr],
            &format!("{HTTP_CHECK}\ncheck_statuses = {statuses}"),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("picket.toml");
    std::fs::write(&path, text("[\"2xx\", \"3xx\"]")).unwrap();
    let node = TestNode::start_file(&path);
    node.verdict_until("app", "one of two", Duration::from_secs(3), |v| {
        v.heart == Heart::Orange && v.ready == 1 && v.reason.contains("HTTP check: answered 500")
    })
    .await;
    for i in 0..20 {
        let answer = client::get(node.proxy, "app.test", &format!("/{i}"))
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
    }
    assert_eq!(failing.requests.load(Ordering::SeqCst), 0, "none to it");
    assert_eq!(good.requests.load(Ordering::SeqCst), 20);
    // The operator says 500 is its health's way of saying "up": a reload,
    // and the next check brings it back.
    std::fs::write(&path, text("\"2xx, 500\"")).unwrap();
    let reload = node.reload().await;
    assert!(
        matches!(reload, picket::node::Reload::Applied(_)),
        "{reload:?}"
    );
    node.verdict_until("app", "both in", Duration::from_secs(3), |v| {
        v.heart == Heart::Green && v.ready == 2
    })
    .await;
    node.stop().await;
}

/// A circuit opened by failing traffic closes by the check once its
/// cool-down is over, with no client as its trial; within the cool-down
/// it stays open, checks passing or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_circuit_closes_by_the_check_after_its_cooldown() {
    let replica = Replica::start(false).await;
    replica.set(200, 503);
    let node = TestNode::start(&route(
        "app",
        "/",
        &[replica.addr],
        &format!(
            "{HTTP_CHECK}\ntries = 1\nbreaker = {{ enabled = true, failures = 2, cooldown = \"2s\" }}"
        ),
    ));
    node.verdict_until("app", "green", Duration::from_secs(3), |v| {
        v.heart == Heart::Green
    })
    .await;
    for _ in 0..2 {
        let answer = client::get(node.proxy, "app.test", "/x").await.unwrap();
        assert_eq!(answer.status, 503);
    }
    let opened = Instant::now();
    node.verdict_until("app", "open", Duration::from_secs(1), |v| {
        v.circuit == BreakerState::Open && v.heart == Heart::Red
    })
    .await;
    replica.set(200, 200);
    let requests = replica.requests.load(Ordering::SeqCst);
    node.verdicts_hold_for(
        "app",
        "open within the cool-down",
        Duration::from_millis(1500),
        |v| v.circuit == BreakerState::Open,
    )
    .await;
    node.verdict_until("app", "closed by the check", Duration::from_secs(3), |v| {
        v.circuit == BreakerState::Closed && v.heart == Heart::Green
    })
    .await;
    let took = opened.elapsed();
    eprintln!(
        "FIGURE | circuit (cool-down 2 s) closed by the check {took:.1?} after it opened, no traffic"
    );
    assert!(
        took >= Duration::from_secs(2),
        "not before its cool-down: {took:?}"
    );
    assert!(
        took <= Duration::from_secs(4),
        "within two intervals after it: {took:?}"
    );
    assert_eq!(
        replica.requests.load(Ordering::SeqCst),
        requests,
        "no trial request"
    );
    node.stop().await;
}
