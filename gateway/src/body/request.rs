//! The client's request body, as the proxy reads it: from an HTTP/1
//! connection (`server::http1`) or an HTTP/2 stream ([`IncomingBody`]),
//! kept for a replay ([`Replay`]), held to the route's `max_body`
//! ([`Limited`]), and why it could not be read ([`BodyError`]).

use bytes::Bytes;
use http::header::HeaderMap;
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// Why the client's body could not be read: decided where it happened,
/// so that what the client is answered, what the access log says and
/// whether the breaker counts it never hang on guessing an error's type.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body passed the route's `max_body`.
    #[error("client request body: larger than this route takes ({max} bytes)")]
    TooLarge { max: u64 },
    /// The client paused its body for longer than the body bound.
    #[error("client request body: {0}")]
    TimedOut(String),
    /// The client closed or reset its connection (an HTTP/2 client its
    /// stream) before the end of its body.
    #[error("client request body: {0}")]
    ClientGone(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The body's framing (its chunks, its length) is not HTTP.
    #[error("client request body: {0}")]
    Framing(#[source] crate::h1::ParseError),
    /// A read that failed otherwise, or a request that could not be sent on.
    #[error("client request body: {0}")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl BodyError {
    /// The client paused its body for longer than `bound`.
    pub fn timed_out(bound: std::time::Duration) -> BodyError {
        BodyError::TimedOut(format!(
            "no body bytes for {}",
            humantime::format_duration(bound)
        ))
    }

    /// A read of the client's connection that failed.
    pub fn from_io(e: std::io::Error) -> BodyError {
        use std::io::ErrorKind;
        match e.kind() {
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => BodyError::ClientGone(Box::new(e)),
            ErrorKind::TimedOut => BodyError::TimedOut(e.to_string()),
            _ => BodyError::Failed(Box::new(e)),
        }
    }

    /// A frame of an HTTP/2 client's body that did not come.
    pub fn from_hyper(e: hyper::Error) -> BodyError {
        let reset = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<h2::Error>())
            .is_some_and(|h2| h2.is_reset() || h2.is_io());
        if e.is_incomplete_message() || e.is_canceled() || e.is_closed() || reset {
            BodyError::ClientGone(Box::new(e))
        } else {
            BodyError::Failed(Box::new(e))
        }
    }

    /// The body passed the route's `max_body`.
    pub fn is_too_large(&self) -> bool {
        matches!(self, BodyError::TooLarge { .. })
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, BodyError::TimedOut(_))
    }

    /// The client closed or reset its connection before the end of its
    /// body (an HTTP/2 client's reset stream included).
    pub fn is_client_gone(&self) -> bool {
        matches!(self, BodyError::ClientGone(_))
    }
}

/// Where a request's body comes from.
pub trait RequestBody: Send {
    /// The next piece of the body; `None` at its end.
    fn next(&mut self) -> impl Future<Output = Option<Result<Bytes, BodyError>>> + Send;

    /// The trailers that ended the body, once [`RequestBody::next`] has
    /// returned `None`.
    fn trailers(&mut self) -> Option<HeaderMap> {
        None
    }

    /// The rest of the body, owned, for a task of its own: an HTTP/2
    /// replica that answers before the body has ended (a bidirectional
    /// gRPC stream) goes on reading it while the answer streams back.
    /// `None` when the body cannot leave the connection's task (HTTP/1).
    fn detach(&mut self) -> Option<IncomingBody> {
        None
    }

    /// Starts the body again from its first byte, for another replica;
    /// `false` when what was read is gone.
    fn rewind(&mut self) -> bool {
        false
    }

    /// Whether everything read so far could be given again.
    fn kept(&self) -> bool {
        false
    }
}

/// The body of an HTTP/2 request, each frame awaited at most `bound`
/// (while the request waits for its answer), and its trailers.
pub struct IncomingBody {
    /// `None` once detached.
    body: Option<Incoming>,
    bound: Option<std::time::Duration>,
    trailers: Option<http::HeaderMap>,
    /// Body bytes read here (not those read after a detach).
    read: u64,
    /// The most bytes it may still give (`max_body`, once detached).
    max: Option<u64>,
    /// The route's `max_body`, for the error.
    route_max: u64,
}

impl IncomingBody {
    /// A request's body, each frame awaited at most `bound`.
    pub fn new(body: Incoming, bound: std::time::Duration) -> IncomingBody {
        IncomingBody {
            body: Some(body),
            bound: Some(bound),
            trailers: None,
            read: 0,
            max: None,
            route_max: 0,
        }
    }

    /// No more bound on the wait for the next frame: the answer has
    /// started, and a stream that has started is never cut by a bound.
    pub fn unbound(&mut self) {
        self.bound = None;
    }

    /// Body bytes read so far (none of those read after a detach).
    pub fn read(&self) -> u64 {
        self.read
    }

    /// The body ends in [`BodyError::TooLarge`] past `max`
    /// more bytes: a detached body keeps its route's `max_body`.
    pub fn limit(&mut self, max: u64, route_max: u64) {
        self.read = 0;
        self.max = Some(max);
        self.route_max = route_max;
    }
}

impl RequestBody for IncomingBody {
    async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        let body = self.body.as_mut()?;
        loop {
            let frame = match self.bound {
                Some(bound) => match tokio::time::timeout(bound, body.frame()).await {
                    Ok(frame) => frame,
                    Err(_) => return Some(Err(BodyError::timed_out(bound))),
                },
                None => body.frame().await,
            };
            match frame? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => {
                        self.read += data.len() as u64;
                        if self.max.is_some_and(|max| self.read > max) {
                            let max = self.route_max;
                            return Some(Err(BodyError::TooLarge { max }));
                        }
                        return Some(Ok(data));
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.trailers = Some(trailers);
                        }
                    }
                },
                Err(e) => return Some(Err(BodyError::from_hyper(e))),
            }
        }
    }

    fn trailers(&mut self) -> Option<http::HeaderMap> {
        self.trailers.clone()
    }

    fn detach(&mut self) -> Option<IncomingBody> {
        Some(IncomingBody {
            body: self.body.take(),
            bound: self.bound,
            trailers: self.trailers.take(),
            read: 0,
            max: None,
            route_max: 0,
        })
    }
}

/// Bytes of a gRPC call's body kept for a replay on another replica.
pub const REPLAY_LIMIT: usize = 64 * 1024;

/// A request body kept as it is read, up to [`REPLAY_LIMIT`], so that a
/// call a replica refused unprocessed can be sent whole to the next one.
pub struct Replay<'a, B> {
    body: &'a mut B,
    kept: Vec<Bytes>,
    kept_len: usize,
    /// More than the limit was read: no replay.
    overflowed: bool,
    /// The body's end was read.
    ended: bool,
    /// Replaying: the next kept piece to give.
    replay_at: Option<usize>,
}

impl<'a, B: RequestBody> Replay<'a, B> {
    pub fn new(body: &'a mut B) -> Replay<'a, B> {
        Replay {
            body,
            kept: Vec::new(),
            kept_len: 0,
            overflowed: false,
            ended: false,
            replay_at: None,
        }
    }
}

impl<B: RequestBody> RequestBody for Replay<'_, B> {
    async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        if let Some(at) = self.replay_at {
            if let Some(piece) = self.kept.get(at) {
                self.replay_at = Some(at + 1);
                return Some(Ok(piece.clone()));
            }
            self.replay_at = None;
        }
        if self.ended {
            return None;
        }
        match self.body.next().await {
            Some(Ok(piece)) => {
                if !self.overflowed {
                    if self.kept_len + piece.len() <= REPLAY_LIMIT {
                        self.kept_len += piece.len();
                        self.kept.push(piece.clone());
                    } else {
                        self.overflowed = true;
                        self.kept = Vec::new();
                    }
                }
                Some(Ok(piece))
            }
            None => {
                self.ended = true;
                None
            }
            Some(Err(e)) => {
                self.overflowed = true;
                Some(Err(e))
            }
        }
    }

    fn trailers(&mut self) -> Option<HeaderMap> {
        self.body.trailers()
    }

    fn rewind(&mut self) -> bool {
        if self.overflowed {
            return false;
        }
        self.replay_at = Some(0);
        true
    }

    fn kept(&self) -> bool {
        !self.overflowed
    }

    fn detach(&mut self) -> Option<IncomingBody> {
        if self.replay_at.is_some() || self.ended {
            return None;
        }
        self.overflowed = true;
        self.body.detach()
    }
}

/// A request body that ends in [`BodyError::TooLarge`] as soon as it passes `max`:
/// the piece that passes it is never given on.
pub struct Limited<'a, B> {
    body: &'a mut B,
    max: u64,
    seen: u64,
}

impl<'a, B: RequestBody> Limited<'a, B> {
    pub fn new(body: &'a mut B, max: u64) -> Limited<'a, B> {
        Limited { body, max, seen: 0 }
    }
}

impl<B: RequestBody> RequestBody for Limited<'_, B> {
    async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        let piece = self.body.next().await?;
        if let Ok(data) = &piece {
            self.seen += data.len() as u64;
            if self.seen > self.max {
                return Some(Err(BodyError::TooLarge { max: self.max }));
            }
        }
        Some(piece)
    }

    fn trailers(&mut self) -> Option<http::HeaderMap> {
        self.body.trailers()
    }

    /// The rest of the body keeps the limit: what it may still give.
    fn detach(&mut self) -> Option<IncomingBody> {
        let mut rest = self.body.detach()?;
        rest.limit(self.max.saturating_sub(self.seen), self.max);
        Some(rest)
    }

    fn rewind(&mut self) -> bool {
        self.seen = 0;
        self.body.rewind()
    }

    fn kept(&self) -> bool {
        self.body.kept()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each failure is classified where it happens: the client gone, the
    /// body bound, the route's limit and broken framing each answer and
    /// log as themselves.
    #[test]
    fn a_body_error_says_what_happened() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::UnexpectedEof,
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionAborted,
            ErrorKind::BrokenPipe,
        ] {
            let e = BodyError::from_io(Error::from(kind));
            assert!(
                e.is_client_gone() && !e.is_timeout() && !e.is_too_large(),
                "{kind:?}"
            );
        }
        let e = BodyError::from_io(Error::from(ErrorKind::TimedOut));
        assert!(e.is_timeout() && !e.is_client_gone());
        let e = BodyError::from_io(Error::from(ErrorKind::PermissionDenied));
        assert!(!e.is_timeout() && !e.is_client_gone() && !e.is_too_large());
        let e = BodyError::timed_out(std::time::Duration::from_secs(30));
        assert!(e.is_timeout());
        assert_eq!(e.to_string(), "client request body: no body bytes for 30s");
        let e = BodyError::TooLarge { max: 1024 };
        assert!(e.is_too_large() && !e.is_client_gone());
        assert_eq!(
            e.to_string(),
            "client request body: larger than this route takes (1024 bytes)"
        );
        let e = BodyError::Framing(crate::h1::ParseError::Chunk("a size that is not hex"));
        assert!(!e.is_timeout() && !e.is_client_gone() && !e.is_too_large());
    }

    /// A body of the given pieces.
    struct Pieces(std::collections::VecDeque<Bytes>);

    impl RequestBody for Pieces {
        async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
            self.0.pop_front().map(Ok)
        }
    }

    async fn read_all(body: &mut impl RequestBody) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(piece) = body.next().await {
            out.extend_from_slice(&piece.unwrap());
        }
        out
    }

    fn pieces(sizes: &[usize]) -> Pieces {
        Pieces(
            sizes
                .iter()
                .enumerate()
                .map(|(i, n)| Bytes::from(vec![b'a' + i as u8; *n]))
                .collect(),
        )
    }

    #[tokio::test]
    async fn a_kept_body_is_given_again_whole() {
        let mut inner = pieces(&[3, 5, 2]);
        let mut body = Replay::new(&mut inner);
        let first = read_all(&mut body).await;
        assert_eq!(first, b"aaabbbbbcc");
        assert!(body.kept());
        assert!(body.rewind());
        assert_eq!(read_all(&mut body).await, first);
    }

    #[tokio::test]
    async fn a_body_rewound_midway_gives_what_was_read_then_the_rest() {
        let mut inner = pieces(&[3, 5, 2]);
        let mut body = Replay::new(&mut inner);
        assert_eq!(&body.next().await.unwrap().unwrap()[..], b"aaa");
        assert!(body.rewind());
        assert_eq!(read_all(&mut body).await, b"aaabbbbbcc");
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_not_kept() {
        let mut inner = pieces(&[REPLAY_LIMIT, 1]);
        let mut body = Replay::new(&mut inner);
        assert_eq!(read_all(&mut body).await.len(), REPLAY_LIMIT + 1);
        assert!(!body.kept());
        assert!(!body.rewind());
        assert!(body.next().await.is_none(), "nothing given twice");
    }

    #[tokio::test]
    async fn the_piece_that_passes_the_limit_is_never_given() {
        let mut inner = Pieces(
            [&b"aaaa"[..], b"bbbb", b"cc"]
                .map(Bytes::from_static)
                .into(),
        );
        let mut body = Limited::new(&mut inner, 9);
        assert_eq!(&body.next().await.unwrap().unwrap()[..], b"aaaa");
        assert_eq!(&body.next().await.unwrap().unwrap()[..], b"bbbb");
        let error = body.next().await.unwrap().unwrap_err();
        assert!(error.is_too_large(), "{error}");
        let mut exact = Pieces([&b"aaaa"[..], b"bbbb"].map(Bytes::from_static).into());
        let mut body = Limited::new(&mut exact, 8);
        assert!(body.next().await.unwrap().is_ok());
        assert!(body.next().await.unwrap().is_ok());
        assert!(body.next().await.is_none());
    }
}
