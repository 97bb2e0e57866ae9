//! Three nodes on loopback, gossiping over sealed UDP: verdicts travel,
//! peers' verdicts change nothing a node does, and a node with 1,000
//! routes still converges.

use std::net::SocketAddr;
use std::time::Duration;

use picket::config::Config;
use picket::metrics::Dropped;
use picket_proto::{Heart, Liveness};
use picket_tests::client::{self, percentile};
use picket_tests::cluster::{
    self, key_file, liveness_in, node_text, section, verdict_in, view_until,
};
use picket_tests::node::TestNode;
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::time::Instant;

const INTERVAL: Duration = Duration::from_millis(200);

fn static_route(name: &str, replicas: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = replicas.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[[route]]\nname = \"{name}\"\npath_prefix = \"/{name}\"\nreplicas = [{}]\n{extra}\n",
        list.join(", ")
    )
}

async fn three(dir: &std::path::Path, routes: [&str; 3]) -> Vec<TestNode> {
    cluster::three(dir, "", routes, INTERVAL).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_change_reaches_every_peer_within_three_gossip_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let a = Upstream::start("a", Behaviour::Echo).await;
    let b = Upstream::start("b", Behaviour::Echo).await;
    let one = static_route("api", &[a.addr], "");
    let nodes = three(dir.path(), [&one, "", ""]).await;
    let source = &nodes[0];
    let base = Config::parse("n1.toml", &node_text("n1", "", &one)).unwrap();
    let two = Config::parse(
        "n1.toml",
        &node_text("n1", "", &static_route("api", &[a.addr, b.addr], "")),
    )
    .unwrap();

    let mut samples = Vec::new();
    for i in 0..50 {
        let total = if i % 2 == 0 { 2 } else { 1 };
        source.node().apply(if total == 2 {
            two.clone()
        } else {
            base.clone()
        });
        // The clock starts when the source's own verdict has changed.
        source
            .verdict_until(
                "api",
                "its own verdict changed",
                Duration::from_secs(10),
                |v| v.total == total,
            )
            .await;
        let start = Instant::now();
        let mut pending: Vec<&TestNode> = nodes[1..].iter().collect();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for peer in pending {
                // What a script sees: the peer's own `/v1/cluster`.
                let (_, json) = peer.admin_json("/v1/cluster").await;
                let seen = json["members"]
                    .as_array()
                    .and_then(|members| members.iter().find(|m| m["name"] == "n1"))
                    .and_then(|m| m["verdicts"].as_array().cloned())
                    .is_some_and(|vs| {
                        vs.iter()
                            .any(|v| v["route"] == "api" && v["total"] == total)
                    });
                if seen {
                    samples.push(start.elapsed());
                } else {
                    still.push(peer);
                }
            }
            pending = still;
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "change {i} never reached every peer"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    samples.sort();
    let (p50, p99, max) = (
        percentile(&mut samples, 50.0),
        percentile(&mut samples, 99.0),
        samples[samples.len() - 1],
    );
    eprintln!(
        "verdict change to peers' /v1/cluster, gossip interval {INTERVAL:?}: {} samples (50 changes x 2 peers), p50 {p50:?}, p99 {p99:?}, max {max:?}",
        samples.len()
    );
    assert!(
        p99 <= INTERVAL * 3,
        "p99 {p99:?} is over three gossip intervals"
    );
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_publishing_red_change_nothing_this_node_does() {
    let dir = tempfile::tempdir().unwrap();
    let live = Upstream::start("live", Behaviour::Echo).await;
    // A port that refuses: on n2 and n3 the route is red after a check.
    let refusing = picket_tests::ports::refusing();
    let refused = refusing.addr;
    let ours = static_route(
        "api",
        &[live.addr],
        "breaker = { enabled = true, failures = 2 }",
    );
    let theirs = format!(
        "[global]\ncheck_every = \"1s\"\n{}",
        static_route("api", &[refused], "")
    );
    let nodes = three(dir.path(), [&ours, &theirs, &theirs]).await;
    let me = &nodes[0];
    view_until(me, "both peers red on api", Duration::from_secs(10), |v| {
        ["n2", "n3"]
            .iter()
            .all(|n| verdict_in(v, n, "api").is_some_and(|v| v.heart == Heart::Red))
    })
    .await;

    let started = Instant::now();
    let mut failed = Vec::new();
    let mut served = 0;
    while started.elapsed() < Duration::from_secs(2) {
        let answer = client::get(me.proxy, "any", "/api").await.unwrap();
        if answer.status.is_success() {
            served += 1;
        } else {
            failed.push(answer.status);
        }
    }
    assert!(
        failed.is_empty(),
        "{} failed of {}: {failed:?}",
        failed.len(),
        served + failed.len()
    );
    assert!(served >= 10, "a steady load ({served} requests)");
    let (_, routes) = me.admin_json("/v1/routes").await;
    let api = &routes["routes"][0];
    assert_eq!(api["breaker"]["state"], "closed", "{api:#}");
    assert_eq!(api["verdict"]["heart"], "green", "{api:#}");
    let (_, across) = me.admin_json("/v1/routes/api").await;
    assert_eq!(across["disagreement"], true, "{across:#}");
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_thousand_routes_converges() {
    let dir = tempfile::tempdir().unwrap();
    let up = Upstream::start("up", Behaviour::Echo).await;
    let key = key_file(dir.path(), "key");
    let routes: String = (0..1000)
        .map(|i| {
            format!(
                "[[route]]\nname = \"r{i}\"\nhost = \"r{i}.test\"\nreplicas = [\"{}\"]\n",
                up.addr
            )
        })
        .collect();
    let big = TestNode::start(&node_text(
        "big",
        &section(&key, &[], INTERVAL),
        &format!("[global]\ncheck_every = \"10m\"\n{routes}"),
    ));
    let seed = big.gossip_addr().await;
    view_until(
        &big,
        "its own 1,000 verdicts",
        Duration::from_secs(10),
        |v| v.members[0].verdicts.len() == 1000,
    )
    .await;
    let start = Instant::now();
    let small = TestNode::start(&node_text("small", &section(&key, &[seed], INTERVAL), ""));
    view_until(
        &small,
        "all 1,000 verdicts of the big node",
        Duration::from_secs(30),
        |v| {
            v.members
                .iter()
                .find(|m| m.name == "big")
                .is_some_and(|m| m.verdicts.len() == 1000)
        },
    )
    .await;
    eprintln!(
        "1,000 routes' verdicts reached a new node in {:?} (gossip interval {INTERVAL:?})",
        start.elapsed()
    );
    // And a change after that still flows: nothing is blocked behind the bulk.
    let fewer: String = (0..999)
        .map(|i| {
            format!(
                "[[route]]\nname = \"r{i}\"\nhost = \"r{i}.test\"\nreplicas = [\"{}\"]\n",
                up.addr
            )
        })
        .collect();
    big.node().apply(
        Config::parse(
            "big.toml",
            &node_text(
                "big",
                "",
                &format!("[global]\ncheck_every = \"10m\"\n{fewer}"),
            ),
        )
        .unwrap(),
    );
    view_until(
        &small,
        "the removed route gone",
        Duration::from_secs(10),
        |v| {
            v.members
                .iter()
                .find(|m| m.name == "big")
                .is_some_and(|m| m.verdicts.len() == 999)
        },
    )
    .await;
    // Alive once the sync has settled: while 1,000 values cross on a busy
    // machine, heartbeats arrive unevenly and the failure detector may
    // call the node dead for a moment.
    view_until(&small, "big alive", Duration::from_secs(10), |v| {
        liveness_in(v, "big") == Some(Liveness::Alive)
    })
    .await;
    // Every sealed datagram, parts included, opened: nothing failed the
    // seal. (A message chitchat could not decode in time on a starved
    // machine is a scheduling matter, not a sealing one.)
    for node in [&big, &small] {
        let gossip = node.node().metrics().gossip();
        for why in [
            Dropped::Malformed,
            Dropped::UnknownKey,
            Dropped::NotAuthentic,
            Dropped::Stale,
            Dropped::Replayed,
            Dropped::Misdirected,
            Dropped::Injected,
        ] {
            assert_eq!(gossip.dropped_count(why), 0, "{why:?} drops");
        }
    }
    big.stop().await;
    small.stop().await;
}
