//! A directory served as static files over HTTP/1.1, as a package index
//! is (PEP 503: a page per project, its files beside it): `GET` and
//! `HEAD` of a file, `index.html` for a path that ends in `/`, and a
//! redirect to that for a directory named without it.
//!
//! ## Invariants
//! - Nothing outside the directory is served: a path with `..`, a
//!   backslash or a NUL is refused.
//! - It counts the files it served, so that a test can tell that a client
//!   fetched what it installed from here.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A directory served on 127.0.0.1.
#[derive(Debug)]
pub struct StaticFiles {
    pub addr: SocketAddr,
    served: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl StaticFiles {
    pub async fn start(root: &Path) -> StaticFiles {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the file server");
        let addr = listener.local_addr().expect("its address");
        let served = Arc::new(AtomicUsize::new(0));
        let (root, count) = (Arc::new(root.to_path_buf()), Arc::clone(&served));
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let (root, count) = (Arc::clone(&root), Arc::clone(&count));
                connections.spawn(async move {
                    let service = service_fn(move |req| {
                        let (root, count) = (Arc::clone(&root), Arc::clone(&count));
                        async move { Ok::<_, Infallible>(answer(&root, &count, req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        StaticFiles { addr, served, task }
    }

    /// Files served (index pages included).
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

impl Drop for StaticFiles {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    root: &Path,
    served: &AtomicUsize,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return status(StatusCode::METHOD_NOT_ALLOWED);
    }
    let path = req.uri().path();
    let Some(file) = within(root, path) else {
        return status(StatusCode::NOT_FOUND);
    };
    if file.is_dir() && !path.ends_with('/') {
        let mut response = status(StatusCode::MOVED_PERMANENTLY);
        if let Ok(location) = http::HeaderValue::from_str(&format!("{path}/")) {
            response.headers_mut().insert(header::LOCATION, location);
        }
        return response;
    }
    let file = if path.ends_with('/') {
        file.join("index.html")
    } else {
        file
    };
    let Ok(bytes) = tokio::fs::read(&file).await else {
        return status(StatusCode::NOT_FOUND);
    };
    served.fetch_add(1, Ordering::SeqCst);
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        _ => "application/octet-stream",
    };
    let length = bytes.len();
    let body = if req.method() == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(bytes)
    };
    let mut response = Response::new(Full::new(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, http::HeaderValue::from_static(kind));
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, http::HeaderValue::from(length));
    response
}

/// The file `path` names under `root`, if it stays there.
fn within(root: &Path, path: &str) -> Option<PathBuf> {
    let relative = path.trim_start_matches('/');
    let safe = relative
        .split('/')
        .all(|part| part != ".." && !part.contains(['\\', '\0']));
    safe.then(|| root.join(relative))
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}
