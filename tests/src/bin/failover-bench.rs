//! Failover side by side: Picket and nginx in front of the same two
//! replicas, one of which drops every packet (a test host in a network
//! namespace with a DROP rule). A request is launched every 250 ms for
//! 30 s to each proxy at the same instants, without waiting for earlier
//! ones. Prints, per proxy: requests, failures, requests over 0.5 s, and
//! latency p50/p99/max. Run by hand, as root, with nginx installed:
//!
//!   cargo run --release -p picket-tests --bin failover-bench
//!
//! nginx is configured as the acceptance text of the failover test says:
//! `proxy_connect_timeout 2s`, `proxy_next_upstream error timeout http_502
//! http_503 http_504`, `proxy_next_upstream_tries 2`, `max_fails=1
//! fail_timeout=10s`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use picket_tests::client::{self, percentile};
use picket_tests::netns::Host;
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::time::{Instant, sleep};

const NGINX_PORT: u16 = 18501;

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers before it exits (a SIGKILL
        // would leave them listening).
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn upstream_binary() -> PathBuf {
    let me = std::env::current_exe().expect("own path");
    me.with_file_name("picket-test-upstream")
}

// Built with the workspace: `cargo build --release -p picket-tests -p picket-test-upstream`.

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    failed: Vec<String>,
}

impl Tally {
    fn row(&mut self, name: &str) -> String {
        let slow = self
            .latencies
            .iter()
            .filter(|d| **d > Duration::from_millis(500))
            .count();
        let sent = self.latencies.len() + self.failed.len();
        let p50 = percentile(&mut self.latencies, 50.0);
        let p99 = percentile(&mut self.latencies, 99.0);
        let max = self.latencies.last().copied().unwrap_or_default();
        format!(
            "| {name} | {sent} | {} | {slow} | {:.1} | {:.1} | {:.1} |",
            self.failed.len(),
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        )
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    anyhow::ensure!(Host::available(), "needs root, ip and iptables");
    let mut host = Host::create()?;
    let dropping = host.upstream(&upstream_binary(), 8080, "dropping").await?;
    let healthy = Upstream::start("healthy", Behaviour::Echo).await;
    host.drop_packets(8080)?;

    let dir = tempfile::tempdir()?;
    let conf = dir.path().join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  upstream api {{\n    server {dropping} max_fails=1 fail_timeout=10s;\n    server {healthy} max_fails=1 fail_timeout=10s;\n  }}\n\
             \x20 server {{\n    listen 127.0.0.1:{NGINX_PORT};\n    location / {{\n      proxy_pass http://api;\n      proxy_connect_timeout 2s;\n\
             \x20     proxy_next_upstream error timeout http_502 http_503 http_504;\n      proxy_next_upstream_tries 2;\n    }}\n  }}\n}}\n",
            dir = dir.path().display(),
            healthy = healthy.addr,
        ),
    )?;
    let _nginx = Nginx(
        Command::new("nginx")
            .args([
                "-c",
                &conf.display().to_string(),
                "-p",
                &dir.path().display().to_string(),
            ])
            .stderr(Stdio::null())
            .spawn()?,
    );
    let picket = TestNode::start(&route(
        "api",
        "/",
        &[dropping, healthy.addr],
        "connect_timeout = \"2s\"\neject_for = \"10s\"",
    ));
    sleep(Duration::from_millis(500)).await;
    let nginx_addr = std::net::SocketAddr::from(([127, 0, 0, 1], NGINX_PORT));

    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..120 {
        for (which, addr) in [(0, picket.proxy), (1, nginx_addr)] {
            tasks.push(tokio::spawn(async move {
                (which, client::get(addr, "api.example.com", "/").await)
            }));
        }
        sleep(Duration::from_millis(250)).await;
    }
    let mut tallies = [Tally::default(), Tally::default()];
    for task in tasks {
        let (which, answer) = task.await?;
        match answer {
            Ok(a) if a.status == 200 => tallies[which].latencies.push(a.elapsed),
            Ok(a) => tallies[which].failed.push(a.status.to_string()),
            Err(e) => tallies[which].failed.push(e.to_string()),
        }
    }
    println!(
        "120 requests to each proxy, one every 250 ms, over {:.1} s",
        start.elapsed().as_secs_f64()
    );
    println!("| proxy | requests | failed | over 0.5 s | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|---|");
    println!("{}", tallies[0].row("picket"));
    println!("{}", tallies[1].row("nginx"));
    picket.stop().await;
    Ok(())
}
