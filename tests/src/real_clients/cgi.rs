//! `git http-backend` served over HTTP/1.1 as a CGI program (RFC 3875):
//! one process per request, its meta-variables set from the request, the
//! request body streamed to its stdin, and its stdout (a CGI head, then
//! the body) streamed back, its `Status:` line made the status.
//!
//! ## Invariants
//! - Bodies stream both ways: a push of many megabytes is never held in
//!   memory, and a chunked request (git sends large packs so) reaches the
//!   program without `CONTENT_LENGTH`, which tells it to read to the end.
//! - The program sees no environment but its meta-variables, `PATH` and a
//!   `HOME` of the test's: no configuration of the machine's user.
//! - What the program says on stderr is kept, for a failing test to show.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::stream;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, ChildStdout};
use tokio::task::JoinHandle;

type Body = BoxBody<Bytes, std::io::Error>;

/// `git http-backend` for the repositories under a directory.
#[derive(Debug)]
pub struct GitHttp {
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    task: JoinHandle<()>,
}

impl GitHttp {
    /// Serves the repositories under `root` (`GIT_PROJECT_ROOT`), every one
    /// exported; `home` is the program's `HOME`.
    pub async fn start(root: &Path, home: &Path) -> GitHttp {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the git server");
        let addr = listener.local_addr().expect("its address");
        let stderr = Arc::new(Mutex::new(String::new()));
        let site = Arc::new(Site {
            root: root.to_path_buf(),
            home: home.to_path_buf(),
            stderr: Arc::clone(&stderr),
        });
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let site = Arc::clone(&site);
                connections.spawn(async move {
                    let service = service_fn(move |req| {
                        let site = Arc::clone(&site);
                        async move { Ok::<_, Infallible>(site.run(req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        GitHttp { addr, stderr, task }
    }

    /// What the program said on stderr so far, every request's.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }
}

impl Drop for GitHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Site {
    root: PathBuf,
    home: PathBuf,
    stderr: Arc<Mutex<String>>,
}

impl Site {
    async fn run(&self, req: Request<Incoming>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let mut command = super::command("git", ["http-backend"]);
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_PROJECT_ROOT", &self.root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("GATEWAY_INTERFACE", "CGI/1.1")
            .env("SERVER_PROTOCOL", "HTTP/1.1")
            .env("SERVER_SOFTWARE", "picket-tests")
            .env("REMOTE_ADDR", "127.0.0.1")
            .env("REQUEST_METHOD", parts.method.as_str())
            .env("PATH_INFO", parts.uri.path())
            .env("QUERY_STRING", parts.uri.query().unwrap_or(""));
        for (name, value) in &parts.headers {
            let Ok(value) = value.to_str() else { continue };
            let variable = match name.as_str() {
                "content-type" => "CONTENT_TYPE".to_string(),
                "content-length" => "CONTENT_LENGTH".to_string(),
                other => format!("HTTP_{}", other.to_ascii_uppercase().replace('-', "_")),
            };
            command.env(variable, value);
        }
        // Protocol v2 is asked for in a header that the program reads from
        // the environment under another name.
        if let Some(protocol) = parts
            .headers
            .get("git-protocol")
            .and_then(|v| v.to_str().ok())
        {
            command.env("GIT_PROTOCOL", protocol);
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => return failure(format!("git http-backend: {e}")),
        };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return failure("git http-backend without pipes".into());
        };
        tokio::spawn(feed(body, stdin));
        let log = Arc::clone(&self.stderr);
        tokio::spawn(async move {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text).await;
            log.lock().expect("stderr lock").push_str(&text);
        });
        let mut stdout = BufReader::new(stdout);
        match head(&mut stdout).await {
            Ok(mut response) => {
                *response.body_mut() = rest(stdout, child);
                response
            }
            Err(e) => failure(format!("git http-backend's CGI head: {e}")),
        }
    }
}

/// Streams the request body into the program, then closes its stdin: the
/// end of a body without `CONTENT_LENGTH`.
async fn feed(mut body: Incoming, mut stdin: tokio::process::ChildStdin) {
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data()
            && stdin.write_all(&data).await.is_err()
        {
            return;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Reads the CGI head: header lines up to an empty one, `Status:` made
/// the response's status.
async fn head(stdout: &mut BufReader<ChildStdout>) -> std::io::Result<Response<Body>> {
    let mut response = Response::new(empty());
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "no end of the head",
            ));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            return Ok(response);
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(std::io::Error::other(format!("not a header: {line:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().unwrap_or_default();
            *response.status_mut() = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .ok_or_else(|| std::io::Error::other(format!("bad status {value:?}")))?;
        } else {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(std::io::Error::other)?;
            let value = HeaderValue::from_str(value).map_err(std::io::Error::other)?;
            response.headers_mut().append(name, value);
        }
    }
}

/// The rest of the program's stdout, as the body; the program is waited
/// for (and so reaped) at its end, and killed if the client goes first.
fn rest(stdout: BufReader<ChildStdout>, child: Child) -> Body {
    let chunks = stream::unfold(Some((stdout, child)), |state| async move {
        let (mut stdout, mut child) = state?;
        let mut buffer = vec![0; 64 * 1024];
        match stdout.read(&mut buffer).await {
            Ok(0) => {
                let _ = child.wait().await;
                None
            }
            Ok(n) => {
                buffer.truncate(n);
                Some((Ok(Frame::data(Bytes::from(buffer))), Some((stdout, child))))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    BodyExt::boxed(StreamBody::new(chunks))
}

fn empty() -> Body {
    BodyExt::boxed(Full::new(Bytes::new()).map_err(|never| match never {}))
}

fn failure(why: String) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed(
        Full::new(Bytes::from(why)).map_err(|never| match never {}),
    ));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}
