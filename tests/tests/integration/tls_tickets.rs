//! Session tickets resume on every node of a cluster: each node derives
//! its ticket keys from the cluster key, so a TLS 1.3 client whose next
//! connection lands on another node skips the full handshake there. A
//! node of another cluster, or one without a cluster key, cannot read
//! them; a ticket older than two periods (12 h each) is a full handshake
//! everywhere. A TLS 1.2 client gets no ticket (one would hold its
//! session's master secret under the cluster key): it resumes by session
//! ID, on the node that keeps its session.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use picket::edge::tickets::{PERIOD_SECS, WallClock};
use picket_tests::client;
use picket_tests::cluster::{key_file, section};
use picket_tests::node::{TestNode, route};
use picket_tests::tls::{TestCa, connect};
use picket_tests::upstream::{Behaviour, Upstream};
use rustls::HandshakeKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NAME: &str = "tickets.test";

/// The TLS versions whose clients get tickets.
const VERSIONS: [(&str, &rustls::SupportedProtocolVersion); 1] =
    [("TLS 1.3", &rustls::version::TLS13)];

/// A client of `ca` that speaks `version` only and keeps the sessions it
/// is given, as browsers and HTTP libraries do: one cache per client.
fn resuming_client(
    ca: &TestCa,
    version: &'static rustls::SupportedProtocolVersion,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).expect("the CA as a root");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .expect("the version")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::in_memory_sessions(64)
        .tls12_resumption(rustls::client::Tls12Resumption::SessionIdOrTickets);
    Arc::new(config)
}

/// One request on a new connection to `addr`, read to its end (so that
/// the tickets sent after a TLS 1.3 handshake reach the client); the kind
/// of handshake it took.
async fn visit(addr: SocketAddr, client: &Arc<rustls::ClientConfig>) -> HandshakeKind {
    let mut stream = connect(addr, NAME, Arc::clone(client))
        .await
        .expect("a handshake");
    let kind = stream
        .get_ref()
        .1
        .handshake_kind()
        .expect("a handshake kind");
    let request = format!("GET / HTTP/1.1\r\nhost: {NAME}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    kind
}

/// `client` visits each node of `steps` in turn, each visit taking the
/// handshake the step says.
async fn walk(
    client: &Arc<rustls::ClientConfig>,
    version: &str,
    steps: &[(SocketAddr, HandshakeKind, &str)],
) {
    for (addr, expected, what) in steps {
        assert_eq!(visit(*addr, client).await, *expected, "{version}: {what}");
    }
}

/// A node serving HTTPS for [`NAME`] with `leaf`, in a cluster of the key
/// in `key` (none: no cluster), its ticket periods read from `clock`.
fn node(
    leaf: &str,
    upstream: SocketAddr,
    key: Option<&Path>,
    clock: Option<WallClock>,
) -> (TestNode, SocketAddr) {
    let cluster = key.map_or(String::new(), |key| {
        section(key, &[], Duration::from_millis(200))
    });
    let text = format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n{leaf}\n{}\n{cluster}",
        route("app", "/", &[upstream], "")
    );
    let node = TestNode::start_with(&text, |options| options.ticket_clock = clock);
    let tls = node.tls.expect("an HTTPS listener");
    (node, tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_from_one_node_resumes_on_another_and_only_in_its_cluster() {
    let ca = TestCa::new("tickets CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "edge", &[NAME]).table();
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let ours = key_file(dir.path(), "ours.key");
    let theirs = key_file(dir.path(), "theirs.key");
    let (one, at_one) = node(&leaf, upstream.addr, Some(&ours), None);
    let (two, at_two) = node(&leaf, upstream.addr, Some(&ours), None);
    let (other, at_other) = node(&leaf, upstream.addr, Some(&theirs), None);
    let (alone, at_alone) = node(&leaf, upstream.addr, None, None);
    use HandshakeKind::{Full, Resumed};
    for (version, protocol) in VERSIONS {
        // Node 1's ticket resumes on node 2, and node 2's on node 1.
        let steps = [
            (at_one, Full, "first visit"),
            (at_two, Resumed, "node 1 to 2"),
            (at_one, Resumed, "node 2 to 1"),
        ];
        walk(&resuming_client(&ca, protocol), version, &steps).await;
        // Another cluster's node cannot read node 1's ticket.
        let steps = [
            (at_one, Full, "first visit"),
            (at_other, Full, "another cluster"),
        ];
        walk(&resuming_client(&ca, protocol), version, &steps).await;
        // Nor a node without a cluster key, whose own tickets resume on
        // itself.
        let steps = [
            (at_one, Full, "first visit"),
            (at_alone, Full, "no cluster key"),
            (at_alone, Resumed, "its own"),
        ];
        walk(&resuming_client(&ca, protocol), version, &steps).await;
    }
    // A TLS 1.2 client resumes on the node that keeps its session, by its
    // ID, and nowhere else: it holds no ticket the cluster key opens.
    let steps = [
        (at_one, Full, "first visit"),
        (at_one, Resumed, "the same node, by session ID"),
        (at_two, Full, "another node: no ticket to show"),
        (at_two, Resumed, "that node's own session"),
    ];
    walk(
        &resuming_client(&ca, &rustls::version::TLS12),
        "TLS 1.2",
        &steps,
    )
    .await;
    // Each node counts its handshakes by kind.
    let metrics = |node: &TestNode| {
        let admin = node.admin;
        async move {
            client::get(admin, "admin", "/metrics")
                .await
                .expect("metrics")
                .text()
        }
    };
    let at_two = metrics(&two).await;
    assert!(
        at_two.contains("picket_tls_handshakes_total{kind=\"resumed\"} 2\n"),
        "{at_two}"
    );
    assert!(
        at_two.contains("picket_tls_handshakes_total{kind=\"full\"} 1\n"),
        "{at_two}"
    );
    let at_one = metrics(&one).await;
    assert!(
        at_one.contains("picket_tls_handshakes_total{kind=\"full\"} 4\n"),
        "{at_one}"
    );
    assert!(
        at_one.contains("picket_tls_handshakes_total{kind=\"resumed\"} 2\n"),
        "{at_one}"
    );
    for node in [one, two, other, alone] {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_older_than_two_periods_gets_a_full_handshake() {
    let ca = TestCa::new("ticket periods CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "edge", &[NAME]).table();
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let key = key_file(dir.path(), "cluster.key");
    let now = Arc::new(AtomicU64::new(
        u64::try_from(picket::clock::now_unix()).expect("after 1970"),
    ));
    let clock = {
        let now = Arc::clone(&now);
        WallClock::new(move || now.load(Ordering::Relaxed))
    };
    let (one, at_one) = node(&leaf, upstream.addr, Some(&key), Some(clock.clone()));
    let (two, at_two) = node(&leaf, upstream.addr, Some(&key), Some(clock));
    for (version, protocol) in VERSIONS {
        let start = now.load(Ordering::Relaxed);
        let issued = start - start % PERIOD_SECS;
        let (kept, late) = (
            resuming_client(&ca, protocol),
            resuming_client(&ca, protocol),
        );
        assert_eq!(visit(at_one, &kept).await, HandshakeKind::Full, "{version}");
        assert_eq!(visit(at_one, &late).await, HandshakeKind::Full, "{version}");
        // The last second of the next period: the ticket still opens.
        now.store(issued + 2 * PERIOD_SECS - 1, Ordering::Relaxed);
        assert_eq!(
            visit(at_two, &kept).await,
            HandshakeKind::Resumed,
            "{version}: next period"
        );
        // Two periods after its own began: a full handshake.
        now.store(issued + 2 * PERIOD_SECS, Ordering::Relaxed);
        assert_eq!(
            visit(at_two, &late).await,
            HandshakeKind::Full,
            "{version}: two periods on"
        );
        assert_eq!(
            visit(at_one, &late).await,
            HandshakeKind::Resumed,
            "{version}: its new ticket"
        );
        now.store(start, Ordering::Relaxed);
    }
    one.stop().await;
    two.stop().await;
}

/// What `openssl s_client` (a client that takes a TLS 1.2 ticket when
/// offered one, and says so) sees: no ticket for TLS 1.2, whatever the
/// cluster key; the session resumes by its ID on the node that keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_gets_no_tls12_ticket_and_resumes_by_session_id() {
    if !picket_tests::require("openssl", picket_tests::has_program("openssl")) {
        return;
    }
    let ca = TestCa::new("openssl CA");
    let dir = tempfile::tempdir().unwrap();
    let leaf = ca.write_leaf(dir.path(), "edge", &[NAME]).table();
    let upstream = Upstream::start("app", Behaviour::Status(200)).await;
    let key = key_file(dir.path(), "cluster.key");
    let (one, at_one) = node(&leaf, upstream.addr, Some(&key), None);
    let session = dir.path().join("session.pem");
    let s_client = |session_flag: &str| {
        let output = std::process::Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &at_one.to_string(),
                "-servername",
                NAME,
            ])
            .args(["-tls1_2", session_flag])
            .arg(&session)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let first = s_client("-sess_out");
    assert!(first.contains("Protocol  : TLSv1.2"), "{first}");
    assert!(!first.contains("TLS session ticket:"), "a ticket: {first}");
    let again = s_client("-sess_in");
    assert!(again.contains("Reused, TLSv1.2"), "{again}");
    one.stop().await;
}
