//! Kubernetes through the fake API server: a real kube client and watcher
//! against the protocol, pods and services changing the rotation and the
//! verdict.

use std::time::Duration;

use picket_proto::Heart;
use picket_tests::client;
use picket_tests::fake_kube::{FakeKube, Kind, pod, pulled, service, with_sidecar};
use picket_tests::node::{TestNode, eventually};
use picket_tests::upstream::{Behaviour, Control, Upstream};

const SOON: Duration = Duration::from_secs(5);

fn config(kube: &FakeKube, routes: &str) -> String {
    format!(
        "[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n[global]\ncheck_every = \"1s\"\ncheck_timeout = \"500ms\"\n{routes}",
        kube.url()
    )
}

const API: &str = "[[route]]\nname = \"api\"\nservice = \"api\"\nport = \"http\"\n";

fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Which pods answered `n` requests.
async fn answered_by(node: &TestNode, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for _ in 0..n {
        let answer = client::get(node.proxy, "a", "/").await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
        names.push(
            answer
                .text()
                .split(':')
                .next()
                .unwrap_or_default()
                .to_string(),
        );
    }
    names.sort();
    names.dedup();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_becoming_ready_unready_or_deleted_move_rotation_and_verdict() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let mut pods = Vec::new();
    for i in 1..=3 {
        pods.push(Upstream::start(&format!("api-{i}"), Behaviour::Echo).await);
    }
    kube.apply(Kind::Services, &service("api", Some("api"), None, 80));
    for (i, p) in pods.iter().enumerate() {
        let ready = i < 2;
        kube.apply(
            Kind::Pods,
            &pod(
                &format!("api-{}", i + 1),
                "api",
                Some("127.0.0.1"),
                p.addr.port(),
                ready,
                "shop/api:1.4",
            ),
        );
    }
    let node = TestNode::start(&config(&kube, API));
    eventually("orange 2/3", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.heart == Heart::Orange && v.ready == 2 && v.total == 3)
    })
    .await;
    assert_eq!(
        answered_by(&node, 10).await,
        ["api-1", "api-2"],
        "only ready pods take requests"
    );

    let third = pod(
        "api-3",
        "api",
        Some("127.0.0.1"),
        pods[2].addr.port(),
        true,
        "shop/api:1.5",
    );
    kube.apply(Kind::Pods, &third);
    eventually("green 3/3", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.heart == Heart::Green && v.ready == 3)
    })
    .await;
    assert_eq!(answered_by(&node, 12).await, ["api-1", "api-2", "api-3"]);
    let images = node.verdict("api").unwrap().images;
    let counts: Vec<(&str, u32)> = images
        .iter()
        .map(|i| (i.image.as_str(), i.replicas))
        .collect();
    assert_eq!(
        counts,
        [("api:1.4", 2), ("api:1.5", 1)],
        "two images with their counts"
    );

    let unready = pod(
        "api-1",
        "api",
        Some("127.0.0.1"),
        pods[0].addr.port(),
        false,
        "shop/api:1.4",
    );
    kube.apply(Kind::Pods, &unready);
    eventually("api-1 leaves the rotation", SOON, || {
        node.verdict("api").is_some_and(|v| v.ready == 2)
    })
    .await;
    let hits = pods[0].hits();
    assert_eq!(answered_by(&node, 12).await, ["api-2", "api-3"]);
    assert_eq!(pods[0].hits(), hits, "no request for the unready pod");

    kube.delete(Kind::Pods, "api-2");
    eventually("api-2 is gone", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.total == 2 && v.ready == 1)
    })
    .await;
    kube.delete(Kind::Pods, "api-3");
    kube.delete(Kind::Pods, "api-1");
    eventually("scaled to zero", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.heart == Heart::Red && *v.reason == *"scaled to zero")
    })
    .await;
    assert_eq!(client::get(node.proxy, "a", "/").await.unwrap().status, 502);
    node.stop().await;
}

/// The (label, replicas) of a verdict's images.
fn image_counts(node: &TestNode) -> Vec<(String, u32)> {
    node.verdict("api")
        .map(|v| {
            v.images
                .iter()
                .map(|i| (i.image.clone(), i.replicas))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_under_one_tag_shows_each_build_and_the_sidecar() {
    install_crypto();
    const OLD: &str =
        "shop/api@sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
    const NEW: &str =
        "shop/api@sha256:9b1d7e0c3a5500aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
    const ENVOY: &str = "docker-pullable://envoyproxy/envoy@sha256:77aa00bb11cc22dd33ee44ff5566778899aabbccddeeff001122334455667788";
    let kube = FakeKube::start("test").await;
    let mut pods = Vec::new();
    for i in 1..=3 {
        pods.push(Upstream::start(&format!("api-{i}"), Behaviour::Echo).await);
    }
    kube.apply(Kind::Services, &service("api", Some("api"), None, 80));
    let api_pod = |i: usize, build: &str| {
        let app = pod(
            &format!("api-{}", i + 1),
            "api",
            Some("127.0.0.1"),
            pods[i].addr.port(),
            true,
            "shop/api:1.4",
        );
        pulled(with_sidecar(app, "envoyproxy/envoy:v1.31"), &[build, ENVOY])
    };
    // Halfway through a rollout of a new build pushed under the same tag.
    kube.apply(Kind::Pods, &api_pod(0, OLD));
    kube.apply(Kind::Pods, &api_pod(1, NEW));
    kube.apply(Kind::Pods, &api_pod(2, NEW));
    let node = TestNode::start(&config(&kube, API));
    eventually("green 3/3", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.heart == Heart::Green && v.ready == 3)
    })
    .await;
    let envoy = "envoy:v1.31@sha256:77aa00bb11cc";
    let old = "api:1.4@sha256:4c0f12ab9d2e";
    let new = "api:1.4@sha256:9b1d7e0c3a55";
    assert_eq!(
        image_counts(&node),
        [(envoy.into(), 3), (new.into(), 2), (old.into(), 1)],
        "two builds under one tag are two entries; the sidecar hides nothing"
    );

    let (status, routes) = node.admin_json("/v1/routes").await;
    assert_eq!(status, 200);
    let route = &routes["routes"][0];
    let mut replicas: Vec<(String, serde_json::Value)> = route["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["address"].as_str().unwrap().to_string(),
                r["images"].clone(),
            )
        })
        .collect();
    replicas.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(replicas[0].0.starts_with("api-1 "), "{replicas:?}");
    assert_eq!(
        replicas[0].1,
        serde_json::json!([old, envoy]),
        "the app first"
    );
    assert_eq!(replicas[1].1, serde_json::json!([new, envoy]));
    assert_eq!(
        route["verdict"]["images"],
        serde_json::json!([
            { "image": envoy, "replicas": 3 },
            { "image": new, "replicas": 2 },
            { "image": old, "replicas": 1 },
        ])
    );

    // The last old pod replaced in place: one build left.
    kube.apply(Kind::Pods, &api_pod(0, NEW));
    eventually("one build left", SOON, || image_counts(&node).len() == 2).await;
    assert_eq!(
        image_counts(&node),
        [(new.into(), 3), (envoy.into(), 3)],
        "as many replicas each: by label"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_version_relists_and_a_dropped_watch_resumes() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let a = Upstream::start("api-1", Behaviour::Echo).await;
    let b = Upstream::start("api-2", Behaviour::Echo).await;
    kube.apply(Kind::Services, &service("api", Some("api"), None, 80));
    kube.apply(
        Kind::Pods,
        &pod(
            "api-1",
            "api",
            Some("127.0.0.1"),
            a.addr.port(),
            true,
            "api:1",
        ),
    );
    let node = TestNode::start(&config(&kube, API));
    eventually("green 1/1", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.heart == Heart::Green && v.total == 1)
    })
    .await;
    let (lists, watches) = kube.requests();

    // A dropped stream: the watcher watches again from where it was.
    kube.drop_watches();
    eventually("re-watched", SOON, || kube.requests().1 >= watches + 2).await;
    assert_eq!(kube.requests().0, lists, "no re-list for a dropped stream");
    kube.apply(
        Kind::Pods,
        &pod(
            "api-2",
            "api",
            Some("127.0.0.1"),
            b.addr.port(),
            true,
            "api:1",
        ),
    );
    eventually("the pod added after the resume", SOON, || {
        node.verdict("api").is_some_and(|v| v.total == 2)
    })
    .await;

    // 410 Gone: the watcher lists again, and nothing is lost.
    kube.expire();
    kube.delete(Kind::Pods, "api-1");
    eventually("re-listed", SOON, || kube.requests().0 >= lists + 2).await;
    eventually("the deletion seen through the re-list", SOON, || {
        node.verdict("api").is_some_and(|v| v.total == 1)
    })
    .await;
    assert_eq!(answered_by(&node, 4).await, ["api-2"]);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_selector_is_checked_by_connect() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let legacy = Upstream::start("legacy", Behaviour::Echo).await;
    let port = legacy.addr.port();
    kube.apply(
        Kind::Services,
        &service("legacy", None, Some("127.0.0.1"), port),
    );
    let route = format!("[[route]]\nname = \"legacy\"\nservice = \"legacy\"\nport = {port}\n");
    let node = TestNode::start(&config(&kube, &route));
    eventually("green by connect", SOON, || {
        node.verdict("legacy")
            .is_some_and(|v| v.heart == Heart::Green && v.total == 1)
    })
    .await;
    // The checks start on the same change as the verdict, from a task of
    // their own: awaited, not raced.
    eventually("a checked endpoint starts the connect checks", SOON, || {
        node.node().checker().running()
    })
    .await;
    assert!(
        client::get(node.proxy, "a", "/")
            .await
            .unwrap()
            .text()
            .starts_with("legacy:")
    );
    legacy.stop();
    eventually(
        "red within one check interval",
        Duration::from_millis(1600),
        || {
            node.verdict("legacy")
                .is_some_and(|v| v.heart == Heart::Red)
        },
    )
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_pod_is_back_when_it_is_ready_again_not_a_probe_period_later() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let control = Control::new(200);
    let hung = Upstream::start("api-1", Behaviour::Controlled(control.clone())).await;
    let fine = Upstream::start("api-2", Behaviour::Echo).await;
    kube.apply(Kind::Services, &service("api", Some("api"), None, 80));
    let apply = |name: &str, upstream: &Upstream, ready: bool| {
        let pod = pod(
            name,
            "api",
            Some("127.0.0.1"),
            upstream.addr.port(),
            ready,
            "shop/api:1.4",
        );
        kube.apply(Kind::Pods, &pod);
    };
    apply("api-1", &hung, true);
    apply("api-2", &fine, true);
    // A probe period far longer than the test: only the runtime can bring
    // the silent pod back.
    let routes = format!("{API}first_answer_timeout = \"1s\"\neject_for = \"1h\"\n");
    let node = TestNode::start(&config(&kube, &routes));
    eventually("2 of 2 ready", SOON, || {
        node.verdict("api").is_some_and(|v| v.ready == 2)
    })
    .await;

    control.set_delay(Duration::from_secs(3600));
    while hung.hits() == 0 {
        let answer = client::get(node.proxy, "a", "/").await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    eventually("the silent pod ejected", SOON, || {
        node.verdict("api").is_some_and(|v| {
            v.ready == 1 && v.reason.contains("no answer within the first-answer bound")
        })
    })
    .await;
    // Its readiness probe fails, then passes once it answers again.
    apply("api-1", &hung, false);
    eventually("the pod reported not ready", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.ready == 1 && v.reason.contains("not ready"))
    })
    .await;
    control.set_delay(Duration::ZERO);
    apply("api-1", &hung, true);
    eventually("the pod back at once", SOON, || {
        node.verdict("api").is_some_and(|v| v.ready == 2)
    })
    .await;
    assert_eq!(answered_by(&node, 10).await, ["api-1", "api-2"]);
    node.stop().await;
}
