//! The page a browser loads in the real-client tests, and the upstream
//! that serves it: `/` and its script `/app.js`, the assets under
//! `/assets/`, an event stream at `/events`, a WebSocket echo at `/ws`,
//! and `/report`, where the page posts what it saw. Plain HTTP/1.1 on one
//! port, HTTPS on another (HTTP/2 when the client offers it by ALPN,
//! else HTTP/1.1, which is how a browser opens a WebSocket there).
//!
//! The script fetches every asset at once and hashes it with
//! `crypto.subtle` (SHA-256), reads the event stream to its last event,
//! sends the WebSocket messages of [`message`] and hashes their echoes,
//! then posts one JSON report: what each asset hashed to (or why it
//! failed), the events, the echoes, the protocol each resource came over,
//! and whether the page was a secure context.
//!
//! ## Invariants
//! - Half the assets go out with a `Content-Length`, half chunked, in
//!   pieces of many sizes; an asset's bytes are what the test gave.
//! - Each fetch has a bound, so a lost byte reports as an error, never as
//!   a page that never reports.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt, stream};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role;

type Body = BoxBody<Bytes, Infallible>;

/// One asset of the page.
#[derive(Debug, Clone)]
pub struct Asset {
    pub name: String,
    pub body: Bytes,
    /// Sent chunked, in pieces, rather than with a `Content-Length`.
    pub chunked: bool,
}

/// What the page does besides its assets.
#[derive(Debug, Clone)]
pub struct Script {
    /// Events the stream sends, 50 ms apart, before it idles.
    pub events: usize,
    /// WebSocket messages: (text?, length), echoed in order.
    pub messages: Vec<(bool, usize)>,
    /// The bound of each fetch, of the stream and of the echoes.
    pub within: Duration,
}

/// The `data` of event `i` as `EventSource` hands it over (two `data:`
/// lines, joined by a newline).
pub fn event_data(i: usize) -> String {
    format!("event {i}\nsecond line of {i}")
}

/// The bytes of WebSocket message `index` of `length` (its UTF-8 when it
/// is text), as the page's script makes them.
pub fn message(index: usize, text: bool, length: usize) -> Vec<u8> {
    (0..length)
        .map(|j| {
            let k = j * 7 + index;
            if text {
                b'a' + (k % 26) as u8
            } else {
                (k % 251) as u8
            }
        })
        .collect()
}

/// The page's upstream.
#[derive(Debug)]
pub struct Page {
    /// Plain HTTP/1.1.
    pub plain: SocketAddr,
    /// HTTPS: HTTP/2 or HTTP/1.1 by ALPN.
    pub tls: SocketAddr,
    reports: Mutex<mpsc::UnboundedReceiver<Bytes>>,
    tasks: Vec<JoinHandle<()>>,
}

struct Site {
    assets: Vec<Asset>,
    script: Script,
    reports: mpsc::UnboundedSender<Bytes>,
}

impl Page {
    /// Serves `assets` and `script`, HTTPS with `tls` (whose ALPN list is
    /// replaced by `h2`, `http/1.1`).
    pub async fn start(assets: Vec<Asset>, script: Script, tls: Arc<rustls::ServerConfig>) -> Page {
        let (sender, reports) = mpsc::unbounded_channel();
        let site = Arc::new(Site {
            assets,
            script,
            reports: sender,
        });
        let plain = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let secure = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let (plain_addr, tls_addr) = (
            plain.local_addr().expect("address"),
            secure.local_addr().expect("address"),
        );
        let mut tls = (*tls).clone();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let tasks = vec![
            tokio::spawn(serve_plain(plain, Arc::clone(&site))),
            tokio::spawn(serve_tls(secure, acceptor, site)),
        ];
        Page {
            plain: plain_addr,
            tls: tls_addr,
            reports: Mutex::new(reports),
            tasks,
        }
    }

    /// The next report a page posted, as JSON, if one comes within
    /// `within`.
    pub async fn report(&self, within: Duration) -> Option<serde_json::Value> {
        let mut reports = self.reports.lock().await;
        let body = tokio::time::timeout(within, reports.recv()).await.ok()??;
        Some(serde_json::from_slice(&body).unwrap_or_else(|e| {
            serde_json::Value::String(format!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            ))
        }))
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn serve_plain(listener: TcpListener, site: Arc<Site>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        let site = Arc::clone(&site);
        connections.spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), Served(site))
                .with_upgrades()
                .await;
        });
    }
}

async fn serve_tls(listener: TcpListener, acceptor: tokio_rustls::TlsAcceptor, site: Arc<Site>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        let (site, acceptor) = (Arc::clone(&site), acceptor.clone());
        connections.spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let _ = if h2 {
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), Served(site))
                    .await
            } else {
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), Served(site))
                    .with_upgrades()
                    .await
            };
        });
    }
}

/// The site as a hyper service.
#[derive(Clone)]
struct Served(Arc<Site>);

impl hyper::service::Service<Request<Incoming>> for Served {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let site = Arc::clone(&self.0);
        Box::pin(async move { Ok(site.answer(req).await) })
    }
}

impl Site {
    async fn answer(&self, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_string();
        match (req.method().clone(), path.as_str()) {
            (Method::GET, "/") => full("text/html; charset=utf-8", PAGE.into()),
            (Method::GET, "/app.js") => full("text/javascript", self.app().into()),
            (Method::GET, "/events") => self.events(),
            (Method::GET, "/ws") => websocket(req),
            (Method::POST, "/report") => {
                let body = req.into_body().collect().await.map(|b| b.to_bytes());
                let _ = self.reports.send(body.unwrap_or_default());
                status(StatusCode::NO_CONTENT)
            }
            (Method::GET, _) => match path.strip_prefix("/assets/") {
                Some(name) => self.asset(name),
                None => status(StatusCode::NOT_FOUND),
            },
            _ => status(StatusCode::METHOD_NOT_ALLOWED),
        }
    }

    fn app(&self) -> String {
        let config = serde_json::json!({
            "assets": self.assets.iter().map(|a| &a.name).collect::<Vec<_>>(),
            "events": self.script.events,
            "messages": self.script.messages,
            "within_ms": self.script.within.as_millis() as u64,
        });
        APP.replace("/*CONFIG*/null", &config.to_string())
    }

    fn asset(&self, name: &str) -> Response<Body> {
        let Some(asset) = self.assets.iter().find(|a| a.name == name) else {
            return status(StatusCode::NOT_FOUND);
        };
        if !asset.chunked {
            return full("application/octet-stream", asset.body.clone());
        }
        // Pieces of 1 byte to 64 KiB, cycling, so that chunk boundaries
        // fall everywhere.
        const PIECES: [usize; 6] = [1, 1000, 4096, 16 * 1024 + 3, 65_536, 333];
        let body = asset.body.clone();
        let pieces = stream::unfold((0usize, 0usize), move |(at, n)| {
            let body = body.clone();
            async move {
                if at >= body.len() {
                    return None;
                }
                let end = (at + PIECES[n % PIECES.len()]).min(body.len());
                let frame = Frame::data(body.slice(at..end));
                Some((Ok::<_, Infallible>(frame), (end, n + 1)))
            }
        });
        let mut response = Response::new(BodyExt::boxed(StreamBody::new(pieces)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/octet-stream"),
        );
        response
    }

    /// The event stream: a comment at once (so the head goes out), then
    /// the events 50 ms apart, then nothing until the client leaves.
    fn events(&self) -> Response<Body> {
        let count = self.script.events;
        let events = stream::unfold(0usize, move |i| async move {
            let text = if i == 0 {
                ": stream open\n\n".to_string()
            } else if i <= count {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let data = event_data(i).replace('\n', "\ndata: ");
                format!("id: {i}\ndata: {data}\n\n")
            } else {
                return std::future::pending().await;
            };
            Some((Ok::<_, Infallible>(Frame::data(Bytes::from(text))), i + 1))
        });
        let mut response = Response::new(BodyExt::boxed(StreamBody::new(events)));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache"),
        );
        response
    }
}

/// Accepts a WebSocket handshake and echoes every message on it.
fn websocket(mut req: Request<Incoming>) -> Response<Body> {
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        while let Some(Ok(message)) = ws.next().await {
            if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err() {
                return;
            }
        }
    });
    let mut response = status(StatusCode::SWITCHING_PROTOCOLS);
    let headers = response.headers_mut();
    headers.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    headers.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("upgrade"),
    );
    if let Ok(accept) = header::HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    response
}

fn full(kind: &'static str, body: Bytes) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed(Full::new(body)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    response
}

fn status(code: StatusCode) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed(Full::new(Bytes::new())));
    *response.status_mut() = code;
    response
}

const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>loading</title>
<script src="/app.js" defer></script></head>
<body><p>Picket real-client page</p></body></html>
"#;

/// The page's script; `/*CONFIG*/null` is replaced by its configuration.
const APP: &str = r#""use strict";
const CONFIG = /*CONFIG*/null;

async function hex(data) {
  const digest = await crypto.subtle.digest("SHA-256", data);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function asset(name) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), CONFIG.within_ms);
  try {
    const response = await fetch("/assets/" + name, { cache: "no-store", signal: abort.signal });
    const body = await response.arrayBuffer();
    return { name, status: response.status, size: body.byteLength, sha256: await hex(body) };
  } catch (e) {
    return { name, error: String(e) };
  } finally {
    clearTimeout(timer);
  }
}

function events() {
  return new Promise((resolve) => {
    const got = [];
    let errors = 0;
    let finished = false;
    const source = new EventSource("/events");
    const done = (error) => {
      if (finished) return;
      finished = true;
      source.close();
      clearTimeout(timer);
      resolve({ got, errors, error });
    };
    const timer = setTimeout(() => done("timeout"), CONFIG.within_ms);
    source.onmessage = (e) => {
      got.push(e.lastEventId + ":" + e.data);
      if (got.length === CONFIG.events) done(null);
    };
    source.onerror = () => { errors += 1; };
  });
}

function message(index, text, length) {
  if (text) {
    const codes = new Array(length);
    for (let j = 0; j < length; j++) codes[j] = 97 + ((j * 7 + index) % 26);
    let s = "";
    for (let j = 0; j < length; j += 8192) s += String.fromCharCode(...codes.slice(j, j + 8192));
    return s;
  }
  const bytes = new Uint8Array(length);
  for (let j = 0; j < length; j++) bytes[j] = (j * 7 + index) % 251;
  return bytes;
}

function socket() {
  return new Promise((resolve) => {
    const echoes = [];
    let finished = false;
    let hashed = Promise.resolve();
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + "/ws");
    ws.binaryType = "arraybuffer";
    const done = (error) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      hashed.then(() => { ws.close(); resolve({ echoes, error }); });
    };
    const timer = setTimeout(() => done("timeout"), CONFIG.within_ms);
    ws.onopen = () => {
      CONFIG.messages.forEach(([text, length], index) => ws.send(message(index, text, length)));
    };
    ws.onmessage = (e) => {
      const data = typeof e.data === "string" ? new TextEncoder().encode(e.data) : e.data;
      hashed = hashed.then(async () => {
        echoes.push(await hex(data));
        if (echoes.length === CONFIG.messages.length) done(null);
      });
    };
    ws.onerror = () => done("error");
    ws.onclose = (e) => done("closed " + e.code);
  });
}

async function main() {
  const [assets, stream, echoes] = await Promise.all([
    Promise.all(CONFIG.assets.map(asset)),
    events(),
    socket(),
  ]);
  const navigation = performance.getEntriesByType("navigation")[0];
  const resources = performance.getEntriesByType("resource");
  return {
    secure: window.isSecureContext,
    page: navigation ? navigation.nextHopProtocol : null,
    protocols: [...new Set(resources.map((r) => r.nextHopProtocol))],
    assets,
    events: stream,
    socket: echoes,
  };
}

main()
  .catch((e) => ({ failed: String(e) }))
  .then((report) => fetch("/report", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(report),
  }))
  .then(() => { document.title = "reported"; });
"#;

/// The browser, from Debian's `chromium` package.
pub const BROWSER: &str = "chromium";

/// A headless Chromium on a page, in a profile of its own.
#[derive(Debug)]
pub struct Browser {
    child: tokio::process::Child,
    log: std::path::PathBuf,
    profile: tempfile::TempDir,
}

impl Browser {
    /// Opens `url` in a new headless Chromium that takes any certificate
    /// (the test's CA is not in its store) and reaches no proxy.
    pub fn open(url: &str) -> Browser {
        let profile = tempfile::Builder::new()
            .prefix(&super::unique("chromium"))
            .tempdir()
            .expect("a Chromium profile");
        let log = profile.path().join("chromium.log");
        let file = std::fs::File::create(&log).expect("a log file");
        let child = super::command(
            BROWSER,
            [
                "--headless".to_string(),
                // The test runs as root, where the sandbox cannot start.
                "--no-sandbox".into(),
                "--disable-gpu".into(),
                "--disable-dev-shm-usage".into(),
                "--no-first-run".into(),
                "--no-default-browser-check".into(),
                "--disable-background-networking".into(),
                "--disable-component-update".into(),
                "--disable-default-apps".into(),
                "--disable-extensions".into(),
                "--disable-breakpad".into(),
                "--disable-crash-reporter".into(),
                "--disable-sync".into(),
                "--disable-features=HttpsUpgrades,MediaRouter,OptimizationHints,Translate".into(),
                "--password-store=basic".into(),
                "--no-proxy-server".into(),
                "--ignore-certificate-errors".into(),
                format!("--user-data-dir={}", profile.path().display()),
                url.to_string(),
            ],
        )
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone().expect("the log file"))
        .stderr(file)
        // A group of its own, its helpers in it, so that closing it can
        // wait for them all.
        .process_group(0)
        .spawn()
        .expect("chromium starts");
        Browser {
            child,
            log,
            profile,
        }
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Asks it to quit (SIGTERM, so that it takes its helper processes
    /// along), waits up to 10 s for its whole process group to be gone
    /// (then kills what is left of it), and removes its profile.
    pub async fn close(self) {
        let Browser {
            mut child, profile, ..
        } = self;
        let Some(pid) = child.id() else {
            return;
        };
        let signal = |signal: &str, target: String| {
            let mut kill = super::command("kill", [signal.to_string(), "--".into(), target]);
            kill.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            async move { kill.status().await.is_ok_and(|s| s.success()) }
        };
        signal("-TERM", pid.to_string()).await;
        let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        // Its helpers leave after it; the group is gone when signal 0 to
        // it fails.
        let group = format!("-{pid}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while signal("-0", group.clone()).await {
            if tokio::time::Instant::now() > deadline {
                signal("-KILL", group.clone()).await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.wait().await;
        let path = profile.path().to_path_buf();
        if profile.close().is_err() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}
