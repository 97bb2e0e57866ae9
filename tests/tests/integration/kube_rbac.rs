//! RBAC forbidding the watch: the node falls back to connect checks of
//! each service's name, and says so once. The node runs on a runtime that
//! logs to this test alone.

use std::time::Duration;

use picket::upstream::Target;
use picket_proto::Heart;
use picket_tests::fake_kube::{FakeKube, Kind};
use picket_tests::logs::Captured;
use picket_tests::node::{TestNode, eventually};

#[test]
fn forbidden_watches_fall_back_to_connect_checks_said_once() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let captured = Captured::default();
    let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
    runtime.block_on(async {

    let kube = FakeKube::start("test").await;
    kube.forbid(true);
    // A second route names its port: without the Service object, the name
    // cannot be resolved, and the node says which right is missing.
    let config = format!(
        "[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n[global]\ncheck_every = \"1s\"\ncheck_timeout = \"300ms\"\n\
         [[route]]\nname = \"api\"\nservice = \"api\"\nport = 80\n\
         [[route]]\nname = \"named\"\npath_prefix = \"/named\"\nservice = \"web\"\nport = \"http\"\n",
        kube.url()
    );
    let node = TestNode::start(&config);
    // The fallback: one connect-checked replica at the service's DNS name,
    // which does not resolve here, so the check fails.
    eventually("a connect-checked replica", Duration::from_secs(5), || {
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
    eventually("red by connect check", Duration::from_secs(5), || {
        node.verdict("api").is_some_and(|v| v.heart == Heart::Red)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = captured.text();
    let said: Vec<&str> = log.lines().filter(|l| l.contains("RBAC forbids")).collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(said[0].contains("namespace=test"), "{}", said[0]);
    assert!(said[0].contains("refused=\"services and pods\""), "{}", said[0]);

    let why = "port \"http\" of service test/web cannot be resolved: RBAC forbids this node to list and watch services and pods in namespace test; grant list and watch on services and pods there, or give the port by number";
    node.verdict_until("named", "red, naming the right", Duration::from_secs(5), |v| {
        v.heart == Heart::Red && v.reason.starts_with(why)
    })
    .await;
    // Requests get 502 at once, saying why (the access log's `decided_by`
    // is `port_unresolved`).
    let started = tokio::time::Instant::now();
    let answer = picket_tests::client::get(node.proxy, "h", "/named").await.unwrap();
    assert_eq!(answer.status, http::StatusCode::BAD_GATEWAY);
    assert!(answer.text().contains(why), "{}", answer.text());
    assert!(started.elapsed() < picket_tests::AT_ONCE);
    node.stop().await;
    });
}

/// RBAC that refuses one list alone: the reason names exactly that right,
/// pods or services, not both.
#[test]
fn a_named_port_names_exactly_the_list_refused() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    for (refused, lists) in [(Kind::Pods, "pods"), (Kind::Services, "services")] {
        let captured = Captured::default();
        let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
        runtime.block_on(async {
            let kube = FakeKube::start("test").await;
            kube.forbid_kinds(&[refused]);
            let config = format!(
                "[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n\
                 [[route]]\nname = \"named\"\nservice = \"web\"\nport = \"http\"\n",
                kube.url()
            );
            let node = TestNode::start(&config);
            let why = format!(
                "port \"http\" of service test/web cannot be resolved: RBAC forbids this node to list and watch {lists} in namespace test; grant list and watch on {lists} there, or give the port by number"
            );
            node.verdict_until("named", "red, naming the list", Duration::from_secs(8), |v| {
                v.heart == Heart::Red && *v.reason == *why
            })
            .await;
            let log = captured.text();
            let said: Vec<&str> = log.lines().filter(|l| l.contains("RBAC forbids")).collect();
            assert_eq!(said.len(), 1, "{log}");
            assert!(said[0].contains(&format!("refused=\"{lists}\"")), "{}", said[0]);
            node.stop().await;
        });
    }
}
