//! `/v1/cluster` at scale: the time to build and encode the answer from a
//! view of N nodes × R routes, whole and with each filter, as the status
//! API does. Run by hand:
//!
//!     cargo bench -p picket-tests --bench cluster_api -- 100 1000
//!
//! Prints the median and the slowest of 21 answers for each query, and the
//! size of the body; then the whole view streamed as the status API sends
//! it (encoded on a blocking thread into 64 KiB pieces, timed until the
//! last piece is taken), and indented, as the status API sent it before
//! its answers became compact.

#![allow(clippy::disallowed_types)]

use std::time::Instant as Wall;

use picket::status::cluster::{ClusterAnswer, cluster};
use picket::status::filter::Filter;
use picket::status::json_body;
use picket_proto::{
    BreakerState, ClusterView, Heart, ImageCount, Liveness, Member, NodeInfo, Verdict,
};

fn verdict(node: usize, route: usize) -> Verdict {
    // One verdict in fifty is red, as a fleet with a few failing routes.
    let red = (route + node).is_multiple_of(50);
    Verdict {
        route: format!("route-{route:04}").into(),
        heart: if red { Heart::Red } else { Heart::Green },
        reason: if red {
            "none ready: connect refused".into()
        } else {
            format!("all {} ready", 2 + (route + node) % 3).into()
        },
        ready: if red { 0 } else { 2 },
        total: 2,
        images: vec![ImageCount {
            image: format!("registry.example.com/team/service-{route}:1.0"),
            replicas: 2,
        }]
        .into(),
        circuit: BreakerState::Closed,
        since_unix_ms: 1_796_000_000_000,
        runtime_stale_since_unix_ms: None,
    }
}

fn view(nodes: usize, routes: usize) -> ClusterView {
    ClusterView {
        node: "n000".to_string(),
        cluster: "bench".to_string(),
        taken_unix_ms: 1_796_000_000_000,
        members: (0..nodes)
            .map(|n| Member {
                name: format!("n{n:03}"),
                gossip: format!("10.0.{}.{}:7946", n / 250, n % 250 + 1),
                generation: 1,
                liveness: Liveness::Alive,
                heard_unix_ms: 1_796_000_000_000,
                info: Some(NodeInfo {
                    name: format!("n{n:03}"),
                    version: "bench".to_string(),
                    admin: format!("10.0.{}.{}:9900", n / 250, n % 250 + 1),
                    feed: None,
                    feed_fingerprint: None,
                    runtime: "kubernetes".to_string(),
                    started_unix_ms: 1_796_000_000_000,
                }),
                table: None,
                certificates: Vec::new(),
                verdicts: std::sync::Arc::new((0..routes).map(|r| verdict(n, r)).collect()),
            })
            .collect(),
    }
}

fn main() {
    let (nodes, routes) = picket_tests::bench_size(100, 1000);
    let view = view(nodes, routes);
    println!(
        "{nodes} nodes x {routes} routes = {} verdicts",
        nodes * routes
    );
    for query in [
        None,
        Some("route=route-0007"),
        Some("heart=red"),
        Some("node=n042"),
    ] {
        let filter = Filter::parse(query).expect("a valid query");
        let query = query.map(|q| format!("?{q}")).unwrap_or_default();
        measure(&format!("/v1/cluster{query}"), || {
            let answer = cluster(&view, Some("bench"), true, 1_796_000_000_500, &filter);
            json_body(&answer).expect("an answer encodes")
        });
    }
    // The whole view as the status API sends it: pieces taken as they come.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let shared = std::sync::Arc::new(view.clone());
    measure("/v1/cluster, streamed as served", || {
        let view = std::sync::Arc::clone(&shared);
        runtime.block_on(async move {
            use http_body_util::BodyExt;
            let mut body = picket::status::streamed::json(move |out| {
                serde_json::to_writer(out, &whole(&view))
            });
            let mut size = 0;
            while let Some(frame) = body.frame().await {
                size += frame.expect("a piece").into_data().map_or(0, |d| d.len());
            }
            // The pieces were taken and let go, as a socket takes them.
            Sent(size)
        })
    });
    // The whole view as the status API encoded it before its answers
    // became compact, for the comparison in one run.
    measure("/v1/cluster, indented as before", || {
        serde_json::to_vec_pretty(&whole(&view)).expect("an answer encodes")
    });
}

/// The whole view's answer, unfiltered.
fn whole(view: &ClusterView) -> ClusterAnswer<'_> {
    cluster(
        view,
        Some("bench"),
        true,
        1_796_000_000_500,
        &Filter::default(),
    )
}

/// An answer's body, or only its size once sent.
trait Answer {
    fn size(&self) -> usize;
}

impl Answer for Vec<u8> {
    fn size(&self) -> usize {
        self.len()
    }
}

struct Sent(usize);

impl Answer for Sent {
    fn size(&self) -> usize {
        self.0
    }
}

/// Builds and encodes an answer 21 times; prints the median and the
/// slowest time and the size of the body.
fn measure<A: Answer>(what: &str, mut answer: impl FnMut() -> A) {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..21 {
        let started = Wall::now();
        let body = answer();
        times.push(started.elapsed());
        size = body.size();
        drop(body);
    }
    times.sort();
    println!(
        "{what}: median {:.1} ms, slowest {:.1} ms, {size} bytes",
        times[times.len() / 2].as_secs_f64() * 1000.0,
        times[times.len() - 1].as_secs_f64() * 1000.0,
    );
}
