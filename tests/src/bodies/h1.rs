//! HTTP/1 read off the wire by hand, for both ends of the matrix: heads
//! parsed with `httparse`, bodies decoded by their framing (length,
//! chunked with trailers, until close) into a [`Summary`], strictly: a
//! body cut short, a chunk not closed by CRLF, two lengths, or bytes
//! past the end are errors that say how far the body came.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{Digest, Summary};

/// Larger than any head the node writes or accepts.
const MAX_HEAD: usize = 128 * 1024;
/// The longest chunk-size or trailer line.
const MAX_LINE: usize = 16 * 1024;
const MAX_FIELDS: usize = 128;

/// A request or response head.
#[derive(Debug, Clone)]
pub struct Head {
    /// A response's status; 0 for a request.
    pub status: u16,
    /// A request's method and target; empty for a response.
    pub method: String,
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Lower-case names, in order.
    pub fields: Vec<(String, String)>,
}

impl Head {
    /// The first value of `name` (lower case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values(name).next()
    }

    pub fn values<'a, 'n>(&'a self, name: &'n str) -> impl Iterator<Item = &'a str> + use<'a, 'n> {
        self.fields
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn fields(raw: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    raw.iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

/// How the body after a head is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The framing of the body after a response head; `head_request` when it
/// answers `HEAD`.
pub fn response_framing(head: &Head, head_request: bool) -> anyhow::Result<BodyFraming> {
    let bodiless = matches!(head.status, 100..=199 | 204 | 304);
    if bodiless || head_request {
        return Ok(BodyFraming::None);
    }
    message_framing(head, BodyFraming::UntilClose)
}

/// The framing of the body after a request head.
pub fn request_framing(head: &Head) -> anyhow::Result<BodyFraming> {
    message_framing(head, BodyFraming::None)
}

fn message_framing(head: &Head, otherwise: BodyFraming) -> anyhow::Result<BodyFraming> {
    let codings: Vec<&str> = head
        .values("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let lengths: Vec<&str> = head.values("content-length").collect();
    match (codings.last(), lengths.first()) {
        (Some(_), Some(_)) => bail!("both Transfer-Encoding and Content-Length"),
        (Some(coding), None) if coding.eq_ignore_ascii_case("chunked") => Ok(BodyFraming::Chunked),
        (Some(coding), None) => bail!("a body coded {coding}"),
        (None, Some(first)) => {
            if lengths.iter().any(|l| l != first) {
                bail!("two lengths: {lengths:?}");
            }
            Ok(BodyFraming::Length(
                first.parse().context("a Content-Length")?,
            ))
        }
        (None, None) => Ok(otherwise),
    }
}

/// A body read to its end.
#[derive(Debug, Clone)]
pub struct Body {
    pub summary: Summary,
    /// Lower-case names.
    pub trailers: Vec<(String, String)>,
    /// Its first bytes, to show.
    pub preview: String,
}

/// One side of an HTTP/1 connection and the bytes it has read and not
/// yet used.
pub struct Reader<R> {
    io: R,
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(io: R) -> Reader<R> {
        Reader {
            io,
            buf: BytesMut::new(),
        }
    }

    /// The connection, to write on.
    pub fn io(&mut self) -> &mut R {
        &mut self.io
    }

    /// Reads more; `false` at the end of the stream.
    async fn more(&mut self) -> anyhow::Result<bool> {
        self.buf.reserve(32 * 1024);
        let n = self.io.read_buf(&mut self.buf).await.context("read")?;
        Ok(n > 0)
    }

    /// The next request head; `None` when the connection closed between
    /// requests.
    pub async fn request_head(&mut self) -> anyhow::Result<Option<Head>> {
        loop {
            let mut raw = [httparse::EMPTY_HEADER; MAX_FIELDS];
            let mut req = httparse::Request::new(&mut raw);
            if let httparse::Status::Complete(n) = req.parse(&self.buf)? {
                let head = Head {
                    status: 0,
                    method: req.method.unwrap_or_default().to_string(),
                    target: req.path.unwrap_or_default().to_string(),
                    minor: req.version.unwrap_or_default(),
                    fields: fields(req.headers),
                };
                self.buf.advance(n);
                return Ok(Some(head));
            }
            if self.buf.len() > MAX_HEAD {
                bail!("a request head over {MAX_HEAD} bytes");
            }
            if !self.more().await? {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                bail!("closed within a request head");
            }
        }
    }

    /// The next response head, interim (1xx) ones included.
    pub async fn response_head(&mut self) -> anyhow::Result<Head> {
        loop {
            let mut raw = [httparse::EMPTY_HEADER; MAX_FIELDS];
            let mut resp = httparse::Response::new(&mut raw);
            if let httparse::Status::Complete(n) = resp.parse(&self.buf)? {
                let head = Head {
                    status: resp.code.unwrap_or_default(),
                    method: String::new(),
                    target: String::new(),
                    minor: resp.version.unwrap_or_default(),
                    fields: fields(resp.headers),
                };
                self.buf.advance(n);
                return Ok(head);
            }
            if self.buf.len() > MAX_HEAD {
                bail!("a response head over {MAX_HEAD} bytes");
            }
            if !self.more().await? {
                bail!(
                    "closed within or before a response head ({} bytes of it)",
                    self.buf.len()
                );
            }
        }
    }

    /// The body after a head, to its end.
    pub async fn body(&mut self, framing: BodyFraming) -> anyhow::Result<Body> {
        let mut digest = Digest::new();
        let mut trailers = Vec::new();
        let read = match framing {
            BodyFraming::None => Ok(()),
            BodyFraming::Length(n) => self.take(n, &mut digest).await,
            BodyFraming::UntilClose => self.until_close(&mut digest).await,
            BodyFraming::Chunked => self.chunked(&mut digest, &mut trailers).await,
        };
        read.with_context(|| format!("{framing:?} body cut after {} bytes", digest.len()))?;
        Ok(Body {
            preview: digest.preview(),
            summary: digest.finish(),
            trailers,
        })
    }

    async fn take(&mut self, mut n: u64, digest: &mut Digest) -> anyhow::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && !self.more().await? {
                bail!("closed with {n} bytes to come");
            }
            let k = self.buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            digest.update(&self.buf[..k]);
            self.buf.advance(k);
            n -= k as u64;
        }
        Ok(())
    }

    async fn until_close(&mut self, digest: &mut Digest) -> anyhow::Result<()> {
        loop {
            digest.update(&self.buf);
            self.buf.clear();
            if !self.more().await? {
                return Ok(());
            }
        }
    }

    async fn chunked(
        &mut self,
        digest: &mut Digest,
        trailers: &mut Vec<(String, String)>,
    ) -> anyhow::Result<()> {
        loop {
            let line = self.line().await.context("a chunk-size line")?;
            let hex = line.split(';').next().unwrap_or_default();
            let size = u64::from_str_radix(hex, 16)
                .with_context(|| format!("a chunk-size line {line:?}"))?;
            if size == 0 {
                break;
            }
            self.take(size, digest).await?;
            let end = self.line().await?;
            if !end.is_empty() {
                bail!("chunk data runs on past its size: {end:?}");
            }
        }
        loop {
            let line = self.line().await.context("the trailer section")?;
            if line.is_empty() {
                return Ok(());
            }
            let (name, value) = line
                .split_once(':')
                .with_context(|| format!("a trailer line {line:?}"))?;
            trailers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }

    /// The next line, without its CRLF.
    async fn line(&mut self) -> anyhow::Result<String> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                self.buf.advance(at + 2);
                return Ok(line);
            }
            if self.buf.len() > MAX_LINE {
                bail!("a line over {MAX_LINE} bytes");
            }
            if !self.more().await? {
                bail!("closed within a line");
            }
        }
    }

    /// Checks that the peer closes the connection with nothing more
    /// written, within `within`.
    pub async fn expect_close(&mut self, within: Duration) -> anyhow::Result<()> {
        if !self.buf.is_empty() {
            bail!("{} stray bytes after the answer", self.buf.len());
        }
        match tokio::time::timeout(within, self.more()).await {
            Err(_) => bail!("the connection stayed open after the answer"),
            // A reset is a close as the client sees it.
            Ok(Ok(false) | Err(_)) => Ok(()),
            Ok(Ok(true)) => bail!(
                "stray bytes after the answer: {:?}",
                String::from_utf8_lossy(&self.buf[..self.buf.len().min(80)])
            ),
        }
    }
}
