//! Checks and probes of `https://` upstreams complete the TLS handshake,
//! verified as requests verify it: a host whose certificate fails
//! verification is red with the TLS reason and never reads green for
//! accepting TCP connections; with its CA trusted it is green and serves.
//! Checks never resume a session: a certificate replaced by one that has
//! expired is seen at the next check.

use std::sync::Arc;
use std::time::Duration;

use picket_proto::Heart;
use picket_tests::client;
use picket_tests::node::{TestNode, eventually};
use picket_tests::tls::{TestCa, TlsUpstream};

const CHECKS: &str = "[global]\ncheck_every = \"1s\"\ncheck_timeout = \"500ms\"\n";

const UNKNOWN_ISSUER: &str =
    "host unusable: TLS handshake: invalid peer certificate: UnknownIssuer";

fn external(name: &str, url: &str, extra: &str) -> String {
    format!(
        "[[route]]\nname = \"{name}\"\npath_prefix = \"/{name}\"\nupstream = \"{url}\"\n{extra}\n"
    )
}

/// Watches the verdict on `route` for `during`, sending a request now and
/// then: every verdict must be red with `reason`, every answer 502.
async fn stays_red(node: &TestNode, route: &str, reason: &str, during: Duration) {
    let end = tokio::time::Instant::now() + during;
    let requests = async {
        while tokio::time::Instant::now() < end {
            let answer = client::get(node.proxy, "any", &format!("/{route}/x"))
                .await
                .expect("the node answers");
            assert_eq!(answer.status, 502, "{}", answer.text());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    let watched = node.verdicts_hold_for(route, "the verdict flapped", during, |v| {
        v.heart == Heart::Red && *v.reason == *reason
    });
    tokio::join!(requests, watched);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_an_unknown_ca_is_red_with_the_tls_reason_and_never_green() {
    let ca = TestCa::new("picket test CA, not trusted");
    let upstream = TlsUpstream::start("billing", ca.server_config(&["127.0.0.1"])).await;
    // The node trusts the built-in roots only.
    let node = TestNode::start(&format!(
        "{CHECKS}{}",
        external(
            "billing",
            &format!("https://127.0.0.1:{}", upstream.addr.port()),
            ""
        )
    ));
    node.verdict_until(
        "billing",
        "red with the TLS reason within one check",
        Duration::from_millis(1500),
        |v| v.heart == Heart::Red && *v.reason == *UNKNOWN_ISSUER,
    )
    .await;
    // Two more check rounds and the probe's first steps (250 ms, 500 ms,
    // 1 s, 2 s): the host accepts every TCP connect, and not one re-admits
    // it.
    stays_red(
        &node,
        "billing",
        UNKNOWN_ISSUER,
        Duration::from_millis(2500),
    )
    .await;
    assert!(
        upstream.accepted() >= 4,
        "checks and probes reached the host: {}",
        upstream.accepted()
    );
    assert_eq!(upstream.handshakes(), 0);
    assert_eq!(upstream.hits(), 0, "no request was served");

    let (status, routes) = node.admin_json("/v1/routes").await;
    assert_eq!(status, 200);
    let text = routes.to_string();
    assert!(
        text.contains("TLS handshake: invalid peer certificate: UnknownIssuer"),
        "the replica's state says why: {text}"
    );
    let metrics = client::get(node.admin, "admin", "/metrics")
        .await
        .expect("metrics")
        .text();
    assert!(
        metrics.lines().any(
            |l| l.starts_with("picket_replica_ejections_by_reason_total")
                && l.contains("route=\"billing\"")
                && l.contains("reason=\"tls\"")
        ),
        "{metrics}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_ca_trusted_the_host_is_green_and_serves() {
    let ca = TestCa::new("picket test CA");
    let upstream = TlsUpstream::start("billing", ca.server_config(&["127.0.0.1"])).await;
    let (node, _roots) = checking(&ca, &upstream);
    node.verdict_until(
        "billing",
        "green once checked",
        Duration::from_millis(1500),
        |v| v.heart == Heart::Green && *v.reason == *"host accepts connections",
    )
    .await;
    // Before any request: the check itself completed a handshake.
    eventually(
        "the check completes the handshake",
        Duration::from_millis(1500),
        || upstream.handshakes() >= 1,
    )
    .await;
    assert_eq!(upstream.hits(), 0);

    let answer = client::get(node.proxy, "any", "/billing/x")
        .await
        .expect("the node answers");
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "billing: GET /billing/x");
    assert_eq!(upstream.hits(), 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_completes_the_handshake_before_it_re_admits() {
    let trusted = TestCa::new("picket test CA");
    let stranger = TestCa::new("picket test CA, not trusted");
    let upstream = TlsUpstream::start("billing", stranger.server_config(&["127.0.0.1"])).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let roots = trusted.write_pem(dir.path());
    // One check at start, then none for ten minutes: only the probe looks
    // at the host again, at most a second apart.
    let node = TestNode::start_with(
        &format!(
            "[global]\ncheck_every = \"10m\"\ncheck_timeout = \"500ms\"\n{}",
            external(
                "billing",
                &format!("https://127.0.0.1:{}", upstream.addr.port()),
                "eject_for = \"1s\""
            )
        ),
        |options| options.tls = picket::tls::client_config(Some(&roots)).expect("TLS roots"),
    );
    node.verdict_until(
        "billing",
        "red after the first check",
        Duration::from_millis(1500),
        |v| v.heart == Heart::Red && *v.reason == *UNKNOWN_ISSUER,
    )
    .await;
    let probed_from = upstream.accepted();
    node.verdicts_hold_for(
        "billing",
        "a probe re-admitted a host whose certificate fails",
        Duration::from_millis(2500),
        |v| v.heart == Heart::Red && *v.reason == *UNKNOWN_ISSUER,
    )
    .await;
    assert!(
        upstream.accepted() >= probed_from + 2,
        "probes connected: {} then {}",
        probed_from,
        upstream.accepted()
    );

    // The host gets a certificate the node trusts: the next probe, not a
    // check ten minutes away, re-admits it.
    upstream.set_config(trusted.server_config(&["127.0.0.1"]));
    node.verdict_until(
        "billing",
        "green by the probe",
        Duration::from_millis(2000),
        |v| v.heart == Heart::Green,
    )
    .await;
    assert!(upstream.handshakes() >= 1);
    let answer = client::get(node.proxy, "any", "/billing/y")
        .await
        .expect("the node answers");
    assert_eq!(answer.status, 200, "{}", answer.text());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_that_expires_under_a_resumable_session_is_seen_at_the_next_check() {
    let ca = TestCa::new("picket test CA");
    let valid = ca.server_config(&["127.0.0.1"]);
    let upstream = TlsUpstream::start("billing", Arc::clone(&valid)).await;
    let (node, _roots) = checking(&ca, &upstream);
    node.verdict_until("billing", "green", Duration::from_secs(3), |v| {
        v.heart == Heart::Green
    })
    .await;
    // The same server, its sessions kept (a client that resumed would not
    // be shown the certificate again), now with one that expired a day ago.
    let expiring = expired(&ca, Some(&valid));
    upstream.set_config(expiring);
    node.verdict_until(
        "billing",
        "red once a check sees the expired certificate",
        Duration::from_secs(5),
        |v| v.heart == Heart::Red && v.reason.to_lowercase().contains("expired"),
    )
    .await;
    node.stop().await;
}

/// A certificate that expires while pooled connections and resumed
/// sessions keep serving: orange, saying both, and every request answered;
/// red once new connections are all that is left (the replica restarted,
/// its sessions gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_that_expires_under_pooled_connections_is_orange_saying_both() {
    let ca = TestCa::new("picket test CA");
    let valid = ca.server_config(&["127.0.0.1"]);
    let upstream = TlsUpstream::start("billing", Arc::clone(&valid)).await;
    let addr = upstream.addr;
    let (node, _roots) = checking(&ca, &upstream);
    node.verdict_until("billing", "green", Duration::from_secs(3), |v| {
        v.heart == Heart::Green
    })
    .await;
    let expiring = expired(&ca, Some(&valid));
    // Traffic all along: 520 requests, 4 at a time.
    let traffic = {
        let proxy = node.proxy;
        tokio::spawn(async move {
            let mut ok = 0;
            for round in 0..130 {
                let batch: Vec<_> = (0..4)
                    .map(|i| {
                        tokio::spawn(async move {
                            client::get(proxy, "any", &format!("/billing/{round}/{i}")).await
                        })
                    })
                    .collect();
                for request in batch {
                    let answer = request.await.expect("joined").expect("an answer");
                    assert_eq!(answer.status, 200, "{}", answer.text());
                    ok += 1;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            ok
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    upstream.set_config(expiring);
    node.verdict_until(
        "billing",
        "orange, saying both",
        Duration::from_secs(4),
        |v| {
            v.heart == Heart::Orange
                && *v.reason
                    == *"TLS handshake: invalid peer certificate: certificate expired; pooled connections still serve"
        },
    )
    .await;
    let served = traffic.await.expect("the traffic ran");
    assert_eq!(served, 520, "every request answered while orange");
    let verdict = node.verdict("billing").expect("a verdict");
    assert_eq!(verdict.heart, Heart::Orange, "{verdict:?}");
    // The replica restarts with the expired certificate and no sessions:
    // only new connections are left, and they are refused.
    drop(upstream);
    // Its task ends (and lets the port go) when the runtime next looks.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => break listener,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("the same port: {e}"),
        }
    };
    let _restarted = TlsUpstream::on(listener, "billing", expired(&ca, None));
    node.verdict_until(
        "billing",
        "red once only new connections are left",
        Duration::from_secs(4),
        |v| {
            v.heart == Heart::Red
                && *v.reason == *"host unusable: TLS handshake: invalid peer certificate: certificate expired"
        },
    )
    .await;
    node.stop().await;
}

/// While a replica refuses new connections (orange), its route is checked
/// every 2 s whatever its period: a certificate renewed (as a name that
/// resolves again) turns it green within that, not at the next 30 s round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_seen_within_two_seconds_while_orange() {
    let ca = TestCa::new("picket test CA");
    let valid = ca.server_config(&["127.0.0.1"]);
    let upstream = TlsUpstream::start("billing", Arc::clone(&valid)).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let roots = ca.write_pem(dir.path());
    let node = TestNode::start_with(
        &external(
            "billing",
            &format!("https://127.0.0.1:{}", upstream.addr.port()),
            "check_every = \"30s\"",
        ),
        |options| {
            options.tls = picket::tls::client_config(Some(&roots)).expect("TLS roots");
        },
    );
    node.verdict_until("billing", "green", Duration::from_secs(3), |v| {
        v.heart == Heart::Green
    })
    .await;
    // Requests keep a connection in the pool.
    let proxy = node.proxy;
    let traffic = tokio::spawn(async move {
        loop {
            let answer = client::get(proxy, "any", "/billing/x")
                .await
                .expect("an answer");
            assert_eq!(answer.status, 200, "{}", answer.text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let expiring = expired(&ca, Some(&valid));
    upstream.set_config(expiring);
    // A round now, as the 30 s timer would run it later.
    node.node().checker().round(node.node().proxy()).await;
    node.verdict_until("billing", "orange", Duration::from_secs(1), |v| {
        v.heart == Heart::Orange && v.reason.contains("certificate expired")
    })
    .await;
    upstream.set_config(Arc::clone(&valid));
    let renewed = tokio::time::Instant::now();
    node.verdict_until("billing", "green again", Duration::from_secs(5), |v| {
        v.heart == Heart::Green
    })
    .await;
    let took = renewed.elapsed();
    eprintln!("FIGURE | renewed certificate seen after {took:.1?} while orange (period 30 s)");
    assert!(took <= Duration::from_millis(2500), "{took:?}");
    traffic.abort();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_replicas_days_to_expiry_are_shown_and_measured() {
    let ca = TestCa::new("picket test CA");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    // Ten days and an hour left.
    let not_after = now + 10 * 86_400 + 3_600;
    let upstream = TlsUpstream::start(
        "billing",
        ca.server_config_expiring(&["127.0.0.1"], Some(not_after)),
    )
    .await;
    let (node, _roots) = checking(&ca, &upstream);
    node.verdict_until("billing", "green", Duration::from_secs(3), |v| {
        v.heart == Heart::Green
    })
    .await;
    // Once a check has completed a handshake.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let routes = loop {
        let (_, routes) = node.admin_json("/v1/routes").await;
        if !routes["routes"][0]["replicas"][0]["certificate"].is_null() {
            break routes;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no certificate seen: {routes}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let certificate = &routes["routes"][0]["replicas"][0]["certificate"];
    assert_eq!(certificate["not_after_unix"], not_after, "{routes}");
    assert_eq!(certificate["days_left"], 10, "{routes}");
    let metrics = admin_metrics(node.admin).await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("picket_replica_certificate_expiry_seconds{")
                && l.ends_with(&format!(" {not_after}"))
        ),
        "{metrics}"
    );
    node.stop().await;
}

/// A server configuration whose certificate expired a day ago; with
/// `sessions`, it keeps `sessions`' store and tickets (a client that
/// resumed would not be shown the new certificate).
fn expired(ca: &TestCa, sessions: Option<&rustls::ServerConfig>) -> Arc<rustls::ServerConfig> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let mut config = (*ca.server_config_expiring(&["127.0.0.1"], Some(now - 86_400))).clone();
    match sessions {
        Some(valid) => {
            config.session_storage = Arc::clone(&valid.session_storage);
            config.ticketer = Arc::clone(&valid.ticketer);
        }
        None => config.session_storage = rustls::server::ServerSessionMemoryCache::new(16),
    }
    Arc::new(config)
}

/// `/metrics` of the admin listener at `admin`.
async fn admin_metrics(admin: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(admin).await.expect("admin");
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .expect("a request");
    let mut out = Vec::new();
    tcp.read_to_end(&mut out).await.expect("an answer");
    String::from_utf8_lossy(&out).into_owned()
}

/// A node checking `upstream` as the external host `billing`, `ca`
/// trusted; the directory of its roots, kept while the node runs.
fn checking(ca: &TestCa, upstream: &TlsUpstream) -> (TestNode, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let roots = ca.write_pem(dir.path());
    let node = TestNode::start_with(
        &format!(
            "{CHECKS}{}",
            external(
                "billing",
                &format!("https://127.0.0.1:{}", upstream.addr.port()),
                ""
            )
        ),
        |options| {
            // As `SSL_CERT_FILE` (`--extra-ca`) gives it.
            options.tls = picket::tls::client_config(Some(&roots)).expect("TLS roots");
        },
    );
    (node, dir)
}
