//! A small HTTP client for tests: one fresh connection per request, and
//! the time each answer took.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A complete answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// From the start of the connect to the end of the body.
    pub elapsed: Duration,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path` with `Host: host` on a new connection to `addr`.
pub async fn get(addr: SocketAddr, host: &str, path: &str) -> anyhow::Result<Answer> {
    send(addr, request(Method::GET, host, path, Bytes::new())).await
}

/// A request with a body.
pub fn request(method: Method, host: &str, path: &str, body: Bytes) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = method;
    *req.uri_mut() = path.parse().unwrap_or_else(|_| http::Uri::from_static("/"));
    if let Ok(value) = http::HeaderValue::from_str(host) {
        req.headers_mut().insert(http::header::HOST, value);
    }
    req
}

/// Sends one request on a new connection and reads the whole answer.
pub async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> anyhow::Result<Answer> {
    let start = Instant::now();
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let response = sender.send_request(req).await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body,
        elapsed: start.elapsed(),
    })
}

/// The p-th percentile (0–100) of `samples`, which it sorts.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort();
    let rank = ((p / 100.0) * (samples.len() - 1) as f64).round() as usize;
    samples[rank.min(samples.len() - 1)]
}
