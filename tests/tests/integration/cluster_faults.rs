//! Gossip under faults: partitions (chitchat's in-memory transport with
//! cut links, and real sockets with the node's gossip port dropped by
//! iptables), a node with another cluster key, garbage sent to the gossip
//! port, and authentic packets sent back to their sender or to another
//! node; and nodes bound to every interface, gossiping as one address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use picket::config::Config;
use picket::gossip::seal::Sealer;
use picket::gossip::{ChannelTransport, Transport, keys};
use picket::metrics::Dropped;
use picket_proto::Liveness;
use picket_tests::client;
use picket_tests::cluster::{key_file, liveness_in, membership, section, verdict_in, view_until};
use picket_tests::netns::{Host, LoopbackUdpCut};
use picket_tests::node::TestNode;
use picket_tests::ports::free_port;
use picket_tests::require;
use picket_tests::upstream::{Behaviour, Upstream};

const INTERVAL: Duration = Duration::from_millis(100);
const SOON: Duration = Duration::from_secs(15);

/// Route `api` on the first `total` of `upstreams`.
fn route(upstreams: &[SocketAddr], total: usize) -> String {
    let replicas: Vec<String> = upstreams[..total]
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect();
    format!(
        "[[route]]\nname = \"api\"\nreplicas = [{}]\n",
        replicas.join(", ")
    )
}

fn in_memory(name: &str, port: u16, seeds: &[u16], routes: &str) -> String {
    let seeds: Vec<String> = seeds.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    format!(
        "[node]\nname = \"{name}\"\n[cluster]\nid = \"test\"\ngossip = \"127.0.0.1:{port}\"\nseeds = [{}]\ninsecure = true\ngossip_interval = \"{}ms\"\n{routes}",
        seeds.join(", "),
        INTERVAL.as_millis()
    )
}

async fn serves(node: &TestNode) -> bool {
    client::get(node.proxy, "any", "/")
        .await
        .is_ok_and(|a| a.status.is_success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_memory_partition_is_suspected_then_dead_and_heals() {
    let mut ups = Vec::new();
    for name in ["up-1", "up-2", "up-3"] {
        ups.push(Upstream::start(name, Behaviour::Echo).await);
    }
    let up: Vec<SocketAddr> = ups.iter().map(|u| u.addr).collect();
    let transport = ChannelTransport::default();
    let shared: Arc<dyn Transport> = Arc::new(transport.clone());
    let ports = [41001, 41002, 41003];
    let nodes: Vec<TestNode> = ["n1", "n2", "n3"]
        .iter()
        .zip(ports)
        .map(|(name, port)| {
            TestNode::start_on(
                &in_memory(name, port, &[ports[0]], &route(&up, 1)),
                Arc::clone(&shared),
            )
        })
        .collect();
    for node in &nodes {
        view_until(node, "three alive", SOON, |v| {
            v.members
                .iter()
                .filter(|m| m.liveness == Liveness::Alive)
                .count()
                == 3
        })
        .await;
    }
    let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    transport.remove_link(addr(ports[0]), addr(ports[2])).await;
    transport.remove_link(addr(ports[1]), addr(ports[2])).await;

    // The majority sees n3 go quiet (suspect), then dead, its age growing.
    view_until(&nodes[0], "n3 suspect or dead on n1", SOON, |v| {
        liveness_in(v, "n3").is_some_and(|l| l != Liveness::Alive)
    })
    .await;
    let age = |v: &picket_proto::ClusterView| {
        let m = v.members.iter().find(|m| m.name == "n3").unwrap();
        v.taken_unix_ms.saturating_sub(m.heard_unix_ms)
    };
    let first_age = age(&*nodes[0].view().await);
    view_until(&nodes[0], "n3 dead on n1", SOON, |v| {
        liveness_in(v, "n3") == Some(Liveness::Dead)
    })
    .await;
    view_until(&nodes[1], "n3 dead on n2", SOON, |v| {
        liveness_in(v, "n3") == Some(Liveness::Dead)
    })
    .await;
    assert!(
        age(&*nodes[0].view().await) > first_age,
        "the age of n3's data grows"
    );
    // The minority sees both others dead.
    view_until(&nodes[2], "n1 and n2 dead on n3", SOON, |v| {
        liveness_in(v, "n1") == Some(Liveness::Dead) && liveness_in(v, "n2") == Some(Liveness::Dead)
    })
    .await;
    for node in &nodes {
        assert!(serves(node).await, "each side keeps serving");
    }
    // What n3 decides meanwhile reaches the others once the partition heals.
    let more = Config::parse(
        "n3.toml",
        &format!("[node]\nname = \"n3\"\n{}", route(&up, 2)),
    )
    .unwrap();
    nodes[2].node().apply(more);
    transport.add_link(addr(ports[0]), addr(ports[2])).await;
    transport.add_link(addr(ports[1]), addr(ports[2])).await;
    for node in &nodes {
        view_until(
            node,
            "all alive again, n3's new verdict everywhere",
            SOON,
            |v| {
                v.members
                    .iter()
                    .filter(|m| m.liveness == Liveness::Alive)
                    .count()
                    == 3
                    && verdict_in(v, "n3", "api").is_some_and(|v| v.total == 2)
            },
        )
        .await;
    }
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_on_real_sockets_heals() {
    if !require(
        "root and iptables (to drop a node's gossip datagrams)",
        Host::available(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key");
    let mut ups = Vec::new();
    for name in ["up-1", "up-2", "up-3"] {
        ups.push(Upstream::start(name, Behaviour::Echo).await);
    }
    let up: Vec<SocketAddr> = ups.iter().map(|u| u.addr).collect();
    let text = |name: &str, seeds: &[SocketAddr]| {
        format!(
            "[node]\nname = \"{name}\"\n{}{}",
            section(&key, seeds, INTERVAL),
            route(&up, 1)
        )
    };
    let n1 = TestNode::start(&text("n1", &[]));
    let seed = n1.gossip_addr().await;
    let nodes = [
        n1,
        TestNode::start(&text("n2", &[seed])),
        TestNode::start(&text("n3", &[seed])),
    ];
    for node in &nodes {
        view_until(node, "three alive", SOON, |v| {
            v.members
                .iter()
                .filter(|m| m.liveness == Liveness::Alive)
                .count()
                == 3
        })
        .await;
    }
    let cut = LoopbackUdpCut::new(nodes[2].gossip_addr().await.port()).unwrap();
    view_until(&nodes[0], "n3 dead on n1", SOON, |v| {
        liveness_in(v, "n3") == Some(Liveness::Dead)
    })
    .await;
    view_until(&nodes[1], "n3 dead on n2", SOON, |v| {
        liveness_in(v, "n3") == Some(Liveness::Dead)
    })
    .await;
    view_until(&nodes[2], "n1, n2 dead on n3", SOON, |v| {
        liveness_in(v, "n1") == Some(Liveness::Dead) && liveness_in(v, "n2") == Some(Liveness::Dead)
    })
    .await;
    for node in &nodes {
        assert!(serves(node).await, "each side keeps serving");
    }
    drop(cut);
    for node in &nodes {
        view_until(node, "all alive again", SOON, |v| {
            v.members
                .iter()
                .filter(|m| m.liveness == Liveness::Alive)
                .count()
                == 3
        })
        .await;
    }
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_key_is_not_admitted_and_garbage_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ours, theirs) = (key_file(dir.path(), "ours"), key_file(dir.path(), "theirs"));
    let mut ups = Vec::new();
    for name in ["up-1", "up-2", "up-3"] {
        ups.push(Upstream::start(name, Behaviour::Echo).await);
    }
    let up: Vec<SocketAddr> = ups.iter().map(|u| u.addr).collect();
    let text = |name: &str, key: &std::path::Path, seeds: &[SocketAddr], total: usize| {
        format!(
            "[node]\nname = \"{name}\"\n{}{}",
            section(key, seeds, INTERVAL),
            route(&up, total)
        )
    };
    let a = TestNode::start(&text("a", &ours, &[], 1));
    let seed = a.gossip_addr().await;
    let b = TestNode::start(&text("b", &ours, &[seed], 1));
    let intruder = TestNode::start(&text("intruder", &theirs, &[seed], 1));
    view_until(&a, "b alive", SOON, |v| {
        liveness_in(v, "b") == Some(Liveness::Alive)
    })
    .await;
    // Twenty gossip rounds of the intruder knocking.
    tokio::time::sleep(INTERVAL * 20).await;
    let gossip = a.node().metrics().gossip();
    assert!(
        gossip.dropped_count(Dropped::UnknownKey) > 0,
        "the intruder's packets were dropped and counted"
    );
    for node in [&a, &b] {
        let view = node.view().await;
        assert!(
            view.members.iter().all(|m| m.name != "intruder"),
            "the intruder never appears: {view:#?}"
        );
    }
    assert_eq!(
        intruder.view().await.members.len(),
        1,
        "the intruder knows only itself"
    );
    let (_, metrics) = client::get(a.admin, "admin", "/metrics")
        .await
        .map(|m| (m.status, m.text()))
        .unwrap();
    assert!(
        metrics.contains(r#"picket_gossip_dropped_packets_total{reason="unknown_key"}"#),
        "{metrics}"
    );

    // Garbage at a's gossip port: noise, truncated and tampered sealed
    // packets, a sealed packet that is not chitchat, and its replay; then
    // authentic packets that are a's own, or meant for b.
    let keys = keys::parse(&std::fs::read_to_string(&ours).unwrap()).unwrap();
    let now = picket::clock::now_unix_ms();
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let stranger = socket.local_addr().unwrap();
    let mut rng = fastrand::Rng::with_seed(0x2545_f491);
    let mut noise = |len: usize| picket_tests::faults::noise(&mut rng, len);
    let before = gossip.dropped_total();
    for len in [0, 1, 30, 31, 47, 48, 500, 1400, 9000, 65_000] {
        socket.send_to(&noise(len), seed).await.unwrap();
    }
    let sealed = Sealer::new(stranger)
        .seal(&keys, b"not a chitchat message at all", seed, now)
        .remove(0);
    for cut in [1, 10, 31, 46, sealed.len() - 1] {
        socket.send_to(&sealed[..cut], seed).await.unwrap();
    }
    let mut tampered = sealed.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    socket.send_to(&tampered, seed).await.unwrap();
    socket.send_to(&sealed, seed).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    socket.send_to(&sealed, seed).await.unwrap();
    let own = Sealer::new(seed).seal(&keys, b"a's", seed, now).remove(0);
    socket.send_to(&own, seed).await.unwrap();
    let for_b = Sealer::new(stranger)
        .seal(&keys, b"b's", b.gossip_addr().await, now)
        .remove(0);
    socket.send_to(&for_b, seed).await.unwrap();
    let deadline = tokio::time::Instant::now() + SOON;
    while gossip.dropped_count(Dropped::Replayed) < 2
        || gossip.dropped_count(Dropped::Misdirected) == 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replays and the misdirected packet were never counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        gossip.dropped_count(Dropped::Replayed),
        2,
        "the replay, and a's own packet"
    );
    assert_eq!(gossip.dropped_count(Dropped::Misdirected), 1, "b's packet");
    assert!(
        gossip.dropped_count(Dropped::Malformed) >= 8,
        "noise and truncations: {}",
        gossip.dropped_count(Dropped::Malformed)
    );
    assert!(gossip.dropped_count(Dropped::NotAuthentic) >= 1);
    assert_eq!(
        gossip.dropped_count(Dropped::Undecodable),
        1,
        "authentic but not chitchat: handed over once, never parsed into state"
    );
    assert!(gossip.dropped_total() >= before + 20);

    // Nothing changed, nothing crashed: gossip still carries b's changes to a.
    let view = a.view().await;
    assert_eq!(view.members.len(), 2, "{view:#?}");
    b.node().apply(
        Config::parse(
            "b.toml",
            &format!("[node]\nname = \"b\"\n{}", route(&up, 3)),
        )
        .unwrap(),
    );
    view_until(&a, "b's new verdict", SOON, |v| {
        verdict_in(v, "b", "api").is_some_and(|v| v.total == 3)
    })
    .await;
    assert!(serves(&a).await);
    for node in [a, b, intruder] {
        node.stop().await;
    }
}

/// Nodes bound to `0.0.0.0`, each gossiping as an address of its own on
/// loopback (127.0.0.2, 127.0.0.3) while its packets leave from 127.0.0.1:
/// as behind NAT, a node's packets do not come from the address it
/// advertises. Every packet still names its recipient as that node knows
/// itself, and none is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_bound_to_every_interface_gossip_as_their_advertised_address() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key");
    let up = Upstream::start("up", Behaviour::Echo).await;
    let (a_port, b_port) = (free_port(), free_port());
    let a_addr = SocketAddr::from(([127, 0, 0, 2], a_port));
    let text = |name: &str, port: u16, advertise: [u8; 4], seeds: &[SocketAddr]| {
        format!(
            "[node]\nname = \"{name}\"\n[cluster]\ngossip = \"0.0.0.0:{port}\"\nadvertise = \"{}\"\n{}{}",
            SocketAddr::from((advertise, port)),
            membership(&key, seeds, INTERVAL),
            route(&[up.addr], 1)
        )
    };
    let a = TestNode::start(&text("a", a_port, [127, 0, 0, 2], &[]));
    let b = TestNode::start(&text("b", b_port, [127, 0, 0, 3], &[a_addr]));
    view_until(&a, "b alive, as 127.0.0.3", SOON, |v| {
        v.members.iter().any(|m| {
            m.name == "b"
                && m.liveness == Liveness::Alive
                && m.gossip == format!("127.0.0.3:{b_port}")
                && !m.verdicts.is_empty()
        })
    })
    .await;
    view_until(&b, "a alive, as 127.0.0.2", SOON, |v| {
        v.members.iter().any(|m| {
            m.name == "a"
                && m.liveness == Liveness::Alive
                && m.gossip == a_addr.to_string()
                && !m.verdicts.is_empty()
        })
    })
    .await;
    // Twenty more rounds, every one answered.
    tokio::time::sleep(INTERVAL * 20).await;
    for node in [&a, &b] {
        let gossip = node.node().metrics().gossip();
        for why in [
            Dropped::Misdirected,
            Dropped::Replayed,
            Dropped::NotAuthentic,
        ] {
            assert_eq!(gossip.dropped_count(why), 0, "{why:?} drops");
        }
        assert!(gossip.packets_received() > 20);
    }
    for node in [a, b] {
        node.stop().await;
    }
}
