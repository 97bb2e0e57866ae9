//! The admin listener's places: at most `admin_max_connections` at once,
//! and at the limit one of the silent ones makes room for the newcomer.
//!
//! A health check, a scrape or a script connects and asks at once; a flood
//! of idle connections (a hostile client, or a script that leaks them)
//! sends nothing. So at the limit the node closes the oldest connection
//! that has nothing to answer: none of its request is waiting to be read,
//! none is being answered, and it has had [`GRACE`] to send one. Past the
//! limit, up to twice it, newcomers are let in while every silent one is
//! younger than that; at twice the limit the oldest silent one goes,
//! whatever its age. A flood costs its own connections their places, not
//! a check its answer, and never the node its descriptors. nginx drops
//! idle keep-alive connections the same way when it runs out of
//! connections.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

/// How long a new connection has to send its request before it counts as
/// silent at the limit: a client on any network sends it at once.
pub const GRACE: Duration = Duration::from_millis(100);

/// One admin connection as its place sees it.
#[derive(Debug)]
struct Held {
    accepted: Instant,
    stream: Arc<TcpStream>,
    /// A request has been read and its answer not yet written.
    answering: Arc<AtomicBool>,
    close: Arc<Notify>,
}

impl Held {
    /// Nothing to answer: no request under way, none waiting to be read.
    fn silent(&self) -> bool {
        if self.answering.load(Ordering::Relaxed) {
            return false;
        }
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Pending: nothing has arrived. A byte, an error or the end: it is
        // asking, or it is gone and its task closes it anyway.
        matches!(self.stream.poll_peek(&mut cx, &mut buf), Poll::Pending)
    }
}

/// The places of the admin listener.
#[derive(Debug)]
pub struct Places {
    max: usize,
    open: Mutex<BTreeMap<u64, Held>>,
    next: AtomicU64,
}

/// A connection's place: given back when dropped.
#[derive(Debug)]
pub struct Place {
    places: Arc<Places>,
    id: u64,
    /// Notified when the place is taken for a newcomer.
    pub close: Arc<Notify>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.places
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl Places {
    pub fn new(max: usize) -> Arc<Places> {
        Arc::new(Places {
            max: max.max(1),
            open: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        })
    }

    /// A place for `stream`, and how many connections were closed to make
    /// room for it: the oldest silent one, at the limit. When every place
    /// is asking or answering, the newcomer is let in past the limit, which
    /// holds again as they finish: their answers are in memory, and quick.
    pub fn take(self: &Arc<Places>, stream: TcpStream) -> (Place, Conn, u64) {
        let stream = Arc::new(stream);
        let answering = Arc::new(AtomicBool::new(false));
        let close = Arc::new(Notify::new());
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let mut evicted = 0;
        while open.len() >= self.max {
            // Past twice the limit, the grace is over for all.
            let graced = open.len() < self.max.saturating_mul(2);
            let oldest = open
                .iter()
                .find(|(_, held)| {
                    !(graced && now.saturating_duration_since(held.accepted) < GRACE)
                        && held.silent()
                })
                .map(|(id, _)| *id);
            let Some(oldest) = oldest else {
                break;
            };
            if let Some(held) = open.remove(&oldest) {
                held.close.notify_one();
                evicted += 1;
            }
        }
        open.insert(
            id,
            Held {
                accepted: now,
                stream: Arc::clone(&stream),
                answering: Arc::clone(&answering),
                close: Arc::clone(&close),
            },
        );
        drop(open);
        let place = Place {
            places: Arc::clone(self),
            id,
            close,
        };
        (place, Conn { stream, answering }, evicted)
    }

    /// Connections held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// An admin connection's stream, shared with its place (which looks at
/// what waits to be read), marking a request as being answered from its
/// first byte read until the first byte of its answer is written.
#[derive(Debug)]
pub struct Conn {
    stream: Arc<TcpStream>,
    answering: Arc<AtomicBool>,
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
                    if n > 0 {
                        self.answering.store(true, Ordering::Relaxed);
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
                Ok(n) => {
                    if n > 0 {
                        self.answering.store(false, Ordering::Relaxed);
                    }
                    return Poll::Ready(Ok(n));
                }
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
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    async fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn at_the_limit_the_oldest_silent_connection_makes_room() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let places = Places::new(2);
        // The oldest asks; the second is silent.
        let (mut asking, first) = pair(&listener).await;
        asking
            .write_all(b"GET /healthz HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let (_silent, second) = pair(&listener).await;
        // Give the request time to arrive.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let (a, _, evicted) = places.take(first);
        assert_eq!(evicted, 0);
        let (b, _, evicted) = places.take(second);
        assert_eq!(evicted, 0);
        // Within its grace, a silent connection keeps its place.
        let (_c_client, third) = pair(&listener).await;
        let (c, _, evicted) = places.take(third);
        assert_eq!(evicted, 0, "the silent one is within its grace");
        drop(c);
        tokio::time::sleep(GRACE).await;
        let (_c_client, third) = pair(&listener).await;
        let (_c, _, evicted) = places.take(third);
        assert_eq!(evicted, 1, "one made room");
        assert_eq!(places.len(), 2);
        // The silent one went, not the older one that asks.
        tokio::time::timeout(std::time::Duration::from_millis(100), b.close.notified())
            .await
            .expect("the silent connection is closed");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), a.close.notified())
                .await
                .is_err(),
            "the asking connection keeps its place"
        );
    }

    #[tokio::test]
    async fn when_every_place_asks_the_newcomer_gets_in_past_the_limit() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let places = Places::new(1);
        let (mut asking, first) = pair(&listener).await;
        asking.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let (_a, _, _) = places.take(first);
        let (_b_client, second) = pair(&listener).await;
        let (b, _, evicted) = places.take(second);
        assert_eq!(evicted, 0);
        assert_eq!(places.len(), 2);
        drop(b);
        assert_eq!(places.len(), 1, "a place is given back when dropped");
    }
}
