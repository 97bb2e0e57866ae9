//! The QUIC feed end to end: three nodes on loopback gossiping over sealed
//! UDP, clients of `picket-tui`'s feed module attached to one of them.

use std::net::SocketAddr;
use std::time::Duration;

use picket::config::Config;
use picket_proto::ClusterView;
use picket_proto::codec;
use picket_tests::client::percentile;
use picket_tests::cluster::{self, node_text_with, verdict_in};
use picket_tests::node::{Killable, TestNode};
use picket_tests::tls::TestCa;
use picket_tests::upstream::{Behaviour, Upstream};
use picket_tui::app::{FeedTarget, Link, Msg};
use picket_tui::feed::{self, Session, Trust};
use tokio::sync::mpsc;
use tokio::time::Instant;

const INTERVAL: Duration = Duration::from_millis(200);
const FEED: &str = "feed = \"127.0.0.1:0\"";

fn api(replicas: &[SocketAddr]) -> String {
    picket_tests::node::route("api", "/api", replicas, "")
}

/// A node's feed address and certificate fingerprint, from its node info.
async fn feed_of(node: &TestNode) -> (String, String) {
    let info = node.membership().await.info.clone();
    (
        info.feed.expect("a feed address"),
        info.feed_fingerprint.expect("a fingerprint"),
    )
}

/// Reads views from `session` into a channel, stamped with their arrival.
fn pump(mut session: Session) -> mpsc::UnboundedReceiver<(Instant, ClusterView)> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(view) = session.next_view().await {
            if tx.send((Instant::now(), view)).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a view where `check` holds; returns when it arrived.
async fn arrival(
    views: &mut mpsc::UnboundedReceiver<(Instant, ClusterView)>,
    within: Duration,
    check: impl Fn(&ClusterView) -> bool,
) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        let next = tokio::time::timeout_at(deadline, views.recv())
            .await
            .expect("no such view in time")
            .expect("the feed ended");
        if check(&next.1) {
            return next.0;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_on_node_c_reaches_a_client_of_node_a_within_three_intervals_and_100ms() {
    let dir = tempfile::tempdir().unwrap();
    let a = Upstream::start("a", Behaviour::Echo).await;
    let b = Upstream::start("b", Behaviour::Echo).await;
    let nodes = cluster::three(dir.path(), FEED, ["", "", &api(&[a.addr])], INTERVAL).await;
    let (addr, pin) = feed_of(&nodes[0]).await;
    let session = Session::open(&addr, &Trust::Pin(pin)).await.unwrap();
    let mut views = pump(session);
    // A slow client on the same node, reading nothing at all, must not
    // delay the one that reads.
    let (slow_addr, slow_pin) = feed_of(&nodes[0]).await;
    let _slow = Session::open(&slow_addr, &Trust::Pin(slow_pin))
        .await
        .unwrap();

    let source = &nodes[2];
    let one = Config::parse("n3.toml", &node_text_with("n3", "", "", &api(&[a.addr]))).unwrap();
    let two = Config::parse(
        "n3.toml",
        &node_text_with("n3", "", "", &api(&[a.addr, b.addr])),
    )
    .unwrap();
    let mut samples = Vec::new();
    for i in 0..30 {
        let total = if i % 2 == 0 { 2 } else { 1 };
        source
            .node()
            .apply(if total == 2 { two.clone() } else { one.clone() });
        // The clock starts when node C's own verdict has changed.
        source
            .verdict_until(
                "api",
                "its own verdict changed",
                Duration::from_secs(10),
                |v| v.total == total,
            )
            .await;
        let start = Instant::now();
        let seen = arrival(&mut views, Duration::from_secs(10), |view| {
            verdict_in(view, "n3", "api").is_some_and(|v| v.total == total)
        })
        .await;
        samples.push(seen.saturating_duration_since(start));
    }
    samples.sort();
    let (p50, p99, max) = (
        percentile(&mut samples, 50.0),
        percentile(&mut samples, 99.0),
        samples[samples.len() - 1],
    );
    eprintln!(
        "verdict change on n3 to a feed client of n1, gossip interval {INTERVAL:?}: {} changes, p50 {p50:?}, p99 {p99:?}, max {max:?}",
        samples.len()
    );
    let bound = INTERVAL * 3 + Duration::from_millis(100);
    assert!(p99 <= bound, "p99 {p99:?} is over {bound:?}");
    assert_eq!(
        nodes[0].node().metrics().feed().clients(),
        2,
        "both clients still attached"
    );
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_certificate_is_pinned_and_a_configured_one_is_checked_against_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    // A generated certificate: the published fingerprint opens it, any
    // other is refused.
    let node = TestNode::start(&node_text_with("n1", FEED, "", ""));
    let (addr, pin) = feed_of(&node).await;
    let wrong = "00".repeat(32);
    let refused = Session::open(&addr, &Trust::Pin(wrong.clone()))
        .await
        .unwrap_err();
    // Said as a mismatch, with the fingerprint the node showed.
    assert_eq!(
        refused.to_string(),
        format!(
            "the node's feed certificate is not the one pinned: its fingerprint is {pin}, \
             --pin said {wrong} (a node's fingerprint is in its /v1/node and its start log)"
        )
    );
    let colons: String = pin
        .as_bytes()
        .chunks(2)
        .map(|pair| String::from_utf8_lossy(pair).to_uppercase())
        .collect::<Vec<_>>()
        .join(":");
    let mut session = Session::open(&addr, &Trust::Pin(colons)).await.unwrap();
    let view = session.next_view().await.unwrap();
    assert_eq!(view.node, "n1");
    session.close().await;
    node.stop().await;

    // A certificate signed by the operator's CA, from files.
    let ca = TestCa::new("picket test CA");
    let (leaf, key) = ca.leaf(&["127.0.0.1"]);
    std::fs::write(dir.path().join("feed.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.path().join("feed.key"), key.serialize_pem()).unwrap();
    let text = node_text_with(
        "n2",
        &format!(
            "{FEED}\nfeed_cert = \"{}\"\nfeed_key = \"{}\"",
            dir.path().join("feed.pem").display(),
            dir.path().join("feed.key").display()
        ),
        "",
        "",
    );
    let node = TestNode::start(&text);
    let (addr, pin) = feed_of(&node).await;
    assert_eq!(pin, feed::fingerprint(leaf.der()), "the leaf's fingerprint");
    let mut session = Session::open(&addr, &Trust::Ca(vec![ca.der.clone()]))
        .await
        .unwrap();
    assert_eq!(session.next_view().await.unwrap().node, "n2");
    session.close().await;
    let other_ca = TestCa::new("another CA");
    let refused = Session::open(&addr, &Trust::Ca(vec![other_ca.der.clone()]))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("invalid peer certificate"),
        "{refused}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_feed_is_refused_and_changes_nothing() {
    let node = TestNode::start(&node_text_with("n1", FEED, "", ""));
    let (addr, pin) = feed_of(&node).await;
    let target: SocketAddr = addr.parse().unwrap();
    let feed_metrics = node.node().metrics().feed().clone();

    // Random datagrams at the port.
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut rng = fastrand::Rng::with_seed(0x2545_f491);
    for len in [0usize, 1, 20, 1200, 1500, 9000] {
        let noise = picket_tests::faults::noise(&mut rng, len);
        socket.send_to(&noise, target).await.unwrap();
    }

    // A client that speaks TLS but not the feed: an announced 4 GiB
    // request, a request that is not one, and one that never comes.
    let config = feed::client_config(&Trust::Pin(pin.clone())).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(config);
    for garbage in [
        u32::MAX.to_be_bytes().to_vec(),
        codec::encode_frame(&"not a request").unwrap(),
    ] {
        let connection = endpoint
            .connect(target, "127.0.0.1")
            .unwrap()
            .await
            .unwrap();
        let (mut send, mut recv) = connection.open_bi().await.unwrap();
        send.write_all(&garbage).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), recv.read_to_end(1 << 20)).await;
        assert!(
            matches!(answer, Ok(Err(_))),
            "the node closes the connection without an answer: {answer:?}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while feed_metrics.refused_count() < 2 {
        assert!(Instant::now() < deadline, "refusals were not counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The feed still serves, and the node still proxies.
    let mut session = Session::open(&addr, &Trust::Pin(pin)).await.unwrap();
    assert_eq!(session.next_view().await.unwrap().node, "n1");
    session.close().await;
    let (_, routes) = node.admin_json("/v1/routes").await;
    assert!(routes.is_object() || routes.is_array(), "{routes}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_shows_stale_within_2s_and_the_client_moves_to_another_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let key = cluster::key_file(dir.path(), "key");
    let first = TestNode::start(&node_text_with(
        "n1",
        FEED,
        &cluster::section(&key, &[], INTERVAL),
        "",
    ));
    let seed = first.gossip_addr().await;
    let doomed = Killable::start(node_text_with(
        "n2",
        FEED,
        &cluster::section(&key, &[seed], INTERVAL),
        "",
    ));
    cluster::view_until(&first, "n2 joined", Duration::from_secs(10), |v| {
        v.members.len() == 2
    })
    .await;

    let (out, mut msgs) = mpsc::channel(1024);
    let (switch, switches) = mpsc::channel(4);
    let addr = doomed.info.feed.clone().unwrap();
    let pin = doomed.info.feed_fingerprint.clone().unwrap();
    tokio::spawn(feed::follow(
        addr.clone(),
        Trust::Pin(pin),
        None,
        out,
        switches,
    ));
    // Attached to n2, with both nodes in its view.
    let mut last = None;
    let mut live = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(live
        && last
            .as_ref()
            .is_some_and(|v: &ClusterView| v.members.len() == 2))
    {
        match tokio::time::timeout_at(deadline, msgs.recv())
            .await
            .unwrap()
        {
            Some(Msg::View(view)) => last = Some(view),
            Some(Msg::Link(Link::Live { addr: live_at })) => live = live_at == addr,
            _ => {}
        }
    }
    let view = last.unwrap();
    assert_eq!(view.node, "n2");

    doomed.kill();
    let killed = Instant::now();
    let stale = loop {
        match tokio::time::timeout(Duration::from_secs(5), msgs.recv()).await {
            Ok(Some(Msg::Link(Link::Stale { .. }))) => break killed.elapsed(),
            Ok(Some(_)) => {}
            other => panic!("no stale link after the kill: {other:?}"),
        }
    };
    eprintln!("stale {stale:?} after the attached node was killed");
    assert!(
        stale <= Duration::from_secs(2),
        "stale only after {stale:?}"
    );

    // The other node's feed, as the last view offers it.
    let n1 = view.members.iter().find(|m| m.name == "n1").unwrap();
    let info = n1.info.as_ref().unwrap();
    switch
        .send(FeedTarget {
            name: "n1".into(),
            addr: info.feed.clone().unwrap(),
            fingerprint: info.feed_fingerprint.clone(),
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut moved = false;
    let mut from_n1 = false;
    while !(moved && from_n1) {
        match tokio::time::timeout_at(deadline, msgs.recv()).await {
            Ok(Some(Msg::Link(Link::Live { addr: now }))) => {
                moved = Some(&now) == info.feed.as_ref();
            }
            Ok(Some(Msg::View(view))) => from_n1 = view.node == "n1",
            Ok(Some(_)) => {}
            other => panic!("never moved to n1: {other:?}"),
        }
    }
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_slows_nobody_and_is_let_go() {
    let a = Upstream::start("a", Behaviour::Echo).await;
    let b = Upstream::start("b", Behaviour::Echo).await;
    let routes = |replicas: &[SocketAddr]| -> String {
        (0..1000)
            .map(|i| {
                picket_tests::node::route(&format!("r{i:04}"), &format!("/r{i:04}"), replicas, "")
            })
            .collect()
    };
    let global = "[global]\ncheck_every = \"10m\"\n";
    let one = format!("{global}{}", routes(&[a.addr]));
    let two = format!("{global}{}", routes(&[a.addr, b.addr]));
    let node = TestNode::start(&node_text_with("n1", FEED, "", &one));
    let (addr, pin) = feed_of(&node).await;
    let metrics = node.node().metrics().feed().clone();
    // Subscribes, then never reads: its stream's flow-control window fills.
    let slow = Session::open(&addr, &Trust::Pin(pin.clone()))
        .await
        .unwrap();
    let mut views = pump(Session::open(&addr, &Trust::Pin(pin)).await.unwrap());

    let configs = [
        Config::parse("n1.toml", &node_text_with("n1", "", "", &one)).unwrap(),
        Config::parse("n1.toml", &node_text_with("n1", "", "", &two)).unwrap(),
    ];
    let mut worst = Duration::ZERO;
    for i in 0..60 {
        let total = (i % 2 + 1) as u32;
        node.node().apply(configs[i % 2].clone());
        node.verdict_until(
            "r0999",
            "its own verdict changed",
            Duration::from_secs(10),
            |v| v.total == total,
        )
        .await;
        let start = Instant::now();
        let seen = arrival(&mut views, Duration::from_secs(5), |view| {
            verdict_in(view, "n1", "r0999").is_some_and(|v| v.total == total)
        })
        .await;
        worst = worst.max(seen.saturating_duration_since(start));
    }
    eprintln!("1,000 verdicts changed 60 times: the reading client's worst lag {worst:?}");
    assert!(
        worst < Duration::from_secs(1),
        "the reading client waited {worst:?} behind one that reads nothing"
    );
    let deadline = Instant::now() + picket::status::feed::STALL + Duration::from_secs(5);
    while metrics.slow_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the stuck client was never let go"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metrics.clients(), 1, "the reading client stays");
    drop(slow);
    node.stop().await;
}

/// Initial packets of `n` QUIC clients, each with connection IDs of its
/// own, caught on a socket of the test's own: no client ever reads a
/// reply.
async fn initial_packets(n: usize) -> Vec<Vec<u8>> {
    let catcher = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    endpoint.set_default_client_config(feed::client_config(&Trust::Insecure).unwrap());
    let mut packets = Vec::new();
    let mut connecting = Vec::new();
    for _ in 0..n {
        connecting.push(
            endpoint
                .connect(catcher.local_addr().unwrap(), "localhost")
                .unwrap(),
        );
        let mut packet = vec![0u8; 2048];
        let (len, _) = tokio::time::timeout(Duration::from_secs(5), catcher.recv_from(&mut packet))
            .await
            .expect("an Initial packet")
            .unwrap();
        packet.truncate(len);
        packets.push(packet);
    }
    endpoint.close(0u32.into(), b"");
    packets
}

/// Bare Initial packets of 300 clients, each from an address of its own
/// (127.0.1.1 on: loopback is all of 127/8), whose replies are never read:
/// before, each took one of the feed's 256 places until its handshake
/// timed out, and 260 locked every client out for about 10 s. Now an
/// unproven address gets a Retry, and no place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_initial_packets_take_no_place_on_the_feed() {
    let node = TestNode::start(&node_text_with("n1", FEED, "", ""));
    let (addr, pin) = feed_of(&node).await;
    let target: SocketAddr = addr.parse().unwrap();
    let mut sockets = Vec::new();
    for (i, packet) in initial_packets(300).await.into_iter().enumerate() {
        let source = std::net::Ipv4Addr::new(127, 0, 1 + (i / 250) as u8, 1 + (i % 250) as u8);
        let socket = tokio::net::UdpSocket::bind((source, 0)).await.unwrap();
        socket.send_to(&packet, target).await.unwrap();
        sockets.push(socket);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let mut session = tokio::time::timeout(
        Duration::from_secs(3),
        Session::open(&addr, &Trust::Pin(pin)),
    )
    .await
    .expect("a client attaches at once")
    .expect("a place for a real client");
    assert_eq!(session.next_view().await.unwrap().node, "n1");
    eprintln!(
        "a real client attached {:?} after 300 bare Initial packets",
        started.elapsed()
    );
    session.close().await;
    drop(sockets);
    node.stop().await;
}

/// One address holds at most 16 places: the 17th client from it is
/// refused, and a place comes back when one of them leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_sixteen_places_on_the_feed() {
    let node = TestNode::start(&node_text_with("n1", FEED, "", ""));
    let (addr, pin) = feed_of(&node).await;
    let mut sessions = Vec::new();
    for _ in 0..16 {
        let mut session = Session::open(&addr, &Trust::Pin(pin.clone()))
            .await
            .unwrap();
        session.next_view().await.unwrap();
        sessions.push(session);
    }
    // The 17th finishes its handshake, and is closed without a view.
    let refused = match Session::open(&addr, &Trust::Pin(pin.clone())).await {
        Err(error) => Err(error.to_string()),
        Ok(mut session) => tokio::time::timeout(Duration::from_secs(3), session.next_view())
            .await
            .map_err(|_| "no view".to_string())
            .and_then(|view| view.map_err(|e| e.to_string()))
            .map(|view| view.node),
    };
    assert!(
        refused.is_err(),
        "a 17th client from one address got a place: {refused:?}"
    );
    let first = sessions.remove(0);
    first.close().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut again = Session::open(&addr, &Trust::Pin(pin.clone()))
        .await
        .expect("a place again");
    again.next_view().await.unwrap();
    again.close().await;
    for session in sessions {
        session.close().await;
    }
    node.stop().await;
}

/// With `feed_client_ca`, only a client with a certificate that CA signed
/// reads the cluster view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_with_a_client_ca_serves_only_its_clients() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("feed clients CA");
    let ca_path = ca.write_pem(dir.path());
    let node = TestNode::start(&node_text_with(
        "n1",
        &format!("{FEED}\nfeed_client_ca = \"{}\"", ca_path.display()),
        "",
        "",
    ));
    let (addr, pin) = feed_of(&node).await;
    let identity = |ca: &TestCa| {
        let (cert, key) = ca.leaf(&["operator"]);
        feed::ClientIdentity {
            chain: vec![cert.der().clone()],
            key: rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        }
    };
    let mut session = Session::open_as(&addr, &Trust::Pin(pin.clone()), Some(&identity(&ca)))
        .await
        .expect("a client the CA signed");
    assert_eq!(session.next_view().await.unwrap().node, "n1");
    session.close().await;
    // No certificate, or one another CA signed: the view is never sent.
    for shown in [None, Some(identity(&TestCa::new("someone else")))] {
        let outcome = match Session::open_as(&addr, &Trust::Pin(pin.clone()), shown.as_ref()).await
        {
            Err(error) => Err(error.to_string()),
            Ok(mut session) => tokio::time::timeout(Duration::from_secs(3), session.next_view())
                .await
                .map_err(|_| "no view".to_string())
                .and_then(|view| view.map_err(|e| e.to_string()))
                .map(|view| view.node),
        };
        assert!(
            outcome.is_err(),
            "a client without the CA's certificate read {outcome:?}"
        );
    }
    node.stop().await;
}

/// A QUIC client that answers the Retry and then stalls its handshake,
/// from `source`, again and again until `until`: a relay of the test's own
/// passes the client's packets to the node until the node has answered
/// its proven Initial, and none after, so the node waits for a Finished
/// that never comes; when the node gives the handshake up, the client
/// starts another.
async fn stall_handshakes(
    endpoint: quinn::Endpoint,
    source: std::net::Ipv4Addr,
    target: SocketAddr,
    until: Instant,
) {
    while Instant::now() < until {
        let outer = tokio::net::UdpSocket::bind((source, 0)).await.unwrap();
        let inner = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let relay_addr = inner.local_addr().unwrap();
        let relay = tokio::spawn(async move {
            let (mut client, mut answered, mut buf_in, mut buf_out) =
                (None, 0usize, vec![0u8; 65536], vec![0u8; 65536]);
            loop {
                tokio::select! {
                    Ok((n, from)) = inner.recv_from(&mut buf_in) => {
                        client = Some(from);
                        // The Retry, then the answer to the proven
                        // Initial: after that, nothing of the client's.
                        if answered < 2 {
                            let _ = outer.send_to(&buf_in[..n], target).await;
                        }
                    }
                    Ok((n, _)) = outer.recv_from(&mut buf_out) => {
                        answered += 1;
                        if let Some(client) = client {
                            let _ = inner.send_to(&buf_out[..n], client).await;
                        }
                    }
                }
            }
        });
        let attempt = async {
            let Ok(connecting) = endpoint.connect(relay_addr, "localhost") else {
                return;
            };
            // The client may think itself connected (its Finished went
            // out); the node never does, and closes when it gives up.
            if let Ok(connection) = connecting.await {
                connection.closed().await;
            }
        };
        let _ = tokio::time::timeout_at(until, attempt).await;
        relay.abort();
    }
}

/// 320 clients from 16 addresses that answer the Retry and then stall
/// their handshakes, again and again: before, each took a feed place at
/// its first proven packet, and the operator, holding a certificate of
/// `feed_client_ca`, was locked out (this test failed at its second
/// round). Now a place is taken
/// only after the handshake, and a stalled handshake makes room: the
/// operator reads the view within 2 s, each of 4 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_never_lock_the_operator_out() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("feed clients CA");
    let ca_path = ca.write_pem(dir.path());
    let node = TestNode::start(&node_text_with(
        "n1",
        &format!("{FEED}\nfeed_client_ca = \"{}\"", ca_path.display()),
        "",
        "",
    ));
    let (addr, pin) = feed_of(&node).await;
    let target: SocketAddr = addr.parse().unwrap();
    let (cert, key) = ca.leaf(&["operator"]);
    let operator = feed::ClientIdentity {
        chain: vec![cert.der().clone()],
        key: rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    };
    let until = Instant::now() + Duration::from_secs(14);
    let mut stallers = Vec::new();
    for address in 0..16u8 {
        let source = std::net::Ipv4Addr::new(127, 0, 2, 1 + address);
        let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        endpoint.set_default_client_config(stalling_config());
        // More than an address's 16 places: every place the flood can
        // take, it holds.
        for _ in 0..20 {
            stallers.push(tokio::spawn(stall_handshakes(
                endpoint.clone(),
                source,
                target,
                until,
            )));
        }
    }
    let metrics = node.node().metrics().feed().clone();
    eventually_feed("the stalled handshakes fill the node's", || {
        metrics.evicted_count() > 0
    })
    .await;
    for round in 0..4 {
        let started = Instant::now();
        let attached = tokio::time::timeout(Duration::from_secs(2), async {
            let mut session = Session::open_as(&addr, &Trust::Pin(pin.clone()), Some(&operator))
                .await
                .map_err(|e| e.to_string())?;
            let view = session.next_view().await.map_err(|e| e.to_string())?;
            session.close().await;
            Ok::<_, String>(view.node)
        })
        .await;
        assert_eq!(
            attached,
            Ok(Ok("n1".to_string())),
            "round {round}: the operator read the view ({:?})",
            started.elapsed()
        );
        eprintln!(
            "round {round}: the operator read the view {:?} into a flood of stalled handshakes ({} evicted so far)",
            started.elapsed(),
            metrics.evicted_count()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(
        metrics.clients() <= 1,
        "no stalled client holds a place: {}",
        metrics.clients()
    );
    for staller in stallers {
        staller.abort();
    }
    node.stop().await;
}

/// A client's configuration that lets the node wait as long as it will:
/// an idle timeout of a minute, where picket-tui's is 1.5 s (the shorter
/// of the two ends a silent handshake).
fn stalling_config() -> quinn::ClientConfig {
    let mut config = feed::client_config(&Trust::Insecure).unwrap();
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
        60_000,
    ))));
    config.transport_config(std::sync::Arc::new(transport));
    config
}

/// Polls `check` every 20 ms for up to 10 s.
async fn eventually_feed(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
