//! `picket socket-proxy` in front of a fake engine on a Unix socket: reads
//! of the allow-list pass, everything else is refused before it reaches the
//! engine, and the event stream comes through as it is written.

use std::convert::Infallible;
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
use picket_tests::client;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::mpsc;

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
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (trigger, shutdown) = picket::shutdown::channel();
    tokio::spawn(picket::socket_proxy::serve(
        listener,
        socket.to_path_buf(),
        shutdown,
    ));
    (addr, trigger)
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
