//! Requests to external hosts go through the forward proxies the node was
//! given, as their checks do: `HTTP_PROXY` in absolute form for `http://`
//! hosts, `HTTPS_PROXY` by `CONNECT` (then TLS through the tunnel) for
//! `https://` ones, and `NO_PROXY` hosts directly. Static replicas never
//! use a proxy.
//!
//! The proxy settings are given to the node as its options, never through
//! the process environment, which the tests running beside share.

use std::time::Duration;

use picket::upstream::ProxyEnv;
use picket_proto::Heart;
use picket_tests::client;
use picket_tests::forward_proxy::ForwardProxy;
use picket_tests::node::{TestNode, eventually, route};
use picket_tests::tls::{TestCa, TlsUpstream};
use picket_tests::upstream::{Behaviour, Upstream};

fn external(name: &str, url: &str) -> String {
    format!("[[route]]\nname = \"{name}\"\npath_prefix = \"/{name}\"\nupstream = \"{url}\"\n")
}

/// The proxy settings of a node, as its environment would give them.
fn proxy_env(vars: &[(&'static str, String)]) -> ProxyEnv {
    ProxyEnv::from_vars(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    })
    .expect("a proxy is set")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_upstreams_go_through_http_proxy_in_absolute_form() {
    let proxy = ForwardProxy::start().await;
    let billing = Upstream::start("billing", Behaviour::Echo).await;
    let port = billing.addr.port();
    let config = format!(
        "[global]\ncheck_every = \"1s\"\ncheck_timeout = \"500ms\"\n{}{}{}",
        external("proxied", &format!("http://127.0.0.1:{port}")),
        // The same host by another name, which NO_PROXY lists.
        external("direct", &format!("http://localhost:{port}")),
        route("static", "/static", &[billing.addr], ""),
    );
    let env = proxy_env(&[
        ("HTTP_PROXY", proxy.url()),
        ("NO_PROXY", "localhost".into()),
    ]);
    let node = TestNode::start_with(&config, |options| options.proxy_env = Some(env));
    for name in ["proxied", "direct", "static"] {
        node.verdict_until(name, "green", Duration::from_secs(2), |v| {
            v.heart == Heart::Green
        })
        .await;
    }

    let answer = client::get(node.proxy, "shop.example.com", "/proxied/x?y=1")
        .await
        .expect("the node answers");
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        answer.headers.get("x-seen-host").map(|h| h.as_bytes()),
        Some(format!("127.0.0.1:{port}").as_bytes())
    );
    let line = format!("GET http://127.0.0.1:{port}/proxied/x?y=1 HTTP/1.1");
    assert!(
        proxy.asked().contains(&line),
        "the proxy was asked {:?}, not {line:?}",
        proxy.asked()
    );

    for path in ["/direct/y", "/static/z"] {
        let answer = client::get(node.proxy, "shop.example.com", path)
            .await
            .expect("the node answers");
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
    }
    assert_eq!(
        proxy.asked(),
        vec![line],
        "only the proxied route went through the proxy"
    );
    assert_eq!(billing.hits(), 3);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_go_through_https_proxy_by_connect() {
    let proxy = ForwardProxy::start().await;
    let ca = TestCa::new("picket test CA");
    let billing =
        TlsUpstream::start("billing", ca.server_config(&["127.0.0.1", "localhost"])).await;
    let port = billing.addr.port();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let roots = ca.write_pem(dir.path());
    // One check at start, none after: every later CONNECT is a request's.
    let config = format!(
        "[global]\ncheck_every = \"10m\"\ncheck_timeout = \"1s\"\n{}{}",
        external("tunnelled", &format!("https://127.0.0.1:{port}")),
        external("direct", &format!("https://localhost:{port}")),
    );
    let env = proxy_env(&[
        ("HTTPS_PROXY", proxy.url()),
        ("no_proxy", "localhost".into()),
    ]);
    let node = TestNode::start_with(&config, |options| {
        options.tls = picket::tls::client_config(Some(&roots)).expect("TLS roots");
        options.proxy_env = Some(env);
    });
    for name in ["tunnelled", "direct"] {
        node.verdict_until(name, "green", Duration::from_secs(2), |v| {
            v.heart == Heart::Green
        })
        .await;
    }
    let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1");
    // The check of the tunnelled host went through the proxy, and through
    // the tunnel completed its handshake. (A host reads green from the
    // start, before its first check: wait for the check itself.)
    eventually(
        "the first check asks the proxy",
        Duration::from_secs(2),
        || !proxy.asked().is_empty(),
    )
    .await;
    assert_eq!(proxy.asked(), vec![connect.clone()], "the check");
    eventually(
        "both checks complete their handshakes",
        Duration::from_secs(1),
        || billing.handshakes() >= 2,
    )
    .await;

    let answer = client::get(node.proxy, "shop.example.com", "/tunnelled/x")
        .await
        .expect("the node answers");
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "billing: GET /tunnelled/x");
    assert_eq!(
        proxy.asked(),
        vec![connect.clone(), connect.clone()],
        "the request opened a tunnel of its own"
    );

    let answer = client::get(node.proxy, "shop.example.com", "/direct/y")
        .await
        .expect("the node answers");
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        proxy.asked(),
        vec![connect.clone(), connect],
        "NO_PROXY hosts are reached directly"
    );
    assert_eq!(billing.hits(), 2);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_refusing_the_tunnel_is_the_verdict_and_the_answer() {
    let proxy = ForwardProxy::refusing_tunnels(403).await;
    let ca = TestCa::new("picket test CA");
    let billing = TlsUpstream::start("billing", ca.server_config(&["127.0.0.1"])).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let roots = ca.write_pem(dir.path());
    let config = format!(
        "[global]\ncheck_every = \"1s\"\ncheck_timeout = \"500ms\"\n{}",
        external(
            "billing",
            &format!("https://127.0.0.1:{}", billing.addr.port())
        ),
    );
    let env = proxy_env(&[("HTTPS_PROXY", proxy.url())]);
    let node = TestNode::start_with(&config, |options| {
        options.tls = picket::tls::client_config(Some(&roots)).expect("TLS roots");
        options.proxy_env = Some(env);
    });
    node.verdict_until(
        "billing",
        "red with the proxy's answer",
        Duration::from_millis(1500),
        |v| {
            v.heart == Heart::Red
                && *v.reason == *"host unusable: the forward proxy answered 403 to CONNECT"
        },
    )
    .await;
    let answer = client::get(node.proxy, "shop.example.com", "/billing/x")
        .await
        .expect("the node answers");
    assert_eq!(answer.status, 502, "{}", answer.text());
    assert_eq!(billing.accepted(), 0, "nothing went around the proxy");
    node.stop().await;
}
