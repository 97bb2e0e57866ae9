//! A node run out of file descriptors (a `max_connections` set past what
//! its open-files limit allows) blames nobody: its connect checks and
//! reloads meet EMFILE for as long as the clients hold their connections,
//! yet no replica is ejected, no configuration is refused, and the episode
//! is logged once when it starts and once when it ends — never once per
//! connection, check or reload.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use picket_tests::client;
use picket_tests::ports::free_port;
use picket_tests::upstream::{Behaviour, Upstream};
use picket_tests::{binaries, has_program, require};
use tokio::net::TcpStream;

#[tokio::test]
async fn running_out_of_descriptors_blames_no_replica() {
    if !require("prlimit (util-linux)", has_program("prlimit")) {
        return;
    }
    let upstream = Upstream::start("ok", Behaviour::Status(200)).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let proxy = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = dir.path().join("picket.toml");
    let text = format!(
        "[node]\nname = \"fd\"\nlisten = \"{proxy}\"\nadmin = \"{admin}\"\nmax_connections = 10000\n\
         [global]\ncheck_every = \"1s\"\n\
         [[route]]\nname = \"r\"\npath_prefix = \"/\"\nreplicas = [\"{}\"]\n",
        upstream.addr
    );
    std::fs::write(&config, &text).expect("write the configuration");
    let log_path = dir.path().join("picket.log");
    let log = std::fs::File::create(&log_path).expect("a log file");
    let mut child = Command::new("prlimit")
        .args(["--nofile=64:64", "--"])
        .arg(binaries::picket())
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .env("PICKET_ACCESS_LOG", "off")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the log file"))
        .stderr(log)
        .spawn()
        .expect("picket starts");
    let log_text = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !client::get(admin, "admin", "/healthz")
        .await
        .is_ok_and(|a| a.status.is_success())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node never answered: {}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = client::get(proxy, "h", "/").await.expect("proxied");
    assert_eq!(answer.status, 200);

    // 100 idle clients: the node runs out of descriptors.
    let mut clients = Vec::new();
    for _ in 0..100 {
        clients.push(TcpStream::connect(proxy).await.expect("connect"));
    }
    // Three check rounds meet EMFILE; a rewrite of the file asks for a
    // reload meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&config)
        .expect("open the configuration");
    writeln!(file, "# touched while the node is out of descriptors").expect("append");
    drop(file);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    drop(clients);

    // Descriptors back: the node serves again, and the replica was never
    // blamed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !client::get(proxy, "h", "/")
        .await
        .is_ok_and(|a| a.status == 200)
    {
        assert!(tokio::time::Instant::now() < deadline, "{}", log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = loop {
        if let Ok(answer) = client::get(admin, "admin", "/metrics").await {
            break answer.text();
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The episode ends once a second has passed without a shortage and a
    // check or an accept succeeds.
    while !log_text().contains("local resources available again") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the episode never ended: {}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = log_text();
    let sample = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert!(
        sample("picket_local_resource_errors_total").is_some_and(|n| n >= 1.0),
        "no local resource error was met; the test did not exhaust the node: {metrics}\n{log}"
    );
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("picket_replica_ejections_total{") && !l.ends_with(" 0")),
        "a replica was ejected: {metrics}"
    );
    assert!(!log.contains("configuration refused"), "{log}");
    let out_of = log.matches("out of a local resource").count();
    let back = log.matches("local resources available again").count();
    // One shortage, one episode: accepts that get a freed descriptor
    // between failures do not end it.
    assert!(
        out_of == 1 && back == 1,
        "episodes logged {out_of} times, ends {back} times: {log}"
    );
    assert!(
        log.lines().count() < 20,
        "lines logged per connection or per check: {log}"
    );
}
