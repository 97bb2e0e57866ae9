//! TLS at the edge: the node's HTTPS listener as clients meet it. Each
//! name gets its certificate; HTTP/1.1, HTTP/2 (by ALPN), HTTP/1.0 (a
//! client offering only `http/1.0` too) and WebSocket work over TLS and
//! the upstream hears `X-Forwarded-Proto: https`; `https_only` routes
//! redirect plain requests; certificates rotate under
//! load without a failed request, and a broken replacement is refused
//! once; a stalled handshake is dropped at the header bound and TLS
//! connections count against the connection limit; bad certificate files
//! are configuration errors with their line and column; and expiry shows
//! in `/v1/node`, in metrics and in the log.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use picket::config::Config;
use picket::node::Reload;
use picket_tests::client;
use picket_tests::logs::Captured;
use picket_tests::node::{TestNode, eventually, route};
use picket_tests::tls::{self, Leaf, TestCa, client_config, connect, inspecting_client, shown};
use picket_tests::upstream::{Behaviour, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

/// The lines logged so far that hold every one of `parts`.
fn logged(logs: &Captured, parts: &[&str]) -> usize {
    logs.text()
        .lines()
        .filter(|line| parts.iter().all(|part| line.contains(part)))
        .count()
}

/// A node serving HTTPS on a port of its own with `certificates` (the
/// first the default), `node` lines in `[node]`, and `rest` after.
fn start(certificates: &[String], node: &str, rest: &str) -> (TestNode, SocketAddr) {
    let node = TestNode::start(&format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n{node}\n{}\n{rest}",
        certificates.concat()
    ));
    let tls = node.tls.expect("an HTTPS listener");
    (node, tls)
}

fn now_unix() -> u64 {
    u64::try_from(picket::clock::now_unix()).expect("after 1970")
}

async fn metrics(node: &TestNode) -> String {
    client::get(node.admin, "admin", "/metrics")
        .await
        .expect("metrics")
        .text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_name_gets_its_certificate_and_the_first_is_the_default() {
    let ca = TestCa::new("sni CA");
    let dir = tempfile::tempdir().unwrap();
    let default = ca.write_leaf(dir.path(), "default", &["default.test"]);
    let a = ca.write_leaf(dir.path(), "a", &["a.test"]);
    let b = ca.write_leaf(dir.path(), "b", &["b.test", "b2.test"]);
    let wild = ca.write_leaf(dir.path(), "wild", &["*.wild.test"]);
    // Its certificate names c.test and d.test; it serves d.test only.
    let narrowed = ca.write_leaf(dir.path(), "narrowed", &["c.test", "d.test"]);
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let (node, tls) = start(
        &[
            default.table(),
            a.table(),
            b.table(),
            wild.table(),
            format!("{}hosts = [\"d.test\"]\n", narrowed.table()),
        ],
        "",
        &route("app", "/", &[upstream.addr], ""),
    );
    let cases: &[(Option<&str>, &Leaf)] = &[
        (Some("a.test"), &a),
        (Some("A.Test"), &a),
        (Some("b2.test"), &b),
        (Some("x.wild.test"), &wild),
        (Some("deep.x.wild.test"), &default),
        (Some("wild.test"), &default),
        (Some("d.test"), &narrowed),
        (Some("c.test"), &default),
        (Some("unknown.test"), &default),
        (None, &default),
    ];
    for (name, expected) in cases {
        let client = inspecting_client(name.is_some());
        let stream = connect(tls, name.unwrap_or("default.test"), client)
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert!(
            shown(&stream).as_ref() == Some(&expected.der),
            "{name:?} got another certificate than {}",
            expected.cert.display()
        );
    }
    // And each verifies for its name with the CA alone.
    for (name, leaf) in [("a.test", &a), ("x.wild.test", &wild)] {
        let (answer, shown, _) = tls::get(tls, client_config(&ca, &[]), name, "/")
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((answer.status, &shown), (http::StatusCode::OK, &leaf.der));
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_and_http2_over_tls_tell_the_upstream_https() {
    let ca = TestCa::new("protocols CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let (node, tls) = start(
        &[leaf.table()],
        "",
        &route("app", "/", &[upstream.addr], ""),
    );
    let cases: [(&[&[u8]], http::Version); 3] = [
        (&[b"http/1.1"], http::Version::HTTP_11),
        (&[b"h2", b"http/1.1"], http::Version::HTTP_2),
        // No ALPN at all: HTTP/1.1.
        (&[], http::Version::HTTP_11),
    ];
    for (alpn, version) in cases {
        let (answer, _, spoken) = tls::get(tls, client_config(&ca, alpn), "app.test", "/x?y=1")
            .await
            .unwrap_or_else(|e| panic!("{version:?}: {e}"));
        assert_eq!(
            (answer.status, spoken),
            (http::StatusCode::OK, version),
            "ALPN {alpn:?}"
        );
        assert_eq!(answer.text(), "echo: GET /x?y=1 (0 bytes)");
        assert_eq!(
            answer.headers["x-seen-x-forwarded-proto"], "https",
            "{version:?}"
        );
        assert_eq!(answer.headers["x-seen-x-forwarded-host"], "app.test");
        // The port of the HTTPS listener, and all of it in `Forwarded`.
        assert_eq!(
            answer.headers["x-seen-x-forwarded-port"],
            tls.port().to_string().as_str()
        );
        assert_eq!(
            answer.headers["x-seen-forwarded"],
            "for=127.0.0.1;proto=https;host=app.test"
        );
    }
    // Plain, the upstream hears `http`, whatever the client claims.
    let mut spoofed = client::request(http::Method::GET, "app.test", "/", bytes::Bytes::new());
    spoofed
        .headers_mut()
        .insert("x-forwarded-proto", http::HeaderValue::from_static("https"));
    let plain = client::send(node.proxy, spoofed).await.unwrap();
    assert_eq!(plain.status, 200);
    let seen: Vec<_> = plain
        .headers
        .get_all("x-seen-x-forwarded-proto")
        .iter()
        .collect();
    assert_eq!(seen, ["http"]);
    node.stop().await;
}

/// One answer read off `stream`: its head as text and its body, framed
/// by its `Content-Length`.
async fn answer_on<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> (String, String) {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
            .await
            .expect("a head within 5 s")
            .expect("the head");
        assert_eq!(n, 1, "closed within the head: {bytes:?}");
        bytes.push(byte[0]);
    }
    let head = String::from_utf8(bytes).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_string)
        })
        .expect("a content-length")
        .parse()
        .unwrap();
    let mut body = vec![0; length];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut body))
        .await
        .expect("the body within 5 s")
        .unwrap();
    (head, String::from_utf8(body).unwrap())
}

/// A client offering only ALPN `http/1.0` (old tools, some load
/// balancers' checks) is served as nginx serves it, with HTTP/1.0's
/// rules: the connection stays open when the request asks for it, and
/// closes after the answer otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_offering_only_http_1_0_is_served() {
    let ca = TestCa::new("http/1.0 CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let (node, tls) = start(
        &[leaf.table()],
        "",
        &route("app", "/", &[upstream.addr], ""),
    );
    let mut stream = connect(tls, "app.test", client_config(&ca, &[b"http/1.0"]))
        .await
        .expect("a handshake offering only http/1.0");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.0"[..]));

    stream
        .write_all(b"GET /kept HTTP/1.0\r\nHost: app.test\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = answer_on(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nconnection: keep-alive\r\n"),
        "{head}"
    );
    assert_eq!(body, "echo: GET /kept (0 bytes)");

    // The same connection, without keep-alive: the last answer on it.
    stream
        .write_all(b"GET /last HTTP/1.0\r\nHost: app.test\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = answer_on(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n"),
        "{head}"
    );
    assert_eq!(body, "echo: GET /last (0 bytes)");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("the node closes the connection");
    // A close without close_notify reads as an error; either way, nothing
    // more came.
    assert!(rest.is_empty(), "{closed:?}: {rest:?}");
    assert_eq!(upstream.hits(), 2);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_negotiates_http2_over_tls() {
    if !picket_tests::require("curl", picket_tests::has_program("curl")) {
        return;
    }
    let ca = TestCa::new("curl CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let roots = ca.write_pem(dir.path());
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let (node, tls) = start(
        &[leaf.table()],
        "",
        &route("app", "/", &[upstream.addr], ""),
    );
    let port = tls.port();
    let output = tokio::process::Command::new("curl")
        .args(["--silent", "--show-error", "--http2", "--max-time", "10"])
        .arg("--cacert")
        .arg(&roots)
        .args(["--resolve", &format!("app.test:{port}:127.0.0.1")])
        .args(["--write-out", "\n%{http_version} %{http_code}"])
        .arg(format!("https://app.test:{port}/curl?q=1"))
        .output()
        .await
        .expect("curl runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout, "echo: GET /curl?q=1 (0 bytes)\n2 200", "{stdout}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_work_over_tls() {
    let ca = TestCa::new("websocket CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let upstream = Upstream::start("ws", Behaviour::WebSocket).await;
    let (node, tls) = start(
        &[leaf.table()],
        "",
        &route("ws", "/", &[upstream.addr], "first_answer_timeout = \"1s\""),
    );
    let stream = connect(tls, "app.test", client_config(&ca, &[b"http/1.1"]))
        .await
        .unwrap();
    let (mut ws, response) = tokio_tungstenite::client_async("wss://app.test/chat", stream)
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    for i in 0..5 {
        ws.send(Message::text(format!("ping {i}"))).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(reply.into_text().unwrap().as_str(), format!("ping {i}"));
    }
    // Past the first-answer bound, the tunnel still carries messages.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    ws.send(Message::text("late")).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(reply.into_text().unwrap().as_str(), "late");
    ws.close(None).await.unwrap();
    assert_eq!(upstream.hits(), 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_only_routes_redirect_plain_requests_to_https() {
    let ca = TestCa::new("redirect CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "site", &["secure.test", "open.test"]);
    let secure = Upstream::start("secure", Behaviour::Echo).await;
    let open = Upstream::start("open", Behaviour::Echo).await;
    let (node, tls) = start(
        &[leaf.table()],
        "",
        &format!(
            "[[route]]\nname = \"secure\"\nhost = \"secure.test\"\nreplicas = [\"{}\"]\nhttps_only = true\n\
             [[route]]\nname = \"open\"\nhost = \"open.test\"\nreplicas = [\"{}\"]\n",
            secure.addr, open.addr
        ),
    );
    let host = format!("secure.test:{}", node.proxy.port());
    for method in [http::Method::GET, http::Method::POST] {
        let answer = client::send(
            node.proxy,
            client::request(method.clone(), &host, "/a/b?c=d", bytes::Bytes::new()),
        )
        .await
        .unwrap();
        assert_eq!(answer.status, 308, "{method}");
        assert_eq!(
            answer.headers["location"],
            format!("https://secure.test:{}/a/b?c=d", tls.port()).as_str(),
            "{method}"
        );
    }
    assert_eq!(secure.hits(), 0, "nothing went upstream in the clear");
    // Over TLS it is served; a route without https_only is served plain.
    let (answer, _, _) = tls::get(tls, client_config(&ca, &[]), "secure.test", "/a/b?c=d")
        .await
        .unwrap();
    assert_eq!(
        (answer.status, answer.text()),
        (
            http::StatusCode::OK,
            "secure: GET /a/b?c=d (0 bytes)".to_string()
        )
    );
    let plain = client::get(node.proxy, "open.test", "/").await.unwrap();
    assert_eq!(plain.status, 200);
    node.stop().await;
}

/// A secret volume as Kubernetes writes one: `tls.crt` and `tls.key` link
/// into `..data`, a link to the directory of the current version. A new
/// version is a new directory, then an atomic rename of a new `..data`
/// link over the old one.
struct Secret {
    dir: PathBuf,
    versions: usize,
}

impl Secret {
    fn new(dir: &Path) -> Secret {
        std::fs::create_dir(dir).unwrap();
        for file in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{file}"), dir.join(file)).unwrap();
        }
        Secret {
            dir: dir.to_path_buf(),
            versions: 0,
        }
    }

    fn publish(&mut self, cert_pem: &str, key_pem: &str) {
        self.versions += 1;
        let version = format!("..v{}", self.versions);
        let at = self.dir.join(&version);
        std::fs::create_dir(&at).unwrap();
        std::fs::write(at.join("tls.crt"), cert_pem).unwrap();
        std::fs::write(at.join("tls.key"), key_pem).unwrap();
        let staged = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&version, &staged).unwrap();
        std::fs::rename(&staged, self.dir.join("..data")).unwrap();
    }

    fn table(&self) -> String {
        format!(
            "[[certificate]]\ncert = {:?}\nkey = {:?}\n",
            self.dir.join("tls.crt").display().to_string(),
            self.dir.join("tls.key").display().to_string()
        )
    }
}

/// One request of the load: when it started, and the certificate and
/// status it got.
type Sample = (
    Duration,
    Result<(rustls::pki_types::CertificateDer<'static>, u16), String>,
);

/// On a runtime that logs to this test alone: it counts its node's lines.
#[test]
fn certificates_rotate_under_load_without_a_failed_request() {
    let captured = Captured::default();
    let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
    runtime.block_on(async {
        let ca = TestCa::new("rotation CA");
        let dir = tempfile::tempdir().unwrap();
        let mut secret = Secret::new(&dir.path().join("secret"));
        let pem = |(cert, key): &(rcgen::Certificate, rcgen::KeyPair)| {
            (format!("{}{}", cert.pem(), ca.pem), key.serialize_pem())
        };
        let first = ca.leaf(&["app.test"]);
        let second = ca.leaf(&["app.test"]);
        let broken = ca.leaf(&["app.test"]);
        let stranger = ca.leaf(&["app.test"]);
        let (first_pem, second_pem) = (pem(&first), pem(&second));
        secret.publish(&first_pem.0, &first_pem.1);
        let upstream = Upstream::start("app", Behaviour::Status(200)).await;
        let (node, tls) = start(
            &[secret.table()],
            "",
            &route("app", "/", &[upstream.addr], ""),
        );

        // A kept-alive HTTP/2 connection made before any rotation: it goes on
        // being served, on the certificate its handshake got.
        let kept = connect(tls, "app.test", client_config(&ca, &[b"h2"]))
            .await
            .unwrap();
        assert_eq!(shown(&kept).as_ref(), Some(first.0.der()));
        let (mut h2, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(kept),
        )
        .await
        .unwrap();
        tokio::spawn(connection);

        // 100 requests a second for 6 s, each on a new connection with a full
        // handshake.
        let start = Instant::now();
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let load = {
            let samples = Arc::clone(&samples);
            let config = client_config(&ca, &[b"http/1.1"]);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                let mut requests = tokio::task::JoinSet::new();
                for _ in 0..600 {
                    tick.tick().await;
                    let (samples, config) = (Arc::clone(&samples), Arc::clone(&config));
                    requests.spawn(async move {
                        let at = start.elapsed();
                        let got = tls::get(tls, config, "app.test", "/")
                            .await
                            .map(|(answer, leaf, _)| (leaf, answer.status.as_u16()))
                            .map_err(|e| format!("{e:#}"));
                        samples.lock().unwrap().push((at, got));
                    });
                }
                while requests.join_next().await.is_some() {}
            })
        };
        let kept_alive = tokio::spawn(async move {
            let mut answered = 0;
            while start.elapsed() < Duration::from_millis(5500) {
                let req = http::Request::get("https://app.test/kept")
                    .body(http_body_util::Empty::<bytes::Bytes>::new())
                    .unwrap();
                let response = h2
                    .send_request(req)
                    .await
                    .expect("the kept connection serves");
                assert_eq!(response.status(), 200);
                answered += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answered
        });

        tokio::time::sleep_until(start + Duration::from_secs(1)).await;
        let rotated = start.elapsed();
        secret.publish(&second_pem.0, &second_pem.1);
        tokio::time::sleep_until(start + Duration::from_millis(3500)).await;
        let broke = start.elapsed();
        // A new certificate with another certificate's key.
        let (broken_cert, _) = pem(&broken);
        let (_, stranger_key) = pem(&stranger);
        secret.publish(&broken_cert, &stranger_key);
        // The same bad version again, a second later: nothing new to say.
        tokio::time::sleep_until(start + Duration::from_millis(4500)).await;
        secret.publish(&broken_cert, &stranger_key);
        load.await.unwrap();
        let answered = kept_alive.await.unwrap();

        let samples = std::mem::take(&mut *samples.lock().unwrap());
        assert_eq!(samples.len(), 600);
        let failed: Vec<_> = samples
            .iter()
            .filter(|(_, got)| !matches!(got, Ok((_, 200))))
            .collect();
        assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
        let which = |leaf: &rustls::pki_types::CertificateDer<'_>| {
            if leaf == first.0.der() {
                "first"
            } else if leaf == second.0.der() {
                "second"
            } else {
                "another"
            }
        };
        for (at, got) in samples.iter() {
            let Ok((leaf, _)) = got else { continue };
            let shown = which(leaf);
            let expected = if *at < rotated {
                "first"
            } else if *at >= rotated + Duration::from_secs(2) {
                // Broken or not, the second serves on.
                "second"
            } else {
                continue;
            };
            assert_eq!(
                shown, expected,
                "a handshake at {at:?} (rotated at {rotated:?}, broken at {broke:?})"
            );
        }
        let after = samples
            .iter()
            .filter(|(at, got)| {
                *at >= rotated && matches!(got, Ok((leaf, _)) if which(leaf) == "second")
            })
            .map(|(at, _)| *at)
            .min()
            .expect("the new certificate served");
        assert!(
            after - rotated < Duration::from_secs(2),
            "the new certificate served {:?} after the swap",
            after - rotated
        );
        assert!(
            answered > 50,
            "the kept connection answered {answered} times"
        );
        let cert = secret.dir.join("tls.crt").display().to_string();
        assert!(
            logged(&captured, &["certificate files changed", "app.test"]) >= 1
                && logged(
                    &captured,
                    &["certificate files refused", &format!("cert={cert}")]
                ) == 1,
            "one line for the rotation, one for the broken version:\n{}",
            captured.text()
        );
        node.stop().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_is_dropped_at_the_header_bound() {
    let ca = TestCa::new("stall CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let (node, tls) = start(
        &[leaf.table()],
        "header_timeout = \"1s\"",
        &route("app", "/", &[upstream.addr], ""),
    );
    let started = Instant::now();
    // A record header announcing a 512-byte ClientHello, and one byte of it.
    let mut stalled = TcpStream::connect(tls).await.unwrap();
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let silent = TcpStream::connect(tls).await.unwrap();
    for (what, mut stream) in [("stalled", stalled), ("silent", silent)] {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("the {what} handshake was not dropped within 5 s"));
        assert!(matches!(read, Ok(0) | Err(_)), "{what}: {read:?}");
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "dropped after {waited:?}, the bound is 1 s"
    );
    assert!(
        metrics(&node)
            .await
            .contains("picket_tls_handshakes_failed_total 2\n")
    );
    // A handshake that goes on is served.
    let (answer, _, _) = tls::get(tls, client_config(&ca, &[]), "app.test", "/")
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_count_against_the_connection_limit() {
    let ca = TestCa::new("limit CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let (node, tls) = start(
        &[leaf.table()],
        "max_connections = 2",
        &route("app", "/", &[upstream.addr], ""),
    );
    let config = client_config(&ca, &[b"http/1.1"]);
    // One TLS and one plain connection take both slots.
    let held_tls = connect(tls, "app.test", Arc::clone(&config)).await.unwrap();
    let held_plain = TcpStream::connect(node.proxy).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !metrics(&node)
        .await
        .contains("picket_client_connections 2\n")
    {
        assert!(Instant::now() < deadline, "{}", metrics(&node).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A third handshake waits in the backlog.
    let waiting = tokio::spawn(tls::get(tls, Arc::clone(&config), "app.test", "/"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "a third connection was served");
    let text = metrics(&node).await;
    assert!(
        text.contains("picket_connection_limit_reached_total 1\n"),
        "{text}"
    );
    // A slot frees: it is served.
    drop(held_plain);
    let (answer, _, _) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once a slot freed")
        .unwrap()
        .unwrap();
    assert_eq!(answer.status, 200);
    drop(held_tls);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificate_files_are_configuration_errors_with_their_place() {
    let ca = TestCa::new("config CA");
    let dir = tempfile::tempdir().unwrap();
    let good = ca.write_leaf(dir.path(), "good", &["app.test"]);
    let other = ca.write_leaf(dir.path(), "other", &["app.test"]);
    let (cert, key) = ca.leaf_expiring(&["app.test"], Some(now_unix() - 86_400));
    let expired = Leaf::write(dir.path(), "expired", &cert, &key, &ca.pem);
    let quoted = |path: &Path| format!("{:?}", path.display().to_string());
    let file = |cert: &Path, key: &Path| {
        format!(
            "[node]\nlisten_tls = \"127.0.0.1:0\"\n[[certificate]]\ncert = {}\nkey = {}\n\
             [[route]]\nname = \"app\"\nreplicas = [\"127.0.0.1:9\"]\n",
            quoted(cert),
            quoted(key)
        )
    };
    let missing = dir.path().join("missing.key");
    let cases = [
        (
            "mismatch",
            file(&good.cert, &other.key),
            "5:7",
            "does not match the certificate",
        ),
        (
            "expired",
            file(&expired.cert, &expired.key),
            "4:8",
            "the certificate expired on",
        ),
        (
            "a directory",
            file(dir.path(), &good.key),
            "4:8",
            "cannot read certificate",
        ),
        (
            "missing",
            file(&good.cert, &missing),
            "5:7",
            "cannot read key",
        ),
    ];
    for (what, text, place, reason) in &cases {
        let path = dir.path().join(format!("{what}.toml"));
        std::fs::write(&path, text).unwrap();
        let error = Config::load(&path).unwrap_err().to_string();
        let located = format!("{}:{place}: ", path.display());
        assert!(
            error.starts_with(&located) && error.contains(reason),
            "{what}: expected {located}… {reason}, got {error}"
        );
    }

    // A reload onto a bad certificate is refused the same way; the good
    // one serves on.
    let path = dir.path().join("picket.toml");
    std::fs::write(&path, file(&good.cert, &good.key)).unwrap();
    let node = TestNode::start_file(&path);
    let tls = node.tls.expect("an HTTPS listener");
    std::fs::write(&path, file(&good.cert, &other.key)).unwrap();
    match node.reload().await {
        Reload::Refused(error) => assert!(
            error.contains(":5:7: ") && error.contains("does not match"),
            "{error}"
        ),
        other => panic!("a bad certificate reloaded: {other:?}"),
    }
    let stream = connect(tls, "app.test", client_config(&ca, &[]))
        .await
        .unwrap();
    assert_eq!(shown(&stream).as_ref(), Some(&good.der));
    node.stop().await;
}

/// On a runtime that logs to this test alone: it counts its node's lines.
#[test]
fn expiry_shows_in_the_status_api_in_metrics_and_in_the_log() {
    let captured = Captured::default();
    let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
    runtime.block_on(async {
        let ca = TestCa::new("expiry CA");
        let dir = tempfile::tempdir().unwrap();
        let not_after = now_unix() + 10 * 86_400 + 3600;
        let (cert, key) = ca.leaf_expiring(&["soon.test"], Some(not_after));
        let soon = Leaf::write(dir.path(), "soon", &cert, &key, &ca.pem);
        let far = ca.write_leaf(dir.path(), "far", &["far.test"]);
        let (node, _) = start(&[soon.table(), far.table()], "", "");
        let (status, answer) = node.admin_json("/v1/node").await;
        assert_eq!(status, 200);
        let certificates = answer["certificates"].as_array().expect("certificates");
        assert_eq!(certificates.len(), 2, "{answer:#}");
        assert_eq!(certificates[0]["names"], serde_json::json!(["soon.test"]));
        assert_eq!(certificates[0]["days_to_expiry"], 10, "{answer:#}");
        assert_eq!(certificates[0]["not_after_unix_ms"], not_after * 1000);
        assert_eq!(certificates[1]["names"], serde_json::json!(["far.test"]));
        assert!(certificates[1]["days_to_expiry"].as_i64().unwrap() > 365 * 10);

        let text = metrics(&node).await;
        assert!(
            text.contains(&format!(
                "picket_certificate_expiry_seconds{{name=\"soon.test\"}} {not_after}\n"
            )),
            "{text}"
        );
        assert!(
            text.contains("picket_certificate_expiry_seconds{name=\"far.test\"} "),
            "{text}"
        );

        let soon_file = format!("cert={}", soon.cert.display());
        eventually("the expiry warned about", Duration::from_secs(5), || {
            logged(&captured, &["certificate expires soon", &soon_file]) == 1
        })
        .await;
        // Looked at again the same day: nothing more to say.
        assert_eq!(
            node.node()
                .certificates()
                .warn_expiring(picket::clock::now_unix()),
            0
        );
        assert_eq!(
            logged(&captured, &["certificate expires soon", &soon_file]),
            1
        );
        assert_eq!(
            logged(
                &captured,
                &[
                    "certificate expires soon",
                    &format!("cert={}", far.cert.display())
                ]
            ),
            0
        );
        node.stop().await;
    });
}

/// A ClientHello naming `name` as its server (SNI), byte for byte as
/// rustls writes one.
fn client_hello(name: &str) -> Vec<u8> {
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut connection = rustls::ClientConnection::new(inspecting_client(true), server).unwrap();
    let mut hello = Vec::new();
    connection.write_tls(&mut hello).unwrap();
    hello
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_write_the_log_through_the_tls_library() {
    let ca = TestCa::new("quiet CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let tls = SocketAddr::from(([127, 0, 0, 1], picket_tests::ports::free_port()));
    let node = picket_tests::process::NodeProcess::start_alone(
        &picket_tests::binaries::picket(),
        dir.path(),
        "quiet",
        &format!(
            "{}\n{}",
            leaf.table(),
            route("app", "/", &[upstream.addr], "")
        ),
        &[("PICKET_LISTEN_TLS", &tls.to_string())],
    );
    node.ready(Duration::from_secs(30)).await;
    // An IP address as SNI, which TLS forbids: rustls warns of it, once per
    // handshake, and ignores it.
    let hello = client_hello("app.test");
    let at = hello.windows(8).position(|w| w == b"app.test").unwrap();
    let mut bad = hello.clone();
    bad[at..at + 8].copy_from_slice(b"10.0.0.1");
    for _ in 0..20 {
        let mut stream = TcpStream::connect(tls).await.unwrap();
        stream.write_all(&bad).await.unwrap();
        // The server hello: the handshake went on, with the default.
        let mut head = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut head))
            .await
            .expect("a server hello within 5 s")
            .unwrap();
        assert_eq!(head[0], 0x16, "a handshake record");
    }
    let (answer, shown, _) = tls::get(tls, client_config(&ca, &[]), "app.test", "/")
        .await
        .unwrap();
    assert_eq!((answer.status, shown), (http::StatusCode::OK, leaf.der));
    let log = node.log_text();
    assert!(!log.contains("rustls"), "{log}");
    assert!(log.contains("node serving"), "the log is written: {log}");
}

/// Over TLS, ALPN decides the protocol: a connection that agreed on
/// HTTP/1.1, or on nothing, and then sends the HTTP/2 preface is refused
/// as a request line that does not parse, never served as HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_decides_an_http2_preface_after_http1_is_refused() {
    let ca = TestCa::new("ALPN CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "app", &["app.test"]);
    let upstream = Upstream::start("echo", Behaviour::Echo).await;
    let (node, tls) = start(
        &[leaf.table()],
        "",
        &route("app", "/", &[upstream.addr], ""),
    );
    for alpn in [&[&b"http/1.1"[..]][..], &[]] {
        let mut stream = connect(tls, "app.test", client_config(&ca, alpn))
            .await
            .expect("a handshake");
        assert_ne!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
        assert!(
            out.starts_with(b"HTTP/1.1 400 "),
            "ALPN {alpn:?}: {}",
            String::from_utf8_lossy(&out)
        );
    }
    assert_eq!(upstream.hits(), 0);
    node.stop().await;
}

/// A client of `ca`'s certificates whose only key exchange is `group`.
fn client_with_only(
    ca: &TestCa,
    group: &'static dyn rustls::crypto::SupportedKxGroup,
) -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).expect("the CA as a root");
    let provider = rustls::crypto::CryptoProvider {
        kx_groups: vec![group],
        ..rustls::crypto::aws_lc_rs::default_provider()
    };
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    std::sync::Arc::new(config)
}

/// The edge offers X25519MLKEM768 (post-quantum, hybrid) and prefers it,
/// and keeps the classical groups for older clients: a client offering
/// only the hybrid group, and one offering only X25519, are both served,
/// each with its group; a client offering both gets the hybrid one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_prefers_post_quantum_key_exchange_and_keeps_x25519() {
    use rustls::crypto::aws_lc_rs::kx_group::{X25519, X25519MLKEM768};
    let ca = TestCa::new("kx CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "edge", &["kx.test"]);
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let (node, tls) = start(
        &[leaf.table()],
        "",
        &route("app", "/", &[upstream.addr], ""),
    );
    let cases = [
        (client_with_only(&ca, X25519MLKEM768), "X25519MLKEM768"),
        (client_with_only(&ca, X25519), "X25519"),
        (client_config(&ca, &[b"http/1.1"]), "X25519MLKEM768"),
    ];
    for (config, expected) in cases {
        let mut stream = connect(tls, "kx.test", config).await.expect("a handshake");
        let group = stream
            .get_ref()
            .1
            .negotiated_key_exchange_group()
            .map(|g| format!("{:?}", g.name()));
        assert_eq!(group.as_deref(), Some(expected));
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: kx.test\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    node.stop().await;
}

/// `[node] tls_groups` narrows the key exchange: a node that offers only
/// X25519 serves a client of X25519 and refuses one of the hybrid alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_groups_narrow_what_the_edge_offers() {
    use rustls::crypto::aws_lc_rs::kx_group::{X25519, X25519MLKEM768};
    let ca = TestCa::new("groups CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "edge", &["groups.test"]);
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let (node, tls) = start(
        &[leaf.table()],
        "tls_groups = [\"X25519\"]",
        &route("app", "/", &[upstream.addr], ""),
    );
    let stream = connect(tls, "groups.test", client_with_only(&ca, X25519))
        .await
        .expect("X25519 is offered");
    let group = stream
        .get_ref()
        .1
        .negotiated_key_exchange_group()
        .map(|g| format!("{:?}", g.name()));
    assert_eq!(group.as_deref(), Some("X25519"));
    let refused = connect(tls, "groups.test", client_with_only(&ca, X25519MLKEM768)).await;
    assert!(refused.is_err(), "the hybrid group alone was served");
    node.stop().await;
}
