//! Bodies of every size, split at every point: what the body-contract
//! matrix (`tests/integration/every_byte.rs`) sends through a node, and
//! how the far end tells that every byte arrived.
//!
//! A body is pseudo-random bytes made from a seed, so both ends can make
//! it and only its length and SHA-256 ([`Summary`]) travel back. How each
//! side writes is a [`Pattern`] turned into a plan of pieces and pauses,
//! seeded too: a failing case replays exactly.
//!
//! ## Paths
//! The replicas ([`replica`]) are told by the request's path what to do:
//! - `/<route>/answer/<framing>/<pattern>/<size>/<seed>`: answer a body of
//!   `size` bytes from `seed`, framed and written so;
//! - `/<route>/take`: read the request body to its end and answer its
//!   length, SHA-256 and trailer in `x-got-*` headers.
//!
//! The clients ([`client`]) speak HTTP/1.0, HTTP/1.1 and HTTP/2, plain or
//! over TLS; HTTP/1 on both sides is written and read byte by byte here
//! ([`h1`]), so that framing and write timing are exactly what the case
//! says.

pub mod client;
pub mod h1;
pub mod replica;

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::HeaderMap;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The trailer that carries a body's SHA-256, both ways.
pub const TRAILER: &str = "x-body-sha256";
/// The longest pause between two pieces of [`Pattern::Pieces`].
const LONGEST_PAUSE_MS: u64 = 3;
/// How many bytes of a body [`Digest::preview`] keeps.
const PREVIEW: usize = 200;
/// At most this many cuts in a body written in [`Pattern::Pieces`].
const MOST_CUTS: usize = 32;
/// The pause between the head and the body of [`Pattern::HeadThenBody`]:
/// long enough that the far end reads them apart.
const HEAD_PAUSE: Duration = Duration::from_millis(5);

/// `len` pseudo-random bytes from `seed`.
pub fn payload(seed: u64, len: usize) -> Bytes {
    let mut bytes = vec![0u8; len];
    fastrand::Rng::with_seed(seed).fill(&mut bytes);
    Bytes::from(bytes)
}

/// The length and SHA-256 of a body, as far as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub len: u64,
    /// Lower-case hex.
    pub sha256: String,
}

impl Summary {
    pub fn of(bytes: &[u8]) -> Summary {
        let mut digest = Digest::new();
        digest.update(bytes);
        digest.finish()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes, sha256 {}", self.len, &self.sha256[..16])
    }
}

/// A SHA-256 and a length, fed as the body arrives.
pub struct Digest {
    context: aws_lc_rs::digest::Context,
    len: u64,
    preview: Vec<u8>,
}

impl Default for Digest {
    fn default() -> Digest {
        Digest::new()
    }
}

impl Digest {
    pub fn new() -> Digest {
        Digest {
            context: aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256),
            len: 0,
            preview: Vec::new(),
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        let room = PREVIEW.saturating_sub(self.preview.len());
        self.preview
            .extend_from_slice(&bytes[..room.min(bytes.len())]);
        self.context.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first bytes fed, as text: what an error page says.
    pub fn preview(&self) -> String {
        String::from_utf8_lossy(&self.preview).into_owned()
    }

    pub fn finish(self) -> Summary {
        let sha256 = self
            .context
            .finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Summary {
            len: self.len,
            sha256,
        }
    }
}

/// How a body is framed on its way, in either direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length`.
    Length,
    /// Chunked, without trailers.
    Chunked,
    /// Chunked, ending with [`TRAILER`].
    ChunkedTrailers,
    /// No length: the replica closes its connection after the body.
    UntilClose,
    /// The answer to `HEAD`: the length of a body that does not follow.
    Head,
    /// `204 No Content`.
    NoContent,
    /// `304 Not Modified`.
    NotModified,
    /// HTTP/2 DATA without a `Content-Length`.
    NoLength,
    /// HTTP/2 DATA without a `Content-Length`, then [`TRAILER`].
    Trailers,
    /// HTTP/2 DATA with a `Content-Length`, then [`TRAILER`].
    LengthTrailers,
    /// `Content-Length` and `Expect: 100-continue`: the body goes once
    /// `100 Continue` has come.
    Continue,
}

const FRAMINGS: [(Framing, &str); 11] = [
    (Framing::Length, "length"),
    (Framing::Chunked, "chunked"),
    (Framing::ChunkedTrailers, "chunked+trailers"),
    (Framing::UntilClose, "until-close"),
    (Framing::Head, "head"),
    (Framing::NoContent, "204"),
    (Framing::NotModified, "304"),
    (Framing::NoLength, "no-length"),
    (Framing::Trailers, "trailers"),
    (Framing::LengthTrailers, "length+trailers"),
    (Framing::Continue, "expect-100"),
];

impl Framing {
    pub fn name(self) -> &'static str {
        FRAMINGS
            .iter()
            .find(|(f, _)| *f == self)
            .map_or("?", |(_, name)| name)
    }

    pub fn from_name(name: &str) -> Option<Framing> {
        FRAMINGS.iter().find(|(_, n)| *n == name).map(|(f, _)| *f)
    }

    /// Whether the body ends with [`TRAILER`].
    pub fn has_trailer(self) -> bool {
        matches!(
            self,
            Framing::ChunkedTrailers | Framing::Trailers | Framing::LengthTrailers
        )
    }

    /// Whether no body follows the head, whatever its size says.
    pub fn is_bodiless(self) -> bool {
        matches!(
            self,
            Framing::Head | Framing::NoContent | Framing::NotModified
        )
    }

    /// The status an answer so framed has.
    pub fn status(self) -> u16 {
        match self {
            Framing::NoContent => 204,
            Framing::NotModified => 304,
            _ => 200,
        }
    }
}

impl fmt::Display for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the sending side writes a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Head and body in one write.
    Whole,
    /// Cut at up to 32 random points (within the head, chunk lines and
    /// body alike), with a random pause of 0 to 3 ms before each piece.
    Pieces,
    /// The head, a pause, then the body in one write.
    HeadThenBody,
    /// One byte per write (for small messages).
    ByteAtATime,
}

const PATTERNS: [(Pattern, &str); 4] = [
    (Pattern::Whole, "whole"),
    (Pattern::Pieces, "pieces"),
    (Pattern::HeadThenBody, "head-then-body"),
    (Pattern::ByteAtATime, "byte-at-a-time"),
];

impl Pattern {
    pub fn name(self) -> &'static str {
        PATTERNS
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("?", |(_, name)| name)
    }

    pub fn from_name(name: &str) -> Option<Pattern> {
        PATTERNS.iter().find(|(_, n)| *n == name).map(|(p, _)| *p)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One write of a plan: the pause before it, and how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub pause: Duration,
    pub len: usize,
}

/// The writes of a message of `len` bytes whose head is its first
/// `head_len` (0: a body alone, as an HTTP/2 stream sends it).
pub fn plan(pattern: Pattern, len: usize, head_len: usize, rng: &mut fastrand::Rng) -> Vec<Piece> {
    let piece = |pause, len| Piece { pause, len };
    match pattern {
        _ if len == 0 => Vec::new(),
        Pattern::Whole => vec![piece(Duration::ZERO, len)],
        Pattern::HeadThenBody if head_len == 0 => vec![piece(HEAD_PAUSE, len)],
        Pattern::HeadThenBody if head_len >= len => vec![piece(Duration::ZERO, len)],
        Pattern::HeadThenBody => vec![
            piece(Duration::ZERO, head_len),
            piece(HEAD_PAUSE, len - head_len),
        ],
        // A pause now and then, so that the far end reads several bytes
        // at once as well as one.
        Pattern::ByteAtATime => (0..len)
            .map(|i| {
                let pause = if i % 16 == 15 {
                    Duration::from_millis(1)
                } else {
                    Duration::ZERO
                };
                piece(pause, 1)
            })
            .collect(),
        Pattern::Pieces => {
            let cuts = rng.usize(1..=MOST_CUTS).min(len - 1);
            let mut at: Vec<usize> = (0..cuts).map(|_| rng.usize(1..len)).collect();
            at.push(len);
            at.sort_unstable();
            at.dedup();
            let mut start = 0;
            at.into_iter()
                .map(|end| {
                    let pause = Duration::from_millis(rng.u64(0..=LONGEST_PAUSE_MS));
                    let p = piece(pause, end - start);
                    start = end;
                    p
                })
                .collect()
        }
    }
}

/// The random source of a side's plan and chunk sizes: the case's seed,
/// apart from its payload's.
pub fn plan_rng(seed: u64, salt: u64) -> fastrand::Rng {
    fastrand::Rng::with_seed(seed.rotate_left(17) ^ salt ^ 0x5bd1_e995)
}

/// Writes `bytes` to `io` as `plan` says, flushing each piece.
pub async fn write_planned(
    io: &mut (impl AsyncWrite + Unpin),
    bytes: &[u8],
    plan: &[Piece],
) -> std::io::Result<()> {
    let mut at = 0;
    for piece in plan {
        if !piece.pause.is_zero() {
            tokio::time::sleep(piece.pause).await;
        }
        io.write_all(&bytes[at..at + piece.len]).await?;
        io.flush().await?;
        at += piece.len;
    }
    debug_assert_eq!(at, bytes.len(), "a plan covers its message");
    Ok(())
}

/// A body sent through hyper, boxed.
pub type StreamedBody = UnsyncBoxBody<Bytes, Infallible>;

/// An HTTP/2 body: `data` in DATA frames as `plan` cuts it, then
/// `trailers`.
pub fn streamed(data: Bytes, plan: &[Piece], trailers: Option<HeaderMap>) -> StreamedBody {
    let mut at = 0;
    let mut frames = Vec::with_capacity(plan.len() + 1);
    for piece in plan {
        frames.push((piece.pause, Frame::data(data.slice(at..at + piece.len))));
        at += piece.len;
    }
    if let Some(trailers) = trailers {
        frames.push((Duration::ZERO, Frame::trailers(trailers)));
    }
    let stream = futures_util::StreamExt::then(
        futures_util::stream::iter(frames),
        |(pause, frame)| async move {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            Ok::<_, Infallible>(frame)
        },
    );
    StreamBody::new(stream).boxed_unsync()
}

/// [`TRAILER`] for `summary`.
pub fn trailer(summary: &Summary) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert(
        TRAILER,
        summary.sha256.parse().expect("hex is a header value"),
    );
    map
}

/// What a replica is asked to do, read from the request's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Answer a body.
    Answer(Answer),
    /// Take the request's body and answer what arrived.
    Take,
}

/// A body a replica answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub framing: Framing,
    pub pattern: Pattern,
    pub size: usize,
    pub seed: u64,
}

impl Answer {
    /// Its path on `route` (`/h1`).
    pub fn path(&self, route: &str) -> String {
        format!(
            "{route}/answer/{}/{}/{}/{}",
            self.framing, self.pattern, self.size, self.seed
        )
    }
}

impl Ask {
    pub fn parse(path: &str) -> anyhow::Result<Ask> {
        let mut parts = path.trim_start_matches('/').split('/').skip(1);
        match parts.next() {
            Some("take") => Ok(Ask::Take),
            Some("answer") => {
                let mut next = || parts.next().context("a path too short");
                let framing = next()?;
                let framing = Framing::from_name(framing).context("no such framing")?;
                let pattern = Pattern::from_name(next()?).context("no such pattern")?;
                let size = next()?.parse()?;
                let seed = next()?.parse()?;
                Ok(Ask::Answer(Answer {
                    framing,
                    pattern,
                    size,
                    seed,
                }))
            }
            _ => bail!("not a path of the body matrix: {path}"),
        }
    }
}

/// Splits `len` bytes into up to 8 chunks of random sizes (none empty).
pub fn chunk_sizes(len: usize, rng: &mut fastrand::Rng) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let cuts = rng.usize(0..8).min(len - 1);
    let mut at: Vec<usize> = (0..cuts).map(|_| rng.usize(1..len)).collect();
    at.push(len);
    at.sort_unstable();
    at.dedup();
    let mut start = 0;
    at.into_iter()
        .map(|end| {
            let size = end - start;
            start = end;
            size
        })
        .collect()
}

/// `body` framed chunked, in `sizes` (from [`chunk_sizes`]), then the last
/// chunk with `trailers`, appended to `out`.
pub fn write_chunked(out: &mut Vec<u8>, body: &[u8], sizes: &[usize], trailers: &[(&str, &str)]) {
    let mut at = 0;
    for size in sizes {
        out.extend_from_slice(format!("{size:x}\r\n").as_bytes());
        out.extend_from_slice(&body[at..at + size]);
        out.extend_from_slice(b"\r\n");
        at += size;
    }
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plan_covers_its_message_once() {
        let mut rng = fastrand::Rng::with_seed(7);
        for len in [1, 2, 3, 64, 1000, 70_000] {
            for pattern in PATTERNS.map(|(p, _)| p) {
                for head in [0, len / 2, len] {
                    let plan = plan(pattern, len, head, &mut rng);
                    assert_eq!(plan.iter().map(|p| p.len).sum::<usize>(), len);
                    assert!(plan.iter().all(|p| p.len > 0), "{pattern} {len}");
                }
            }
        }
        assert!(plan(Pattern::Pieces, 0, 0, &mut rng).is_empty());
    }

    #[test]
    fn chunks_cover_the_body() {
        let mut rng = fastrand::Rng::with_seed(9);
        for len in [0, 1, 2, 17, 65_537] {
            let sizes = chunk_sizes(len, &mut rng);
            assert_eq!(sizes.iter().sum::<usize>(), len);
            assert!(sizes.iter().all(|s| *s > 0));
        }
    }

    #[test]
    fn paths_read_back() {
        let answer = Answer {
            framing: Framing::ChunkedTrailers,
            pattern: Pattern::HeadThenBody,
            size: 65_537,
            seed: 42,
        };
        assert_eq!(
            Ask::parse(&answer.path("/h2c")).unwrap(),
            Ask::Answer(answer)
        );
        assert_eq!(Ask::parse("/h1/take").unwrap(), Ask::Take);
        assert!(Ask::parse("/h1/other").is_err());
    }
}
