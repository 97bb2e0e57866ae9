//! The admin listener's places: at most `admin_max_connections` at once,
//! and at the limit one that has nothing to answer makes room for the
//! newcomer.
//!
//! A health check, a scrape or a script connects and asks at once; a flood
//! of idle connections (a hostile client, or a script that leaks them)
//! sends nothing, or a byte and nothing more. So at the limit a newcomer
//! takes the place of, in this order ([`room`], pure, tested as a table):
//! 1. a connection that never asked, and has had [`GRACE`] to: the oldest;
//! 2. one whose request has been arriving for longer than [`GRACE`]
//!    without its head ending (a byte, then nothing): the oldest.
//!
//! When none may go, the newcomer is let in past the limit, up to twice it
//! (new connections ask or leave soon, answers from memory end soon). At
//! twice the limit the grace ends for all, and an idle keep-alive
//! connection (one answered before, a scraper between scrapes) may go
//! too, the longest idle first, after every connection that never asked;
//! when that frees nothing, the newcomer is closed at once. Never one
//! being answered: an answer counts from its request's head to its body's
//! last byte, a `/metrics` or `/v1/cluster` sent for seconds as it is
//! encoded included ([`Finishing`]). So a flood costs its own
//! connections their places, never a scrape its answer, and the listener
//! never holds more than twice its limit of descriptors. nginx drops idle
//! keep-alive connections the same way when it runs out of connections.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

/// How long a new connection has to send its request (and a request to
/// end its head) before it may make room at the limit: a client on any
/// network sends it at once.
pub const GRACE: Duration = Duration::from_millis(100);

/// What a held connection is doing, as [`room`] weighs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doing {
    /// A request is being answered: from its head read to its body's
    /// last byte.
    Answering,
    /// Bytes wait that the node has not read yet: its own backlog, not
    /// the client's silence.
    Waiting,
    /// The node has read part of a request, not yet its whole head.
    Asking,
    /// Nothing has arrived; nothing is being answered.
    Silent,
    /// The client closed it; its task has not yet.
    Gone,
}

/// One held connection, as [`room`] weighs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub doing: Doing,
    /// It has been answered before: a keep-alive connection.
    pub served: bool,
    /// Since it was accepted, or its last answer ended.
    pub quiet_for: Duration,
}

/// What a newcomer gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// Under the limit: a place.
    Free,
    /// The connection at this index makes room.
    Evict(usize),
    /// Nobody may go: in past the limit.
    Past,
    /// Twice the limit, and nobody may go: closed at once.
    Refuse,
}

/// Where a newcomer goes, with `held` connections in `max` places.
pub fn room(max: usize, held: &[Seen]) -> Room {
    if held.len() < max {
        return Room::Free;
    }
    // Under twice the limit, a new connection has its grace, and one that
    // was answered before (a keep-alive scraper between scrapes) keeps
    // its place: a flood's own connections leave first. At twice the
    // limit, the grace is over for all.
    let twice = held.len() >= max.saturating_mul(2);
    let grace = if twice { Duration::ZERO } else { GRACE };
    let rank = |seen: &Seen| -> Option<u8> {
        match (seen.doing, seen.served) {
            (Doing::Answering, _) => None,
            (Doing::Gone, _) => Some(0),
            (Doing::Silent | Doing::Asking, false) if seen.quiet_for < grace => None,
            (Doing::Silent, false) => Some(1),
            (Doing::Asking, false) => Some(2),
            _ if !twice => None,
            (Doing::Silent, true) => Some(3),
            (Doing::Asking, true) => Some(4),
            (Doing::Waiting, _) => Some(5),
        }
    };
    let victim = held
        .iter()
        .enumerate()
        .filter_map(|(i, seen)| Some(((rank(seen)?, std::cmp::Reverse(seen.quiet_for)), i)))
        .min()
        .map(|(_, i)| i);
    match victim {
        Some(i) => Room::Evict(i),
        None if !twice => Room::Past,
        None => Room::Refuse,
    }
}

/// What a connection's tasks tell its place.
#[derive(Debug, Default)]
pub struct Activity {
    /// Bytes of a request have been read, its head not yet whole.
    reading: AtomicBool,
    /// A request is being answered.
    answering: AtomicBool,
    /// It has been answered before.
    served: AtomicBool,
    /// When it was accepted, or its last answer ended: ms after the
    /// places' start.
    quiet_since_ms: AtomicU64,
}

impl Activity {
    /// A request's head is whole: it is being answered.
    pub fn answering(&self) {
        self.reading.store(false, Ordering::Relaxed);
        self.answering.store(true, Ordering::Relaxed);
    }
}

/// One admin connection as its place sees it.
#[derive(Debug)]
struct Held {
    stream: Arc<TcpStream>,
    activity: Arc<Activity>,
    close: Arc<Notify>,
}

impl Held {
    fn seen(&self, now_ms: u64) -> Seen {
        let activity = &self.activity;
        let quiet_for = Duration::from_millis(
            now_ms.saturating_sub(activity.quiet_since_ms.load(Ordering::Relaxed)),
        );
        let served = activity.served.load(Ordering::Relaxed);
        let doing = if activity.answering.load(Ordering::Relaxed) {
            Doing::Answering
        } else {
            match self.peek() {
                Peeked::Gone => Doing::Gone,
                Peeked::Bytes => Doing::Waiting,
                Peeked::Nothing if activity.reading.load(Ordering::Relaxed) => Doing::Asking,
                Peeked::Nothing => Doing::Silent,
            }
        };
        Seen {
            doing,
            served,
            quiet_for,
        }
    }

    /// What waits to be read. Asked of the socket itself (`MSG_PEEK`,
    /// non-blocking), not through the runtime: a poll with another waker
    /// would take the connection task's place, and its task would sleep
    /// through its request.
    fn peek(&self) -> Peeked {
        let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        match socket2::SockRef::from(&*self.stream).peek(&mut byte) {
            Ok(0) => Peeked::Gone,
            Ok(_) => Peeked::Bytes,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Peeked::Nothing,
            Err(_) => Peeked::Gone,
        }
    }
}

/// What [`Held::peek`] found.
enum Peeked {
    Nothing,
    Bytes,
    Gone,
}

/// The places of the admin listener.
#[derive(Debug)]
pub struct Places {
    max: usize,
    start: Instant,
    open: Mutex<BTreeMap<u64, Held>>,
    next: AtomicU64,
    /// Places held now (`picket_admin_connections`).
    held: prometheus_client::metrics::gauge::Gauge,
}

/// A connection's place: given back when dropped.
#[derive(Debug)]
pub struct Place {
    places: Arc<Places>,
    id: u64,
    /// Notified when the place is taken for a newcomer.
    pub close: Arc<Notify>,
    /// What the connection does, for its answers to mark.
    pub activity: Arc<Activity>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.places.open.lock().unwrap_or_else(|e| e.into_inner());
        open.remove(&self.id);
        self.places
            .held
            .set(i64::try_from(open.len()).unwrap_or(i64::MAX));
    }
}

/// What taking a place gave: the place and its stream, or nothing (the
/// newcomer is closed), and how many connections made room.
#[derive(Debug)]
pub struct Taken {
    pub held: Option<(Place, Conn)>,
    pub evicted: u64,
}

impl Places {
    /// `max` places, their count kept in `held`.
    pub fn new(max: usize, held: prometheus_client::metrics::gauge::Gauge) -> Arc<Places> {
        Arc::new(Places {
            max: max.max(1),
            start: Instant::now(),
            open: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            held,
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A place for `stream`, as [`room`] decides.
    pub fn take(self: &Arc<Places>, stream: TcpStream) -> Taken {
        let now_ms = self.now_ms();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let mut evicted = 0;
        loop {
            let ids: Vec<u64> = open.keys().copied().collect();
            let seen: Vec<Seen> = open.values().map(|held| held.seen(now_ms)).collect();
            match room(self.max, &seen) {
                Room::Free | Room::Past => break,
                Room::Evict(i) => {
                    if let Some(held) = open.remove(&ids[i]) {
                        // Closed now, its descriptor with its task soon.
                        let _ = socket2::SockRef::from(&*held.stream)
                            .shutdown(std::net::Shutdown::Both);
                        held.close.notify_one();
                        evicted += 1;
                    }
                }
                Room::Refuse => {
                    self.held.set(i64::try_from(open.len()).unwrap_or(i64::MAX));
                    return Taken {
                        held: None,
                        evicted,
                    };
                }
            }
        }
        let stream = Arc::new(stream);
        let activity = Arc::new(Activity {
            quiet_since_ms: AtomicU64::new(now_ms),
            ..Activity::default()
        });
        let close = Arc::new(Notify::new());
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        open.insert(
            id,
            Held {
                stream: Arc::clone(&stream),
                activity: Arc::clone(&activity),
                close: Arc::clone(&close),
            },
        );
        self.held.set(i64::try_from(open.len()).unwrap_or(i64::MAX));
        drop(open);
        let place = Place {
            places: Arc::clone(self),
            id,
            close,
            activity: Arc::clone(&activity),
        };
        Taken {
            held: Some((place, Conn { stream, activity })),
            evicted,
        }
    }

    /// Connections held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Marks the answer of `activity` ended now.
    fn finished(&self, activity: &Activity) {
        activity
            .quiet_since_ms
            .store(self.now_ms(), Ordering::Relaxed);
        activity.served.store(true, Ordering::Relaxed);
        activity.answering.store(false, Ordering::Relaxed);
    }
}

/// An answer's body that marks its connection answered once its last
/// byte is handed to the connection (or the answer is given up).
#[derive(Debug)]
pub struct Finishing<B> {
    body: B,
    mark: Option<(Arc<Places>, Arc<Activity>)>,
}

impl<B> Finishing<B> {
    pub fn new(body: B, place: &Place) -> Finishing<B> {
        Finishing {
            body,
            mark: Some((Arc::clone(&place.places), Arc::clone(&place.activity))),
        }
    }

    fn done(&mut self) {
        if let Some((places, activity)) = self.mark.take() {
            places.finished(&activity);
        }
    }
}

impl<B> Drop for Finishing<B> {
    fn drop(&mut self) {
        self.done();
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Finishing<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if frame.is_none() || self.body.is_end_stream() {
            self.done();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An admin connection's stream, shared with its place (which looks at
/// what waits to be read), marking a request as arriving from its first
/// byte read.
#[derive(Debug)]
pub struct Conn {
    stream: Arc<TcpStream>,
    activity: Arc<Activity>,
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.stream.poll_read_ready(cx))?;
            match self.stream.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    if n > 0 && !self.activity.answering.load(Ordering::Relaxed) {
                        self.activity.reading.store(true, Ordering::Relaxed);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self.stream.try_write(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The write side closes with the socket, once the place and the
        // connection both let it go.
        Poll::Ready(socket2::SockRef::from(&*self.stream).shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(doing: Doing, served: bool, quiet_ms: u64) -> Seen {
        Seen {
            doing,
            served,
            quiet_for: Duration::from_millis(quiet_ms),
        }
    }

    /// Who makes room, at a limit of 3.
    #[test]
    fn who_makes_room() {
        use Doing::{Answering, Asking, Gone, Silent, Waiting};
        let cases: &[(&str, Vec<Seen>, Room)] = &[
            (
                "under the limit",
                vec![seen(Silent, false, 5_000)],
                Room::Free,
            ),
            (
                "a silent newcomer past its grace before an idle scraper",
                vec![
                    seen(Silent, true, 9_000),
                    seen(Silent, false, 150),
                    seen(Answering, true, 0),
                ],
                Room::Evict(1),
            ),
            (
                "an idle scraper keeps its place under twice the limit",
                vec![
                    seen(Silent, true, 9_000),
                    seen(Silent, false, 50),
                    seen(Answering, true, 0),
                ],
                Room::Past,
            ),
            (
                "the oldest of two silent ones",
                vec![
                    seen(Silent, false, 300),
                    seen(Silent, false, 900),
                    seen(Answering, false, 0),
                ],
                Room::Evict(1),
            ),
            (
                "a byte and nothing more, before an idle scraper",
                vec![
                    seen(Silent, true, 9_000),
                    seen(Asking, false, 5_000),
                    seen(Answering, false, 0),
                ],
                Room::Evict(1),
            ),
            (
                "silent before stalled",
                vec![
                    seen(Asking, false, 5_000),
                    seen(Silent, false, 200),
                    seen(Answering, false, 0),
                ],
                Room::Evict(1),
            ),
            (
                "a request the node has not read yet is its own backlog",
                vec![
                    seen(Waiting, false, 5_000),
                    seen(Waiting, true, 5_000),
                    seen(Answering, false, 0),
                ],
                Room::Past,
            ),
            (
                "one its client closed goes first, whatever its age",
                vec![
                    seen(Silent, false, 5_000),
                    seen(Gone, true, 1),
                    seen(Answering, false, 0),
                ],
                Room::Evict(1),
            ),
            (
                "idle keep-alive connections stay under twice the limit",
                vec![
                    seen(Silent, true, 2_000),
                    seen(Silent, true, 7_000),
                    seen(Answering, true, 0),
                ],
                Room::Past,
            ),
            (
                "within the grace, nobody: in past the limit",
                vec![
                    seen(Silent, false, 10),
                    seen(Asking, false, 20),
                    seen(Answering, true, 0),
                ],
                Room::Past,
            ),
            (
                "an answer is never cut",
                vec![
                    seen(Answering, true, 60_000),
                    seen(Answering, false, 60_000),
                    seen(Answering, true, 60_000),
                ],
                Room::Past,
            ),
        ];
        for (what, held, expected) in cases {
            assert_eq!(room(3, held), *expected, "{what}");
        }
        // At twice the limit the grace ends: who never asked first, then
        // the idle scraper, then a request not yet read; with nothing but
        // answers, the newcomer is closed.
        let mut full = vec![seen(Answering, true, 0); 3];
        full.push(seen(Waiting, false, 0));
        full.push(seen(Silent, true, 5_000));
        full.push(seen(Silent, false, 10));
        assert_eq!(
            room(3, &full),
            Room::Evict(5),
            "the newest that never asked"
        );
        full[5] = seen(Answering, false, 0);
        assert_eq!(room(3, &full), Room::Evict(4), "then the idle scraper");
        full[4] = seen(Answering, false, 0);
        assert_eq!(
            room(3, &full),
            Room::Evict(3),
            "then a request not yet read"
        );
        let answers = vec![seen(Answering, true, 0); 6];
        assert_eq!(room(3, &answers), Room::Refuse);
    }

    async fn pair(listener: &tokio::net::TcpListener) -> (TcpStream, TcpStream) {
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    /// Places held never pass twice the limit: past it, nobody to close,
    /// the newcomer is refused.
    #[tokio::test]
    async fn the_listener_never_holds_more_than_twice_its_limit() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let places = Places::new(2, Default::default());
        let mut kept = Vec::new();
        let mut refused = 0;
        for _ in 0..6 {
            let (client, accepted) = pair(&listener).await;
            let taken = places.take(accepted);
            match taken.held {
                Some((place, conn)) => {
                    place.activity.answering();
                    kept.push((client, place, conn));
                }
                None => refused += 1,
            }
        }
        assert_eq!(places.len(), 4);
        assert_eq!(refused, 2);
    }
}
