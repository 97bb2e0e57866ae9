//! Routes from Ingress objects through the fake API server: an Ingress of
//! the node's class is served within a second, by a Service's named port;
//! an `Exact` path matches itself alone; another class is not served; the
//! TLS Secret it names is served by SNI and replaced without a restart;
//! RBAC that forbids Ingresses costs their routes, never the services';
//! deleting the Ingress removes its routes.

use std::time::Duration;

use picket_proto::Heart;
use picket_tests::fake_kube::{FakeKube, Kind, ingress, pod, service, tls_secret};
use picket_tests::node::{TestNode, eventually};
use picket_tests::tls::{self, TestCa};
use picket_tests::upstream::{Behaviour, Upstream};
use picket_tests::{AT_ONCE, client};
use tokio::time::Instant;

const SOON: Duration = Duration::from_secs(5);
/// How often a wait looks again: an HTTP answer has no event to await.
const POLL: Duration = Duration::from_millis(50);

fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

fn config(kube: &FakeKube, rest: &str) -> String {
    format!(
        "[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n{rest}",
        kube.url()
    )
}

/// The status and the answering upstream's name of a GET.
async fn answer(node: &TestNode, host: &str, path: &str) -> (u16, String) {
    match client::get(node.proxy, host, path).await {
        Ok(a) => (
            a.status.as_u16(),
            a.text().split(':').next().unwrap_or_default().to_string(),
        ),
        Err(e) => (0, e.to_string()),
    }
}

/// Waits until a GET answers `status` (from `upstream`, when 200).
async fn until_answers(
    node: &TestNode,
    (host, path): (&str, &str),
    (status, upstream): (u16, &str),
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let got = answer(node, host, path).await;
        if got.0 == status && (status != 200 || got.1 == upstream) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "{host}{path}: still {got:?} after {within:?}, wanted {status} from {upstream}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The cart Service (its port `http` is 80, to the pods' port `http`) and
/// one ready pod of it on `upstream`.
fn cart(kube: &FakeKube, upstream: &Upstream) {
    kube.apply(Kind::Services, &service("cart", Some("cart"), None, 80));
    kube.apply(
        Kind::Pods,
        &pod(
            "cart-1",
            "cart",
            Some("127.0.0.1"),
            upstream.addr.port(),
            true,
            "shop/cart:1",
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_of_the_class_is_served_within_a_second_and_goes_with_it() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let upstream = Upstream::start("cart", Behaviour::Echo).await;
    cart(&kube, &upstream);
    let node = TestNode::start(&config(&kube, ""));
    until_answers(&node, ("shop.test", "/cart/x"), (404, ""), SOON).await;
    // Let the watches list what there is before the Ingress comes.
    tokio::time::sleep(Duration::from_millis(300)).await;

    kube.apply(
        Kind::Ingresses,
        &ingress(
            "shop",
            "picket",
            "shop.test",
            &[
                ("/cart", "Prefix", "cart", "http"),
                ("/checkout", "Exact", "cart", "80"),
            ],
            None,
        ),
    );
    let served = until_answers(&node, ("shop.test", "/cart/x"), (200, "cart"), AT_ONCE).await;
    eprintln!("FIGURE | route from an Ingress served {served:.1?} after its event");
    assert_eq!(
        answer(&node, "shop.test", "/checkout").await,
        (200, "cart".into())
    );
    assert_eq!(
        answer(&node, "shop.test", "/checkout/x").await.0,
        404,
        "an Exact path matches itself alone"
    );
    assert_eq!(answer(&node, "other.test", "/cart").await.0, 404);
    let (_, routes) = node.admin_json("/v1/routes").await;
    let cart_route = routes["routes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "test/shop/0.0").cloned())
        .expect("the Ingress's first path in /v1/routes");
    assert_eq!(
        cart_route["declared_by"], "ingress test/shop",
        "{cart_route}"
    );
    assert_eq!(
        cart_route["upstream"], "service cart, port \"http\"",
        "{cart_route}"
    );
    eventually("the Ingress's route green", SOON, || {
        node.verdict("test/shop/0.0")
            .is_some_and(|v| v.heart == Heart::Green && v.ready == 1)
    })
    .await;

    // Another class is some other controller's.
    kube.apply(
        Kind::Ingresses,
        &ingress(
            "blog",
            "nginx",
            "blog.test",
            &[("/", "Prefix", "cart", "http")],
            None,
        ),
    );

    // A backend the node cannot serve is a red route that says why.
    kube.apply(
        Kind::Ingresses,
        &ingress(
            "bad",
            "picket",
            "bad.test",
            &[("/", "Prefix", "cart", "9999")],
            None,
        ),
    );
    // And a backend by resource (not a Service): refused, with the reason.
    let mut store = ingress(
        "store",
        "picket",
        "store.test",
        &[("/", "Prefix", "cart", "http")],
        None,
    );
    store["spec"]["rules"][0]["http"]["paths"][0]["backend"] = serde_json::json!({
        "resource": { "apiGroup": "storage.example.com", "kind": "Bucket", "name": "static" }
    });
    kube.apply(Kind::Ingresses, &store);
    eventually("the bad Ingresses judged", SOON, || {
        node.verdict("test/bad/0.0").is_some() && node.verdict("test/store/0.0").is_some()
    })
    .await;
    let verdict = node.verdict("test/bad/0.0").expect("a verdict");
    assert_eq!(verdict.heart, Heart::Red, "{verdict:?}");
    assert_eq!(
        verdict.reason.as_ref(),
        "Service test/cart has no port 9999",
        "{verdict:?}"
    );
    let verdict = node.verdict("test/store/0.0").expect("a verdict");
    assert_eq!(verdict.heart, Heart::Red, "{verdict:?}");
    let (_, routes) = node.admin_json("/v1/routes").await;
    let store_route = routes["routes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "test/store/0.0").cloned())
        .expect("the refused route in /v1/routes");
    assert_eq!(
        store_route["refused"],
        "ingress test/store, store.test/: a backend by resource is not a Service; \
         Picket serves Services only",
        "{store_route}"
    );
    assert_eq!(answer(&node, "store.test", "/").await.0, 404);
    // The watch delivers in order: the other class's Ingress, put before
    // these, has been seen and left alone.
    assert_eq!(answer(&node, "blog.test", "/").await.0, 404);
    assert!(node.verdict("test/blog/0.0").is_none());

    kube.delete(Kind::Ingresses, "shop");
    let gone = until_answers(&node, ("shop.test", "/cart/x"), (404, ""), AT_ONCE).await;
    eprintln!("FIGURE | route from an Ingress removed {gone:.1?} after its event");
    assert!(
        node.verdict("test/shop/0.0").is_none() || {
            tokio::time::sleep(Duration::from_millis(100)).await;
            node.verdict("test/shop/0.0").is_none()
        }
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_secret_of_an_ingress_is_served_and_replaced_without_a_restart() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let upstream = Upstream::start("cart", Behaviour::Echo).await;
    cart(&kube, &upstream);
    let dir = tempfile::tempdir().expect("a directory");
    let ca = TestCa::new("kube-ingress CA");
    // The file's certificate, for another name: the listener needs one.
    let file = ca.write_leaf(dir.path(), "file", &["file.test"]);
    let (first, first_key) = ca.leaf(&["shop.test"]);
    kube.apply(
        Kind::Secrets,
        &tls_secret(
            "shop-tls",
            first.pem().as_bytes(),
            first_key.serialize_pem().as_bytes(),
        ),
    );
    kube.apply(
        Kind::Ingresses,
        &ingress(
            "shop",
            "picket",
            "shop.test",
            &[("/", "Prefix", "cart", "http")],
            Some("shop-tls"),
        ),
    );
    let node = TestNode::start(&format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n{}{}",
        file.table(),
        config(&kube, "")
    ));
    let https = node.tls.expect("an HTTPS listener");
    let client = tls::client_config(&ca, &[b"http/1.1"]);
    let shown = |client: std::sync::Arc<rustls::ClientConfig>, host: &'static str| async move {
        tls::get(https, client, host, "/")
            .await
            .ok()
            .map(|(answer, leaf, _)| (answer.status.as_u16(), leaf))
    };
    let start = Instant::now();
    loop {
        if shown(client.clone(), "shop.test").await == Some((200, first.der().clone())) {
            break;
        }
        assert!(
            start.elapsed() < SOON,
            "the Secret's certificate never served"
        );
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        shown(client.clone(), "file.test").await.map(|s| s.1),
        Some(file.der.clone()),
        "the file's certificate serves its own name"
    );
    let (_, answer) = node.admin_json("/v1/node").await;
    let certificates = answer["certificates"].as_array().expect("certificates");
    assert!(
        certificates
            .iter()
            .any(|c| c["cert"] == "secret test/shop-tls"),
        "{answer}"
    );

    // The Secret is replaced (cert-manager renewing it): the next
    // handshake gets the new certificate.
    let (second, second_key) = ca.leaf(&["shop.test"]);
    kube.apply(
        Kind::Secrets,
        &tls_secret(
            "shop-tls",
            second.pem().as_bytes(),
            second_key.serialize_pem().as_bytes(),
        ),
    );
    let start = Instant::now();
    loop {
        if shown(client.clone(), "shop.test").await.map(|s| s.1) == Some(second.der().clone()) {
            break;
        }
        assert!(
            start.elapsed() < AT_ONCE,
            "the replaced Secret not served within {AT_ONCE:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    eprintln!(
        "FIGURE | replaced TLS Secret served {:.1?} after its event",
        start.elapsed()
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_that_forbids_ingresses_costs_their_routes_never_the_services() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let upstream = Upstream::start("cart", Behaviour::Echo).await;
    cart(&kube, &upstream);
    kube.forbid_kinds(&[Kind::Ingresses, Kind::Secrets]);
    kube.apply(
        Kind::Ingresses,
        &ingress(
            "shop",
            "picket",
            "shop.test",
            &[("/", "Prefix", "cart", "http")],
            None,
        ),
    );
    let node = TestNode::start(&config(
        &kube,
        "[runtime.breaker]\ncooldown = \"1s\"\n[[route]]\nname = \"api\"\nhost = \"api.test\"\nservice = \"cart\"\nport = \"http\"\n",
    ));
    until_answers(&node, ("api.test", "/"), (200, "cart"), SOON).await;
    assert_eq!(answer(&node, "shop.test", "/").await.0, 404);
    eventually("the file's route green, its data current", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.heart == Heart::Green && v.runtime_stale_since_unix_ms.is_none())
    })
    .await;
    // The right granted: the Ingress is served from the next try.
    kube.forbid_kinds(&[]);
    until_answers(&node, ("shop.test", "/"), (200, "cart"), SOON).await;
    assert_eq!(answer(&node, "api.test", "/").await, (200, "cart".into()));
    node.stop().await;
}

/// Without the right on Secrets, an Ingress's routes still serve, over
/// plain HTTP and with the file's certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_that_forbids_secrets_costs_the_certificates_alone() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let upstream = Upstream::start("cart", Behaviour::Echo).await;
    cart(&kube, &upstream);
    kube.forbid_kinds(&[Kind::Secrets]);
    let dir = tempfile::tempdir().expect("a directory");
    let ca = TestCa::new("kube-ingress CA");
    let file = ca.write_leaf(dir.path(), "file", &["file.test"]);
    let (cert, key) = ca.leaf(&["shop.test"]);
    kube.apply(
        Kind::Secrets,
        &tls_secret(
            "shop-tls",
            cert.pem().as_bytes(),
            key.serialize_pem().as_bytes(),
        ),
    );
    kube.apply(
        Kind::Ingresses,
        &ingress(
            "shop",
            "picket",
            "shop.test",
            &[("/", "Prefix", "cart", "http")],
            Some("shop-tls"),
        ),
    );
    let node = TestNode::start(&format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n{}{}",
        file.table(),
        config(&kube, "[runtime.breaker]\ncooldown = \"1s\"\n")
    ));
    until_answers(&node, ("shop.test", "/"), (200, "cart"), SOON).await;
    let https = node.tls.expect("an HTTPS listener");
    // The name's own certificate is not there: the default (the file's)
    // is what a client is shown, which a client of shop.test refuses.
    let shown = tls::get(
        https,
        tls::client_config(&ca, &[b"http/1.1"]),
        "shop.test",
        "/",
    )
    .await;
    assert!(
        shown.is_err(),
        "no certificate for shop.test without its Secret"
    );
    kube.forbid_kinds(&[]);
    let start = Instant::now();
    loop {
        let shown = tls::get(
            https,
            tls::client_config(&ca, &[b"http/1.1"]),
            "shop.test",
            "/",
        )
        .await;
        if shown.is_ok_and(|(_, leaf, _)| leaf == *cert.der()) {
            break;
        }
        assert!(
            start.elapsed() < SOON,
            "the Secret never served once allowed"
        );
        tokio::time::sleep(POLL).await;
    }
    node.stop().await;
}
