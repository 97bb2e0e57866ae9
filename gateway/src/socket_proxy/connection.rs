//! One client connection of the socket proxy, and how long it may stay
//! open without a request in progress.
//!
//! ## Bounds
//! - A new connection has the header-read timeout to send its first
//!   complete request head; a head begun later has it from its first byte.
//! - Between requests, a kept-alive connection has the idle timeout to
//!   send the first byte of its next head.
//! - While a request is being answered there is no bound: the engine's
//!   event stream lasts as long as the client follows it, however long
//!   nothing happens on it. How many such connections there are is bounded
//!   by the connection limit, at accept.
//! - Bytes that arrive while a response is still being written (a head
//!   pipelined early) give the connection the header-read timeout from
//!   the end of that response, not the idle timeout.
//!
//! Past a bound the connection is closed, with no answer: nothing was
//! asked yet.
//!
//! hyper's own `header_read_timeout` is not used: it runs from the end of
//! the previous response, so it would be both bounds in one and an idle
//! keep-alive connection would be closed at the header-read timeout.
//!
//! [`Phase`] decides, from the events of the connection and `now`;
//! [`serve`] observes the reads, the requests and the ends of responses,
//! and closes the connection at the deadline the phase gives.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until};

/// Where a connection stands between and within its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A head has begun (or the connection is new) and is not complete.
    Head { since: Instant },
    /// A request is being answered. `early`: bytes arrived meanwhile,
    /// presumably the start of the next head.
    Answering { early: bool },
    /// Between requests, with nothing of the next head yet.
    Idle { since: Instant },
}

impl Phase {
    /// A connection just accepted.
    pub fn accepted(now: Instant) -> Phase {
        Phase::Head { since: now }
    }

    /// Bytes arrived from the client.
    pub fn read(self, now: Instant) -> Phase {
        match self {
            Phase::Idle { .. } => Phase::Head { since: now },
            Phase::Answering { .. } => Phase::Answering { early: true },
            head @ Phase::Head { .. } => head,
        }
    }

    /// A complete request head was read.
    pub fn request(self) -> Phase {
        Phase::Answering { early: false }
    }

    /// The response to the request ended (or was given up).
    pub fn answered(self, now: Instant) -> Phase {
        match self {
            Phase::Answering { early: true } => Phase::Head { since: now },
            Phase::Answering { early: false } => Phase::Idle { since: now },
            other => other,
        }
    }

    /// When the connection is to be closed if nothing changes; `None`
    /// while a request is being answered.
    pub fn deadline(self, header_read: Duration, idle: Duration) -> Option<Instant> {
        match self {
            Phase::Head { since } => Some(since + header_read),
            Phase::Idle { since } => Some(since + idle),
            Phase::Answering { .. } => None,
        }
    }
}

/// How a connection ended.
#[derive(Debug)]
pub enum Ended {
    /// Either side closed it, cleanly or not.
    Closed(Option<hyper::Error>),
    /// Closed by the proxy at a bound, in this phase.
    Bounded(Phase),
}

/// The phase of one connection, shared by what observes it.
#[derive(Debug, Clone)]
struct Progress(Arc<Mutex<Phase>>);

impl Progress {
    fn update(&self, change: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *phase = change(*phase);
    }

    fn get(&self) -> Phase {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves HTTP/1 on `stream`, each request answered by `answer`, until
/// either side closes it or it outlives a bound.
pub async fn serve<F, Fut, B>(
    stream: TcpStream,
    header_read: Duration,
    idle: Duration,
    answer: F,
) -> Ended
where
    F: Fn(Request<Incoming>) -> Fut,
    Fut: Future<Output = Response<B>>,
    B: Body + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let progress = Progress(Arc::new(Mutex::new(Phase::accepted(Instant::now()))));
    let io = TokioIo::new(Observed {
        io: stream,
        progress: progress.clone(),
    });
    let service = {
        let progress = progress.clone();
        service_fn(move |req| {
            // Called as soon as hyper has the whole head.
            progress.update(Phase::request);
            let response = answer(req);
            let progress = progress.clone();
            async move {
                Ok::<_, Infallible>(response.await.map(|body| Answer {
                    body,
                    progress: Some(progress),
                }))
            }
        })
    };
    let mut conn = pin!(
        http1::Builder::new()
            .header_read_timeout(None)
            .serve_connection(io, service)
    );
    let mut sleep = pin!(sleep_until(
        progress
            .get()
            .deadline(header_read, idle)
            .unwrap_or_else(Instant::now)
    ));
    poll_fn(|cx| {
        if let Poll::Ready(result) = conn.as_mut().poll(cx) {
            return Poll::Ready(Ended::Closed(result.err()));
        }
        // Every change of phase happens within the poll of the connection
        // just above (a read, a request, the end of a body), so the phase
        // read here is current, and while answering the connection's own
        // wake-ups are the only ones needed.
        let phase = progress.get();
        let Some(deadline) = phase.deadline(header_read, idle) else {
            return Poll::Pending;
        };
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Ended::Bounded(phase)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// The client's stream, telling [`Progress`] when bytes arrive.
struct Observed {
    io: TcpStream,
    progress: Progress,
}

impl AsyncRead for Observed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = Instant::now();
            self.progress.update(|phase| phase.read(now));
        }
        polled
    }
}

impl AsyncWrite for Observed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A response body that tells [`Progress`] once when it ends or is
/// dropped, whichever comes first.
struct Answer<B> {
    body: B,
    progress: Option<Progress>,
}

impl<B> Answer<B> {
    fn answered(&mut self) {
        if let Some(progress) = self.progress.take() {
            let now = Instant::now();
            progress.update(|phase| phase.answered(now));
        }
    }
}

impl<B: Body + Unpin> Body for Answer<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.answered();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<B> Drop for Answer<B> {
    fn drop(&mut self) {
        self.answered();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_secs(30);
    const IDLE: Duration = Duration::from_secs(60);

    #[test]
    fn every_transition() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(5);
        let head = |since| Phase::Head { since };
        let idle = |since| Phase::Idle { since };
        let answering = |early| Phase::Answering { early };
        enum Event {
            Read,
            Request,
            Answered,
        }
        use Event::{Answered, Read, Request};
        // (from, event at t1, to)
        let table = [
            (head(t0), Read, head(t0)),
            (head(t0), Request, answering(false)),
            (head(t0), Answered, head(t0)),
            (answering(false), Read, answering(true)),
            (answering(true), Read, answering(true)),
            (answering(false), Request, answering(false)),
            (answering(false), Answered, idle(t1)),
            (answering(true), Answered, head(t1)),
            (idle(t0), Read, head(t1)),
            (idle(t0), Request, answering(false)),
            (idle(t0), Answered, idle(t0)),
        ];
        for (from, event, to) in table {
            let next = match event {
                Read => from.read(t1),
                Request => from.request(),
                Answered => from.answered(t1),
            };
            assert_eq!(next, to, "from {from:?}");
        }
    }

    #[test]
    fn deadlines() {
        let t0 = Instant::now();
        assert_eq!(
            Phase::accepted(t0).deadline(HEADER, IDLE),
            Some(t0 + HEADER),
            "a new connection has the header-read timeout for its first head"
        );
        assert_eq!(
            Phase::Idle { since: t0 }.deadline(HEADER, IDLE),
            Some(t0 + IDLE)
        );
        for early in [false, true] {
            assert_eq!(
                Phase::Answering { early }.deadline(HEADER, IDLE),
                None,
                "a response in progress is never cut"
            );
        }
    }
}
