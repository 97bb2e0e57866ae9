//! The soak: a three-node cluster on loopback (gossip sealed, interval
//! 200 ms) over four replicas, a steady load spread over the nodes, and one
//! fault a minute, in turn: a replica killed and restarted, a replica
//! paused, a replica answering 503, a reload storm, bad input at the proxy.
//! The nodes are `picket run` processes (the release build), so that
//! their memory is their own; the load and the replicas
//! run here. Run by hand:
//!
//!   cargo bench -p picket-tests --bench soak            # 30 minutes
//!   cargo bench -p picket-tests --bench soak -- 5 200   # MINUTES RATE
//!
//! Prints one `SOAK |` line a minute (the fault, what the load saw in that
//! minute, each node's RSS) and a total line with each node's RSS at start,
//! at its highest and at the end, and how many lines each node logged.

use std::net::SocketAddr;
use std::time::Duration;

use picket_tests::cluster;
use picket_tests::faults::{Load, Report, malformed_requests, rss_kb};
use picket_tests::node::route;
use picket_tests::process::NodeProcess;
use picket_tests::upstream::{Behaviour, Control, Upstream};
use tokio::io::AsyncWriteExt;
use tokio::time::{Instant, sleep};

const INTERVAL: Duration = Duration::from_millis(200);

fn routes(replicas: &[SocketAddr], extra: bool) -> String {
    let mut text = route(
        "api",
        "/",
        replicas,
        "connect_timeout = \"1s\"\nfirst_answer_timeout = \"1s\"\ntries = 3",
    );
    if extra {
        text.push_str(
            "[[route]]\nname = \"extra\"\npath_prefix = \"/extra\"\nreplicas = [\"127.0.0.1:9\"]\n",
        );
    }
    text
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let minutes: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(30);
    let rate: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(soak(minutes, rate));
}

async fn soak(minutes: u64, rate: u32) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = tempfile::tempdir().expect("a directory");
    let control = Control::new(200);
    let controlled = Upstream::start("r0", Behaviour::Controlled(control.clone())).await;
    let mut killable = Upstream::start("r1", Behaviour::Echo).await;
    let others = [
        Upstream::start("r2", Behaviour::Echo).await,
        Upstream::start("r3", Behaviour::Echo).await,
    ];
    let replicas = [
        controlled.addr,
        killable.addr,
        others[0].addr,
        others[1].addr,
    ];
    let binary = picket_tests::binaries::picket_release();
    let key = cluster::key_file(dir.path(), "key");
    let cluster = |seeds: &[SocketAddr]| cluster::membership(&key, seeds, INTERVAL);
    let plain = routes(&replicas, false);
    let first = NodeProcess::start(&binary, dir.path(), "n1", &cluster(&[]), &plain);
    let seeds = [first.gossip];
    let mut nodes = vec![first];
    for name in ["n2", "n3"] {
        nodes.push(NodeProcess::start(
            &binary,
            dir.path(),
            name,
            &cluster(&seeds),
            &plain,
        ));
    }
    for node in &nodes {
        node.ready(Duration::from_secs(10)).await;
    }
    for node in &nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        while node
            .metric("picket_cluster_members{liveness=\"alive\"}")
            .await
            != Some(3.0)
        {
            assert!(
                Instant::now() < deadline,
                "{} never saw three alive",
                node.name
            );
            sleep(Duration::from_millis(100)).await;
        }
    }
    let node_rss = |nodes: &[NodeProcess]| -> Vec<Option<u64>> {
        nodes.iter().map(NodeProcess::rss_kb).collect()
    };
    let proxies: Vec<SocketAddr> = nodes.iter().map(|n| n.proxy).collect();
    let rss_start = rss_kb();
    let nodes_start = node_rss(&nodes);
    let mut nodes_peak = nodes_start.clone();
    let started = Instant::now();
    let mut total = Vec::new();
    eprintln!(
        "soak: {minutes} min at {rate} requests/s over 3 nodes and 4 replicas, one fault a minute"
    );
    for minute in 0..minutes {
        let load = Load::start(proxies.clone(), "api.test", "/", rate);
        sleep(Duration::from_secs(10)).await;
        let fault = match minute % 5 {
            0 => {
                let addr = killable.stop();
                sleep(Duration::from_secs(10)).await;
                let listener = tokio::net::TcpListener::bind(addr).await.expect("rebind");
                killable = Upstream::on(listener, "r1", Behaviour::Echo);
                "a replica killed for 10 s, then restarted"
            }
            1 => {
                control.set_delay(Duration::from_secs(3600));
                sleep(Duration::from_secs(10)).await;
                control.set_delay(Duration::ZERO);
                "a replica paused for 10 s"
            }
            2 => {
                control.set_status(503);
                sleep(Duration::from_secs(10)).await;
                control.set_status(200);
                "a replica answering 503 for 10 s"
            }
            3 => {
                let reloads = "picket_config_reloads_total{result=\"applied\"}";
                let before = nodes[0].metric(reloads).await.unwrap_or(0.0);
                for i in 0..100usize {
                    for (node, seeds) in nodes.iter().zip([&[][..], &seeds, &seeds]) {
                        node.write_config(&cluster(seeds), &routes(&replicas, i % 2 == 1));
                    }
                    sleep(Duration::from_millis(100)).await;
                }
                let after = nodes[0].metric(reloads).await.unwrap_or(0.0);
                eprintln!(
                    "SOAK | reload storm | n1 applied {} reloads",
                    after - before
                );
                "10 configuration rewrites a second on every node for 10 s"
            }
            _ => {
                let target = nodes[0].proxy;
                let malformed = malformed_requests();
                for _ in 0..100 {
                    for bytes in &malformed {
                        if let Ok(mut stream) = tokio::net::TcpStream::connect(target).await {
                            let _ = stream.write_all(bytes).await;
                        }
                    }
                }
                "bad input at a proxy: 600 malformed requests"
            }
        };
        // The rest of the minute, steady.
        sleep(Duration::from_secs(40)).await;
        let samples = load.stop().await;
        let report = Report::new(fault, &samples);
        let rss = node_rss(&nodes);
        for (peak, now) in nodes_peak.iter_mut().zip(&rss) {
            *peak = (*peak).max(*now);
        }
        eprintln!(
            "SOAK | minute {:>2} | {} | {} sent | failed {} | p50 {:.1?} p99 {:.1?} max {:.1?} | nodes' RSS {:?} kB | harness RSS {:?} kB",
            minute + 1,
            fault,
            report.sent,
            report.failed_total(),
            report.p50,
            report.p99,
            report.max,
            rss,
            rss_kb()
        );
        total.extend(samples);
    }
    let report = Report::new("soak", &total);
    eprintln!(
        "SOAK | total {:.0?} | {} sent | failed {} {:?} | p50 {:.1?} p99 {:.1?} max {:.1?}",
        started.elapsed(),
        report.sent,
        report.failed_total(),
        report.failed,
        report.p50,
        report.p99,
        report.max,
    );
    let end = node_rss(&nodes);
    for (i, node) in nodes.iter_mut().enumerate() {
        let state = if node.running() {
            "running"
        } else {
            "NOT RUNNING"
        };
        eprintln!(
            "SOAK | {} | RSS {:?} kB at start, {:?} kB at its highest minute, {:?} kB at the end | {} log lines | {}",
            node.name,
            nodes_start[i],
            nodes_peak[i],
            end[i],
            node.log_lines(),
            state,
        );
    }
    eprintln!(
        "SOAK | harness (load, replicas) RSS {rss_start:?} kB at start, {:?} kB at the end",
        rss_kb()
    );
}
