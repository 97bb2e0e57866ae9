//! Raw HTTP/1 on a socket, for tests that look at the bytes: pipelining,
//! framing, `Expect`, connection handling.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The HTTP/2 connection preface a client sends first.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One HTTP/2 frame, by hand: what a hostile or a bare client sends.
pub fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut frame = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A response as read off the wire.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// Lower-cased names; the last value of each.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

/// A client connection that reads responses one by one.
#[derive(Debug)]
pub struct Wire {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Wire {
    pub async fn connect(addr: std::net::SocketAddr) -> Wire {
        Wire {
            stream: TcpStream::connect(addr).await.expect("connect"),
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    async fn more(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            _ => false,
        }
    }

    /// Reads until `needle` has arrived; returns everything up to its end.
    pub async fn read_until(&mut self, needle: &[u8]) -> Option<Vec<u8>> {
        loop {
            if let Some(at) = self.buf.windows(needle.len()).position(|w| w == needle) {
                return Some(self.buf.drain(..at + needle.len()).collect());
            }
            if !self.more().await {
                return None;
            }
        }
    }

    /// Whether the server closed the connection (after what was buffered).
    pub async fn closed(&mut self) -> bool {
        !self.more().await && self.buf.is_empty()
    }

    /// Reads one response; `head_request` when it answers a HEAD.
    pub async fn response(&mut self, head_request: bool) -> Option<RawResponse> {
        let head = self.read_until(b"\r\n\r\n").await?;
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut lines = text.split("\r\n");
        let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let mut body = Vec::new();
        let no_body =
            head_request || status == 204 || status == 304 || (100..200).contains(&status);
        if no_body {
        } else if headers
            .get("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let line = self.read_until(b"\r\n").await?;
                let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).ok()?;
                if size == 0 {
                    self.read_until(b"\r\n").await?;
                    break;
                }
                while self.buf.len() < size + 2 {
                    if !self.more().await {
                        return None;
                    }
                }
                body.extend(self.buf.drain(..size));
                self.buf.drain(..2);
            }
        } else if let Some(length) = headers
            .get("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            while self.buf.len() < length {
                if !self.more().await {
                    return None;
                }
            }
            body.extend(self.buf.drain(..length));
        } else {
            while self.more().await {}
            body = std::mem::take(&mut self.buf);
        }
        Some(RawResponse {
            status,
            headers,
            body,
        })
    }
}
