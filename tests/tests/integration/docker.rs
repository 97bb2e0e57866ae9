//! Docker: real containers of the test upstream on a network of the
//! test's own, followed through the engine's inventory and event stream.
//! Without an engine these tests are skipped outside CI and fail in it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use picket_proto::Heart;
use picket_tests::client;
use picket_tests::docker::{self, Container, Network, Relay, Spec};
use picket_tests::node::TestNode;
use picket_tests::require;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const SOON: Duration = Duration::from_secs(20);

fn config(network: &Network, endpoint: Option<&str>) -> String {
    let endpoint = endpoint
        .map(|e| format!("endpoint = \"{e}\"\n"))
        .unwrap_or_default();
    // A short runtime breaker cool-down: a cut engine comes back within
    // these tests' patience, not the default 30 s.
    format!(
        "[runtime]\nkind = \"docker\"\nnetwork = \"{}\"\n{endpoint}breaker = {{ cooldown = \"1s\" }}\n\
         [[route]]\nname = \"api\"\nservice = \"{}/api\"\nport = 8080\nconnect_timeout = \"1s\"\n",
        network.name, network.name
    )
}

fn api(version: &str) -> Spec<'_> {
    Spec {
        service: "api",
        project: None,
        version,
        healthy: None,
        labels: &[],
    }
}

fn engine() -> bool {
    require("a Docker engine", docker::available())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_containers_leave_the_rotation_before_any_request_fails() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let containers: Vec<Container> = (0..3)
        .map(|_| Container::run(&network, &api("1")))
        .collect();
    let node = TestNode::start(&config(&network, None));
    node.verdict_until("api", "green 3/3", SOON, |v| {
        v.heart == Heart::Green && v.ready == 3
    })
    .await;

    // Steady load while one replica stops.
    let running = Arc::new(AtomicBool::new(true));
    let load: JoinHandle<Vec<(u16, String, tokio::time::Instant)>> = {
        let (running, proxy) = (Arc::clone(&running), node.proxy);
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while running.load(Ordering::SeqCst) {
                let answer = client::get(proxy, "a", "/").await.expect("an answer");
                let name = answer
                    .text()
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                seen.push((answer.status.as_u16(), name, tokio::time::Instant::now()));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seen
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = tokio::time::Instant::now();
    containers[0].stop();
    node.verdict_until("api", "orange 2/3", SOON, |v| {
        v.heart == Heart::Orange && v.ready == 2
    })
    .await;
    let flipped = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    running.store(false, Ordering::SeqCst);
    let seen = load.await.unwrap();
    let failed: Vec<_> = seen.iter().filter(|(status, ..)| *status != 200).collect();
    assert!(
        failed.is_empty(),
        "{} failed of {}: {failed:?}",
        failed.len(),
        seen.len()
    );
    let stopped = &containers[0].name;
    let after: Vec<_> = seen
        .iter()
        .filter(|(_, name, at)| name == stopped && *at > flipped)
        .collect();
    assert!(
        after.is_empty(),
        "the stopped replica answered after the event: {after:?}"
    );
    // The load ran on both sides of the stop (how many requests a loaded
    // machine fits in is not the point).
    let before = seen.iter().filter(|(.., at)| *at < stopping).count();
    let past = seen.iter().filter(|(.., at)| *at > flipped).count();
    assert!(
        before >= 10 && past >= 10,
        "a steady load: {before} requests before the stop, {past} after the flip"
    );

    containers[1].stop();
    containers[2].stop();
    node.verdict_until("api", "red, none ready", SOON, |v| {
        v.heart == Heart::Red && v.reason.starts_with("none ready") && v.total == 3
    })
    .await;
    // Back in rotation once it runs; asked once its process listens (the
    // engine says `start` before the upstream inside has bound its port).
    containers[1].start();
    assert!(
        containers[1].listening(SOON).await,
        "the started replica listens"
    );
    node.verdict_until("api", "one back", SOON, |v| v.ready == 1)
        .await;
    let answer = client::get(node.proxy, "a", "/").await.expect("an answer");
    assert!(
        answer.status == 200 && answer.text().starts_with(&containers[1].name),
        "the started replica answers: {} {}",
        answer.status,
        answer.text()
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthchecks_pauses_and_images() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let healthy = Container::run(
        &network,
        &Spec {
            service: "api",
            project: None,
            version: "1",
            healthy: Some(true),
            labels: &[],
        },
    );
    let failing = Container::run(
        &network,
        &Spec {
            service: "api",
            project: None,
            version: "1",
            healthy: Some(false),
            labels: &[],
        },
    );
    let plain = Container::run(&network, &api("2"));
    let node = TestNode::start(&config(&network, None));
    node.verdict_until(
        "api",
        "the healthy and the plain one ready, the failing one not",
        SOON,
        |v| v.ready == 2 && v.total == 3,
    )
    .await;
    let replicas = node
        .node()
        .proxy()
        .table()
        .find(None, "/")
        .cloned()
        .unwrap()
        .upstream
        .replicas();
    let not_ready: Vec<&str> = replicas
        .iter()
        .filter(|r| !r.ready())
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(not_ready, [failing.name.as_str()]);
    let images = node.verdict("api").unwrap().images;
    let counts: Vec<(&str, u32)> = images
        .iter()
        .map(|i| (i.image.as_str(), i.replicas))
        .collect();
    let images = docker::Images::hold();
    let (one, two) = (images.label("1"), images.label("2"));
    assert_eq!(
        counts,
        [(one.as_str(), 2), (two.as_str(), 1)],
        "two images, each with its image ID, with counts"
    );

    plain.pause();
    node.verdict_until("api", "paused is not ready", SOON, |v| v.ready == 1)
        .await;
    for _ in 0..5 {
        assert!(
            client::get(node.proxy, "a", "/")
                .await
                .unwrap()
                .text()
                .starts_with(&healthy.name)
        );
    }
    plain.unpause();
    node.verdict_until("api", "unpaused is ready again", SOON, |v| v.ready == 2)
        .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_event_stream_reconnects_with_a_fresh_inventory() {
    if !engine()
        || !require(
            "the engine's socket at /var/run/docker.sock",
            std::path::Path::new("/var/run/docker.sock").exists(),
        )
    {
        return;
    }
    let network = Network::create();
    let a = Container::run(&network, &api("1"));
    let b = Container::run(&network, &api("1"));
    let mut relay = Relay::start().await;
    let node = TestNode::start(&config(&network, Some(&relay.endpoint())));
    node.verdict_until("api", "green 2/2", SOON, |v| {
        v.heart == Heart::Green && v.ready == 2
    })
    .await;

    relay.cut();
    node.verdict_until("api", "stale while cut", SOON, |v| {
        v.runtime_stale_since_unix_ms.is_some()
    })
    .await;
    // What happens meanwhile is not streamed to the node...
    b.stop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        node.verdict("api").unwrap().ready,
        2,
        "the last known replicas stay"
    );
    assert!(
        client::get(node.proxy, "a", "/")
            .await
            .unwrap()
            .status
            .is_success(),
        "traffic goes on meanwhile"
    );
    // ...but the fresh inventory after the reconnect sees it.
    relay.restore().await;
    node.verdict_until("api", "the stop seen after the reconnect", SOON, |v| {
        v.ready == 1 && v.total == 2 && v.runtime_stale_since_unix_ms.is_none()
    })
    .await;
    assert!(
        client::get(node.proxy, "a", "/")
            .await
            .unwrap()
            .text()
            .starts_with(&a.name)
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_follows_the_engine_through_the_read_only_socket_proxy() {
    if !engine()
        || !require(
            "the engine's socket at /var/run/docker.sock",
            std::path::Path::new("/var/run/docker.sock").exists(),
        )
    {
        return;
    }
    let network = Network::create();
    let a = Container::run(&network, &api("1"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("tcp://{}", listener.local_addr().unwrap());
    let (_trigger, shutdown) = picket::shutdown::channel();
    tokio::spawn(picket::socket_proxy::serve(
        listener,
        picket::socket_proxy::SocketProxy::new(
            "/var/run/docker.sock".into(),
            picket::socket_proxy::Bounds::default(),
        ),
        shutdown,
    ));
    let node = TestNode::start(&config(&network, Some(&endpoint)));
    node.verdict_until("api", "the inventory, through the proxy", SOON, |v| {
        v.heart == Heart::Green && v.ready == 1
    })
    .await;
    // Events, through the proxy.
    let b = Container::run(&network, &api("2"));
    node.verdict_until(
        "api",
        "a started container, through the event stream",
        SOON,
        |v| v.ready == 2,
    )
    .await;
    a.kill();
    node.verdict_until("api", "a killed one", SOON, |v| {
        v.ready == 1 && v.total == 2
    })
    .await;
    assert!(
        client::get(node.proxy, "a", "/")
            .await
            .unwrap()
            .text()
            .starts_with(&b.name)
    );
    node.stop().await;
}

/// A container of a compose service that declares its route in labels,
/// on a real engine: served through the node by its host, by the labels
/// the engine reports, until the container is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compose_service_declares_its_route_in_labels() {
    if !engine() {
        return;
    }
    let network = Network::create();
    let node = TestNode::start(&format!(
        "[runtime]\nkind = \"docker\"\nnetwork = \"{}\"\n",
        network.name
    ));
    let shop = Container::run(
        &network,
        &Spec {
            service: "shop",
            project: None,
            version: "1",
            healthy: None,
            labels: &[
                ("picket.enable", "true"),
                ("picket.route.shop.host", "shop.test"),
                ("picket.route.shop.port", "8080"),
                ("picket.route.shop.strip_prefix", "true"),
                ("picket.route.shop.path_prefix", "/shop"),
            ],
        },
    );
    let deadline = tokio::time::Instant::now() + SOON;
    let answer = loop {
        let answer = client::get(node.proxy, "shop.test", "/shop/cart").await;
        let status = answer.as_ref().map(|a| a.status.as_u16()).ok();
        if let (Ok(answer), Some(200)) = (answer, status) {
            break answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "shop.test never served: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The test upstream says its name and what it was asked: the prefix
    // was stripped, as the label says.
    assert_eq!(answer.text(), format!("{}: GET /cart (0 bytes)", shop.name));
    let (_, routes) = node.admin_json("/v1/routes").await;
    let route = routes["routes"]
        .as_array()
        .and_then(|r| {
            r.iter()
                .find(|r| r["name"] == format!("{}/shop/shop", network.name))
                .cloned()
        })
        .expect("shop in /v1/routes");
    assert_eq!(
        route["declared_by"],
        format!("service {}/shop", network.name),
        "{route}"
    );

    drop(shop);
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let status = client::get(node.proxy, "shop.test", "/shop/cart")
            .await
            .map(|a| a.status.as_u16());
        if status.as_ref().is_ok_and(|s| *s == 404) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "shop.test still served after its container was removed: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.stop().await;
}
