//! Test upstreams: small servers whose behaviour a test picks, and which
//! count what reached them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How a test upstream answers.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// 200 with `name: METHOD PATH` and the request headers echoed as
    /// `x-seen-<name>` response headers.
    Echo,
    /// Always this status, with a short body.
    Status(u16),
    /// Reads the request and never answers.
    Hang,
    /// Head at once, then `chunks` chunks of `chunk` bytes, one per `every`.
    Trickle {
        chunks: usize,
        chunk: usize,
        every: Duration,
    },
    /// Answers after `delay`.
    Delay(Duration),
    /// A WebSocket server that echoes every message.
    WebSocket,
    /// Answers with the status and after the delay the test sets now.
    Controlled(Control),
}

/// The knobs of a [`Behaviour::Controlled`] upstream.
#[derive(Debug, Clone)]
pub struct Control {
    status: Arc<std::sync::atomic::AtomicU16>,
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl Control {
    pub fn new(status: u16) -> Control {
        Control {
            status: Arc::new(status.into()),
            delay_ms: Arc::new(0.into()),
        }
    }

    pub fn set_status(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

/// A running test upstream.
#[derive(Debug)]
pub struct Upstream {
    pub addr: SocketAddr,
    pub name: String,
    hits: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Upstream {
    /// Starts an upstream on a loopback port.
    pub async fn start(name: &str, behaviour: Behaviour) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a test upstream");
        Upstream::on(listener, name, behaviour)
    }

    /// Starts an upstream on a listener the test bound.
    pub fn on(listener: TcpListener, name: &str, behaviour: Behaviour) -> Upstream {
        let addr = listener.local_addr().expect("local address");
        let hits = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(serve(
            listener,
            name.to_string(),
            behaviour,
            Arc::clone(&hits),
            Arc::clone(&accepted),
        ));
        Upstream {
            addr,
            name: name.to_string(),
            hits,
            accepted,
            task,
        }
    }

    /// Requests (or WebSocket handshakes) that reached this upstream.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Stops accepting; the port then refuses connections.
    pub fn stop(self) -> SocketAddr {
        self.task.abort();
        self.addr
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    listener: TcpListener,
    name: String,
    behaviour: Behaviour,
    hits: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        let (name, behaviour, hits) = (name.clone(), behaviour.clone(), Arc::clone(&hits));
        connections.spawn(async move {
            if let Behaviour::WebSocket = behaviour {
                websocket_echo(stream, &hits).await;
                return;
            }
            let service = service_fn(move |req| {
                answer(req, name.clone(), behaviour.clone(), Arc::clone(&hits))
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

type TestBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn answer(
    req: Request<Incoming>,
    name: String,
    behaviour: Behaviour,
    hits: Arc<AtomicUsize>,
) -> Result<Response<TestBody>, Infallible> {
    hits.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = req.into_parts();
    let received = body
        .collect()
        .await
        .map(|b| b.to_bytes().len())
        .unwrap_or(0);
    let text = |status: u16, text: String| {
        let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
        response
    };
    let summary = format!("{name}: {} {} ({received} bytes)", parts.method, parts.uri);
    Ok(match behaviour {
        Behaviour::Echo => {
            let mut response = text(200, summary);
            for (key, value) in &parts.headers {
                if let Ok(name) = http::HeaderName::from_bytes(format!("x-seen-{key}").as_bytes()) {
                    response.headers_mut().append(name, value.clone());
                }
            }
            response
        }
        Behaviour::Status(status) => text(status, summary),
        Behaviour::Delay(delay) => {
            tokio::time::sleep(delay).await;
            text(200, summary)
        }
        Behaviour::Hang => std::future::pending().await,
        Behaviour::Trickle {
            chunks,
            chunk,
            every,
        } => {
            let stream = futures_util::stream::unfold(0usize, move |sent| async move {
                if sent == chunks {
                    return None;
                }
                if sent > 0 {
                    tokio::time::sleep(every).await;
                }
                let frame = Frame::data(Bytes::from(vec![b'x'; chunk]));
                Some((Ok::<_, Infallible>(frame), sent + 1))
            });
            Response::new(BodyExt::boxed(StreamBody::new(stream)))
        }
        Behaviour::WebSocket => text(500, "not a websocket request".into()),
        Behaviour::Controlled(control) => {
            let delay = control.delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            text(control.status.load(Ordering::SeqCst), summary)
        }
    })
}

async fn websocket_echo(stream: TcpStream, hits: &AtomicUsize) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    hits.fetch_add(1, Ordering::SeqCst);
    while let Some(Ok(message)) = ws.next().await {
        if message.is_close() {
            break;
        }
        if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err() {
            break;
        }
    }
}

/// A loopback address nothing listens on: connects are refused.
pub async fn refused_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("local address")
}

/// An upstream that answers every request head with fixed bytes, then
/// closes: for responses hyper would not write (close-delimited bodies,
/// odd framing).
#[derive(Debug)]
pub struct RawUpstream {
    pub addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl RawUpstream {
    pub async fn start(answer: &'static [u8]) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a test upstream");
        let addr = listener.local_addr().expect("local address");
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(n) if n > 0 => seen.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.write_all(answer).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        RawUpstream { addr, hits, task }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
