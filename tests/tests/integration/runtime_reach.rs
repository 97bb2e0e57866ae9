//! Runtime API endpoints that hang, refuse or come back, against fake
//! engines and a fake API server: each endpoint is judged on its own, a
//! hung one is marked stale within 6 s, a refused right falls back to
//! connect checks and recovers by itself.

use std::time::Duration;

use tokio::time::Instant;

use picket::upstream::Target;
use picket_proto::Heart;
use picket_tests::fake_docker::{FakeDocker, Mode};
use picket_tests::fake_kube::{FakeKube, Kind, pod, service};
use picket_tests::node::{TestNode, eventually};
use picket_tests::upstream::{Behaviour, Upstream};

const SOON: Duration = Duration::from_secs(5);

fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

fn stale(node: &TestNode) -> bool {
    node.verdict("api")
        .is_some_and(|v| v.runtime_stale_since_unix_ms.is_some())
}

/// Waits until `node`'s verdict on `api` says its data is stale; returns
/// how long that took from `since`.
async fn stale_after(node: &TestNode, since: Instant, within: Duration) -> Duration {
    loop {
        if stale(node) {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < within,
            "not marked stale within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_engine_is_marked_stale_within_6_s_and_relisted_when_it_answers() {
    let engine = FakeDocker::start().await;
    let replica = Upstream::start("api-1", Behaviour::Echo).await;
    let port = replica.addr.port();
    engine.run("api-1", "api", true, "api:1");
    engine.run("api-2", "api", true, "api:1");
    let node = TestNode::start(&format!(
        "[runtime]\nkind = \"docker\"\nendpoint = \"{}\"\nbreaker = {{ cooldown = \"2s\" }}\n\
         [[route]]\nname = \"api\"\nservice = \"t/api\"\nport = {port}\n",
        engine.url()
    ));
    eventually("2 of 2, current", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.ready == 2 && v.runtime_stale_since_unix_ms.is_none())
    })
    .await;
    // A calm engine stays current: the pings answer.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!stale(&node), "a quiet engine is not a hung one");
    assert!(engine.requests("/_ping") >= 1, "a quiet stream is pinged");

    let hung = Instant::now();
    engine.set_mode(Mode::Hangs);
    let took = stale_after(&node, hung, Duration::from_secs(8)).await;
    eprintln!("FIGURE | hung Docker engine marked stale after {took:.1?}");
    assert!(took <= Duration::from_secs(6), "stale only after {took:?}");
    // Both containers die while it hangs: nothing can say so yet, the last
    // known replicas stay, marked stale.
    engine.run("api-1", "api", false, "api:1");
    engine.run("api-2", "api", false, "api:1");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let v = node.verdict("api").unwrap();
    assert_eq!(
        (v.ready, v.runtime_stale_since_unix_ms.is_some()),
        (2, true)
    );
    // The status API never shows the last pass as current.
    let (_, routes) = node.admin_json("/v1/routes").await;
    let api = &routes["routes"][0];
    assert_eq!(api["stale"], true, "{api}");
    let said = api["stale_reason"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("runtime silent for ") && said.ends_with(" s; last seen: all 2 ready"),
        "{said}"
    );
    // Its heart is a heart of its own, the last pass beside it: a script
    // asking for green verdicts never gets one no one can refresh.
    assert_eq!(api["verdict"]["heart"], "stale", "{api}");
    assert_eq!(api["verdict"]["last_heart"], "green", "{api}");
    let (_, green) = node.admin_json("/v1/cluster?heart=green").await;
    assert_eq!(
        green["members"][0]["verdicts"],
        serde_json::json!([]),
        "{green}"
    );
    let (_, stale) = node.admin_json("/v1/cluster?heart=stale").await;
    assert_eq!(
        stale["members"][0]["verdicts"][0]["route"], "api",
        "{stale}"
    );
    let (_, cluster) = node.admin_json("/v1/cluster").await;
    let spec = crate::status_api::openapi();
    crate::status_api::check(&spec, "/v1/cluster", "200", &cluster);
    crate::status_api::check(&spec, "/v1/routes", "200", &routes);
    // It answers again: a fresh inventory shows what happened meanwhile.
    engine.set_mode(Mode::Answers);
    eventually("current again, both dead", Duration::from_secs(15), || {
        node.verdict("api").is_some_and(|v| {
            v.ready == 0 && v.heart == Heart::Red && v.runtime_stale_since_unix_ms.is_none()
        })
    })
    .await;
    let (_, routes) = node.admin_json("/v1/routes").await;
    assert_eq!(routes["routes"][0]["stale"], false);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_engine_of_two_down_keeps_the_data_stale() {
    let engines = [FakeDocker::start().await, FakeDocker::start().await];
    let replica = Upstream::start("api", Behaviour::Echo).await;
    let port = replica.addr.port();
    engines[0].run("a-1", "api", true, "api:1");
    engines[1].run("b-1", "api", true, "api:1");
    let node = TestNode::start(&format!(
        "[runtime]\nkind = \"swarm\"\nproxies = [\"{}\", \"{}\"]\nbreaker = {{ cooldown = \"1s\" }}\n\
         [[route]]\nname = \"api\"\nservice = \"t/api\"\nport = {port}\n",
        engines[0].addr, engines[1].addr
    ));
    eventually("2 of 2 from two engines", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.ready == 2 && v.runtime_stale_since_unix_ms.is_none())
    })
    .await;
    engines[0].set_mode(Mode::Drops);
    eventually("stale while one engine is down", SOON, || stale(&node)).await;
    // The other engine keeps talking: its news arrives, and still the data
    // of the first one is not current.
    engines[1].run("b-2", "api", true, "api:1");
    eventually("the other engine's news", SOON, || {
        node.verdict("api").is_some_and(|v| v.total == 3)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        stale(&node),
        "one engine answering does not clear another's mark"
    );
    assert_eq!(
        node.node().board().runtime.unreachable(),
        [format!("http://{}", engines[0].addr)]
    );
    engines[0].set_mode(Mode::Answers);
    eventually("current once both answer", Duration::from_secs(10), || {
        node.verdict("api")
            .is_some_and(|v| v.total == 3 && v.runtime_stale_since_unix_ms.is_none())
    })
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_refuses_falls_back_to_connect_checks_and_recovers() {
    let engine = FakeDocker::start().await;
    let replica = Upstream::start("api-1", Behaviour::Echo).await;
    let port = replica.addr.port();
    engine.run("api-1", "api", true, "api:1");
    engine.set_mode(Mode::Forbids);
    let node = TestNode::start(&format!(
        "[runtime]\nkind = \"docker\"\nendpoint = \"{}\"\nbreaker = {{ cooldown = \"1s\" }}\n\
         [global]\ncheck_every = \"1s\"\ncheck_timeout = \"300ms\"\n\
         [[route]]\nname = \"api\"\nservice = \"t/api\"\nport = {port}\n",
        engine.url()
    ));
    let by_name = Target::Named {
        host: "api".into(),
        port,
    };
    eventually("a connect check of the service's name", SOON, || {
        node.node().proxy().table().values().any(|r| {
            r.upstream
                .replicas()
                .iter()
                .any(|x| x.checked && x.key.target == by_name)
        })
    })
    .await;
    assert!(!stale(&node), "an engine that answers 403 is reachable");
    // The right is granted: the next try, a cool-down later, lists.
    engine.set_mode(Mode::Answers);
    eventually("the container again", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.ready == 1 && v.heart == Heart::Green)
            && node.node().proxy().table().values().all(|r| {
                r.upstream
                    .replicas()
                    .iter()
                    .all(|x| !x.checked && x.id == "api-1")
            })
    })
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_refuses_only_events_is_listed_every_cooldown() {
    let engine = FakeDocker::start().await;
    let replica = Upstream::start("api-1", Behaviour::Echo).await;
    let port = replica.addr.port();
    engine.run("api-1", "api", true, "api:1");
    engine.set_mode(Mode::ForbidsEvents);
    let node = TestNode::start(&format!(
        "[runtime]\nkind = \"docker\"\nendpoint = \"{}\"\nbreaker = {{ cooldown = \"1s\" }}\n\
         [[route]]\nname = \"api\"\nservice = \"t/api\"\nport = {port}\n",
        engine.url()
    ));
    eventually("the listed container, not a check by name", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.ready == 1 && v.heart == Heart::Green)
    })
    .await;
    // No events: a change shows at the next listing, a cool-down later.
    engine.run("api-2", "api", true, "api:1");
    eventually("the next listing", SOON, || {
        node.verdict("api").is_some_and(|v| v.total == 2)
    })
    .await;
    assert!(
        node.node()
            .proxy()
            .table()
            .values()
            .all(|r| { r.upstream.replicas().iter().all(|x| !x.checked) }),
        "never a fallback to connect checks: the containers were listed"
    );
    node.stop().await;
}

fn kube_config(kube: &FakeKube, extra: &str, routes: &str) -> String {
    format!(
        "[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n{extra}\n\
         [global]\ncheck_every = \"1s\"\ncheck_timeout = \"300ms\"\n{routes}",
        kube.url()
    )
}

const API: &str = "[[route]]\nname = \"api\"\nservice = \"api\"\nport = 80\n";

/// A fake API server with service `api` and one ready pod `api-1` served
/// by `replica` (image `image`).
async fn kube_with_api(replica: &Upstream, image: &str) -> FakeKube {
    let kube = FakeKube::start("test").await;
    kube.apply(Kind::Services, &service("api", Some("api"), None, 80));
    kube.apply(Kind::Pods, &api_pod(replica, image));
    kube
}

fn api_pod(replica: &Upstream, image: &str) -> k8s_openapi::api::core::v1::Pod {
    pod(
        "api-1",
        "api",
        Some("127.0.0.1"),
        replica.addr.port(),
        true,
        image,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_api_server_is_marked_stale_within_6_s_and_a_calm_one_probed_rarely() {
    install_crypto();
    let replica = Upstream::start("api-1", Behaviour::Echo).await;
    let kube = kube_with_api(&replica, "api:1").await;
    let node = TestNode::start(&kube_config(&kube, "", API));
    eventually("1 of 1, current", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.ready == 1 && v.runtime_stale_since_unix_ms.is_none())
    })
    .await;
    // Healthy and calm: only the probe, at most one per quiet period.
    let window = std::env::var("PICKET_PROBE_WINDOW_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(16), Duration::from_secs);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (requests, probes) = (kube.all_requests(), kube.versions());
    tokio::time::sleep(window).await;
    let (requests, probes) = (kube.all_requests() - requests, kube.versions() - probes);
    let per_second = requests as f64 / window.as_secs_f64();
    eprintln!(
        "FIGURE | healthy API server: {requests} requests ({probes} probes) in {window:?}: {per_second:.3}/s per node"
    );
    let most = (window.as_secs_f64() / picket::targets::kube::PROBE_QUIET.as_secs_f64()).floor()
        as usize
        + 1;
    assert!(
        (1..=most).contains(&probes),
        "{probes} probes in {window:?}"
    );
    assert_eq!(requests, probes, "nothing but probes while calm");

    // Events flowing: no probe needed.
    let probes = kube.versions();
    for i in 0..12 {
        kube.apply(
            Kind::Pods,
            &api_pod(&replica, &format!("api:{}", i % 2 + 1)),
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(kube.versions(), probes, "watch events prove the server");

    let hung = Instant::now();
    kube.hang(true);
    let took = stale_after(&node, hung, Duration::from_secs(8)).await;
    eprintln!("FIGURE | hung Kubernetes API server marked stale after {took:.1?}");
    assert!(took <= Duration::from_secs(6), "stale only after {took:?}");
    kube.hang(false);
    eventually("current again", Duration::from_secs(10), || !stale(&node)).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_recovers_by_itself_when_the_grant_appears() {
    install_crypto();
    let replica = Upstream::start("api-1", Behaviour::Echo).await;
    let kube = kube_with_api(&replica, "api:1").await;
    kube.forbid(true);
    let node = TestNode::start(&kube_config(
        &kube,
        "breaker = { cooldown = \"1s\" }",
        "[[route]]\nname = \"api\"\nservice = \"api\"\nport = \"http\"\n[[route]]\nname = \"plain\"\npath_prefix = \"/plain\"\nservice = \"api\"\nport = 80\n",
    ));
    eventually("the fallback", SOON, || {
        node.node().proxy().table().values().any(|r| {
            r.upstream.replicas().iter().any(|x| {
                x.checked
                    && x.key.target
                        == Target::Named {
                            host: "api.test.svc".into(),
                            port: 80,
                        }
            })
        })
    })
    .await;
    // The RoleBinding is applied after the node started.
    kube.forbid(false);
    eventually("the pods, without a restart", SOON, || {
        node.verdict("api")
            .is_some_and(|v| v.ready == 1 && v.heart == Heart::Green)
    })
    .await;
    let answer = picket_tests::client::get(node.proxy, "a", "/")
        .await
        .unwrap();
    assert!(answer.text().starts_with("api-1:"), "{}", answer.text());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_of_two_namespaces() {
    install_crypto();
    let kube = FakeKube::start("test").await;
    let own = Upstream::start("api-own", Behaviour::Echo).await;
    let billing = Upstream::start("api-billing", Behaviour::Echo).await;
    kube.apply(Kind::Services, &service("api", Some("api"), None, 80));
    kube.apply(
        Kind::Pods,
        &pod(
            "api-own",
            "api",
            Some("127.0.0.1"),
            own.addr.port(),
            true,
            "api:1",
        ),
    );
    let mut other = service("api", Some("api"), None, 80);
    other.metadata.namespace = Some("billing".into());
    kube.apply(Kind::Services, &other);
    let mut pod_b = pod(
        "api-billing",
        "api",
        Some("127.0.0.1"),
        billing.addr.port(),
        true,
        "api:2",
    );
    pod_b.metadata.namespace = Some("billing".into());
    kube.apply(Kind::Pods, &pod_b);
    let node = TestNode::start(&kube_config(
        &kube,
        "namespaces = [\"billing\"]",
        "[[route]]\nname = \"api\"\nservice = \"api\"\nport = \"http\"\n\
         [[route]]\nname = \"billing\"\nhost = \"billing\"\nservice = \"billing/api\"\nport = \"http\"\n",
    ));
    for route in ["api", "billing"] {
        eventually(route, SOON, || {
            node.verdict(route)
                .is_some_and(|v| v.ready == 1 && v.total == 1)
        })
        .await;
    }
    let mine = picket_tests::client::get(node.proxy, "a", "/")
        .await
        .unwrap();
    assert!(mine.text().starts_with("api-own:"), "{}", mine.text());
    let theirs = picket_tests::client::get(node.proxy, "billing", "/")
        .await
        .unwrap();
    assert!(
        theirs.text().starts_with("api-billing:"),
        "{}",
        theirs.text()
    );
    node.stop().await;
}
