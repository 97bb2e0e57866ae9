//! Every byte, and what happened to it (DESIGN.md): bodies of many sizes,
//! framed every way and written whole, in random pieces with pauses, head
//! apart from body, or a byte at a time, cross one node from every client
//! protocol (HTTP/1.0, HTTP/1.1, h2c, HTTP/1.1 and HTTP/2 over TLS) to
//! every replica protocol (HTTP/1.1, h2c, h2 over TLS) and back.
//!
//! The far end hashes what arrived and the case compares length and
//! SHA-256 with what was sent (a request body's digest comes back in the
//! replica's `x-got-*` headers), and the trailer that carries the body's
//! digest where the client's protocol has room for it. Then the
//! connection must carry another request (HTTP/1.1, HTTP/2), or be closed
//! by the node with nothing more written (HTTP/1.0): a body cut short, a
//! wrong byte, stray bytes after an answer or a keep-alive connection
//! left unusable each fail the case.
//!
//! The matrix is a table built by loops over the dimensions; the cases
//! run a bounded number at a time, and a failure lists every failing case
//! (client, replica, framing, size, pattern, seed) before the test fails.
//!
//!   cargo test -p picket-tests --test integration every_byte -- --test-threads=2

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use anyhow::{Context, anyhow, ensure};
use futures_util::StreamExt;
use picket_tests::bodies::client::{Call, Conn, Front, Protocol, Received, Upload};
use picket_tests::bodies::replica::Replica;
use picket_tests::bodies::{Answer, Framing, Pattern, Summary, TRAILER, payload};
use picket_tests::node::{TestNode, route};
use picket_tests::tls::TestCa;
use tokio::time::Instant;

/// 0, 1, a small body written a byte at a time, then each side of the
/// node's buffer sizes: its read reserve (1 KiB), the sink of a lingering
/// close (4 KiB), its read chunk (8 KiB), the spare buffers and HTTP/2's
/// frame (16 KiB), the largest head and the replay limit of a request
/// body (64 KiB); then 1 MiB.
const SIZES: [usize; 19] = [
    0,
    1,
    64,
    1023,
    1024,
    1025,
    4095,
    4096,
    4097,
    8191,
    8192,
    8193,
    16383,
    16384,
    16385,
    65535,
    65536,
    65537,
    1 << 20,
];
/// Bodies this large go once per pair of client and replica protocols,
/// one framing each, not through the whole matrix.
const HUGE: usize = 16 << 20;
/// The largest body written a byte at a time.
const BYTE_AT_A_TIME_UP_TO: usize = 64;
/// Cases under way at once.
const AT_ONCE: usize = 24;
/// The first seed; a case's is this plus its place in its table.
const SEED: u64 = 0x00b0_d1e5_0000;

const CLIENTS: [Protocol; 5] = [
    Protocol::Http10,
    Protocol::Http11,
    Protocol::H2c,
    Protocol::Http11Tls,
    Protocol::H2Tls,
];

/// What a replica speaks, and its route on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Http1,
    H2c,
    H2Tls,
}

const REPLICAS: [Side; 3] = [Side::Http1, Side::H2c, Side::H2Tls];

impl Side {
    fn route(self) -> &'static str {
        match self {
            Side::Http1 => "/h1",
            Side::H2c => "/h2c",
            Side::H2Tls => "/h2",
        }
    }

    /// How it frames the bodies it answers.
    fn answer_framings(self) -> &'static [Framing] {
        match self {
            Side::Http1 => &[
                Framing::Length,
                Framing::Chunked,
                Framing::ChunkedTrailers,
                Framing::UntilClose,
                Framing::Head,
                Framing::NoContent,
                Framing::NotModified,
            ],
            Side::H2c | Side::H2Tls => &[
                Framing::Length,
                Framing::NoLength,
                Framing::Trailers,
                Framing::LengthTrailers,
            ],
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Http1 => "HTTP/1.1 replica",
            Side::H2c => "h2c replica",
            Side::H2Tls => "h2+TLS replica",
        })
    }
}

/// How `client` frames the bodies it sends.
fn upload_framings(client: Protocol) -> &'static [Framing] {
    match client {
        Protocol::Http10 => &[Framing::Length],
        Protocol::Http11 | Protocol::Http11Tls => &[
            Framing::Length,
            Framing::Chunked,
            Framing::ChunkedTrailers,
            Framing::Continue,
        ],
        Protocol::H2c | Protocol::H2Tls => &[Framing::Length, Framing::NoLength, Framing::Trailers],
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// The replica sends the body.
    Answer,
    /// The client sends the body.
    Upload,
}

/// One row of the matrix.
#[derive(Debug, Clone, Copy)]
struct Case {
    direction: Direction,
    client: Protocol,
    replica: Side,
    framing: Framing,
    size: usize,
    /// How the sending side writes.
    pattern: Pattern,
    seed: u64,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arrow = match self.direction {
            Direction::Answer => "<-",
            Direction::Upload => "->",
        };
        write!(
            f,
            "{} {arrow} {}, {}, {} bytes, {}, seed {}",
            self.client, self.replica, self.framing, self.size, self.pattern, self.seed
        )
    }
}

fn patterns(size: usize) -> Vec<Pattern> {
    let mut patterns = vec![Pattern::Whole, Pattern::Pieces, Pattern::HeadThenBody];
    if size <= BYTE_AT_A_TIME_UP_TO {
        patterns.push(Pattern::ByteAtATime);
    }
    patterns
}

/// Numbers the cases' seeds in table order.
fn seeded(mut cases: Vec<Case>) -> Vec<Case> {
    for (i, case) in cases.iter_mut().enumerate() {
        case.seed = SEED + i as u64;
    }
    cases
}

fn case(
    direction: Direction,
    client: Protocol,
    replica: Side,
    framing: Framing,
    size: usize,
    pattern: Pattern,
) -> Case {
    Case {
        direction,
        client,
        replica,
        framing,
        size,
        pattern,
        seed: 0,
    }
}

/// A [`HUGE`] body for each pair of client and replica protocols, framed
/// in turn each way `framings` gives for the pair, written in pieces or
/// whole by turns.
fn huge(
    direction: Direction,
    framings: impl Fn(Protocol, Side) -> &'static [Framing],
) -> Vec<Case> {
    let mut cases = Vec::new();
    for client in CLIENTS {
        for replica in REPLICAS {
            let i = cases.len();
            let framings: Vec<Framing> = framings(client, replica)
                .iter()
                .copied()
                .filter(|f| !f.is_bodiless())
                .collect();
            let framing = framings[i % framings.len()];
            let pattern = [Pattern::Pieces, Pattern::Whole, Pattern::HeadThenBody][i % 3];
            cases.push(case(direction, client, replica, framing, HUGE, pattern));
        }
    }
    cases
}

/// Bodies from replicas to clients.
fn answer_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for client in CLIENTS {
        for replica in REPLICAS {
            for &framing in replica.answer_framings() {
                // A 204 or a 304 has no body whatever its size.
                let sizes: &[usize] = match framing {
                    Framing::NoContent | Framing::NotModified => &[0],
                    _ => &SIZES,
                };
                for &size in sizes {
                    for pattern in patterns(size) {
                        cases.push(case(
                            Direction::Answer,
                            client,
                            replica,
                            framing,
                            size,
                            pattern,
                        ));
                    }
                }
            }
        }
    }
    cases.extend(huge(Direction::Answer, |_, replica| {
        replica.answer_framings()
    }));
    seeded(cases)
}

/// Bodies from clients to replicas.
fn upload_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for client in CLIENTS {
        for replica in REPLICAS {
            for &framing in upload_framings(client) {
                for size in SIZES {
                    for pattern in patterns(size) {
                        cases.push(case(
                            Direction::Upload,
                            client,
                            replica,
                            framing,
                            size,
                            pattern,
                        ));
                    }
                }
            }
        }
    }
    cases.extend(huge(Direction::Upload, |client, _| upload_framings(client)));
    seeded(cases)
}

impl Case {
    fn call(&self) -> Call {
        match self.direction {
            Direction::Answer => Call {
                path: self.answer().path(self.replica.route()),
                head_request: self.framing == Framing::Head,
                upload: None,
            },
            Direction::Upload => Call {
                path: format!("{}/take", self.replica.route()),
                head_request: false,
                upload: Some(Upload {
                    framing: self.framing,
                    pattern: self.pattern,
                    size: self.size,
                    seed: self.seed,
                }),
            },
        }
    }

    fn answer(&self) -> Answer {
        Answer {
            framing: self.framing,
            pattern: self.pattern,
            size: self.size,
            seed: self.seed,
        }
    }

    /// What was sent, by either side.
    fn sent(&self) -> Summary {
        Summary::of(&payload(self.seed, self.size))
    }

    /// How long the case may take, on a loaded machine.
    fn bound(&self) -> Duration {
        Duration::from_secs(15 + 2 * (self.size >> 20) as u64)
    }

    async fn run(self, front: Front) -> anyhow::Result<()> {
        let bound = self.bound();
        tokio::time::timeout(bound, self.exchange(&front))
            .await
            .map_err(|_| anyhow!("not over within {bound:?}"))?
    }

    async fn exchange(&self, front: &Front) -> anyhow::Result<()> {
        let mut conn = Conn::open(self.client, front).await.context("connect")?;
        let got = conn.call(&self.call()).await?;
        match self.direction {
            Direction::Answer => self.check_answer(&got)?,
            Direction::Upload => self.check_upload(&got)?,
        }
        if self.client == Protocol::Http10 {
            return conn
                .expect_close(Duration::from_secs(5))
                .await
                .context("an HTTP/1.0 connection after its answer");
        }
        // The connection carries the next request, its answer whole.
        let next = Answer {
            framing: Framing::Length,
            pattern: Pattern::Whole,
            size: 100,
            seed: !self.seed,
        };
        let call = Call {
            path: next.path(self.replica.route()),
            head_request: false,
            upload: None,
        };
        let got = conn
            .call(&call)
            .await
            .context("the next request on the connection")?;
        ensure!(
            got.status == 200 && got.body == Summary::of(&payload(next.seed, next.size)),
            "the next request on the connection: {} with {}: {:?}",
            got.status,
            got.body,
            got.preview
        );
        Ok(())
    }

    fn check_answer(&self, got: &Received) -> anyhow::Result<()> {
        ensure!(
            got.status == self.framing.status(),
            "status {} (not {}): {:?}",
            got.status,
            self.framing.status(),
            got.preview
        );
        let sent = self.sent();
        let want = if self.framing.is_bodiless() {
            Summary::of(b"")
        } else {
            sent.clone()
        };
        ensure!(got.body == want, "got {} of {}", got.body, want);
        if self.framing == Framing::Head
            && let Some(length) = got.get("content-length")
        {
            ensure!(
                length == self.size.to_string(),
                "HEAD declared {length} bytes, not {}",
                self.size
            );
        }
        // Trailers reach a client of HTTP/2, or of HTTP/1.1 when the body
        // has no length (so goes chunked); a body with a length has no
        // room for them over HTTP/1, nor has HTTP/1.0 at all.
        let room = match self.client {
            Protocol::Http10 => false,
            Protocol::Http11 | Protocol::Http11Tls => self.framing != Framing::LengthTrailers,
            Protocol::H2c | Protocol::H2Tls => true,
        };
        if self.framing.has_trailer() && room {
            ensure!(
                got.trailer(TRAILER) == Some(sent.sha256.as_str()),
                "trailer {TRAILER}: {:?} (chunked: {}), trailers {:?}",
                got.trailer(TRAILER),
                got.chunked,
                got.trailers
            );
        }
        Ok(())
    }

    fn check_upload(&self, got: &Received) -> anyhow::Result<()> {
        ensure!(
            got.status == 200,
            "status {}: {:?}",
            got.status,
            got.preview
        );
        let sent = self.sent();
        let arrived = (got.get("x-got-length"), got.get("x-got-sha256"));
        ensure!(
            arrived
                == (
                    Some(sent.len.to_string().as_str()),
                    Some(sent.sha256.as_str())
                ),
            "the replica got {:?} bytes, sha256 {:?}, of {}",
            arrived.0,
            arrived.1,
            sent
        );
        if self.framing.has_trailer() {
            ensure!(
                got.get("x-got-trailer") == Some(sent.sha256.as_str()),
                "the replica got trailer {:?}",
                got.get("x-got-trailer")
            );
        }
        Ok(())
    }
}

/// A node with an HTTPS listener, and a replica of each protocol behind
/// a route of its own.
struct World {
    node: TestNode,
    front: Front,
    _replicas: [Replica; 3],
    _dir: tempfile::TempDir,
}

async fn world() -> World {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let ca = TestCa::new("every byte CA");
    let dir = tempfile::tempdir().expect("a directory");
    let leaf = ca.write_leaf(dir.path(), "node", &["node.test"]);
    let ca_file = ca.write_pem(dir.path()).display().to_string();
    let http1 = Replica::http1().await;
    let h2c = Replica::h2(None).await;
    let h2 = Replica::h2(Some(ca.server_config_alpn(&["replica.test"], &[b"h2"]))).await;
    // The body's digest travels as a trailer of the test's own name,
    // which every route admits both ways.
    let admitting = format!(
        "[global]\nrequest_headers = {{ trailers = [{TRAILER:?}] }}\n\
         response_headers = {{ trailers = [{TRAILER:?}] }}\n"
    );
    let node = TestNode::start(&format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n{admitting}{}{}{}{}",
        leaf.table(),
        route("h1", Side::Http1.route(), &[http1.addr], ""),
        route("h2c", Side::H2c.route(), &[h2c.addr], "protocol = \"h2c\""),
        route(
            "h2",
            Side::H2Tls.route(),
            &[h2.addr],
            &format!(
                "protocol = \"h2\"\ntls = {{ ca = {ca_file:?}, server_name = \"replica.test\" }}"
            ),
        ),
    ));
    let front = Front::new(
        node.proxy,
        node.tls.expect("an HTTPS listener"),
        "node.test",
        &ca,
    );
    World {
        node,
        front,
        _replicas: [http1, h2c, h2],
        _dir: dir,
    }
}

/// Runs `cases` [`AT_ONCE`] at a time; fails listing every failing case.
async fn run(what: &str, cases: Vec<Case>) {
    let world = world().await;
    let started = Instant::now();
    let total = cases.len();
    let mut failures: Vec<(Case, String)> = futures_util::stream::iter(cases)
        .map(|case| {
            let front = world.front.clone();
            async move {
                let outcome = tokio::spawn(case.run(front))
                    .await
                    .unwrap_or_else(|panic| Err(anyhow!("panicked: {panic}")));
                (case, outcome)
            }
        })
        .buffer_unordered(AT_ONCE)
        .filter_map(
            |(case, outcome)| async move { outcome.err().map(|e| (case, format!("{e:#}"))) },
        )
        .collect()
        .await;
    let took = started.elapsed();
    world.node.stop().await;
    eprintln!(
        "{what}: {total} cases in {took:.1?}, {} failed",
        failures.len()
    );
    if failures.is_empty() {
        return;
    }
    failures.sort_by_key(|(case, _)| case.seed);
    for (case, error) in &failures {
        eprintln!("FAILED {case}: {error}");
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for (case, _) in &failures {
        *kinds
            .entry(format!(
                "{} <-> {}, {}",
                case.client, case.replica, case.framing
            ))
            .or_default() += 1;
    }
    eprintln!("{what}: failures by client, replica and framing:");
    for (kind, n) in &kinds {
        eprintln!("  {n:5}  {kind}");
    }
    panic!(
        "{what}: {} of {total} cases failed (listed above)",
        failures.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_arrives_whole() {
    run("answers", answer_cases()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upload_arrives_whole() {
    run("uploads", upload_cases()).await;
}

#[test]
fn the_matrix_covers_every_pair_and_size() {
    let answers = answer_cases();
    let uploads = upload_cases();
    for cases in [&answers, &uploads] {
        for client in CLIENTS {
            for replica in REPLICAS {
                let sizes: Vec<usize> = cases
                    .iter()
                    .filter(|c| c.client == client && c.replica == replica)
                    .map(|c| c.size)
                    .collect();
                for size in SIZES {
                    assert!(sizes.contains(&size), "{client} {replica} {size}");
                }
            }
            for replica in REPLICAS {
                assert!(
                    cases
                        .iter()
                        .any(|c| (c.client, c.replica, c.size) == (client, replica, HUGE))
                );
            }
        }
        let mut seeds: Vec<u64> = cases.iter().map(|c| c.seed).collect();
        seeds.dedup();
        assert_eq!(seeds.len(), cases.len(), "every case its own seed");
    }
}
