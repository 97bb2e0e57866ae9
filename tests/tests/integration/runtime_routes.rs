//! Routes from Docker labels, against a fake engine whose containers run
//! at 127.0.0.1 and test upstreams behind them: a route added, changed and
//! removed by labels serves within a second, with nothing else touched; an
//! invalid label and a conflict with the file are red routes with their
//! reasons; every node gossips its route table's generation, and a node
//! on another table is flagged.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use picket_proto::Heart;
use picket_tests::AT_ONCE;
use picket_tests::client;
use picket_tests::cluster::{key_file, node_text, section, view_until};
use picket_tests::fake_docker::FakeDocker;
use picket_tests::node::{TestNode, eventually};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::time::Instant;

const SOON: Duration = Duration::from_secs(5);

/// Waits until a node follows `engine`'s events: the fake replays none, so
/// a change made before would be heard of only at the next inventory.
async fn followed(engine: &FakeDocker) {
    eventually("the node follows the engine's events", SOON, || {
        engine.streams() > 0
    })
    .await;
}

fn docker(engine: &FakeDocker) -> String {
    format!(
        "[runtime]\nkind = \"docker\"\nendpoint = \"{}\"\n",
        engine.url()
    )
}

fn file_route(name: &str, host: &str, upstream: &Upstream) -> String {
    format!(
        "[[route]]\nname = \"{name}\"\nhost = \"{host}\"\nreplicas = [\"{}\"]\n",
        upstream.addr
    )
}

/// The created time of the `n`th container of a test: later is newer.
fn created(n: u32) -> String {
    format!("2026-12-04T10:{:02}:{:02}.000000000Z", n / 60, n % 60)
}

/// The status and the body's first word (the upstream's name) of a GET.
async fn answer(node: &TestNode, host: &str, path: &str) -> (u16, String) {
    match client::get(node.proxy, host, path).await {
        Ok(answer) => (
            answer.status.as_u16(),
            answer
                .text()
                .split(':')
                .next()
                .unwrap_or_default()
                .to_string(),
        ),
        Err(error) => (0, error.to_string()),
    }
}

/// Waits until a GET answers `status` (from `upstream`, when 200); returns
/// how long that took.
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
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn route_json(node: &TestNode, name: &str) -> Option<serde_json::Value> {
    let (_, routes) = node.admin_json("/v1/routes").await;
    routes["routes"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == name)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_add_change_and_remove_a_route_within_a_second() {
    let engine = FakeDocker::start().await;
    let shop = Upstream::start("shop", Behaviour::Echo).await;
    let files = Upstream::start("files", Behaviour::Echo).await;
    let node = TestNode::start(&format!(
        "{}{}",
        docker(&engine),
        file_route("files", "files.test", &files)
    ));
    until_answers(&node, ("files.test", "/"), (200, "files"), SOON).await;
    until_answers(&node, ("shop.test", "/x"), (404, ""), SOON).await;
    let port = shop.addr.port().to_string();

    followed(&engine).await;
    engine.run_labelled(
        "shop-1",
        "shop",
        &[
            ("picket.enable", "true"),
            ("picket.route.shop.host", "shop.test"),
            ("picket.route.shop.port", &port),
            ("picket.route.shop.connect_timeout", "2s"),
        ],
        &created(1),
    );
    let added = until_answers(&node, ("shop.test", "/x"), (200, "shop"), AT_ONCE).await;
    let shown = route_json(&node, "t/shop/shop")
        .await
        .expect("shop in /v1/routes");
    assert_eq!(shown["declared_by"], "service t/shop", "{shown}");
    assert_eq!(shown["connect_timeout_ms"], 2000, "{shown}");
    assert_eq!(shown["upstream"], format!("service t/shop, port {port}"));

    // The service is recreated with other labels: its newest container
    // speaks for it.
    engine.run_labelled(
        "shop-2",
        "shop",
        &[
            ("picket.enable", "true"),
            ("picket.route.shop.host", "shop.test"),
            ("picket.route.shop.path_prefix", "/v2"),
            ("picket.route.shop.port", &port),
        ],
        &created(2),
    );
    let changed = until_answers(&node, ("shop.test", "/x"), (404, ""), AT_ONCE).await;
    until_answers(&node, ("shop.test", "/v2/x"), (200, "shop"), AT_ONCE).await;

    engine.remove("shop-1");
    engine.remove("shop-2");
    let removed = until_answers(&node, ("shop.test", "/v2/x"), (404, ""), AT_ONCE).await;
    assert!(route_json(&node, "t/shop/shop").await.is_none());
    eprintln!(
        "FIGURE | route from labels: added in {added:.1?}, changed in {changed:.1?}, removed in {removed:.1?}"
    );
    assert_eq!(
        answer(&node, "files.test", "/").await,
        (200, "files".into())
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_label_or_a_conflict_with_the_file_is_a_red_route_with_its_reason() {
    let engine = FakeDocker::start().await;
    let files = Upstream::start("files", Behaviour::Echo).await;
    let blog = Upstream::start("blog", Behaviour::Echo).await;
    let node = TestNode::start(&format!(
        "{}{}",
        docker(&engine),
        file_route("files", "files.test", &files)
    ));
    let port = blog.addr.port().to_string();
    followed(&engine).await;
    engine.run_labelled(
        "bad-1",
        "bad",
        &[
            ("picket.enable", "true"),
            ("picket.route.bad.host", "bad.test"),
            ("picket.route.bad.port", &port),
            ("picket.route.bad.tries", "0"),
        ],
        &created(1),
    );
    engine.run_labelled(
        "clash-1",
        "clash",
        &[
            ("picket.enable", "true"),
            ("picket.route.clash.host", "files.test"),
            ("picket.route.clash.port", &port),
        ],
        &created(2),
    );
    engine.run_labelled(
        "blog-1",
        "blog",
        &[
            ("picket.enable", "true"),
            ("picket.route.blog.host", "blog.test"),
            ("picket.route.blog.port", &port),
        ],
        &created(3),
    );
    until_answers(&node, ("blog.test", "/"), (200, "blog"), SOON).await;
    eventually("both refusals judged", SOON, || {
        node.verdict("t/bad/bad").is_some() && node.verdict("t/clash/clash").is_some()
    })
    .await;

    let bad = route_json(&node, "t/bad/bad")
        .await
        .expect("bad in /v1/routes");
    let reason = bad["refused"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("picket.route.bad.tries: tries = 0 is out of range"),
        "{bad}"
    );
    assert_eq!(bad["declared_by"], "service t/bad");
    let verdict = node.verdict("t/bad/bad").expect("a verdict on bad");
    assert_eq!(verdict.heart, Heart::Red);
    assert!(
        verdict.reason.contains("picket.route.bad.tries"),
        "{verdict:?}"
    );
    assert_eq!(
        answer(&node, "bad.test", "/").await.0,
        404,
        "a refused route serves nothing"
    );

    let clash = route_json(&node, "t/clash/clash")
        .await
        .expect("clash in /v1/routes");
    let reason = clash["refused"].as_str().unwrap_or_default();
    assert!(
        reason.contains(
            "files.test is served by route \"files\" of the file: every path under it is the file's"
        ),
        "{clash}"
    );
    assert_eq!(
        node.verdict("t/clash/clash").map(|v| v.heart),
        Some(Heart::Red)
    );
    assert_eq!(
        answer(&node, "files.test", "/").await,
        (200, "files".into()),
        "the file's route keeps its host"
    );

    let metrics = node.node().metrics().encode();
    for line in [
        "picket_routes{source=\"file\",state=\"served\"} 1",
        "picket_routes{source=\"runtime\",state=\"served\"} 1",
        "picket_routes{source=\"runtime\",state=\"refused\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }

    // Fixed labels: the route serves, the red route goes.
    engine.run_labelled(
        "bad-2",
        "bad",
        &[
            ("picket.enable", "true"),
            ("picket.route.bad.host", "bad.test"),
            ("picket.route.bad.port", &port),
            ("picket.route.bad.tries", "1"),
        ],
        &created(4),
    );
    until_answers(&node, ("bad.test", "/"), (200, "blog"), AT_ONCE).await;
    assert!(
        route_json(&node, "t/bad/bad")
            .await
            .is_some_and(|r| r["refused"].is_null()),
        "served now"
    );
    node.stop().await;
}

/// 100 requests a second to two steady routes (one from the file, one from
/// labels) while another service's labels change 40 times: none fails, and
/// the steady routes keep their objects and their pooled connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_storm_leaves_other_routes_and_their_connections_untouched() {
    let engine = FakeDocker::start().await;
    let files = Upstream::start("files", Behaviour::Echo).await;
    let steady = Upstream::start("steady", Behaviour::Echo).await;
    let storm = Upstream::start("storm", Behaviour::Echo).await;
    let node = TestNode::start(&format!(
        "{}{}",
        docker(&engine),
        file_route("files", "files.test", &files)
    ));
    followed(&engine).await;
    engine.run_labelled(
        "steady-1",
        "steady",
        &[
            ("picket.enable", "true"),
            ("picket.route.steady.host", "steady.test"),
            ("picket.route.steady.port", &steady.addr.port().to_string()),
        ],
        &created(1),
    );
    until_answers(&node, ("steady.test", "/"), (200, "steady"), SOON).await;
    until_answers(&node, ("files.test", "/"), (200, "files"), SOON).await;
    let route_of = |host: &str| {
        node.node()
            .proxy()
            .table()
            .find(Some(host), "/")
            .cloned()
            .expect("a route")
    };
    let (files_route, steady_route) = (route_of("files.test"), route_of("steady.test"));
    let connections = (files.connections(), steady.connections());

    let failed = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let load = {
        let (failed, sent, addr) = (Arc::clone(&failed), Arc::clone(&sent), node.proxy);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(10));
            let start = Instant::now();
            let mut i = 0usize;
            while start.elapsed() < Duration::from_secs(5) {
                every.tick().await;
                let (host, name) = if i.is_multiple_of(2) {
                    ("files.test", "files")
                } else {
                    ("steady.test", "steady")
                };
                i += 1;
                let ok = client::get(addr, host, "/")
                    .await
                    .is_ok_and(|a| a.status == 200 && a.text().starts_with(name));
                sent.fetch_add(1, Ordering::SeqCst);
                if !ok {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    let port = storm.addr.port().to_string();
    for n in 0..40u32 {
        let id = format!("storm-{n}");
        let path = format!("/{n}");
        engine.run_labelled(
            &id,
            "storm",
            &[
                ("picket.enable", "true"),
                ("picket.route.storm.host", "storm.test"),
                ("picket.route.storm.path_prefix", &path),
                ("picket.route.storm.port", &port),
            ],
            &created(10 + n),
        );
        if n > 0 {
            engine.remove(&format!("storm-{}", n - 1));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    until_answers(&node, ("storm.test", "/39/x"), (200, "storm"), AT_ONCE).await;
    load.await.expect("the load");
    let (sent, failed) = (sent.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    eprintln!(
        "FIGURE | change storm: 40 label changes, {sent} requests to other routes, {failed} failed"
    );
    assert!(sent >= 300, "only {sent} requests sent");
    assert_eq!(
        failed, 0,
        "requests to other routes failed during the storm"
    );
    assert!(
        Arc::ptr_eq(&files_route, &route_of("files.test")),
        "the file's route was rebuilt"
    );
    assert!(
        Arc::ptr_eq(&steady_route, &route_of("steady.test")),
        "the steady route was rebuilt"
    );
    assert_eq!(
        (files.connections(), steady.connections()),
        connections,
        "the steady routes opened new connections to their replicas"
    );
    node.stop().await;
}

/// Two nodes following two engines: while only one engine runs a labelled
/// service, the nodes serve different tables, and `/v1/cluster` says which
/// node serves which and flags the one that differs; once both engines run
/// it, the tables agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_gossips_its_table_and_a_node_on_another_is_flagged() {
    let dir = tempfile::tempdir().expect("a directory");
    let key = key_file(dir.path(), "key");
    let interval = Duration::from_millis(100);
    let engines = [FakeDocker::start().await, FakeDocker::start().await];
    let web = Upstream::start("web", Behaviour::Echo).await;
    let first = TestNode::start(&node_text(
        "n1",
        &section(&key, &[], interval),
        &docker(&engines[0]),
    ));
    let seed = first.gossip_addr().await;
    let second = TestNode::start(&node_text(
        "n2",
        &section(&key, &[seed], interval),
        &docker(&engines[1]),
    ));
    let tables = |view: &picket_proto::ClusterView| -> Vec<Option<(String, u32)>> {
        view.members
            .iter()
            .map(|m| m.table.as_ref().map(|t| (t.digest.clone(), t.routes)))
            .collect()
    };
    let alive = |v: &picket_proto::ClusterView| {
        v.members.len() == 2
            && v.members
                .iter()
                .all(|m| m.liveness == picket_proto::Liveness::Alive)
    };
    for node in [&first, &second] {
        view_until(node, "both nodes alive on the empty table", SOON, |v| {
            let t = tables(v);
            alive(v) && t[0].is_some() && t[0] == t[1]
        })
        .await;
    }
    let (_, answer) = second.admin_json("/v1/cluster").await;
    assert_eq!(answer["route_tables"]["disagreement"], false, "{answer}");

    followed(&engines[0]).await;
    followed(&engines[1]).await;
    let labels = [
        ("picket.enable", "true"),
        ("picket.route.web.host", "web.test"),
        ("picket.route.web.port", &web.addr.port().to_string()),
    ];
    engines[0].run_labelled("web-1", "web", &labels, &created(1));
    view_until(&second, "n1 on a table of 1 route", SOON, |v| {
        let t = tables(v);
        alive(v)
            && t[0].as_ref().is_some_and(|(_, n)| *n == 1)
            && t[1].as_ref().is_some_and(|(_, n)| *n == 0)
    })
    .await;
    let (_, answer) = second.admin_json("/v1/cluster").await;
    let route_tables = &answer["route_tables"];
    assert_eq!(route_tables["disagreement"], true, "{answer}");
    assert_eq!(
        route_tables["tables"][0]["nodes"],
        serde_json::json!(["n1"]),
        "{route_tables}"
    );
    assert_eq!(route_tables["tables"][0]["routes"], 1);
    assert_eq!(
        route_tables["tables"][1]["nodes"],
        serde_json::json!(["n2"])
    );
    assert_eq!(route_tables["tables"][1]["differs"], true);
    let members = answer["members"].as_array().expect("members");
    let flagged: Vec<(&str, bool)> = members
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or_default(),
                m["table_differs"] == true,
            )
        })
        .collect();
    assert_eq!(flagged, [("n1", false), ("n2", true)]);

    engines[1].run_labelled("web-1", "web", &labels, &created(1));
    view_until(&first, "both nodes on the table of 1 route", SOON, |v| {
        let t = tables(v);
        alive(v) && t[0].as_ref().is_some_and(|(_, n)| *n == 1) && t[0] == t[1]
    })
    .await;
    let (_, answer) = first.admin_json("/v1/cluster").await;
    assert_eq!(answer["route_tables"]["disagreement"], false, "{answer}");
    second.stop().await;
    first.stop().await;
}

/// A reload of the file keeps the routes labels declare; a route the
/// reload adds takes its host from a label route (the file wins), and
/// gives it back when the reload after removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_label_routes_and_its_new_routes_win() {
    let engine = FakeDocker::start().await;
    let files = Upstream::start("files", Behaviour::Echo).await;
    let blog = Upstream::start("blog", Behaviour::Echo).await;
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("picket.toml");
    let first = format!(
        "{}{}",
        docker(&engine),
        file_route("files", "files.test", &files)
    );
    std::fs::write(&path, &first).expect("write the file");
    let node = TestNode::start_file(&path);
    followed(&engine).await;
    engine.run_labelled(
        "blog-1",
        "blog",
        &[
            ("picket.enable", "true"),
            ("picket.route.blog.host", "blog.test"),
            ("picket.route.blog.port", &blog.addr.port().to_string()),
        ],
        &created(1),
    );
    until_answers(&node, ("blog.test", "/"), (200, "blog"), SOON).await;

    // The file now routes blog.test itself.
    std::fs::write(
        &path,
        format!("{first}{}", file_route("blog-file", "blog.test", &files)),
    )
    .expect("write the file");
    // The node's own watch of the file may have applied it already.
    assert!(!matches!(
        node.reload().await,
        picket::node::Reload::Refused(_)
    ));
    until_answers(&node, ("blog.test", "/"), (200, "files"), AT_ONCE).await;
    let refused = route_json(&node, "t/blog/blog").await.expect("blog listed");
    assert!(
        refused["refused"]
            .as_str()
            .is_some_and(|r| r.ends_with("every path under it is the file's")),
        "{refused}"
    );

    // Back: the label route serves again.
    std::fs::write(&path, &first).expect("write the file");
    // The node's own watch of the file may have applied it already.
    assert!(!matches!(
        node.reload().await,
        picket::node::Reload::Refused(_)
    ));
    until_answers(&node, ("blog.test", "/"), (200, "blog"), AT_ONCE).await;
    assert!(
        route_json(&node, "t/blog/blog")
            .await
            .is_some_and(|r| r["refused"].is_null())
    );
    node.stop().await;
}

/// A refused route is logged once, with its service, its label and the
/// reason, however many times other services change after it; each route
/// added, changed or removed by labels is one line.
#[test]
fn a_refused_label_is_logged_once_and_each_change_once() {
    let captured = picket_tests::logs::Captured::default();
    let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
    runtime.block_on(async {
        let engine = FakeDocker::start().await;
        let blog = Upstream::start("blog", Behaviour::Echo).await;
        let port = blog.addr.port().to_string();
        let node = TestNode::start(&docker(&engine));
        followed(&engine).await;
        engine.run_labelled(
            "bad-1",
            "bad",
            &[
                ("picket.enable", "true"),
                ("picket.route.bad.port", &port),
                ("picket.route.bad.tries", "0"),
            ],
            &created(1),
        );
        // Other services come and go, five times.
        for n in 0..5u32 {
            engine.run_labelled(
                &format!("blog-{n}"),
                "blog",
                &[
                    ("picket.enable", "true"),
                    ("picket.route.blog.host", "blog.test"),
                    ("picket.route.blog.path_prefix", &format!("/{n}")),
                    ("picket.route.blog.port", &port),
                ],
                &created(2 + n),
            );
            until_answers(
                &node,
                ("blog.test", &format!("/{n}/x")),
                (200, "blog"),
                SOON,
            )
            .await;
            engine.remove(&format!("blog-{n}"));
            until_answers(&node, ("blog.test", &format!("/{n}/x")), (404, ""), SOON).await;
        }
        let log = captured.text();
        let lines = |what: &str| log.lines().filter(|l| l.contains(what)).count();
        let refused: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("route from the runtime refused"))
            .collect();
        assert_eq!(refused.len(), 1, "{log}");
        assert!(refused[0].contains("service t/bad"), "{}", refused[0]);
        assert!(
            refused[0].contains("picket.route.bad.tries: tries = 0 is out of range"),
            "{}",
            refused[0]
        );
        assert_eq!(lines("route added from the runtime"), 5, "{log}");
        assert_eq!(lines("route removed by the runtime"), 5, "{log}");
        node.stop().await;
    });
}
