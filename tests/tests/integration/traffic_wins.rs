//! Real traffic wins for the last replica and for an external host: a
//! replica kept in rotation because nothing else is left, but failing
//! every request, is in rotation, not serving. The verdict turns red
//! within moments of the fifth failed request, on the node and in
//! `/v1/cluster`, with a reason that says what traffic saw and why the
//! replica is kept; a success turns it back.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use picket_proto::Heart;
use picket_tests::client;
use picket_tests::netns::Host;
use picket_tests::node::{TestNode, route};
use picket_tests::require;
use picket_tests::upstream::{Behaviour, Control, Upstream};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// Well past a verdict's judging and publishing, far under any bound the
/// tests set: the acceptance asks for the verdict within 2 s.
const VERDICT: Duration = Duration::from_secs(2);

/// Sends `n` requests, each of which must get `status`.
async fn fail(node: &TestNode, n: usize, status: StatusCode) {
    for i in 0..n {
        let answer = client::get(node.proxy, "h", "/").await.unwrap();
        assert_eq!(answer.status, status, "request {i}");
    }
}

/// The route's heart and reason in this node's `/v1/cluster`.
async fn in_cluster(node: &TestNode, name: &str) -> (String, String) {
    let (_, cluster) = node.admin_json("/v1/cluster").await;
    let text = cluster.to_string();
    let verdict = cluster["members"]
        .as_array()
        .and_then(|members| members.first())
        .and_then(|m| m["verdicts"].as_array())
        .and_then(|vs| vs.iter().find(|v| v["route"] == name))
        .unwrap_or_else(|| panic!("no verdict on {name}: {text}"));
    (
        verdict["heart"].as_str().unwrap_or("").to_string(),
        verdict["reason"].as_str().unwrap_or("").to_string(),
    )
}

/// Waits for the verdict on `name` to be red with `reason`, on the node
/// and in its `/v1/cluster`.
async fn red_with(node: &TestNode, name: &str, reason: &str) {
    node.verdict_until(name, "red with the traffic's reason", VERDICT, |v| {
        v.heart == Heart::Red && v.reason.contains(reason)
    })
    .await;
    let (heart, said) = in_cluster(node, name).await;
    assert_eq!(heart, "red", "{said}");
    assert!(said.contains(reason), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_replica_answering_503_is_red_while_kept_and_green_once_it_serves() {
    let control = Control::new(503);
    let replica = Upstream::start("lone", Behaviour::Controlled(control.clone())).await;
    let node = TestNode::start(&route("lone", "/", &[replica.addr], ""));
    fail(&node, 5, StatusCode::SERVICE_UNAVAILABLE).await;
    red_with(
        &node,
        "lone",
        "1 failing traffic: 5 consecutive 503; kept in rotation: no other replica",
    )
    .await;
    // Kept: the next request still goes to it, and a success is seen.
    control.set_status(200);
    let answer = client::get(node.proxy, "h", "/").await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    node.verdict_until("lone", "green again", VERDICT, |v| v.heart == Heart::Green)
        .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_silent_replica_is_red_after_five_first_answer_bounds() {
    let replica = Upstream::start("silent", Behaviour::Hang).await;
    let node = TestNode::start(&route(
        "silent",
        "/",
        &[replica.addr],
        "first_answer_timeout = \"1s\"\n",
    ));
    fail(&node, 5, StatusCode::GATEWAY_TIMEOUT).await;
    red_with(&node, "silent", "5 consecutive 504; kept in rotation").await;
    node.stop().await;
}

/// A replica that reads each request and closes without a word.
async fn closing() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = tcp.read(&mut buf).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_replica_that_closes_unanswered_is_red() {
    let addr = closing().await;
    let node = TestNode::start(&route("closing", "/", &[addr], ""));
    fail(&node, 5, StatusCode::BAD_GATEWAY).await;
    red_with(&node, "closing", "5 consecutive 502; kept in rotation").await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_host_that_accepts_and_fails_is_red_with_the_traffics_reason() {
    let host = Upstream::start("external", Behaviour::Status(503)).await;
    let node = TestNode::start(&format!(
        "[[route]]\nname = \"ext\"\npath_prefix = \"/\"\nupstream = \"http://{}\"\n",
        host.addr
    ));
    // Before: the host is its one replica, serving: 1/1.
    node.verdict_until("ext", "green, 1/1", VERDICT, |v| {
        v.heart == Heart::Green && (v.ready, v.total) == (1, 1)
    })
    .await;
    fail(&node, 5, StatusCode::SERVICE_UNAVAILABLE).await;
    red_with(&node, "ext", "host fails requests: 5 consecutive 503").await;
    // The count says the same as the heart: the host fails, 0 of 1 serve;
    // `/v1/routes` shows the host as that one replica, with its state.
    let verdict = node.verdict("ext").expect("a verdict");
    assert_eq!((verdict.ready, verdict.total), (0, 1), "{verdict:?}");
    let (_, routes) = node.admin_json("/v1/routes").await;
    let replicas = routes["routes"][0]["replicas"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(replicas.len(), 1, "{routes}");
    assert_eq!(replicas[0]["address"], host.addr.to_string(), "{routes}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_replica_beside_a_healthy_one_costs_one_client_per_ejection() {
    let silent = Upstream::start("silent", Behaviour::Hang).await;
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    let node = TestNode::start(&route(
        "pair",
        "/",
        &[silent.addr, healthy.addr],
        "first_answer_timeout = \"1s\"\neject_for = \"1s\"\n",
    ));
    // A client every 50 ms for 9 s; each that went to the silent replica
    // waits out the bound (then gets its answer from the healthy one).
    let started = tokio::time::Instant::now();
    let mut clients = Vec::new();
    while started.elapsed() < Duration::from_secs(9) {
        let proxy = node.proxy;
        let sent = started.elapsed();
        clients.push(tokio::spawn(async move {
            let answer = client::get(proxy, "h", "/").await.unwrap();
            (sent, answer.status, answer.elapsed)
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut waited = Vec::new();
    for client in clients {
        let (sent, status, elapsed) = client.await.unwrap();
        assert_eq!(status, StatusCode::OK, "retried on the healthy replica");
        if elapsed >= Duration::from_millis(900) {
            waited.push(sent);
        }
    }
    // Before the first ejection, every client sent to it waits: the
    // node learns of its silence only at the bound. After, it is back on
    // trial at 2 s, 5 s (ejected for 2 s), and 10 s (for 4 s): one client
    // each, never the rotation's share of a second's clients.
    let after_first: Vec<_> = waited
        .iter()
        .filter(|sent| **sent > Duration::from_millis(1500))
        .collect();
    eprintln!(
        "clients that met the bound: {} in all, {} after the first ejection (sent at {after_first:?})",
        waited.len(),
        after_first.len()
    );
    assert!(
        after_first.len() <= 3,
        "one client per ejection, at most: {after_first:?}"
    );
    node.stop().await;
}

/// The probation case over ten minutes, with the defaults (a 15 s
/// first-answer bound, a 10 s ejection period), on a virtual clock: the
/// runtime's clock is paused, and jumps to the next timer whenever every
/// task waits. Five clients a second, many at once while one waits out
/// the bound; each that met the silent replica waited the bound out and
/// was then answered by the healthy one. Re-admission takes an answer, and
/// each ejection in a row lasts twice as long: the first meeting, then one
/// trial per ejection (after 10, 20, 40, 80, 160 and 300 s), so at most 8
/// in the ten minutes.
#[tokio::test(start_paused = true)]
async fn ten_minutes_beside_a_silent_replica_cost_at_most_eight_clients() {
    let silent = Upstream::start("silent", Behaviour::Hang).await;
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    let node = TestNode::start(&route("pair", "/", &[silent.addr, healthy.addr], ""));
    let started = tokio::time::Instant::now();
    let mut clients = Vec::new();
    while started.elapsed() < Duration::from_secs(600) {
        let proxy = node.proxy;
        let sent = started.elapsed();
        clients.push(tokio::spawn(async move {
            let answer = client::get(proxy, "h", "/").await.unwrap();
            (sent, answer.status, answer.elapsed)
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut waited = Vec::new();
    for client in clients {
        let (sent, status, elapsed) = client.await.unwrap();
        assert_eq!(
            status,
            StatusCode::OK,
            "sent at {sent:?}: retried on the healthy one"
        );
        if elapsed >= Duration::from_secs(15) {
            waited.push(sent.as_secs());
        }
    }
    eprintln!("clients that met the bound, sent at (s): {waited:?}");
    assert!(
        !waited.is_empty(),
        "the silent replica was never met: the test proves nothing"
    );
    assert!(
        waited.len() <= 8,
        "{} clients met the bound: {waited:?}",
        waited.len()
    );
    node.stop().await;
}

/// An external host whose name stops resolving while the node's pooled
/// connections to it still serve: orange, with a reason that says both,
/// and requests keep being answered; red would send operators after a
/// host that serves. The node runs in a test host of its own, whose
/// `/etc/hosts` the test writes and then empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_gone_while_pooled_connections_serve_is_orange() {
    if !require("root, ip and iptables for a test host", Host::available()) {
        return;
    }
    let mut host = Host::create().unwrap();
    host.hosts(&format!(
        "127.0.0.1 localhost\n{} billing.picket.test\n",
        host.addr
    ))
    .unwrap();
    let billing = host
        .upstream(&picket_tests::binaries::test_upstream(), 8080, "billing")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("picket.toml");
    let proxy = SocketAddr::from((host.addr, 18080));
    let admin = SocketAddr::from((host.addr, 19900));
    std::fs::write(
        &config,
        format!(
            "[node]\nlisten = \"{proxy}\"\nadmin = \"{admin}\"\naccess_log = \"off\"\n\
             [global]\ncheck_every = \"1s\"\n\
             [[route]]\nname = \"billing\"\npath_prefix = \"/\"\n\
             upstream = \"http://billing.picket.test:{}\"\n",
            billing.port()
        ),
    )
    .unwrap();
    let config = config.to_string_lossy().into_owned();
    host.spawn(
        &picket_tests::binaries::picket(),
        &["run", "--config", &config],
    )
    .unwrap();
    let reason = |routes: &serde_json::Value| {
        let route = &routes["routes"][0];
        (
            route["verdict"]["heart"].as_str().unwrap_or("").to_string(),
            route["verdict"]["reason"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        )
    };
    let routes = || async {
        match client::get(admin, "admin", "/v1/routes").await {
            Ok(answer) => serde_json::from_slice(&answer.body).unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (heart, _) = reason(&routes().await);
        if heart == "green" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never green: {heart}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A request leaves a connection to the host in the node's pool.
    let answer = client::get(proxy, "h", "/").await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);

    host.hosts("127.0.0.1 localhost\n").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let (heart, said) = loop {
        let (heart, said) = reason(&routes().await);
        if heart != "green" || tokio::time::Instant::now() > deadline {
            break (heart, said);
        }
        // Requests meanwhile keep the pooled connection in use.
        let answer = client::get(proxy, "h", "/").await.unwrap();
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "served while the name is gone"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(heart, "orange", "{said}");
    assert!(
        said.contains("name does not resolve") && said.contains("pooled connections still serve"),
        "{said}"
    );
    // Three more check rounds (one a second) while requests keep the
    // connection busy: a check that finds it serving a request rather
    // than idle in the pool still says it serves.
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        let answer = client::get(proxy, "h", "/").await.unwrap();
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "the pooled connection still serves"
        );
        let (heart, said) = reason(&routes().await);
        assert_eq!(heart, "orange", "{said}");
    }
    // The same in the node's cluster view.
    let cluster: serde_json::Value = serde_json::from_slice(
        &client::get(admin, "admin", "/v1/cluster")
            .await
            .unwrap()
            .body,
    )
    .unwrap();
    let text = cluster.to_string();
    assert!(
        text.contains("\"orange\"") && text.contains("name does not resolve"),
        "{text}"
    );
}
