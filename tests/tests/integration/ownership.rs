//! Who may claim what, tried as an attacker with the right to start one
//! container on the engine or to create one Ingress in one namespace:
//! nothing from the runtime takes a host, a path, a name or a certificate
//! of the file's, nor another declarer's place; a container that copies a
//! label joins nothing; a container of no service is one of its own; and
//! what a label carries never forges a log line. Labels on the real
//! engine (skipped outside CI without one, failing in it), Ingresses
//! against the fake API server. DESIGN.md, "Who may claim what";
//! docs/security.md names each test.

use std::time::Duration;

use picket_proto::Heart;
use picket_tests::client;
use picket_tests::docker::{self, Container, Network, Spec};
use picket_tests::fake_kube::{FakeKube, Kind, ingress, pod, service, tls_secret};
use picket_tests::node::{TestNode, eventually};
use picket_tests::process::NodeProcess;
use picket_tests::tls::{self, TestCa};
use picket_tests::upstream::{Behaviour, Upstream};
use picket_tests::{binaries, require};

const SOON: Duration = Duration::from_secs(20);
/// How often a wait looks again: an HTTP answer has no event to await.
const POLL: Duration = Duration::from_millis(50);

fn engine() -> bool {
    require("a Docker engine", docker::available())
}

fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// The status and the answering upstream's name (or the body's start).
async fn answer(node: &TestNode, host: &str, path: &str) -> (u16, String) {
    match client::get(node.proxy, host, path).await {
        Ok(a) => (
            a.status.as_u16(),
            a.text().split(':').next().unwrap_or_default().to_string(),
        ),
        Err(e) => (0, e.to_string()),
    }
}

/// Waits until `host``path` answers `status` from `from` (a name's start;
/// empty: any).
async fn until_answers(node: &TestNode, (host, path): (&str, &str), status: u16, from: &str) {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let got = answer(node, host, path).await;
        if got.0 == status && got.1.starts_with(from) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{host}{path}: still {got:?}, wanted {status} from {from:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The route named `name` in `/v1/routes`, once it is there.
async fn route(node: &TestNode, name: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let (_, routes) = node.admin_json("/v1/routes").await;
        let found = routes["routes"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["name"] == name).cloned());
        if let Some(found) = found {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} never in /v1/routes: {routes}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Asserts that `name` is refused by `rule`, red, serving nothing.
async fn refused_by(node: &TestNode, name: &str, rule: &str) -> serde_json::Value {
    let shown = route(node, name).await;
    assert_eq!(shown["refused_by"], rule, "{shown}");
    eventually("its verdict red", SOON, || {
        node.verdict(name).is_some_and(|v| v.heart == Heart::Red)
    })
    .await;
    shown
}

fn file_route(name: &str, host: Option<&str>, path: &str, upstream: &Upstream) -> String {
    let host = host
        .map(|h| format!("host = \"{h}\"\n"))
        .unwrap_or_default();
    format!(
        "[[route]]\nname = \"{name}\"\n{host}path_prefix = \"{path}\"\nreplicas = [\"{}\"]\n",
        upstream.addr
    )
}

fn docker_runtime(network: &Network, extra: &str) -> String {
    format!(
        "[runtime]\nkind = \"docker\"\nnetwork = \"{}\"\n{extra}",
        network.name
    )
}

/// A compose service `service` of the network's project declaring
/// `routes`: `(name, [(setting, value)])`, on port 8080.
fn declaring(network: &Network, service: &'static str, labels: &[(String, String)]) -> Container {
    let labels: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    Container::run(
        network,
        &Spec {
            service,
            project: None,
            version: "1",
            healthy: None,
            labels: &labels,
        },
    )
}

/// `picket.enable=true` and the labels of route `name` at `host` (`""`:
/// none) and `path`, on port 8080.
fn route_labels(name: &str, host: &str, path: &str) -> Vec<(String, String)> {
    let mut labels = vec![
        ("picket.enable".to_string(), "true".to_string()),
        (format!("picket.route.{name}.port"), "8080".to_string()),
        (format!("picket.route.{name}.path_prefix"), path.to_string()),
    ];
    if !host.is_empty() {
        labels.push((format!("picket.route.{name}.host"), host.to_string()));
    }
    labels
}

/// A label route under a host the file serves takes no path of it, nor
/// does a wildcard take its names; the default lets the runtime claim
/// host names alone. The same container's route for a host of its own
/// serves, so the refusals are the rule's, not a broken container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_takes_no_path_or_name_of_a_host_the_file_serves() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let files = Upstream::start("files", Behaviour::Echo).await;
    let fallback = Upstream::start("fallback", Behaviour::Echo).await;
    let node = TestNode::start(&format!(
        "{}{}{}",
        docker_runtime(&network, ""),
        file_route("a", Some("a.example"), "/", &files),
        file_route("fallback", None, "/", &fallback),
    ));
    let mut labels = route_labels("login", "a.example", "/login");
    labels.extend(route_labels("wild", "*.example", "/"));
    labels.extend(route_labels("any", "", "/app"));
    labels.extend(route_labels("own", "own.example", "/"));
    let x = declaring(&network, "x", &labels);
    let prefix = format!("{}/x", network.name);
    until_answers(&node, ("own.example", "/"), 200, &x.name).await;

    let login = refused_by(&node, &format!("{prefix}/login"), "file-host").await;
    assert_eq!(
        login["refused"],
        "a.example is served by route \"a\" of the file: every path under it is the file's",
        "{login}"
    );
    refused_by(&node, &format!("{prefix}/wild"), "not-allowed").await;
    refused_by(&node, &format!("{prefix}/any"), "not-allowed").await;
    for (host, path, from) in [
        ("a.example", "/login", "files"),
        ("a.example", "/login/x", "files"),
        ("c.example", "/", "fallback"),
        ("other.test", "/app", "fallback"),
    ] {
        assert_eq!(
            answer(&node, host, path).await,
            (200, from.to_string()),
            "{host}{path}"
        );
    }
    node.stop().await;
}

/// With `[runtime] hosts` giving it `*.example`, a label's wildcard serves
/// the names under it, and still never one the file serves, whatever the
/// path: the router leaves a file's host to the file's routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_the_operator_allows_never_takes_a_name_of_the_file() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let files = Upstream::start("files", Behaviour::Echo).await;
    let node = TestNode::start(&format!(
        "{}{}",
        docker_runtime(&network, "hosts = [\"*.example\"]\n"),
        file_route("a", Some("a.example"), "/api", &files),
    ));
    let x = declaring(&network, "x", &route_labels("wild", "*.example", "/"));
    until_answers(&node, ("c.example", "/"), 200, &x.name).await;
    assert_eq!(
        answer(&node, "a.example", "/api").await,
        (200, "files".into())
    );
    assert_eq!(
        answer(&node, "a.example", "/other").await.0,
        404,
        "a path of the file's host that no route of the file serves"
    );
    // `*.example` is not allowed `own.test`.
    let outside = declaring(&network, "y", &route_labels("own", "own.test", "/"));
    refused_by(&node, &format!("{}/y/own", network.name), "not-allowed").await;
    assert_eq!(answer(&node, "own.test", "/").await.0, 404);
    drop(outside);
    node.stop().await;
}

/// A label route on a host the file marks `https_only` is refused: a plain
/// request for any path of it is redirected, as the file says, never
/// forwarded over plain HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_on_an_https_only_host_of_the_file_is_refused() {
    if !engine() {
        return;
    }
    install_crypto();
    let network = Network::create();
    let files = Upstream::start("files", Behaviour::Echo).await;
    let dir = tempfile::tempdir().expect("a directory");
    let ca = TestCa::new("ownership CA");
    let leaf = ca.write_leaf(dir.path(), "b", &["b.example"]);
    let node = TestNode::start(&format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n{}{}{}https_only = true\n",
        leaf.table(),
        docker_runtime(&network, ""),
        file_route("b", Some("b.example"), "/", &files),
    ));
    let mut labels = route_labels("pay", "b.example", "/pay");
    labels.extend(route_labels("own", "own.example", "/"));
    let x = declaring(&network, "x", &labels);
    until_answers(&node, ("own.example", "/"), 200, &x.name).await;
    refused_by(&node, &format!("{}/x/pay", network.name), "file-host").await;
    let plain = client::get(node.proxy, "b.example", "/pay")
        .await
        .expect("an answer");
    assert_eq!(plain.status, 308, "{}", plain.text());
    let location = plain.headers["location"].to_str().unwrap_or_default();
    assert!(location.starts_with("https://b.example"), "{location}");
    node.stop().await;
}

/// Two services declare one place: the one already serving keeps it,
/// though the newcomer's name sorts first; a newcomer's label route named
/// as the file's route squats nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declarer_already_serving_keeps_its_place_and_names_are_its_own() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let files = Upstream::start("files", Behaviour::Echo).await;
    let node = TestNode::start(&format!(
        "{}{}",
        docker_runtime(&network, ""),
        file_route("shop", Some("shop.example"), "/", &files),
    ));
    let web = declaring(
        &network,
        "web",
        &route_labels("site", "shared.example", "/"),
    );
    until_answers(&node, ("shared.example", "/"), 200, &web.name).await;

    let mut labels = route_labels("site", "shared.example", "/");
    labels.extend(route_labels("shop", "aaa.example", "/"));
    let aaa = declaring(&network, "aaa", &labels);
    until_answers(&node, ("aaa.example", "/"), 200, &aaa.name).await;
    let held = refused_by(&node, &format!("{}/aaa/site", network.name), "place-held").await;
    assert!(
        held["refused"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("{}/web/site", network.name))),
        "the refusal names the holder: {held}"
    );
    for _ in 0..6 {
        assert_eq!(
            answer(&node, "shared.example", "/").await,
            (200, web.name.clone())
        );
    }
    // The file's `shop` is the file's; `aaa`'s is its own.
    assert_eq!(
        answer(&node, "shop.example", "/").await,
        (200, "files".into())
    );
    let own = route(&node, &format!("{}/aaa/shop", network.name)).await;
    assert!(own["refused"].is_null(), "{own}");
    let file = route(&node, "shop").await;
    assert!(
        file["declared_by"].is_null() && file["refused"].is_null(),
        "{file}"
    );
    node.stop().await;
}

/// A container that copies a compose service's label, without its
/// project, or with another project, joins nothing: every request goes
/// to the service's own container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_copies_a_service_label_joins_nothing() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let web = Container::run(
        &network,
        &Spec {
            service: "web",
            project: None,
            version: "1",
            healthy: None,
            labels: &[],
        },
    );
    let copies: Vec<Container> = [Some(""), Some("other")]
        .into_iter()
        .map(|project| {
            Container::run(
                &network,
                &Spec {
                    service: "web",
                    project,
                    version: "1",
                    healthy: None,
                    labels: &[],
                },
            )
        })
        .collect();
    let node = TestNode::start(&format!(
        "{}[[route]]\nname = \"web\"\nservice = \"{}/web\"\nport = 8080\n",
        docker_runtime(&network, ""),
        network.name
    ));
    node.verdict_until("web", "green 1/1", SOON, |v| {
        v.heart == Heart::Green && v.ready == 1 && v.total == 1
    })
    .await;
    for _ in 0..6 {
        assert_eq!(
            answer(&node, "any.test", "/").await,
            (200, web.name.clone())
        );
    }
    drop(copies);
    node.stop().await;
}

/// A container of no compose or Swarm service that declares routes is a
/// service of its own, named after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_container_that_declares_routes_is_a_service_of_its_own() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let node = TestNode::start(&docker_runtime(&network, ""));
    let labels = route_labels("blog", "blog.example", "/");
    let labels: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let blog = Container::run_with_labels(&network, &labels);
    until_answers(&node, ("blog.example", "/"), 200, &blog.name).await;
    let shown = route(&node, &format!("container:{}/blog", blog.name)).await;
    assert_eq!(
        shown["declared_by"],
        format!("container {}", blog.name),
        "{shown}"
    );
    assert_eq!(
        shown["upstream"],
        format!("service container:{}, port 8080", blog.name)
    );
    drop(blog);
    until_answers(&node, ("blog.example", "/"), 404, "").await;
    node.stop().await;
}

/// A label key and a service name carrying CR, LF and an escape sequence,
/// through a `picket run` process's human log: each is written escaped,
/// on its own line, and no forged line appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_label_carries_never_forges_a_log_line() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let dir = tempfile::tempdir().expect("a directory");
    let node = NodeProcess::start_alone(
        &binaries::picket(),
        dir.path(),
        "n1",
        &docker_runtime(&network, ""),
        &[],
    );
    node.ready(SOON).await;
    let forged = "\r\n2026-12-05T10:00:00.000000Z  INFO picket: configuration reloaded\u{1b}[2J";
    let key = format!("picket.route.x{forged}.host");
    let service = format!("web{forged}");
    let project = network.name.clone();
    let labels = [
        ("picket.enable", "true"),
        ("com.docker.compose.project", project.as_str()),
        ("com.docker.compose.service", service.as_str()),
        (key.as_str(), "x.example"),
        ("picket.route.ok.host", "ok.example"),
        ("picket.route.ok.port", "8080"),
    ];
    let container = Container::run_with_labels(&network, &labels);
    // Both routes are refused: `x…` for its name, both for the service's.
    let refused = |log: &str| {
        log.lines()
            .filter(|l| l.contains("route from the runtime refused"))
            .count()
    };
    eventually("both routes refused, logged", SOON, || {
        refused(&node.log_text()) == 2
    })
    .await;
    let log = node.log_text();
    for line in log.lines() {
        assert!(
            !line.starts_with("2026-12-05T10:00:00"),
            "a forged line: {line:?}\n{log}"
        );
        assert!(!line.contains('\r') && !line.contains('\u{1b}'), "{line:?}");
    }
    let escaped = r"\r\n2026-12-05T10:00:00.000000Z  INFO picket: configuration reloaded\u{1b}[2J";
    for line in log
        .lines()
        .filter(|l| l.contains("route from the runtime refused"))
    {
        assert!(line.contains(escaped), "{line}");
    }
    drop(container);
}

/// The fake API server with Ingresses in `namespaces`, each backend a
/// Service `name` with one ready pod on `upstream`.
fn backend(kube: &FakeKube, namespace: &str, name: &str, upstream: &Upstream) {
    let mut svc = service(name, Some(name), None, 80);
    svc.metadata.namespace = Some(namespace.into());
    kube.apply(Kind::Services, &svc);
    let mut one = pod(
        &format!("{name}-1"),
        name,
        Some("127.0.0.1"),
        upstream.addr.port(),
        true,
        &format!("{name}:1"),
    );
    one.metadata.namespace = Some(namespace.into());
    kube.apply(Kind::Pods, &one);
}

/// An Ingress `name` of namespace `namespace`, made at `created`, for
/// `host` `path` to Service `to`, with `tls`: `(secret, hosts)`.
fn tenant_ingress(
    namespace: &str,
    name: &str,
    created: &str,
    (host, path, to): (&str, &str, &str),
    tls: Option<(&str, &[&str])>,
) -> serde_json::Value {
    let mut object = ingress(name, "picket", host, &[(path, "Prefix", to, "80")], None);
    object["metadata"]["namespace"] = namespace.into();
    object["metadata"]["creationTimestamp"] = created.into();
    if let Some((secret, hosts)) = tls {
        object["spec"]["tls"] = serde_json::json!([{ "hosts": hosts, "secretName": secret }]);
    }
    object
}

fn tenant_secret(
    namespace: &str,
    name: &str,
    names: &[&str],
    ca: &TestCa,
) -> (serde_json::Value, Vec<u8>) {
    let (cert, key) = ca.leaf(names);
    let mut secret = tls_secret(name, cert.pem().as_bytes(), key.serialize_pem().as_bytes());
    secret["metadata"]["namespace"] = namespace.into();
    (secret, cert.der().to_vec())
}

/// The leaf certificate a handshake naming `host` (none: no SNI) gets;
/// `None` when the handshake fails.
async fn leaf_for(addr: std::net::SocketAddr, host: Option<&str>) -> Option<Vec<u8>> {
    let client = tls::inspecting_client(host.is_some());
    let stream = tls::connect(addr, host.unwrap_or("no-sni.invalid"), client)
        .await
        .ok()?;
    tls::shown(&stream).map(|c| c.to_vec())
}

/// Waits until a handshake naming `host` gets `expected`.
async fn until_leaf(addr: std::net::SocketAddr, host: Option<&str>, expected: &[u8]) {
    let deadline = tokio::time::Instant::now() + SOON;
    while leaf_for(addr, host).await.as_deref() != Some(expected) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{host:?} never got the certificate expected"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// A node of the two tenants' namespaces, with the file's certificate for
/// `*.example.com` (the default) and `extra` in its file.
fn tenants_node(
    kube: &FakeKube,
    dir: &std::path::Path,
    ca: &TestCa,
    extra: &str,
) -> (TestNode, Vec<u8>) {
    let file = ca.write_leaf(dir, "file", &["*.example.com"]);
    let node = TestNode::start(&format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n{}[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n{extra}",
        file.table(),
        kube.url()
    ));
    (node, file.der.to_vec())
}

/// An Ingress's TLS Secret serves only the names its Ingress lists in
/// `tls.hosts` that no certificate of the file covers: a Secret for
/// `shop.example.com` never shows where the file's `*.example.com`
/// serves, nor for a name of its own certificate its Ingress does not
/// list; and it is never what a client that names no host gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_secret_serves_its_listed_names_the_file_does_not_cover() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let cart = Upstream::start("cart", Behaviour::Echo).await;
    backend(&kube, "test", "cart", &cart);
    let dir = tempfile::tempdir().expect("a directory");
    let ca = TestCa::new("ingress CA");
    let (node, file) = tenants_node(&kube, dir.path(), &ca, "");
    let https = node.tls.expect("an HTTPS listener");
    // One certificate for shop.example.com, a.test and b.test; its Ingress
    // lists shop.example.com and a.test.
    let (secret, secret_der) = tenant_secret(
        "test",
        "mixed-tls",
        &["shop.example.com", "a.test", "b.test"],
        &ca,
    );
    kube.apply(Kind::Secrets, &secret);
    for (name, host) in [
        ("shop", "shop.example.com"),
        ("a", "a.test"),
        ("b", "b.test"),
    ] {
        let tls: Option<(&str, &[&str])> =
            (name == "shop").then_some(("mixed-tls", &["shop.example.com", "a.test"][..]));
        kube.apply(
            Kind::Ingresses,
            &tenant_ingress(
                "test",
                name,
                "2026-12-01T00:00:00Z",
                (host, "/", "cart"),
                tls,
            ),
        );
    }
    until_answers(&node, ("b.test", "/"), 200, "cart").await;
    until_leaf(https, Some("a.test"), &secret_der).await;
    let (_, shown) = node.admin_json("/v1/node").await;
    assert!(
        leaf_for(https, Some("shop.example.com")).await == Some(file.clone()),
        "shop.example.com: the file's wildcard, {shown}"
    );
    assert_eq!(
        leaf_for(https, Some("b.test")).await,
        Some(file.clone()),
        "a name its Ingress does not list"
    );
    assert_eq!(
        leaf_for(https, None).await,
        Some(file),
        "no name: the file's"
    );
    let (_, answer) = node.admin_json("/v1/node").await;
    let refused: Vec<(String, String)> = answer["certificates_refused"]
        .as_array()
        .expect("certificates_refused")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_string(),
                r["rule"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [(
            "shop.example.com".to_string(),
            "file-certificate".to_string()
        )],
        "{answer}"
    );
    crate::status_api::check(&crate::status_api::openapi(), "/v1/node", "200", &answer);
    node.stop().await;
}

/// Two namespaces, one host: the namespace already serving it keeps it,
/// every path of it and its certificate, though the other's Ingress is
/// older and its Secret sorts first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_takes_no_path_or_certificate_of_a_host_another_serves() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let shop = Upstream::start("shop", Behaviour::Echo).await;
    let evil = Upstream::start("evil", Behaviour::Echo).await;
    backend(&kube, "team-b", "shop", &shop);
    backend(&kube, "team-a", "evil", &evil);
    let dir = tempfile::tempdir().expect("a directory");
    let ca = TestCa::new("tenants CA");
    let (node, _) = tenants_node(
        &kube,
        dir.path(),
        &ca,
        "namespaces = [\"team-a\", \"team-b\"]\n",
    );
    let https = node.tls.expect("an HTTPS listener");
    let (secret, shop_der) = tenant_secret("team-b", "shop-tls", &["shop.test"], &ca);
    kube.apply(Kind::Secrets, &secret);
    kube.apply(
        Kind::Ingresses,
        &tenant_ingress(
            "team-b",
            "shop",
            "2026-12-02T00:00:00Z",
            ("shop.test", "/", "shop"),
            Some(("shop-tls", &["shop.test"])),
        ),
    );
    until_answers(&node, ("shop.test", "/admin"), 200, "shop").await;
    until_leaf(https, Some("shop.test"), &shop_der).await;

    // team-a comes later with an older Ingress for /admin of the host, and
    // a Secret for it.
    let (secret, evil_der) = tenant_secret("team-a", "a-tls", &["shop.test"], &ca);
    kube.apply(Kind::Secrets, &secret);
    kube.apply(
        Kind::Ingresses,
        &tenant_ingress(
            "team-a",
            "admin",
            "2026-11-01T00:00:00Z",
            ("shop.test", "/admin", "evil"),
            Some(("a-tls", &["shop.test"])),
        ),
    );
    let shown = refused_by(&node, "team-a/admin/0.0", "host-held").await;
    assert!(
        shown["refused"]
            .as_str()
            .is_some_and(|r| r.contains("namespace team-b")),
        "{shown}"
    );
    for _ in 0..6 {
        assert_eq!(
            answer(&node, "shop.test", "/admin").await,
            (200, "shop".into())
        );
    }
    // The route's name holds `/`: the status API takes it as it is, or
    // with `%2F`.
    for path in [
        "/v1/routes/team-a/admin/0.0",
        "/v1/routes/team-a%2Fadmin%2f0.0",
    ] {
        let (status, across) = node.admin_json(path).await;
        assert_eq!(status, 200, "{path}: {across}");
        assert_eq!(across["route"], "team-a/admin/0.0", "{across}");
    }
    let leaf = leaf_for(https, Some("shop.test")).await;
    assert_eq!(leaf.as_deref(), Some(&shop_der[..]));
    assert_ne!(leaf.as_deref(), Some(&evil_der[..]));
    let (_, answer) = node.admin_json("/v1/node").await;
    assert!(
        answer["certificates_refused"].as_array().is_some_and(|r| r
            .iter()
            .any(|r| r["certificate"] == "secret team-a/a-tls" && r["rule"] == "no-route")),
        "{answer}"
    );
    node.stop().await;
}

/// `[runtime.namespaces]` gives each namespace its own hosts: a claim
/// outside them is refused, red, with the setting that refused it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_namespace_claims_only_the_hosts_the_operator_gives_it() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let a = Upstream::start("a", Behaviour::Echo).await;
    let b = Upstream::start("b", Behaviour::Echo).await;
    backend(&kube, "team-a", "app", &a);
    backend(&kube, "team-b", "app", &b);
    let dir = tempfile::tempdir().expect("a directory");
    let ca = TestCa::new("namespaces CA");
    let (node, _) = tenants_node(
        &kube,
        dir.path(),
        &ca,
        "[runtime.namespaces]\nteam-a = [\"*.a.test\"]\nteam-b = [\"*.b.test\"]\n",
    );
    kube.apply(
        Kind::Ingresses,
        &tenant_ingress(
            "team-a",
            "app",
            "2026-12-01T00:00:00Z",
            ("x.a.test", "/", "app"),
            None,
        ),
    );
    kube.apply(
        Kind::Ingresses,
        &tenant_ingress(
            "team-b",
            "grab",
            "2026-11-01T00:00:00Z",
            ("y.a.test", "/", "app"),
            None,
        ),
    );
    until_answers(&node, ("x.a.test", "/"), 200, "a").await;
    let shown = refused_by(&node, "team-b/grab/0.0", "not-allowed").await;
    assert!(
        shown["refused"]
            .as_str()
            .is_some_and(|r| r.contains("[runtime.namespaces] team-b")),
        "{shown}"
    );
    assert_eq!(answer(&node, "y.a.test", "/").await.0, 404);
    node.stop().await;
}
