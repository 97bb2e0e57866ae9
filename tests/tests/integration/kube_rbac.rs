//! RBAC forbidding the watch: the node falls back to connect checks of
//! each service's name, and says so once. The node runs on a runtime that
//! logs to this test alone.

use std::time::Duration;

use picket::upstream::Target;
use picket_proto::Heart;
use picket_tests::fake_kube::FakeKube;
use picket_tests::logs::Captured;
use picket_tests::node::{TestNode, eventually};

#[test]
fn forbidden_watches_fall_back_to_connect_checks_said_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let captured = Captured::default();
    let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
    runtime.block_on(async {

    let kube = FakeKube::start("test").await;
    kube.forbid(true);
    let config = format!(
        "[runtime]\nkind = \"kubernetes\"\napi = \"{}\"\nnamespace = \"test\"\n[global]\ncheck_every = \"1s\"\ncheck_timeout = \"300ms\"\n\
         [[route]]\nname = \"api\"\nservice = \"api\"\nport = 80\n",
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
    node.stop().await;
    });
}
