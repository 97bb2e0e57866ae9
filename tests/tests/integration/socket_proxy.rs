//! `picket socket-proxy` in front of a fake engine on a Unix socket: reads
//! of the allow-list pass, everything else is refused before it reaches the
//! engine, and the event stream comes through as it is written. Clients are
//! bounded: a head must come within the header-read timeout, an idle
//! keep-alive connection is closed, connections beyond the limit wait to
//! be accepted, and a response in progress is never cut.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use picket::socket_proxy::{Bounds, SocketProxy};
use picket_tests::client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the fake engine was asked, and the writer of its event stream.
struct Engine {
    seen: Arc<Mutex<Vec<String>>>,
    events: mpsc::UnboundedReceiver<mpsc::UnboundedSender<Bytes>>,
}

fn fake_engine(socket: &Path) -> Engine {
    let listener = UnixListener::bind(socket).unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (streams, events) = mpsc::unbounded_channel();
    let recorded = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (seen, streams) = (Arc::clone(&recorded), streams.clone());
            let service = service_fn(move |req: Request<Incoming>| {
                seen.lock()
                    .unwrap()
                    .push(format!("{} {}", req.method(), req.uri()));
                let body: BoxBody<Bytes, Infallible> = if req.uri().path().ends_with("/events") {
                    // The test writes the stream, one event at a time.
                    let (writer, chunks) = mpsc::unbounded_channel::<Bytes>();
                    let _ = streams.send(writer);
                    let frames = tokio_stream_of(chunks)
                        .map(|chunk| Ok::<_, Infallible>(Frame::data(chunk)));
                    BoxBody::new(StreamBody::new(frames))
                } else {
                    BoxBody::new(Full::new(Bytes::from_static(b"[]")))
                };
                async move { Ok::<_, Infallible>(Response::new(body)) }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    Engine { seen, events }
}

fn tokio_stream_of(
    mut chunks: mpsc::UnboundedReceiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| chunks.poll_recv(cx))
}

async fn proxy(socket: &Path) -> (std::net::SocketAddr, picket::shutdown::Trigger) {
    let (addr, trigger, _) = bounded_proxy(socket, Bounds::default()).await;
    (addr, trigger)
}

async fn bounded_proxy(
    socket: &Path,
    bounds: Bounds,
) -> (
    std::net::SocketAddr,
    picket::shutdown::Trigger,
    Arc<SocketProxy>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (trigger, shutdown) = picket::shutdown::channel();
    let proxy = SocketProxy::new(socket.to_path_buf(), bounds);
    tokio::spawn(picket::socket_proxy::serve(
        listener,
        Arc::clone(&proxy),
        shutdown,
    ));
    (addr, trigger, proxy)
}

fn bounds(header_read: Duration, idle: Duration, max_connections: usize) -> Bounds {
    Bounds {
        header_read,
        idle,
        max_connections: NonZeroUsize::new(max_connections).unwrap(),
    }
}

/// Sends `GET path` on a kept-alive connection and reads the fake engine's
/// `[]` answer, within `within`.
async fn ask(stream: &mut TcpStream, path: &str, within: Duration) -> Result<String, String> {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: docker\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 1024];
        while !answer.ends_with(b"\r\n\r\n[]") {
            match stream.read(&mut buf).await {
                Ok(0) => return Err("closed".to_string()),
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    })
    .await;
    match read {
        Ok(Ok(())) => Ok(String::from_utf8_lossy(&answer).into_owned()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}

/// Reads until the proxy closes `stream`; `None` if it is still open after
/// `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<()> {
    tokio::time::timeout(within, async {
        let mut buf = [0u8; 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

#[tokio::test]
async fn reads_pass_and_everything_else_is_refused_before_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let engine = fake_engine(&socket);
    let (addr, _trigger) = proxy(&socket).await;

    for path in [
        "/v1.47/containers/json?all=1",
        "/containers/abc123/json",
        "/version",
        "/v1.47/tasks",
        "/nodes/n1",
    ] {
        let answer = client::get(addr, "docker", path).await.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        assert_eq!(answer.text(), "[]", "{path}: the engine's own answer");
    }
    let passed = engine.seen.lock().unwrap().len();
    assert_eq!(passed, 5);

    let refused = [
        (Method::POST, "/v1.47/containers/abc123/stop"),
        (Method::POST, "/containers/create"),
        (Method::DELETE, "/containers/abc123"),
        (Method::PUT, "/containers/abc123/archive"),
        (Method::POST, "/containers/abc123/exec"),
        (Method::GET, "/containers/abc123/logs"),
        (Method::GET, "/containers/abc123/archive?path=/etc"),
        (Method::GET, "/secrets"),
        (Method::GET, "/v1.47/../secrets"),
        (Method::GET, "/images/json"),
    ];
    for (method, path) in refused {
        let answer = client::send(
            addr,
            client::request(method.clone(), "docker", path, Bytes::new()),
        )
        .await
        .unwrap();
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{method} {path}");
        assert!(
            answer.text().contains("read-only"),
            "{method} {path}: {}",
            answer.text()
        );
    }
    assert_eq!(
        engine.seen.lock().unwrap().len(),
        passed,
        "no refused request reached the engine: {:?}",
        engine.seen.lock().unwrap()
    );
}

#[tokio::test]
async fn the_event_stream_is_not_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let mut engine = fake_engine(&socket);
    let (addr, _trigger) = proxy(&socket).await;

    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let response = tokio::spawn(sender.send_request(client::request(
        Method::GET,
        "docker",
        "/v1.47/events?filters=%7B%7D",
        Bytes::new(),
    )));
    let writer = tokio::time::timeout(Duration::from_secs(5), engine.events.recv())
        .await
        .unwrap()
        .unwrap();
    writer
        .send(Bytes::from_static(
            b"{\"Type\":\"container\",\"Action\":\"start\"}\n",
        ))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    for action in ["start", "die", "destroy"] {
        if action != "start" {
            writer
                .send(Bytes::from(format!(
                    "{{\"Type\":\"container\",\"Action\":\"{action}\"}}\n"
                )))
                .unwrap();
        }
        // Each event arrives while the stream stays open.
        let frame = tokio::time::timeout(Duration::from_secs(2), body.frame())
            .await
            .expect("the event, at once")
            .unwrap()
            .unwrap();
        let data = frame.into_data().unwrap();
        assert!(String::from_utf8_lossy(&data).contains(action), "{data:?}");
    }
}

#[tokio::test]
async fn a_head_not_complete_within_the_header_timeout_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let engine = fake_engine(&socket);
    let header_read = Duration::from_secs(1);
    // An idle timeout far away: what closes these is the header timeout.
    let (addr, _trigger, _) =
        bounded_proxy(&socket, bounds(header_read, Duration::from_secs(60), 16)).await;

    // Half a head, then nothing.
    let started = Instant::now();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /version HTTP/1.1\r\nHost: docker\r\n")
        .await
        .unwrap();
    // A head trickled a byte at a time: each byte is not a new lease.
    let trickle = TcpStream::connect(addr).await.unwrap();
    let (mut trickle_read, mut trickle_write) = trickle.into_split();
    tokio::spawn(async move {
        let _ = trickle_write
            .write_all(b"GET /version HTTP/1.1\r\nX-Slow: ")
            .await;
        while trickle_write.write_all(b"a").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    assert!(
        closed_within(&mut half, Duration::from_secs(10))
            .await
            .is_some(),
        "half a head is cut at the header timeout"
    );
    assert!(
        started.elapsed() >= header_read,
        "not before the header timeout: {:?}",
        started.elapsed()
    );
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 64];
        loop {
            match trickle_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "a trickled head is cut at the header timeout"
    );
    assert!(
        engine.seen.lock().unwrap().is_empty(),
        "nothing of an unfinished head reached the engine"
    );
    // The proxy itself is fine.
    let answer = client::get(addr, "docker", "/version").await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let _engine = fake_engine(&socket);
    // A header timeout far away: what closes this is the idle timeout.
    let (addr, _trigger, _) = bounded_proxy(
        &socket,
        bounds(Duration::from_secs(60), Duration::from_secs(1), 16),
    )
    .await;

    let mut conn = TcpStream::connect(addr).await.unwrap();
    let within = Duration::from_secs(5);
    ask(&mut conn, "/version", within).await.unwrap();
    // Kept alive: the next request on the same connection is answered.
    ask(&mut conn, "/info", within).await.unwrap();
    assert!(
        closed_within(&mut conn, Duration::from_secs(10))
            .await
            .is_some(),
        "an idle keep-alive connection is closed at the idle timeout"
    );
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let engine = fake_engine(&socket);
    let long = Duration::from_secs(60);
    let (addr, _trigger, proxy) = bounded_proxy(&socket, bounds(long, long, 2)).await;
    let within = Duration::from_secs(5);

    let mut first = TcpStream::connect(addr).await.unwrap();
    let mut second = TcpStream::connect(addr).await.unwrap();
    ask(&mut first, "/version", within).await.unwrap();
    ask(&mut second, "/version", within).await.unwrap();
    assert_eq!(proxy.limit_reached(), 1, "the limit, reached once");

    // The third connects (the listen backlog takes it) but is not served.
    let mut third = TcpStream::connect(addr).await.unwrap();
    let waiting = ask(&mut third, "/info", Duration::from_millis(500)).await;
    assert!(waiting.is_err(), "served beyond the limit: {waiting:?}");
    // The first two still work.
    ask(&mut first, "/nodes", within).await.unwrap();
    ask(&mut second, "/nodes", within).await.unwrap();
    assert!(
        !engine
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.ends_with("/info")),
        "the waiting client's request did not reach the engine"
    );

    // One closes: the third is accepted and its waiting request answered.
    drop(first);
    let mut answer = Vec::new();
    tokio::time::timeout(within, async {
        let mut buf = [0u8; 1024];
        while !answer.ends_with(b"\r\n\r\n[]") {
            let n = third.read(&mut buf).await.unwrap();
            assert_ne!(n, 0, "the third connection was closed, not served");
            answer.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the third connection served once the first closed");
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    assert_eq!(
        proxy.limit_reached(),
        1,
        "still the same episode at the limit: counted once"
    );
}

#[tokio::test]
async fn an_event_stream_outlasting_the_idle_timeout_is_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let mut engine = fake_engine(&socket);
    let short = Duration::from_secs(1);
    let (addr, _trigger, _) = bounded_proxy(&socket, bounds(short, short, 16)).await;

    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let response = tokio::spawn(sender.send_request(client::request(
        Method::GET,
        "docker",
        "/events",
        Bytes::new(),
    )));
    let writer = tokio::time::timeout(Duration::from_secs(5), engine.events.recv())
        .await
        .unwrap()
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    for action in ["start", "die", "destroy"] {
        // Each event comes after more than the idle and the header
        // timeouts of silence on the connection.
        tokio::time::sleep(short + Duration::from_millis(500)).await;
        writer
            .send(Bytes::from(format!(
                "{{\"Type\":\"container\",\"Action\":\"{action}\"}}\n"
            )))
            .unwrap();
        let frame = tokio::time::timeout(Duration::from_secs(2), body.frame())
            .await
            .expect("the event, at once")
            .expect("the stream still open")
            .unwrap();
        let data = frame.into_data().unwrap();
        assert!(String::from_utf8_lossy(&data).contains(action), "{data:?}");
    }
}
