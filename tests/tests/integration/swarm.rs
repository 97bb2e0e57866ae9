//! Swarm: the local engine made a one-node swarm for the test, a service of
//! the test upstream on an overlay network of the test's own, followed
//! through `picket socket-proxy` as every node of a swarm does. Without an
//! engine this test is skipped outside CI and fails in it.
//!
//! The tasks' overlay addresses are reachable only from containers attached
//! to the overlay, not from the machine itself, so this test sends no
//! traffic to them: it checks what the node knows of the service.

use std::time::Duration;

use picket_proto::Heart;
use picket_tests::docker::{self, Container, Network};
use picket_tests::node::{TestNode, eventually};
use picket_tests::require;
use tokio::net::TcpListener;

const SOON: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swarm_service_is_followed_through_the_socket_proxy() {
    if !require("a Docker engine", docker::available())
        || !require(
            "the engine's socket at /var/run/docker.sock",
            std::path::Path::new("/var/run/docker.sock").exists(),
        )
    {
        return;
    }
    let _turn = docker::swarm_turn().await;
    let Some(_swarm) = docker::Swarm::hold() else {
        return;
    };
    let network = Network::create_overlay();
    let service = docker::Service::create(&network, 2);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    let (_trigger, shutdown) = picket::shutdown::channel();
    tokio::spawn(picket::socket_proxy::serve(
        listener,
        picket::socket_proxy::SocketProxy::new(
            "/var/run/docker.sock".into(),
            picket::socket_proxy::Bounds::default(),
        ),
        shutdown,
    ));
    let node = TestNode::start(&format!(
        "[runtime]\nkind = \"swarm\"\nproxies = [\"{proxy}\"]\nnetwork = \"{}\"\n\
         [[route]]\nname = \"api\"\nservice = \"{}\"\nport = 8080\nconnect_timeout = \"1s\"\n",
        network.name, service.name
    ));
    node.verdict_until("api", "green 2/2", SOON, |v| {
        v.heart == Heart::Green && v.ready == 2
    })
    .await;
    // Every replica of the route, with whether it is in the rotation.
    let replicas = || -> Vec<(String, bool)> {
        let route = node
            .node()
            .proxy()
            .table()
            .find(None, "/")
            .cloned()
            .unwrap();
        route
            .upstream
            .replicas()
            .iter()
            .map(|r| (r.id.clone(), r.ready()))
            .collect()
    };
    let in_rotation = || -> Vec<String> {
        replicas()
            .into_iter()
            .filter_map(|(id, ready)| ready.then_some(id))
            .collect()
    };
    let tasks = in_rotation();
    assert!(
        tasks
            .iter()
            .all(|id| id.starts_with(&format!("{}.", service.name))),
        "the tasks' containers: {tasks:?}"
    );

    service.scale(3);
    node.verdict_until("api", "a third task joins", SOON, |v| {
        v.ready == 3 && v.total == 3
    })
    .await;
    service.scale(1);
    // The test upstream ignores SIGTERM (it runs as PID 1): each task going
    // away is out of the rotation from its `kill` event on, and gone at its
    // `die` when the engine's 10 s stop grace has run out.
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let verdict = node.verdict("api");
        if verdict
            .as_ref()
            .is_some_and(|v| v.heart == Heart::Green && v.ready == 1 && v.total == 1)
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {SOON:?}: scaled down to one, green 1/1; last verdict: {verdict:?}\n\
             the node's replicas (id, ready): {:?}\n{}",
            replicas(),
            service.engine_view()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(in_rotation().len(), 1, "one task in the rotation");
    node.stop().await;
}

/// Serves `picket socket-proxy` on loopback in front of the engine, until
/// the trigger returned goes.
async fn socket_proxy() -> (std::net::SocketAddr, picket::shutdown::Trigger) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    let (trigger, shutdown) = picket::shutdown::channel();
    tokio::spawn(picket::socket_proxy::serve(
        listener,
        picket::socket_proxy::SocketProxy::new(
            "/var/run/docker.sock".into(),
            picket::socket_proxy::Bounds::default(),
        ),
        shutdown,
    ));
    (proxy, trigger)
}

/// Containers that copy a Swarm task's labels, one with a task ID of its
/// own making and one with the real task's, on the service's network: the
/// swarm's manager (asked through the socket proxy) says neither is a
/// task of the service, and neither becomes a replica.
#[test]
fn a_copied_task_label_joins_no_swarm_service() {
    if !require("a Docker engine", docker::available())
        || !require(
            "the engine's socket at /var/run/docker.sock",
            std::path::Path::new("/var/run/docker.sock").exists(),
        )
    {
        return;
    }
    let captured = picket_tests::logs::Captured::default();
    let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
    runtime.block_on(async {
        let _turn = docker::swarm_turn().await;
        let Some(_swarm) = docker::Swarm::hold() else {
            return;
        };
        let network = Network::create_overlay();
        let service = docker::Service::create(&network, 1);
        let (proxy, _proxy) = socket_proxy().await;
        let node = TestNode::start(&format!(
            "[runtime]\nkind = \"swarm\"\nproxies = [\"{proxy}\"]\nnetwork = \"{}\"\n\
             [[route]]\nname = \"api\"\nservice = \"{}\"\nport = 8080\n",
            network.name, service.name
        ));
        node.verdict_until("api", "green 1/1", SOON, |v| {
            v.heart == Heart::Green && v.ready == 1
        })
        .await;
        let task = docker::docker(&[
            "ps",
            "--filter",
            &format!("label=com.docker.swarm.service.name={}", service.name),
            "--format",
            "{{.Label \"com.docker.swarm.task.id\"}}",
        ])
        .expect("the task's ID");
        assert!(!task.is_empty(), "the service's task");
        let copies: Vec<Container> = ["forged0000000000000000000", task.as_str()]
            .iter()
            .map(|task| {
                Container::run_with_labels(
                    &network,
                    &[
                        ("com.docker.swarm.service.name", service.name.as_str()),
                        ("com.docker.swarm.task.id", task),
                    ],
                )
            })
            .collect();
        let denied = || {
            captured
                .text()
                .lines()
                .filter(|l| l.contains("the swarm says it is not"))
                .count()
        };
        eventually("both copies denied by the swarm", SOON, || denied() == 2).await;
        let verdict = node.verdict("api").expect("a verdict");
        assert_eq!((verdict.ready, verdict.total), (1, 1), "{verdict:?}");
        let replicas: Vec<String> = node
            .node()
            .proxy()
            .table()
            .find(None, "/")
            .cloned()
            .expect("the route")
            .upstream
            .replicas()
            .iter()
            .map(|r| r.id.clone())
            .collect();
        assert!(
            replicas
                .iter()
                .all(|id| copies.iter().all(|c| *id != c.name)),
            "{replicas:?}"
        );
        drop(copies);
        node.stop().await;
    });
}
