//! An upstream that records every byte it receives, for tests that assert
//! what crossed the proxy byte for byte (the smuggling suite).
//!
//! It frames requests itself, independently of Picket's codec (httparse
//! for heads, `Content-Length` or a plain chunked scan for bodies), and
//! answers each complete one with a fixed `200 ok`. Bytes it cannot frame
//! are recorded all the same, and the connection is closed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What every complete request gets.
pub const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

#[derive(Debug, Default)]
struct Seen {
    bytes: Vec<u8>,
    requests: usize,
    /// Connections open now, and accepted in all.
    open: usize,
    accepted: usize,
}

#[derive(Debug)]
pub struct Recorder {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    changed: Arc<Notify>,
    task: JoinHandle<()>,
}

/// Bytes that cannot be framed as a request.
#[derive(Debug)]
pub struct Unframed;

/// The length of the first complete request in `buf`, if there is one.
pub fn frame(buf: &[u8]) -> Result<Option<usize>, Unframed> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut request = httparse::Request::new(&mut headers);
    let head = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Unframed),
    };
    let mut length = 0usize;
    let mut chunked = false;
    for h in request.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.parse().ok())
                .ok_or(Unframed)?;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        }
    }
    if !chunked {
        return Ok((buf.len() >= head + length).then_some(head + length));
    }
    // Chunked: walk size lines.
    let mut at = head;
    loop {
        let Some(end) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size = std::str::from_utf8(&buf[at..at + end])
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or(Unframed)?;
        at += end + 2;
        if size == 0 {
            return Ok((buf.len() >= at + 2).then_some(at + 2));
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        at += size + 2;
    }
}

/// Counts a connection closed when its task ends, however it ends.
struct Closed(Arc<Mutex<Seen>>, Arc<Notify>);

impl Drop for Closed {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).open -= 1;
        self.1.notify_waiters();
    }
}

impl Recorder {
    pub async fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a recording upstream");
        let addr = listener.local_addr().expect("local address");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let changed = Arc::new(Notify::new());
        let (task_seen, task_changed) = (Arc::clone(&seen), Arc::clone(&changed));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let (seen, changed) = (Arc::clone(&task_seen), Arc::clone(&task_changed));
                {
                    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                    seen.open += 1;
                    seen.accepted += 1;
                }
                changed.notify_waiters();
                tokio::spawn(async move {
                    let _closed = Closed(Arc::clone(&seen), Arc::clone(&changed));
                    let mut pending = Vec::new();
                    let mut chunk = [0u8; 16384];
                    loop {
                        let n = match stream.read(&mut chunk).await {
                            Ok(n) if n > 0 => n,
                            _ => return,
                        };
                        pending.extend_from_slice(&chunk[..n]);
                        seen.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .bytes
                            .extend_from_slice(&chunk[..n]);
                        loop {
                            match frame(&pending) {
                                Ok(Some(len)) => {
                                    pending.drain(..len);
                                    seen.lock().unwrap_or_else(|e| e.into_inner()).requests += 1;
                                    changed.notify_waiters();
                                    if stream.write_all(ANSWER).await.is_err() {
                                        return;
                                    }
                                }
                                Ok(None) => break,
                                Err(Unframed) => {
                                    changed.notify_waiters();
                                    return;
                                }
                            }
                        }
                        changed.notify_waiters();
                    }
                });
            }
        });
        Recorder {
            addr,
            seen,
            changed,
            task,
        }
    }

    /// Every byte received since the last call, and the complete requests
    /// among them; clears both.
    pub fn take(&self) -> (Vec<u8>, usize) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let requests = std::mem::take(&mut seen.requests);
        (std::mem::take(&mut seen.bytes), requests)
    }

    /// Complete requests received since the last [`Recorder::take`].
    pub fn requests(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).requests
    }

    /// Connections open now, and accepted since the start.
    pub fn connections(&self) -> (usize, usize) {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        (seen.open, seen.accepted)
    }

    /// Waits until at least `n` complete requests have arrived, at most
    /// `within`; returns whether they did.
    pub async fn wait_requests(&self, n: usize, within: std::time::Duration) -> bool {
        self.wait(within, |r| r.requests() >= n).await
    }

    /// Waits until `check` holds, at most `within`, woken by every change;
    /// returns whether it held.
    pub async fn wait(
        &self,
        within: std::time::Duration,
        check: impl Fn(&Recorder) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let changed = self.changed.notified();
            if check(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return check(self);
            }
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
