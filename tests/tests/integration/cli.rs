//! The `picket` command as operators run it: `check` on fixture files,
//! `--help`, `run` reloading on SIGHUP, and `demo`.

// A test of the binary as a process: waits are on the wall clock of real
// processes.
#![allow(clippy::disallowed_types)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `picket` the tests run.
fn picket() -> PathBuf {
    picket_tests::binaries::picket()
}

/// The configuration fixtures, beside the gateway's sources.
fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/tests/fixtures")
}

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = fixture_dir().join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn check(file: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(picket())
        .arg("check")
        .arg(file)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn every_invalid_fixture_is_refused_naming_file_line_and_column() {
    let files = fixtures("invalid");
    assert!(files.len() >= 10);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let expected = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# error: "))
            .unwrap();
        let out = check(&file, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", file.display());
        let located = format!("{}:{}", file.display(), expected.trim_end());
        assert!(
            stderr.starts_with(&located),
            "{}\n expected: {located}\n      got: {stderr}",
            file.display()
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn every_valid_fixture_passes_and_its_effective_form_passes_too() {
    let dir = tempfile::tempdir().unwrap();
    for file in fixtures("valid") {
        let out = check(&file, &[]);
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let effective = String::from_utf8(out.stdout).unwrap();
        // The printed configuration is itself a valid file meaning the same.
        let copy = dir.path().join("effective.toml");
        std::fs::write(&copy, &effective).unwrap();
        let again = check(&copy, &[]);
        assert!(again.status.success(), "{effective}");
        let strip = |s: &str| {
            s.lines()
                .skip(1)
                .map(|l| l.split(" #").next().unwrap().trim_end().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            strip(&effective),
            strip(&String::from_utf8(again.stdout).unwrap()),
            "{}",
            file.display()
        );
    }
}

#[test]
fn the_runtime_breaker_takes_its_settings_from_the_environment() {
    let file = fixture_dir().join("valid/runtime_services.toml");
    let out = check(
        &file,
        &[
            ("PICKET_RUNTIME_BREAKER_COOLDOWN", "45s"),
            ("PICKET_RUNTIME_BREAKER_DISABLED", "yes"),
        ],
    );
    let output = String::from_utf8(out.stdout).unwrap();
    let breaker: Vec<String> = output
        .split("[runtime.breaker]")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| !l.starts_with('['))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        breaker,
        [
            "enabled = false # flag or environment",
            "failures = 3",
            "cooldown = \"45s\" # flag or environment",
        ]
    );
    // The names `failures` had before are still read: the key in a file,
    // the variable in the environment.
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("legacy.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&legacy, text.replace("failures = 3", "threshold = 3")).unwrap();
    let shown = |env: &[(&str, &str)]| {
        let out = check(&legacy, env);
        let output = String::from_utf8(out.stdout).unwrap();
        output
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .find(|l| l.starts_with("failures = "))
            .unwrap_or_else(|| panic!("no failures line: {output}"))
    };
    assert_eq!(shown(&[]), "failures = 3");
    assert_eq!(
        shown(&[("PICKET_RUNTIME_BREAKER_THRESHOLD", "7")]),
        "failures = 7 # flag or environment"
    );
    assert_eq!(
        shown(&[
            ("PICKET_RUNTIME_BREAKER_THRESHOLD", "7"),
            ("PICKET_RUNTIME_BREAKER_FAILURES", "9"),
        ]),
        "failures = 9 # flag or environment",
        "the new name wins"
    );
    // A bare number is seconds.
    let out = check(&file, &[("PICKET_RUNTIME_BREAKER_COOLDOWN", "120")]);
    let output = String::from_utf8(out.stdout).unwrap();
    assert!(
        output
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .any(|l| l == "cooldown = \"2m\" # flag or environment"),
        "{output}"
    );
    for (var, value) in [
        ("PICKET_RUNTIME_BREAKER_COOLDOWN", "0s"),
        ("PICKET_RUNTIME_BREAKER_THRESHOLD", "0"),
        ("PICKET_RUNTIME_BREAKER_DISABLED", "maybe"),
    ] {
        let out = check(&file, &[(var, value)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {stderr}");
        assert!(
            stderr.contains("runtime-breaker"),
            "{var}={value}: {stderr}"
        );
    }
}

/// The `key = value  # origin` lines of route `name` in `check` output.
fn route_lines(output: &str, name: &str) -> Vec<String> {
    let blocks: Vec<&str> = output.split("[[route]]").collect();
    let block = blocks
        .iter()
        .find(|b| b.contains(&format!("name = \"{name}\"")))
        .unwrap();
    block
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn check_shows_each_bound_inherited_separately() {
    let file = fixture_dir().join("valid/inheritance.toml");
    let out = check(&file, &[]);
    let output = String::from_utf8(out.stdout).unwrap();
    let api = route_lines(&output, "api");
    for line in [
        "connect_timeout = \"2s\" # set on the route",
        "first_answer_timeout = \"20s\" # inherited from [global]",
        "tries = 2 # default",
        "eject_for = \"10s\" # default",
    ] {
        assert!(
            api.contains(&line.to_string()),
            "api lacks {line:?}: {api:#?}"
        );
    }
    let billing = route_lines(&output, "billing");
    for line in [
        "upstream = \"https://billing.example.net:443\"",
        "connect_timeout = \"5s\" # default",
        "first_answer_timeout = \"45s\" # set on the route",
        "tries = 1 # set on the route",
        "eject_for = \"30s\" # set on the route",
    ] {
        assert!(
            billing.contains(&line.to_string()),
            "billing lacks {line:?}: {billing:#?}"
        );
    }
    assert!(
        output.contains("first_answer_timeout = \"20s\""),
        "{output}"
    );
}

#[test]
fn check_shows_breaker_settings_inherited_field_by_field() {
    let file = fixture_dir().join("valid/breaker.toml");
    let out = check(&file, &[]);
    let output = String::from_utf8(out.stdout).unwrap();
    let api = route_lines(&output, "api");
    for line in [
        "enabled = true # inherited from [global]",
        "failures = 3 # inherited from [global]",
        "cooldown = \"30s\" # set on the route",
    ] {
        assert!(
            api.contains(&line.to_string()),
            "api lacks {line:?}: {api:#?}"
        );
    }
    let off = route_lines(&output, "static");
    for line in [
        "enabled = false # set on the route",
        "failures = 3 # inherited from [global]",
        "cooldown = \"15s\" # default",
    ] {
        assert!(
            off.contains(&line.to_string()),
            "static lacks {line:?}: {off:#?}"
        );
    }
}

#[test]
fn environment_overrides_show_in_check() {
    let file = fixture_dir().join("valid/minimal.toml");
    let out = check(
        &file,
        &[
            ("PICKET_LISTEN", "127.0.0.1:1234"),
            ("PICKET_NODE_NAME", "n9"),
        ],
    );
    let output = String::from_utf8(out.stdout).unwrap();
    assert!(output.contains("listen = \"127.0.0.1:1234\""), "{output}");
    assert!(
        output
            .lines()
            .any(|l| l.starts_with("listen = \"127.0.0.1:1234\"")
                && l.ends_with("# flag or environment")),
        "{output}"
    );
    assert!(
        output.lines().any(|l| l.starts_with("name = \"n9\"")),
        "{output}"
    );
}

#[test]
fn an_https_listener_set_by_the_environment_needs_a_certificate() {
    let valid = fixture_dir().join("valid");
    let out = check(
        &valid.join("minimal.toml"),
        &[("PICKET_LISTEN_TLS", "127.0.0.1:8443")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("listen_tls) needs at least one [[certificate]]"),
        "{stderr}"
    );
    let out = check(
        &valid.join("tls.toml"),
        &[("PICKET_LISTEN_TLS", "127.0.0.1:9443")],
    );
    let output = String::from_utf8(out.stdout).unwrap();
    assert!(
        output
            .lines()
            .any(|l| l.starts_with("listen_tls = \"127.0.0.1:9443\"")
                && l.ends_with("# flag or environment")),
        "{output}"
    );
}

#[test]
fn help_explains_every_flag() {
    let out = Command::new(picket())
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--config",
        "--name",
        "--listen",
        "--listen-tls",
        "--admin",
        "--workers",
        "--extra-ca",
        "--log-format",
        "--log",
    ] {
        assert!(help.contains(flag), "run --help lacks {flag}:\n{help}");
    }
    for env in [
        "PICKET_CONFIG",
        "PICKET_NODE_NAME",
        "PICKET_LISTEN",
        "PICKET_LISTEN_TLS",
        "PICKET_ADMIN",
        "PICKET_WORKERS",
    ] {
        assert!(help.contains(env), "run --help lacks {env}:\n{help}");
    }
    let out = Command::new(picket()).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for command in ["run", "check", "demo"] {
        assert!(help.contains(command), "--help lacks {command}:\n{help}");
    }
    // Every variable the binary reads, those without a flag included.
    for env in [
        "PICKET_CONFIG",
        "PICKET_NODE_NAME",
        "PICKET_LISTEN",
        "PICKET_LISTEN_TLS",
        "PICKET_ADMIN",
        "PICKET_ADVERTISE",
        "PICKET_WORKERS",
        "PICKET_ACCESS_LOG",
        "PICKET_CLUSTER_KEY",
        "PICKET_RUNTIME_BREAKER_THRESHOLD",
        "PICKET_RUNTIME_BREAKER_COOLDOWN",
        "PICKET_RUNTIME_BREAKER_DISABLED",
        "PICKET_LOG",
        "PICKET_LOG_FORMAT",
        "SSL_CERT_FILE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "DOCKER_HOST",
        "POD_NAMESPACE",
        "KUBECONFIG",
        "PICKET_SOCKET_PROXY_LISTEN",
        "PICKET_DOCKER_SOCKET",
    ] {
        assert!(help.contains(env), "--help lacks {env}:\n{help}");
    }
}

#[test]
fn a_machine_wide_ssl_cert_file_is_not_shown_as_a_required_flag() {
    let out = Command::new(picket())
        .arg("check")
        .env("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Usage: picket check"), "{stderr}");
    assert!(!stderr.contains("--extra-ca"), "{stderr}");
}

/// Every unknown key of a file at once, each with the field it was likely
/// meant to be; a bare number for a duration says how to write one; a
/// route named twice is one problem.
#[test]
fn check_reports_every_unknown_field_with_what_was_meant() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("picket.toml");
    std::fs::write(
        &file,
        "[node]\nlistn = \"0.0.0.0:8080\"\nworkrs = 2\n\n\
         [[route]]\nname = \"api\"\nreplicas = [\"10.0.0.7:8080\"]\nconect-timeout = \"1s\"\n\
         breaker = { enabled = true, failurs = 3, wobble = 1 }\n",
    )
    .unwrap();
    let out = check(&file, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let at = |rest: &str| format!("{}:{rest}", file.display());
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines[..5],
        [
            at("2:1: unknown field `listn` in node: did you mean `listen`?").as_str(),
            at("3:1: unknown field `workrs` in node: did you mean `workers`?").as_str(),
            at("8:1: unknown field `conect-timeout` in route: did you mean `connect_timeout`?")
                .as_str(),
            at("9:29: unknown field `failurs` in route.breaker: did you mean `failures`?").as_str(),
            at("9:42: unknown field `wobble` in route.breaker").as_str(),
        ],
        "{stderr}"
    );

    std::fs::write(
        &file,
        "[global]\nconnect_timeout = 5\n\n[[route]]\nname = \"api\"\nreplicas = [\"10.0.0.7:8080\"]\n",
    )
    .unwrap();
    let out = check(&file, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&at(
            "2:19: invalid type: integer `5`, expected a string: connect_timeout is a duration: \
             a string with its unit, such as \"5s\" or \"250ms\""
        )),
        "{stderr}"
    );

    std::fs::write(
        &file,
        "[[route]]\nname = \"api\"\nreplicas = [\"10.0.0.7:8080\"]\n\n\
         [[route]]\nname = \"api\"\nreplicas = [\"10.0.0.8:8080\"]\n",
    )
    .unwrap();
    let out = check(&file, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        at("6:8: route name \"api\" is already used by the route at line 1"),
        "one problem for a route named twice"
    );
}

fn free_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], picket_tests::ports::free_port()))
}

/// `GET path` over a fresh connection: (status, body).
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// An HTTP server on a thread that answers every request with `text`.
fn answering(text: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut seen = Vec::new();
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}",
                            text.len()
                        );
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn config(listen: SocketAddr, admin: SocketAddr, replica: SocketAddr) -> String {
    format!(
        "[node]\nlisten = \"{listen}\"\nadmin = \"{admin}\"\n[[route]]\nname = \"api\"\nreplicas = [\"{replica}\"]\n"
    )
}

#[test]
fn sighup_reloads_the_configuration() {
    let (a, b) = (answering("from a"), answering("from b"));
    let (listen, admin) = (free_port(), free_port());
    // The node's path is a symlink into another directory: editing the
    // target there is invisible to the file watch, so only SIGHUP can
    // make the node see it.
    let dir = tempfile::tempdir().unwrap();
    let hidden = tempfile::tempdir().unwrap();
    let target = hidden.path().join("real.toml");
    std::fs::write(&target, config(listen, admin, a)).unwrap();
    let path = dir.path().join("picket.toml");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    // Outside the watched directory: writing the log must not look like
    // a change there.
    let log = hidden.path().join("picket.log");
    let child = Command::new(picket())
        .args(["run", "--log-format", "json", "--config"])
        .arg(&path)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut process = Process(child);
    wait_until("the node answers", Duration::from_secs(10), || {
        get(listen, "/").is_some_and(|(_, b)| b == "from a")
    });
    std::fs::write(&target, config(listen, admin, b)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        get(listen, "/").unwrap().1,
        "from a",
        "no SIGHUP yet, no reload"
    );
    let pid = process.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    wait_until("the reloaded route answers", Duration::from_secs(5), || {
        get(listen, "/").is_some_and(|(_, b)| b == "from b")
    });
    let (status, metrics) = get(admin, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("picket_config_reloads_total{result=\"applied\"} 1"),
        "{metrics}"
    );
    // Requests leave no log line; the reload leaves one, as JSON.
    for _ in 0..20 {
        get(listen, "/").unwrap();
    }
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let _ = process.0.wait();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["fields"]["message"].as_str())
        .collect();
    assert_eq!(
        messages
            .iter()
            .filter(|m| **m == "configuration reloaded")
            .count(),
        1,
        "{messages:?}"
    );
    assert_eq!(
        messages,
        [
            "node serving",
            "configuration reloaded",
            "stop signal received; draining",
            "node stopped"
        ]
    );
}

/// The first of three consecutive loopback ports free for TCP and UDP.
fn three_free_ports() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], picket_tests::ports::consecutive(3)))
}

#[test]
fn demo_is_a_three_node_cluster_showing_healthy_slow_and_refused_routes() {
    let (listen, admin, gossip, feed) = (
        three_free_ports(),
        three_free_ports(),
        three_free_ports(),
        three_free_ports(),
    );
    let child = Command::new(picket())
        .args([
            "demo",
            "--listen",
            &listen.to_string(),
            "--admin",
            &admin.to_string(),
            "--gossip",
            &gossip.to_string(),
            "--feed",
            &feed.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _process = Process(child);
    wait_until("the demo answers", Duration::from_secs(10), || {
        get(listen, "/").is_some()
    });
    let mut replicas: Vec<String> = (0..3).map(|_| get(listen, "/").unwrap().1).collect();
    replicas.sort();
    assert!(replicas[0].starts_with("hello from web-1"), "{replicas:?}");
    assert!(replicas[2].starts_with("hello from web-3"), "{replicas:?}");
    // A refused replica answers at once; the slow one at the demo's 2 s
    // first-answer bound, not before (end to end, the upper bounds are
    // generous: the bound's precision is shown on a paused clock, in
    // `bounds::on_a_paused_clock_the_first_answer_bound_is_exact`).
    let started = Instant::now();
    assert_eq!(get(listen, "/refused").unwrap().0, 502);
    assert!(started.elapsed() < picket_tests::AT_ONCE);
    let started = Instant::now();
    assert_eq!(get(listen, "/slow").unwrap().0, 504);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(2) + picket_tests::AT_ONCE,
        "{took:?}"
    );
    assert_eq!(get(admin, "/healthz").unwrap().0, 200);
    // Three nodes, and node 3 alone sees `web` orange.
    wait_until(
        "node 3's disagreement on web",
        Duration::from_secs(15),
        || {
            get(admin, "/v1/routes/web").is_some_and(|(status, body)| {
                status == 200
                    && body.contains("\"disagreement\":true")
                    && body.matches("\"node\":\"demo-").count() == 4
            })
        },
    );
    let (_, cluster) = get(admin, "/v1/cluster").unwrap();
    assert_eq!(
        cluster.matches("\"liveness\":\"alive\"").count(),
        3,
        "{cluster}"
    );
}

#[test]
fn health_asks_the_admin_listener_and_says_when_it_does_not_answer() {
    let a = answering("from a");
    let (listen, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("picket.toml");
    std::fs::write(&path, config(listen, admin, a)).unwrap();
    let child = Command::new(picket())
        .args(["run", "--config"])
        .arg(&path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let process = Process(child);
    let health = |admin: SocketAddr| {
        Command::new(picket())
            .args(["health", "--admin", &admin.to_string()])
            .output()
            .unwrap()
    };
    wait_until("the node is healthy", Duration::from_secs(10), || {
        health(admin).status.success()
    });
    // The image's form: the admin listener on every interface.
    let unspecified = SocketAddr::from(([0, 0, 0, 0], admin.port()));
    assert!(health(unspecified).status.success());
    drop(process);
    let output = health(admin);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&format!("connecting to {admin}")),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
