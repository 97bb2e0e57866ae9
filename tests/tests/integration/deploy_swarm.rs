//! `deploy/swarm/stack.yml` on the machine's engine, made a one-node swarm:
//! the image of `deploy/Dockerfile`, the stack as operators deploy it (its
//! ports moved to free ones, plus a service of the test upstream to route
//! to), traffic through the published port, HTTPS through the published
//! TLS port with the certificate of the stack's secrets, that certificate
//! rotated as docs/install.md says, the verdict in the status API, in
//! `picket-tui --once --json` and in the image's own `picket tui` run
//! inside a node, the socket proxy refusing a create,
//! rolling updates of a two-replica service under load (stop-first and
//! start-first: nothing fails, nothing waits a second), the service scaled
//! to 0, the stack removed and the swarm left. `deploy/swarm/stack-acme.yml`
//! the same way, against Pebble: its certificate from ACME, kept on its
//! volume.
//!
//! Everything it makes has a name of its run's own (the stack, its secrets,
//! the images) and is removed at its end. It never touches a swarm it did
//! not make: on an engine already in one it refuses, loudly.
//!
//! Without an engine this test is skipped outside CI and fails in it.

// Processes and wall time only: no runtime whose clock could be paused.
#![allow(clippy::disallowed_types)]

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use picket_tests::docker::{self, docker};
use picket_tests::ports::free_port;
use picket_tests::tls::{self, TestCa};
use picket_tests::{binaries, require};

/// The stack's name: this run's own, never an operator's `picket`.
fn stack_name() -> String {
    format!("picket-t{}", std::process::id())
}
const SOON: Duration = Duration::from_secs(90);

/// One HTTP/1.1 exchange; the status and body.
fn http(addr: SocketAddr, method: &str, path: &str) -> Option<(u16, String)> {
    http_to(addr, "test", method, path)
}

/// [`http`] with `Host: host`.
fn http_to(addr: SocketAddr, host: &str, method: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

fn until_or_none<T>(mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + SOON;
    while Instant::now() < deadline {
        if let Some(found) = check() {
            return Some(found);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    None
}

fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + SOON;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "not within {SOON:?}: {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The stack removed, its secrets and volumes deleted, when the test
/// ends.
struct Deployed {
    stack: String,
    secrets: Vec<String>,
    /// Named volumes of the stack, which `stack rm` leaves.
    volumes: Vec<String>,
}

impl Drop for Deployed {
    fn drop(&mut self) {
        let _ = docker(&["stack", "rm", &self.stack]);
        let label = format!("label=com.docker.stack.namespace={}", self.stack);
        for _ in 0..120 {
            let networks = docker(&["network", "ls", "-q", "--filter", &label]);
            let containers = docker(&["ps", "-aq", "--filter", &label]);
            if networks.is_ok_and(|ids| ids.is_empty())
                && containers.is_ok_and(|ids| ids.is_empty())
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        for secret in &self.secrets {
            let _ = docker(&["secret", "rm", secret]);
        }
        for volume in &self.volumes {
            let _ = docker(&["volume", "rm", volume]);
        }
    }
}

/// A service of the test's own, removed when the test ends (before the
/// stack, whose network it is attached to).
struct Removed(String);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = docker(&["service", "rm", &self.0]);
    }
}

fn verdict(admin: SocketAddr, route: &str) -> Option<serde_json::Value> {
    let (status, body) = http(admin, "GET", &format!("/v1/routes/{route}"))?;
    (status == 200).then(|| serde_json::from_str(&body).ok())?
}

/// A shipped stack file with this test's image, its ports published at
/// the free ones given (`(shipped, free)`).
fn shipped(file: &Path, image: &str, ports: &[(u16, u16)]) -> String {
    let stack = std::fs::read_to_string(file)
        .unwrap()
        .replace("image: picket:latest", &format!("image: {image}"));
    ports.iter().fold(stack, |stack, (shipped, free)| {
        let published = format!("published: {shipped},");
        assert!(
            stack.contains(&published),
            "{published} in {}",
            file.display()
        );
        stack.replace(&published, &format!("published: {free},"))
    })
}

fn engine() -> bool {
    require("a Docker engine", docker::available())
        && require(
            "the engine's socket at /var/run/docker.sock",
            Path::new("/var/run/docker.sock").exists(),
        )
}

#[test]
fn the_swarm_stack_deploys_routes_judges_and_goes() {
    let _turn = docker::swarm_turn_blocking();
    if !engine() {
        return;
    }
    // Dropped last: the swarm after the images, the images after the stack.
    let Some(_swarm) = docker::Swarm::hold() else {
        return;
    };
    let images = docker::Images::hold();
    let image = images.picket();
    let upstream = images.upstream("1");
    let tui = binaries::picket_tui();
    let stack_name = stack_name();
    let stack_name = stack_name.as_str();

    // The stack as shipped, with this test's image and free ports, and a
    // service to route to.
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/swarm");
    let (proxy, https, admin, feed) = (free_port(), free_port(), free_port(), free_port());
    // The stack's secrets under names of this test's own.
    let secret = |name: &str| format!("{name}-t{}", std::process::id());
    let named = |stack: String, name: &str| {
        stack.replace(
            &format!("\n  {name}:\n    external: true\n"),
            &format!(
                "\n  {name}:\n    external: true\n    name: {}\n",
                secret(name)
            ),
        )
    };
    let stack = shipped(
        &deploy.join("stack.yml"),
        &image,
        &[(8080, proxy), (8443, https), (9900, admin), (9901, feed)],
    )
    .replace(
            "\nnetworks:\n",
            &format!(
                "\n  web:\n    image: {upstream}\n    command: [\"--listen\", \"0.0.0.0:8080\", \"--name\", \"web\"]\n    \
                 networks: [upstreams]\n    healthcheck: {{ disable: true }}\n    stop_grace_period: 2s\n    \
                 deploy: {{ replicas: 3 }}\n\
                 \nnetworks:\n"
            ),
        );
    let config = std::fs::read_to_string(deploy.join("picket.toml"))
        .unwrap()
        .replace("service = \"shop_web\"", &format!("service = \"{stack_name}_web\""))
        .replace(
            "network = \"picket_upstreams\"",
            &format!("network = \"{stack_name}_upstreams\""),
        )
        // The socket proxy, reached through the node on its internal
        // network: what the stack lets through and what it refuses.
        + "\n[[route]]\nname = \"engine\"\npath_prefix = \"/containers\"\nupstream = \"http://socket-proxy:2375\"\n";
    let dir = tempfile::tempdir().unwrap();
    let stack = ["picket-gossip-key", "picket-tls-cert", "picket-tls-key"]
        .iter()
        .fold(stack, |stack, name| named(stack, name));
    for name in ["picket-gossip-key", "picket-tls-cert", "picket-tls-key"] {
        assert!(stack.contains(&secret(name)), "secret {name} in\n{stack}");
    }
    std::fs::write(dir.path().join("stack.yml"), &stack).unwrap();
    std::fs::write(dir.path().join("picket.toml"), &config).unwrap();
    let key = picket::gossip::keys::generate().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, key).unwrap();

    // The certificate the stack serves, from a CA of this test.
    let ca = TestCa::new("deploy-swarm CA");
    let first = ca.write_leaf(dir.path(), "first", &["shop.example"]);
    let mut deployed = Deployed {
        stack: stack_name.to_string(),
        secrets: Vec::new(),
        volumes: Vec::new(),
    };
    for (name, file) in [
        ("picket-gossip-key", &key_file),
        ("picket-tls-cert", &first.cert),
        ("picket-tls-key", &first.key),
    ] {
        docker(&["secret", "create", &secret(name), file.to_str().unwrap()]).unwrap();
        deployed.secrets.push(secret(name));
    }
    let stack_file = dir.path().join("stack.yml");
    docker(&[
        "stack",
        "deploy",
        "-c",
        stack_file.to_str().unwrap(),
        stack_name,
    ])
    .unwrap_or_else(|e| panic!("{e}\n{stack}"));

    let (proxy, https, admin) = (
        SocketAddr::from(([127, 0, 0, 1], proxy)),
        SocketAddr::from(([127, 0, 0, 1], https)),
        SocketAddr::from(([127, 0, 0, 1], admin)),
    );
    // Traffic through the published port reaches the service's replicas.
    until("an answer from web through the published port", || {
        http(proxy, "GET", "/hello").filter(|(status, body)| *status == 200 && body.contains("web"))
    });
    let green = until("web green with 3 of 3 ready", || {
        verdict(admin, "web").filter(|v| {
            v["nodes"][0]["verdict"]["heart"] == "green" && v["nodes"][0]["verdict"]["ready"] == 3
        })
    });
    eprintln!("{green:#}");

    // A service that declares its own route in labels, on the stack's
    // network: served through the published port, changed by a label
    // update, gone with the service.
    let blog = Removed(format!("{stack_name}-blog"));
    docker(&[
        "service",
        "create",
        "--detach=false",
        "--name",
        &blog.0,
        "--network",
        &format!("{stack_name}_upstreams"),
        "--no-healthcheck",
        "--container-label",
        "picket.enable=true",
        "--container-label",
        "picket.route.blog.host=blog.test",
        "--container-label",
        "picket.route.blog.port=8080",
        &upstream,
        "--listen",
        "0.0.0.0:8080",
        "--name",
        "blog",
    ])
    .unwrap();
    until("blog through the published port, by its labels", || {
        http_to(proxy, "blog.test", "GET", "/hello")
            .filter(|(status, body)| *status == 200 && body.starts_with("blog"))
    });
    let declared = until("blog in /v1/routes", || {
        let (_, body) = http(admin, "GET", "/v1/routes")?;
        let routes: serde_json::Value = serde_json::from_str(&body).ok()?;
        routes["routes"]
            .as_array()?
            .iter()
            .find(|r| r["name"] == format!("{}/blog", blog.0))
            .cloned()
    });
    assert_eq!(
        declared["declared_by"],
        format!("service {}", blog.0),
        "{declared}"
    );
    docker(&[
        "service",
        "update",
        "--detach=false",
        "--container-label-add",
        "picket.route.blog.path_prefix=/v2",
        &blog.0,
    ])
    .unwrap();
    // The stack's `web` takes every host and path no other route has.
    until("blog on /v2 after its labels changed", || {
        let moved = http_to(proxy, "blog.test", "GET", "/hello")
            .is_some_and(|(s, body)| s == 200 && body.starts_with("web"));
        let served = http_to(proxy, "blog.test", "GET", "/v2/hello")
            .is_some_and(|(s, body)| s == 200 && body.starts_with("blog"));
        (moved && served).then_some(())
    });
    docker(&["service", "rm", &blog.0]).unwrap();
    until("no blog once its service is removed", || {
        http_to(proxy, "blog.test", "GET", "/v2/hello")
            .filter(|(status, body)| *status == 200 && body.starts_with("web"))
    });
    // The stack's own route served throughout.
    assert!(http(proxy, "GET", "/hello").is_some_and(|(s, b)| s == 200 && b.contains("web")));

    // HTTPS through the published TLS port, with the certificate of the
    // stack's secrets, checked against this test's CA.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = tls::client_config(&ca, &[b"h2", b"http/1.1"]);
    let over_tls = || {
        runtime
            .block_on(tls::get(https, client.clone(), "shop.example", "/hello"))
            .ok()
    };
    let (answer, shown, _) = until("an answer from web over HTTPS", || {
        over_tls().filter(|(answer, _, _)| answer.status == 200)
    });
    assert_eq!(shown, first.der, "the certificate of the stack's secrets");
    assert!(answer.text().contains("web"), "{answer:?}");

    // A new certificate, as docs/install.md rotates it: new secrets, swapped
    // into the service by an update that replaces its task.
    let second = ca.write_leaf(dir.path(), "second", &["shop.example"]);
    let rotated = |name: &str| format!("{}-2", secret(name));
    for (name, file) in [
        ("picket-tls-cert", &second.cert),
        ("picket-tls-key", &second.key),
    ] {
        docker(&["secret", "create", &rotated(name), file.to_str().unwrap()]).unwrap();
        deployed.secrets.push(rotated(name));
    }
    docker(&[
        "service",
        "update",
        "--detach=false",
        "--secret-rm",
        &secret("picket-tls-cert"),
        "--secret-add",
        &format!(
            "source={},target=picket-tls.crt",
            rotated("picket-tls-cert")
        ),
        "--secret-rm",
        &secret("picket-tls-key"),
        "--secret-add",
        &format!(
            "source={},target=picket-tls.key,uid=65534,gid=65534,mode=0400",
            rotated("picket-tls-key")
        ),
        &format!("{stack_name}_picket"),
    ])
    .unwrap();
    until("the new certificate over HTTPS", || {
        over_tls().filter(|(answer, shown, _)| answer.status == 200 && *shown == second.der)
    });
    until("web green with 3 of 3 ready after the update", || {
        verdict(admin, "web").filter(|v| {
            v["nodes"][0]["verdict"]["heart"] == "green" && v["nodes"][0]["verdict"]["ready"] == 3
        })
    });

    // The same verdict through the feed, pinned to the fingerprint the
    // node publishes.
    let (_, node) = http(admin, "GET", "/v1/node").unwrap();
    let node: serde_json::Value = serde_json::from_str(&node).unwrap();
    let pin = node["feed_fingerprint"].as_str().unwrap().to_string();
    let output = Command::new(&tui)
        .args([
            "--pin",
            &pin,
            "--once",
            "--json",
            &format!("127.0.0.1:{feed}"),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let view: picket_proto::ClusterView = serde_json::from_slice(&output.stdout).unwrap();
    let web = view.members[0]
        .verdicts
        .iter()
        .find(|v| *v.route == *"web")
        .unwrap();
    assert_eq!(web.heart, picket_proto::Heart::Green, "{view:#?}");

    // The image's one binary carries the terminal view (`picket tui`):
    // run inside a node, against that node's own feed, it shows the same.
    let node_container = docker(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=com.docker.swarm.service.name={stack_name}_picket"),
    ])
    .unwrap();
    let node_container = node_container.lines().next().expect("a node's container");
    let inside = docker(&[
        "exec",
        node_container,
        "/picket",
        "tui",
        "--insecure",
        "--once",
        "--json",
        "127.0.0.1:9901",
    ])
    .unwrap_or_else(|e| panic!("picket tui inside the node: {e}"));
    let view: picket_proto::ClusterView = serde_json::from_str(&inside).unwrap();
    let web = view.members[0]
        .verdicts
        .iter()
        .find(|v| *v.route == *"web")
        .unwrap();
    assert_eq!(web.heart, picket_proto::Heart::Green, "{view:#?}");

    // The socket proxy lets a read through and refuses a create.
    let mut last = None;
    let found = until_or_none(|| {
        last = http(proxy, "GET", "/containers/json");
        last.clone().filter(|(s, _)| *s == 200)
    });
    let (status, _) = found.unwrap_or_else(|| {
        panic!(
            "the socket proxy never answered through the node: {last:?}; engine: {:#}",
            verdict(admin, "engine").unwrap_or_default()
        )
    });
    assert_eq!(status, 200);
    let (status, body) = http(proxy, "POST", "/containers/create").unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("refused by picket socket-proxy"), "{body}");

    // Rolling updates under load: a request every 25 ms through the
    // published port while each task of a two-replica service is replaced,
    // stop-first then start-first. A task being stopped leaves the rotation
    // at the engine's kill event, before its address stops answering:
    // nothing fails, nothing waits a second.
    docker(&["service", "scale", "-d", &format!("{stack_name}_web=2")]).unwrap();
    until("web green with 2 of 2 ready", || {
        verdict(admin, "web").filter(|v| {
            let v = &v["nodes"][0]["verdict"];
            v["heart"] == "green" && v["ready"] == 2 && v["total"] == 2
        })
    });
    for order in ["stop-first", "start-first"] {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut samples = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let sent = Instant::now();
                    let status = http(proxy, "GET", "/hello").map_or(0, |(status, _)| status);
                    samples.push((status, sent.elapsed()));
                    std::thread::sleep(Duration::from_millis(25).saturating_sub(sent.elapsed()));
                }
                samples
            })
        };
        std::thread::sleep(Duration::from_secs(1));
        docker(&[
            "service",
            "update",
            "--detach=false",
            "--force",
            "--update-order",
            order,
            "--update-parallelism",
            "1",
            "--update-delay",
            "2s",
            &format!("{stack_name}_web"),
        ])
        .unwrap();
        until("web green again with 2 of 2 ready", || {
            verdict(admin, "web").filter(|v| {
                let v = &v["nodes"][0]["verdict"];
                v["heart"] == "green" && v["ready"] == 2 && v["total"] == 2
            })
        });
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let samples = load.join().unwrap();
        let failed: Vec<_> = samples
            .iter()
            .filter(|(status, _)| *status != 200)
            .collect();
        let slowest = samples
            .iter()
            .map(|(_, took)| *took)
            .max()
            .unwrap_or_default();
        eprintln!(
            "rolling update, {order}: {} requests, {} failed, slowest {slowest:?}",
            samples.len(),
            failed.len()
        );
        assert!(failed.is_empty(), "{order}: failed requests {failed:?}");
        assert!(
            slowest < Duration::from_secs(1),
            "{order}: a request took {slowest:?}"
        );
    }

    // No replica left: red.
    docker(&["service", "scale", "-d", &format!("{stack_name}_web=0")]).unwrap();
    until("web red with none ready", || {
        verdict(admin, "web").filter(|v| {
            v["nodes"][0]["verdict"]["heart"] == "red" && v["nodes"][0]["verdict"]["ready"] == 0
        })
    });
}

/// `deploy/swarm/stack-acme.yml` as docs/install.md deploys it, against
/// Pebble on the machine (listening where containers reach it): no
/// certificate secret, the node obtains its certificate, validated through
/// the published port, serves it through the published TLS port, keeps it
/// on its volume (the node's user's own, the key 0600), and a replaced
/// task serves it from that volume without ordering again.
#[test]
fn the_acme_stack_obtains_its_certificate_and_keeps_it_on_its_volume() {
    let _turn = docker::swarm_turn_blocking();
    if !engine()
        || !require(
            "Pebble (Debian's pebble package)",
            picket_tests::pebble::available(),
        )
    {
        return;
    }
    let Some(_swarm) = docker::Swarm::hold() else {
        return;
    };
    let images = docker::Images::hold();
    let image = images.picket();
    let stack_name = format!("picket-acme-t{}", std::process::id());
    let stack_name = stack_name.as_str();
    // Containers reach the machine at the gateway of docker_gwbridge.
    let gateway: std::net::Ipv4Addr = docker(&[
        "network",
        "inspect",
        "docker_gwbridge",
        "-f",
        "{{(index .IPAM.Config 0).Gateway}}",
    ])
    .unwrap()
    .trim()
    .parse()
    .expect("the gateway of docker_gwbridge");
    let (proxy, https, admin, feed) = (free_port(), free_port(), free_port(), free_port());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Every name resolves to 127.0.0.1: the published port of the one node.
    let pebble = runtime.block_on(picket_tests::pebble::Pebble::start(
        picket_tests::pebble::Setup {
            listen: gateway,
            http_port: proxy,
            tls_port: https,
            validate_at: std::net::Ipv4Addr::LOCALHOST,
            validity: None,
        },
    ));
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/swarm");
    let secret = format!("picket-gossip-key-t{}", std::process::id());
    let stack = shipped(
        &deploy.join("stack-acme.yml"),
        &image,
        &[(80, proxy), (443, https), (9900, admin), (9901, feed)],
    )
    .replace(
            "  picket-gossip-key:\n    external: true\n",
            &format!("  picket-gossip-key:\n    external: true\n    name: {secret}\n"),
        )
        // The CA of Pebble's directory, as a config of the stack.
        .replace(
            "      - source: picket-acme-config\n        target: /etc/picket/picket.toml\n",
            "      - source: picket-acme-config\n        target: /etc/picket/picket.toml\n      - source: acme-ca\n        target: /etc/picket/acme-ca.pem\n      - source: acme-issuers\n        target: /etc/picket/acme-issuers.pem\n",
        )
        .replace(
            "    file: ./acme.toml\n",
            "    file: ./acme.toml\n  acme-ca:\n    file: ./acme-ca.pem\n  acme-issuers:\n    file: ./acme-issuers.pem\n",
        );
    assert!(
        stack.contains(&secret) && stack.contains("acme-ca.pem"),
        "{stack}"
    );
    let config = std::fs::read_to_string(deploy.join("acme.toml"))
        .unwrap()
        .replace(
            "directory = \"https://acme-v02.api.letsencrypt.org/directory\"",
            &format!(
                "directory = \"{}\"\nca = \"/etc/picket/acme-ca.pem\"\nissuers = \"/etc/picket/acme-issuers.pem\"",
                pebble.directory
            ),
        )
        .replace(
            "service = \"shop_web\"",
            &format!("service = \"{stack_name}_web\""),
        )
        .replace(
            "network = \"picket_upstreams\"",
            &format!("network = \"{stack_name}_upstreams\""),
        );
    assert!(config.contains(&pebble.directory), "{config}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stack-acme.yml"), &stack).unwrap();
    std::fs::write(dir.path().join("acme.toml"), &config).unwrap();
    std::fs::copy(&pebble.ca_file, dir.path().join("acme-ca.pem")).unwrap();
    std::fs::copy(&pebble.issuers_file, dir.path().join("acme-issuers.pem")).unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, picket::gossip::keys::generate().unwrap()).unwrap();
    let volume = format!("{stack_name}_acme-cache");
    let _deployed = Deployed {
        stack: stack_name.to_string(),
        secrets: vec![secret.clone()],
        volumes: vec![volume.clone()],
    };
    docker(&["secret", "create", &secret, key_file.to_str().unwrap()]).unwrap();
    let stack_file = dir.path().join("stack-acme.yml");
    docker(&[
        "stack",
        "deploy",
        "-c",
        stack_file.to_str().unwrap(),
        stack_name,
    ])
    .unwrap_or_else(|e| panic!("{e}\n{stack}"));
    let admin = SocketAddr::from(([127, 0, 0, 1], admin));
    let https = SocketAddr::from(([127, 0, 0, 1], https));
    let acme = |admin: SocketAddr| {
        let (status, body) = http(admin, "GET", "/v1/node")?;
        let node: serde_json::Value = serde_json::from_str(&body).ok()?;
        (status == 200).then(|| node["acme"][0].clone())
    };
    let state = until("the node serves a certificate from ACME", || {
        acme(admin).filter(|s| s["phase"] == "serving")
    });
    let serial = state["serial"].as_str().unwrap().to_string();
    // Through the published TLS port, verified against the CA's root.
    let roots = runtime.block_on(pebble.issued_roots());
    let shown = |name: &str| {
        runtime
            .block_on(tls::get(https, std::sync::Arc::clone(&roots), name, "/"))
            .map(|(_, leaf, _)| leaf)
    };
    for name in ["shop.example.com", "www.shop.example.com"] {
        shown(name).unwrap_or_else(|e| panic!("{name} over the published TLS port: {e:#}"));
    }
    // On its volume: the node's user's own, the key readable by it alone.
    let mountpoint = docker(&["volume", "inspect", "-f", "{{.Mountpoint}}", &volume]).unwrap();
    let cache = Path::new(mountpoint.trim());
    let file = cache.join("shop.example.com.pem");
    {
        use std::os::unix::fs::MetadataExt;
        let (dir_meta, file_meta) = (
            std::fs::metadata(cache).unwrap(),
            std::fs::metadata(&file).unwrap(),
        );
        assert_eq!((dir_meta.uid(), dir_meta.mode() & 0o777), (65534, 0o700));
        assert_eq!((file_meta.uid(), file_meta.mode() & 0o777), (65534, 0o600));
    }
    // A replaced task serves it from the volume, ordering nothing.
    docker(&[
        "service",
        "update",
        "--detach=false",
        "--force",
        &format!("{stack_name}_picket"),
    ])
    .unwrap();
    let again = until("the new task serves the same certificate", || {
        acme(admin).filter(|s| s["phase"] == "serving")
    });
    assert_eq!(
        again["serial"].as_str(),
        Some(serial.as_str()),
        "from the volume"
    );
    let (_, metrics) = http(admin, "GET", "/metrics").unwrap();
    assert!(
        !metrics.contains("picket_acme_orders_total{"),
        "the new task ordered nothing:\n{metrics}"
    );
    shown("shop.example.com").expect("served after the update");
}

/// On an engine in a swarm the tests did not make, holding an operator's
/// stack named `picket` and its secret `picket-gossip-key`, the deploy test
/// refuses to run: skipped loudly outside CI, failed in it, and the
/// operator's stack and secret are still there after either.
#[test]
fn the_deploy_test_leaves_a_swarm_it_did_not_make_alone() {
    let _turn = docker::swarm_turn_blocking();
    if !engine() {
        return;
    }
    // An operator's swarm, stack and secret: made here, so that this test
    // too touches only what it made.
    let Some(_operators) = docker::ForeignSwarm::make() else {
        return;
    };
    let images = docker::Images::hold();
    let dir = tempfile::tempdir().unwrap();
    let stack = dir.path().join("stack.yml");
    std::fs::write(
        &stack,
        format!(
            "version: \"3.8\"\nservices:\n  picket:\n    image: {}\n    \
             command: [\"--listen\", \"0.0.0.0:8080\", \"--name\", \"operator\"]\n    \
             healthcheck: {{ disable: true }}\n",
            images.upstream("1")
        ),
    )
    .unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "the operator's key").unwrap();
    struct Operators;
    impl Drop for Operators {
        fn drop(&mut self) {
            let _ = docker(&["stack", "rm", "picket"]);
            for _ in 0..120 {
                let left = docker(&[
                    "ps",
                    "-aq",
                    "--filter",
                    "label=com.docker.stack.namespace=picket",
                ]);
                if left.is_ok_and(|ids| ids.is_empty()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            let _ = docker(&["secret", "rm", "picket-gossip-key"]);
        }
    }
    let _operators_stack = Operators;
    docker(&[
        "secret",
        "create",
        "picket-gossip-key",
        key.to_str().unwrap(),
    ])
    .unwrap();
    docker(&["stack", "deploy", "-c", stack.to_str().unwrap(), "picket"]).unwrap();

    let still_there = || {
        let services = docker(&[
            "service",
            "ls",
            "--format",
            "{{.Name}}",
            "--filter",
            "label=com.docker.stack.namespace=picket",
        ])
        .unwrap();
        assert_eq!(services, "picket_picket", "the operator's stack");
        let secrets = docker(&["secret", "ls", "--format", "{{.Name}}"]).unwrap();
        assert!(
            secrets.lines().any(|s| s == "picket-gossip-key"),
            "the operator's secret: {secrets}"
        );
    };
    still_there();
    for ci in ["false", "true"] {
        let run = Command::new(std::env::current_exe().unwrap())
            .args([
                "deploy_swarm::the_swarm_stack_deploys_routes_judges_and_goes",
                "--exact",
                "--nocapture",
            ])
            .env("CI", ci)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(
            said.contains("not one the tests made"),
            "CI={ci}: the refusal is said:\n{said}"
        );
        // Skipped, loudly, outside CI; failed in it.
        assert_eq!(run.status.success(), ci == "false", "CI={ci}:\n{said}");
        if ci == "false" {
            assert!(said.contains("SKIPPED"), "{said}");
        }
        still_there();
    }
}
