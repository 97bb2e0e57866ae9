//! Reloads: an invalid file keeps the running routes; a valid one swaps
//! the route table without cutting requests in flight, and re-paces the
//! connect checks from their next round.

use std::time::Duration;

use picket::node::Reload;
use picket_tests::client;
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::time::Instant;

/// Whether the node's answer to `/` comes from the upstream `name`.
async fn answered_by(node: &TestNode, name: &str) -> bool {
    client::get(node.proxy, "x", "/")
        .await
        .unwrap()
        .text()
        .starts_with(&format!("{name}:"))
}

/// Polls `check` every 50 ms until it holds or 5 s pass.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(Instant::now() < deadline, "not within 5 s: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_keep_serving_and_never_cut_requests_in_flight() {
    let old = Upstream::start("old", Behaviour::Echo).await;
    let new = Upstream::start("new", Behaviour::Echo).await;
    let trickle = Behaviour::Trickle {
        chunks: 20,
        chunk: 500,
        every: Duration::from_millis(150),
    };
    let download = Upstream::start("download", trickle).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("picket.toml");
    let downloads = route("download", "/download", &[download.addr], "");
    std::fs::write(
        &path,
        format!("{}{downloads}", route("api", "/", &[old.addr], "")),
    )
    .unwrap();
    let node = TestNode::start_file(&path);

    // A 3 s download starts on the old table.
    let proxy = node.proxy;
    let long = tokio::spawn(async move { client::get(proxy, "x", "/download/big").await });
    eventually("the download started", async || download.hits() == 1).await;

    // A broken file: refused, old routes still served.
    std::fs::write(
        &path,
        "[[route]]\nname = \"api\"\nreplicas = [\"not an address\"]\n",
    )
    .unwrap();
    eventually("the broken file was refused", async || {
        node.node()
            .metrics()
            .encode()
            .contains("picket_config_reloads_total{result=\"refused\"} 1")
    })
    .await;
    let answer = client::get(node.proxy, "x", "/").await.unwrap();
    assert!(answer.text().starts_with("old:"), "{}", answer.text());
    // Asked again (a SIGHUP), the same broken file gets the same answer,
    // counted once.
    match node.reload().await {
        Reload::Refused(error) => assert!(error.contains("not an address"), "{error}"),
        other => panic!("the broken file, asked again: {other:?}"),
    }
    assert!(
        node.node()
            .metrics()
            .encode()
            .contains("picket_config_reloads_total{result=\"refused\"} 1")
    );

    // A good file: routing changes.
    std::fs::write(
        &path,
        format!("{}{downloads}", route("api", "/", &[new.addr], "")),
    )
    .unwrap();
    eventually("the new route answers", async || {
        answered_by(&node, "new").await
    })
    .await;

    let answer = long.await.unwrap().unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.body.len(),
        20 * 500,
        "the download survived both reloads whole"
    );
    assert!(
        node.node()
            .metrics()
            .encode()
            .contains("picket_config_reloads_total{result=\"applied\"} 1")
    );
    node.stop().await;
}

#[tokio::test]
async fn unchanged_routes_keep_their_state_across_a_reload() {
    let a = Upstream::start("a", Behaviour::Echo).await;
    let b = Upstream::start("b", Behaviour::Echo).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("picket.toml");
    std::fs::write(&path, route("a", "/", &[a.addr], "")).unwrap();
    let node = TestNode::start_file(&path);
    let before = node
        .node()
        .proxy()
        .table()
        .find(None, "/")
        .cloned()
        .unwrap();
    std::fs::write(
        &path,
        format!(
            "{}{}",
            route("a", "/", &[a.addr], ""),
            route("b", "/b", &[b.addr], "")
        ),
    )
    .unwrap();
    eventually("route b appears", async || {
        client::get(node.proxy, "x", "/b")
            .await
            .unwrap()
            .text()
            .starts_with("b:")
    })
    .await;
    let after = node
        .node()
        .proxy()
        .table()
        .find(None, "/")
        .cloned()
        .unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&before, &after),
        "route a kept its replicas and pool"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_check_every_paces_the_very_next_connect_checks() {
    // A static replica that counts its connect checks: each is one
    // accepted connection, and nothing else connects to it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let replica = listener.local_addr().unwrap();
    let (checked, mut checks) = tokio::sync::mpsc::unbounded_channel();
    let counter = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
            let _ = checked.send(Instant::now());
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("picket.toml");
    let config = |every: &str| {
        format!(
            "[global]\ncheck_every = \"{every}\"\n{}",
            route("api", "/", &[replica], "")
        )
    };
    std::fs::write(&path, config("30s")).unwrap();
    let node = TestNode::start_file(&path);
    tokio::time::timeout(Duration::from_secs(5), checks.recv())
        .await
        .expect("the first round runs at once");

    std::fs::write(&path, config("1s")).unwrap();
    let reloaded = Instant::now();
    // Thirty seconds after the first round by the old period; at once by
    // the new one (the last round started more than a second ago, or
    // nearly), then one a second.
    for n in 1..=3 {
        let check = tokio::time::timeout(Duration::from_secs(3), checks.recv()).await;
        check.unwrap_or_else(|_| {
            panic!(
                "check {n} after the reload did not come within 3 s: the checks keep the old period"
            )
        });
    }
    assert!(
        reloaded.elapsed() < Duration::from_secs(6),
        "three checks in {:?} at one a second",
        reloaded.elapsed()
    );
    assert_eq!(
        node.node().checker().settings().every,
        Duration::from_secs(1)
    );
    node.stop().await;
    counter.abort();
}

/// A reload that rebuilds a route whose circuit was open leaves its state
/// gauges saying closed, and only closed; one that removes a route leaves
/// none of its series in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_leaves_no_stale_or_orphaned_series() {
    let refusing = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let kept = Upstream::start("kept", Behaviour::Echo).await;
    let breaker = "breaker = { enabled = true, failures = 2, cooldown = \"60s\" }";
    let text = |timeout: &str| {
        format!(
            "{}{}",
            route(
                "doomed",
                "/doomed",
                &[refusing],
                &format!("{breaker}\nfirst_answer_timeout = \"{timeout}\"")
            ),
            route("kept", "/", &[kept.addr], "")
        )
    };
    let node = TestNode::start(&text("5s"));
    for _ in 0..3 {
        let answer = client::get(node.proxy, "x", "/doomed").await.unwrap();
        assert!(
            matches!(answer.status.as_u16(), 502 | 503),
            "{}",
            answer.status
        );
    }
    let metrics = || node.node().metrics().encode();
    let state = |state: &str, value: u8| {
        format!("picket_breaker_state{{route=\"doomed\",state=\"{state}\"}} {value}")
    };
    assert!(metrics().contains(&state("open", 1)), "{}", metrics());
    assert!(metrics().contains(&state("closed", 0)), "{}", metrics());

    // Rebuilt: a fresh circuit, closed.
    node.node()
        .apply(picket::config::Config::parse("picket.toml", &text("4s")).unwrap());
    let after = metrics();
    assert!(after.contains(&state("closed", 1)), "{after}");
    assert!(after.contains(&state("open", 0)), "{after}");
    assert!(after.contains(&state("half_open", 0)), "{after}");

    // Removed: nothing of it is left.
    node.node().apply(
        picket::config::Config::parse("picket.toml", &route("kept", "/", &[kept.addr], ""))
            .unwrap(),
    );
    let after = metrics();
    assert!(!after.contains("route=\"doomed\""), "{after}");
    assert!(after.contains("route=\"kept\""), "{after}");
    node.stop().await;
}

/// A file written in place, as `>` in a shell or an editor without
/// atomic saves writes it: truncated, then filled, here with pauses
/// between the parts. The node never applies the empty or the half-written
/// file: the old routes answer throughout, and the whole new file is
/// applied once written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_in_place_is_never_applied_half_written() {
    use std::io::Write;
    let old = Upstream::start("old", Behaviour::Echo).await;
    let new = Upstream::start("new", Behaviour::Echo).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("picket.toml");
    let api = |addr| route("api", "/", &[addr], "");
    std::fs::write(&path, api(old.addr)).unwrap();
    let node = TestNode::start_file(&path);

    let proxy = node.proxy;
    let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let running = std::sync::Arc::clone(&running);
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            while running.load(std::sync::atomic::Ordering::SeqCst) {
                let answer = client::get(proxy, "x", "/").await.unwrap();
                statuses.push(answer.status.as_u16());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            statuses
        })
    };

    // Truncated, left empty for 400 ms (the watch reads it meanwhile);
    // then a first part that parses alone (a route that is not `api`),
    // 30 ms later the rest.
    let mut file = std::fs::File::create(&path).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let whole = format!(
        "{}{}",
        route("other", "/other", &[new.addr], ""),
        api(new.addr)
    );
    let cut = whole.find("[[route]]\nname = \"api\"").unwrap();
    file.write_all(&whole.as_bytes()[..cut]).unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    file.write_all(&whole.as_bytes()[cut..]).unwrap();
    drop(file);

    eventually("the whole new file is applied", async || {
        answered_by(&node, "new").await
    })
    .await;
    running.store(false, std::sync::atomic::Ordering::SeqCst);
    let statuses = watcher.await.unwrap();
    assert!(statuses.len() > 20, "{} requests", statuses.len());
    assert!(
        statuses.iter().all(|s| *s == 200),
        "a half-written file was applied: {statuses:?}"
    );
    assert_eq!(
        client::get(node.proxy, "x", "/other/x")
            .await
            .unwrap()
            .status,
        200
    );
    node.stop().await;
}

/// A reload that changes only node-wide fields (`trusted_proxies`,
/// `underscores_in_headers`, `body_timeout`, the global header rules)
/// resets no route's state: an open circuit stays open with its upstream
/// untouched, a drained rate bucket stays drained, and the replicas'
/// health and pool are the same objects.
#[tokio::test]
async fn a_node_wide_change_resets_no_routes_state() {
    let control = picket_tests::upstream::Control::new(502);
    let failing = Upstream::start("api", Behaviour::Controlled(control)).await;
    let echo = Upstream::start("limited", Behaviour::Echo).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("picket.toml");
    let routes = format!(
        "{}{}",
        route(
            "api",
            "/",
            &[failing.addr],
            "breaker = { enabled = true, failures = 5, cooldown = \"60s\" }"
        ),
        route(
            "limited",
            "/limited",
            &[echo.addr],
            "rate = { per_second = 0.01, burst = 1 }"
        ),
    );
    std::fs::write(&path, &routes).unwrap();
    let node = TestNode::start_file(&path);
    let status = async |path: &str| {
        client::get(node.proxy, "x", path)
            .await
            .unwrap()
            .status
            .as_u16()
    };
    for _ in 0..5 {
        assert_eq!(status("/").await, 502);
    }
    assert_eq!(status("/").await, 503, "the circuit opened");
    assert_eq!(status("/limited").await, 200);
    assert_eq!(status("/limited").await, 429, "the bucket is drained");
    let table = node.node().proxy().table();
    let before = table.find(None, "/").cloned().unwrap();

    std::fs::write(
        &path,
        format!(
            "[global]\ntrusted_proxies = [\"10.0.0.0/8\"]\nunderscores_in_headers = true\n\
             body_timeout = \"20s\"\nrequest_headers = {{ set = {{ x-env = \"prod\" }} }}\n\n{routes}"
        ),
    )
    .unwrap();
    match node.reload().await {
        Reload::Applied(_) | Reload::Unchanged => {}
        Reload::Refused(error) => panic!("{error}"),
    }
    eventually("the new table serves", async || {
        let table = node.node().proxy().table();
        table
            .find(None, "/")
            .is_some_and(|r| r.config.underscores_in_headers)
    })
    .await;
    let after = node
        .node()
        .proxy()
        .table()
        .find(None, "/")
        .cloned()
        .unwrap();
    assert!(
        !std::sync::Arc::ptr_eq(&before, &after),
        "the route took the new settings"
    );
    assert!(
        std::sync::Arc::ptr_eq(&before.upstream, &after.upstream),
        "the replicas, their health and pool are the same"
    );
    let hits = failing.hits();
    assert_eq!(status("/").await, 503, "the circuit is still open");
    assert_eq!(failing.hits(), hits, "nothing went to the failing replica");
    let (code, routes) = node.admin_json("/v1/routes").await;
    assert_eq!(code, 200);
    let api = routes["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "api")
        .unwrap();
    assert_eq!(api["breaker"]["state"], "open", "{api}");
    assert_eq!(status("/limited").await, 429, "the bucket is still drained");
    let metrics = node.node().metrics().encode();
    assert!(
        metrics.contains("picket_breaker_transitions_total{route=\"api\",state=\"open\"} 1"),
        "{metrics}"
    );

    // A change of the breaker itself starts a new circuit.
    std::fs::write(
        &path,
        routes_with_breaker(&failing.addr, &echo.addr, "failures = 6"),
    )
    .unwrap();
    if let Reload::Refused(error) = node.reload().await {
        panic!("{error}");
    }
    eventually("the new circuit is closed", async || {
        let table = node.node().proxy().table();
        table.find(None, "/").is_some_and(|r| {
            r.breaker
                .as_ref()
                .is_some_and(|b| b.settings().failures == 6)
        })
    })
    .await;
    assert_eq!(
        status("/").await,
        502,
        "a new circuit lets requests through"
    );
    node.stop().await;
}

fn routes_with_breaker(
    failing: &std::net::SocketAddr,
    echo: &std::net::SocketAddr,
    breaker: &str,
) -> String {
    format!(
        "{}{}",
        route(
            "api",
            "/",
            &[*failing],
            &format!("breaker = {{ enabled = true, {breaker}, cooldown = \"60s\" }}")
        ),
        route(
            "limited",
            "/limited",
            &[*echo],
            "rate = { per_second = 0.01, burst = 1 }"
        ),
    )
}

/// The node's own reads of the files it watches are no changes: left
/// alone, a node reads its configuration and its certificate once, not
/// again and again (each reading used to wake the watch that orders the
/// next, ten times a second). What it opens is watched here from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_left_alone_does_not_read_its_files_again() {
    use notify::Watcher;
    let dir = tempfile::tempdir().unwrap();
    let ca = picket_tests::tls::TestCa::new("watch CA");
    let leaf = ca.write_leaf(dir.path(), "edge", &["edge.test"]);
    let up = Upstream::start("up", Behaviour::Echo).await;
    let path = dir.path().join("picket.toml");
    std::fs::write(
        &path,
        format!(
            "[node]\nlisten_tls = \"127.0.0.1:0\"\n{}{}",
            route("r", "/", &[up.addr], ""),
            leaf.table()
        ),
    )
    .unwrap();
    let node = TestNode::start_file(&path);
    // Its first readings settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let opened = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&opened);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && matches!(
                event.kind,
                notify::EventKind::Access(notify::event::AccessKind::Open(_))
            )
        {
            seen.lock().unwrap().extend(event.paths);
        }
    })
    .unwrap();
    watcher
        .watch(dir.path(), notify::RecursiveMode::NonRecursive)
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(watcher);
    let opened = opened.lock().unwrap().clone();
    assert!(
        opened.is_empty(),
        "read again while nothing changed: {opened:?}"
    );
    // A change is still seen.
    std::fs::write(
        &path,
        format!(
            "[node]\nlisten_tls = \"127.0.0.1:0\"\n{}{}",
            route("r", "/", &[up.addr], "tries = 1"),
            leaf.table()
        ),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.node().config().routes[0].tries.value != 1 {
        assert!(Instant::now() < deadline, "the change was not applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.stop().await;
}
