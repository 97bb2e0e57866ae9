//! TLS towards a route's replicas: `tls = { ca, server_name, client_cert,
//! client_key }`. The route's own CA verifies the replicas, the client
//! pair answers a replica that requires one (a route without it is red by
//! its checks, though TLS 1.3 refuses it after the handshake), and a
//! replica whose
//! certificate the CA did not issue is a failed connect (502) and a failed
//! check, never plain text.

use std::time::Duration;

use picket_proto::Heart;
use picket_tests::client;
use picket_tests::node::{TestNode, eventually};
use picket_tests::tls::{TestCa, TlsUpstream};

const SOON: Duration = Duration::from_secs(5);

fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Route `name` on `path` to `replica`, with `tls`.
fn route(name: &str, path: &str, replica: &TlsUpstream, tls: &str) -> String {
    format!(
        "[[route]]\nname = \"{name}\"\npath_prefix = \"{path}\"\nreplicas = [\"{}\"]\ntls = {{ {tls} }}\n",
        replica.addr
    )
}

const CHECKS: &str = "[global]\ncheck_every = \"1s\"\ncheck_timeout = \"500ms\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_verified_with_the_routes_own_ca() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("internal CA");
    let ca_file = ca.write_pem(dir.path());
    let replica = TlsUpstream::start("api", ca.server_config(&["api.internal"])).await;
    let other = TestCa::new("someone else");
    let stranger = TlsUpstream::start("stranger", other.server_config(&["api.internal"])).await;
    let tls = format!(
        "ca = {:?}, server_name = \"api.internal\"",
        ca_file.display().to_string()
    );
    let node = TestNode::start(&format!(
        "{CHECKS}{}{}{}",
        route("api", "/", &replica, &tls),
        route("stranger", "/stranger", &stranger, &tls),
        route("unvisited", "/unvisited", &stranger, &tls)
    ));
    let answer = client::get(node.proxy, "a", "/x").await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        answer.text().starts_with("api: GET /x"),
        "{}",
        answer.text()
    );
    assert!(replica.handshakes() >= 1, "over TLS");
    assert_eq!(replica.hits(), 1);

    // Not issued by the route's CA: a failed connect, never plain text.
    let refused = client::get(node.proxy, "a", "/stranger").await.unwrap();
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert_eq!(stranger.hits(), 0);
    eventually("the check fails too", SOON, || {
        node.verdict("stranger")
            .is_some_and(|v| v.heart == Heart::Red && v.reason.contains("TLS"))
    })
    .await;
    // A route no request has tried: its connect check alone says so.
    eventually("the check of a route never asked fails", SOON, || {
        node.verdict("unvisited")
            .is_some_and(|v| v.heart == Heart::Red && v.reason.contains("TLS"))
    })
    .await;
    eventually("the trusted one green", SOON, || {
        node.verdict("api").is_some_and(|v| v.heart == Heart::Green)
    })
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_requires_a_client_certificate_gets_the_routes() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("mesh CA");
    let ca_file = ca.write_pem(dir.path()).display().to_string();
    let client_leaf = ca.write_leaf(dir.path(), "gateway", &["gateway.mesh"]);
    let replica = TlsUpstream::start(
        "billing",
        ca.server_config_requiring_clients(&["billing.mesh"]),
    )
    .await;
    let with_pair = format!(
        "ca = {ca_file:?}, server_name = \"billing.mesh\", client_cert = {:?}, client_key = {:?}",
        client_leaf.cert.display().to_string(),
        client_leaf.key.display().to_string()
    );
    let without = format!("ca = {ca_file:?}, server_name = \"billing.mesh\"");
    let node = TestNode::start(&format!(
        "{CHECKS}{}{}{}",
        route("mutual", "/", &replica, &with_pair),
        route("anonymous", "/anonymous", &replica, &without),
        route("unasked", "/unasked", &replica, &without)
    ));
    let answer = client::get(node.proxy, "a", "/pay").await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(answer.text().starts_with("billing: GET /pay"));
    // The same replica, without the pair: refused by the replica. Its
    // connections never come from the other route's pool, which holds
    // connections that did present the pair.
    let hits = replica.hits();
    let refused = client::get(node.proxy, "a", "/anonymous").await.unwrap();
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert_eq!(replica.hits(), hits, "nothing reached the replica");
    eventually("the mutual one green", SOON, || {
        node.verdict("mutual")
            .is_some_and(|v| v.heart == Heart::Green)
    })
    .await;
    // Over TLS 1.3 the replica accepts the handshake and refuses it a round
    // trip later: a route no request has tried is red by its check alone.
    eventually("the route without the pair red by its check", SOON, || {
        node.verdict("unasked").is_some_and(|v| {
            v.heart == Heart::Red && v.reason.contains("TLS") && v.reason.contains("ertificate")
        })
    })
    .await;
    assert_eq!(replica.hits(), hits, "no check reached the replica's HTTP");
    node.stop().await;
}

/// Route `name` on `path` to `replica`, with `tls` and `protocol`.
fn route_speaking(
    name: &str,
    path: &str,
    replica: &TlsUpstream,
    tls: &str,
    protocol: &str,
) -> String {
    format!(
        "{}protocol = \"{protocol}\"\n",
        route(name, path, replica, tls)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_over_tls_is_asked_for_by_alpn() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("h2 CA");
    let ca_file = ca.write_pem(dir.path()).display().to_string();
    let both = TlsUpstream::start(
        "both",
        ca.server_config_alpn(&["api.internal"], &[b"h2", b"http/1.1"]),
    )
    .await;
    let old = TlsUpstream::start(
        "old",
        ca.server_config_alpn(&["api.internal"], &[b"http/1.1"]),
    )
    .await;
    let tls = format!("ca = {ca_file:?}, server_name = \"api.internal\"");
    let node = TestNode::start(&format!(
        "{CHECKS}{}{}{}{}",
        route_speaking("h2", "/h2", &both, &tls, "h2"),
        route_speaking("auto", "/auto", &both, &tls, "auto"),
        route_speaking("auto-old", "/auto-old", &old, &tls, "auto"),
        route_speaking("h2-old", "/h2-old", &old, &tls, "h2"),
    ));
    for (path, want) in [
        ("/h2/x", "both: GET https://"),
        ("/auto/x", "both: GET https://"),
        ("/auto-old/x", "old: GET /auto-old/x"),
    ] {
        let answer = client::get(node.proxy, "a", path).await.unwrap();
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
        assert!(answer.text().starts_with(want), "{path}: {}", answer.text());
        let h2 = answer.text().ends_with("over HTTP/2");
        assert_eq!(h2, want.contains("https://"), "{path}: {}", answer.text());
    }
    // A replica that does not agree to HTTP/2: a failed connect, and red.
    let refused = client::get(node.proxy, "a", "/h2-old/x").await.unwrap();
    assert_eq!(refused.status, 502, "{}", refused.text());
    eventually("the check fails too", SOON, || {
        node.verdict("h2-old")
            .is_some_and(|v| v.heart == Heart::Red && v.reason.contains("HTTP/2"))
    })
    .await;
    node.stop().await;
}
