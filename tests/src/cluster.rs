//! Clusters of test nodes: a key of their own in a temporary file, a
//! `[cluster]` section naming it, and helpers that wait on the views.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use picket_proto::{ClusterView, Liveness, Verdict};

use crate::node::TestNode;

/// Writes a fresh cluster key into `dir`; returns its path.
pub fn key_file(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let key = picket::gossip::keys::generate().expect("a key");
    std::fs::write(&path, format!("{key}\n")).expect("write the key file");
    path
}

/// A `[cluster]` section on loopback (port 0) with `seeds`.
pub fn section(key: &Path, seeds: &[SocketAddr], interval: Duration) -> String {
    format!(
        "[cluster]\ngossip = \"127.0.0.1:0\"\n{}",
        membership(key, seeds, interval)
    )
}

/// The lines of a `[cluster]` section other than `gossip`: the cluster id,
/// `seeds`, the key file and the gossip interval.
pub fn membership(key: &Path, seeds: &[SocketAddr], interval: Duration) -> String {
    let seeds: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "id = \"test\"\nseeds = [{}]\nkey_file = \"{}\"\ngossip_interval = \"{}ms\"\n",
        seeds.join(", "),
        key.display(),
        interval.as_millis()
    )
}

/// `node`'s verdict on `route` as `view` holds it.
pub fn verdict_in<'a>(view: &'a ClusterView, node: &str, route: &str) -> Option<&'a Verdict> {
    view.members
        .iter()
        .find(|m| m.name == node)?
        .verdicts
        .iter()
        .find(|v| *v.route == *route)
}

/// `node`'s liveness as `view` holds it.
pub fn liveness_in(view: &ClusterView, node: &str) -> Option<Liveness> {
    view.members
        .iter()
        .find(|m| m.name == node)
        .map(|m| m.liveness)
}

/// Waits until `check` holds on `node`'s view, looking at each view the
/// node publishes; panics after `within`, showing the last view.
pub async fn view_until(
    node: &TestNode,
    what: &str,
    within: Duration,
    mut check: impl FnMut(&ClusterView) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    let mut views = node.membership().await.subscribe();
    loop {
        let view = views.borrow_and_update().clone();
        if check(&view) {
            return;
        }
        match tokio::time::timeout_at(deadline, views.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("the node left before: {what}; view: {view:#?}"),
            Err(_) => panic!("not within {within:?}: {what}; view: {view:#?}"),
        }
    }
}

/// A node's configuration: its name, more `[node]` lines, a `[cluster]`
/// section and routes.
pub fn node_text(name: &str, cluster: &str, routes: &str) -> String {
    node_text_with(name, "", cluster, routes)
}

/// [`node_text`] with more `[node]` lines (`key = value`).
pub fn node_text_with(name: &str, node: &str, cluster: &str, routes: &str) -> String {
    format!("[node]\nname = \"{name}\"\n{node}\n{cluster}\n{routes}")
}

/// Three nodes, n1 to n3, seeded through the first, with `routes[i]` on
/// node i and `node` lines in each `[node]`; returns once every node sees
/// all three alive.
pub async fn three(dir: &Path, node: &str, routes: [&str; 3], interval: Duration) -> Vec<TestNode> {
    let key = key_file(dir, "key");
    let first = TestNode::start(&node_text_with(
        "n1",
        node,
        &section(&key, &[], interval),
        routes[0],
    ));
    let seed = first.gossip_addr().await;
    let mut nodes = vec![first];
    for (i, routes) in routes.iter().enumerate().skip(1) {
        let text = node_text_with(
            &format!("n{}", i + 1),
            node,
            &section(&key, &[seed], interval),
            routes,
        );
        nodes.push(TestNode::start(&text));
    }
    for node in &nodes {
        view_until(node, "three alive members", Duration::from_secs(10), |v| {
            v.members.len() == 3 && v.members.iter().all(|m| m.liveness == Liveness::Alive)
        })
        .await;
    }
    nodes
}
