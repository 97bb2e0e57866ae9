//! An answer sent as it is encoded.
//!
//! The whole cluster view at 100 nodes × 1,000 routes is 18 MB of JSON,
//! and the metrics of 1,000 routes 2 MB of text. Encoded into one buffer
//! and then sent, a client waited for the encoding and then for the
//! transfer, and the node grew by the buffer (and by its doublings) for
//! every such request. Encoded on a blocking thread into 64 KiB pieces
//! that go out as they are made, the transfer runs beside the encoding,
//! and a request holds a few pieces: the encoder waits while the client
//! reads.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Bytes of one piece.
const PIECE: usize = 64 * 1024;
/// Pieces encoded ahead of the client.
const AHEAD: usize = 4;
/// How long the encoder waits for a client to take a piece before it
/// gives up, freeing its thread and what it holds (nginx's
/// `send_timeout` is 60 s too).
const PATIENCE: Duration = Duration::from_secs(60);
/// How long in all a text encoder that holds locks (the metrics' families)
/// may wait for its client: a series created meanwhile (a new route's on
/// a reload, a replica's first ejection) waits on that lock that long at
/// most. Past it, the rest is encoded ahead into memory, as a whole answer
/// would be, and sent once the locks are let go.
const LOCKED_WAIT: Duration = Duration::from_millis(50);

/// How the encoder waits for a client that is behind.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// Up to this long for each piece; then the answer is given up.
    PerPiece(Duration),
    /// Up to this long in all while encoding; then the rest is kept and
    /// sent once the encoding is done, each piece with [`PATIENCE`].
    InAll(Duration),
}

/// An answer's body, its pieces coming from the encoder.
#[derive(Debug)]
pub struct Streamed {
    pieces: mpsc::Receiver<Bytes>,
    /// Set by the encoder once its last piece is sent.
    finished: Arc<AtomicBool>,
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.pieces.poll_recv(cx).map(|piece| match piece {
            Some(piece) => Some(Ok(Frame::data(piece))),
            None if self.finished.load(Ordering::Acquire) => None,
            // The encoder failed, gave up or panicked: the body ends with
            // an error, without its last chunk, so the client sees an
            // answer cut short, never a shorter answer that looks whole.
            None => Some(Err(io::Error::other("the answer could not be finished"))),
        })
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Runs `encode` on a blocking thread, writing compact JSON (the status
/// API's encoding) to the body as it comes, then a closing newline. Must
/// be called within a tokio runtime with its timer.
pub fn json<F>(encode: F) -> Streamed
where
    F: FnOnce(&mut Pieces) -> serde_json::Result<()> + Send + 'static,
{
    stream(
        move |out| {
            encode(out)?;
            out.piece.push(b'\n');
            Ok::<(), serde_json::Error>(())
        },
        Wait::PerPiece(PATIENCE),
    )
}

/// Runs `encode` on a blocking thread, writing text to the body as it
/// comes. For an encoder that holds locks while it writes: it waits for
/// its client [`LOCKED_WAIT`] in all, then encodes the rest ahead. Must
/// be called within a tokio runtime with its timer.
pub fn text<F>(encode: F) -> Streamed
where
    F: FnOnce(&mut Pieces) -> fmt::Result + Send + 'static,
{
    text_within(encode, LOCKED_WAIT)
}

fn text_within<F>(encode: F, wait: Duration) -> Streamed
where
    F: FnOnce(&mut Pieces) -> fmt::Result + Send + 'static,
{
    stream(
        move |out| {
            encode(out).map_err(|fmt::Error| {
                out.failure
                    .take()
                    .unwrap_or_else(|| io::Error::other("the text could not be encoded"))
            })
        },
        Wait::InAll(wait),
    )
}

fn stream<F, E>(encode: F, wait: Wait) -> Streamed
where
    F: FnOnce(&mut Pieces) -> Result<(), E> + Send + 'static,
    E: Into<io::Error>,
{
    let (tx, pieces) = mpsc::channel(AHEAD);
    let finished = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&finished);
    tokio::task::spawn_blocking(move || {
        let mut out = Pieces {
            tx,
            runtime: tokio::runtime::Handle::current(),
            wait,
            waited: Duration::ZERO,
            kept: Vec::new(),
            failure: None,
            piece: Vec::with_capacity(PIECE),
        };
        let encoded = encode(&mut out)
            .map_err(Into::into)
            .and_then(|()| out.send());
        if let Err(error) = encoded {
            tracing::debug!(%error, "a streamed answer was not finished");
            return;
        }
        let kept = std::mem::take(&mut out.kept);
        if kept.is_empty() {
            done.store(true, Ordering::Release);
            return;
        }
        // What was encoded ahead goes out from a task, so that a slow
        // client holds memory, as a whole answer would, but not a thread.
        let tx = out.tx.clone();
        out.runtime.spawn(async move {
            match send_all(&tx, kept).await {
                Ok(()) => done.store(true, Ordering::Release),
                Err(error) => tracing::debug!(%error, "a streamed answer was not finished"),
            }
        });
    });
    Streamed { pieces, finished }
}

/// Sends `kept` in order, waiting [`PATIENCE`] at most for each piece.
async fn send_all(tx: &mpsc::Sender<Bytes>, kept: Vec<Bytes>) -> io::Result<()> {
    for piece in kept {
        match tokio::time::timeout(PATIENCE, tx.send(piece)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(client_left()),
            Err(_) => return Err(client_idle()),
        }
    }
    Ok(())
}

/// The encoder's output, cut into pieces. A type of its own, not a
/// `dyn Write`: the encoder writes millions of fragments (a brace, a key,
/// a number), and through a `dyn Write` each was a call of its own, which
/// made the whole view three times slower to encode.
pub struct Pieces {
    tx: mpsc::Sender<Bytes>,
    runtime: tokio::runtime::Handle,
    wait: Wait,
    /// How long the encoder has waited for the client so far.
    waited: Duration,
    /// Pieces encoded ahead once the wait in all ran out, in order: sent
    /// once the encoder is done (and has let go of what it held).
    kept: Vec<Bytes>,
    /// Why the last text write failed (`fmt::Error` carries nothing).
    failure: Option<io::Error>,
    piece: Vec<u8>,
}

impl Pieces {
    /// Sends the piece so far; waits while the client is behind, as
    /// `wait` allows.
    fn send(&mut self) -> io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(
            &mut self.piece,
            Vec::with_capacity(PIECE),
        ));
        if !self.kept.is_empty() {
            self.kept.push(piece);
            return Ok(());
        }
        let limit = match self.wait {
            Wait::PerPiece(patience) => patience,
            Wait::InAll(wait) => wait.saturating_sub(self.waited),
        };
        let started = Instant::now();
        // A zero limit still takes a free place: the timeout polls the
        // reservation first.
        let reserved = self
            .runtime
            .block_on(tokio::time::timeout(limit, self.tx.reserve()));
        self.waited += started.elapsed();
        match reserved {
            Ok(Ok(place)) => {
                place.send(piece);
                Ok(())
            }
            Ok(Err(_)) => Err(client_left()),
            Err(_) => match self.wait {
                Wait::PerPiece(_) => Err(client_idle()),
                Wait::InAll(_) => {
                    self.kept.push(piece);
                    Ok(())
                }
            },
        }
    }

    #[inline]
    fn write_bytes(&mut self, data: &[u8]) -> io::Result<()> {
        self.piece.extend_from_slice(data);
        if self.piece.len() >= PIECE {
            self.send()?;
        }
        Ok(())
    }
}

fn client_left() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the client left")
}

fn client_idle() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the client took nothing for too long",
    )
}

impl io::Write for Pieces {
    #[inline]
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_bytes(data)?;
        Ok(data.len())
    }

    #[inline]
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.write_bytes(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl fmt::Write for Pieces {
    #[inline]
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.write_bytes(text.as_bytes()).map_err(|error| {
            self.failure = Some(error);
            fmt::Error
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_streamed_answer_is_the_whole_answer_in_pieces() {
        let answer: Vec<String> = (0..50_000).map(|i| format!("route-{i:05}")).collect();
        let expected = {
            let mut whole = serde_json::to_vec(&answer).unwrap();
            whole.push(b'\n');
            whole
        };
        let given = answer.clone();
        let mut body = json(move |out| serde_json::to_writer(out, &given));
        let mut pieces = 0;
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            assert!(
                data.len() <= PIECE + 64,
                "{} bytes in one piece",
                data.len()
            );
            got.extend_from_slice(&data);
            pieces += 1;
        }
        assert_eq!(got, expected);
        assert!(pieces > expected.len() / PIECE, "{pieces} pieces");
    }

    /// Takes one piece of `body`, drops it, and waits for the encoder to
    /// say (on `done`) that it gave up.
    async fn gives_up_once_dropped(mut body: Streamed, done: std::sync::mpsc::Receiver<()>) {
        body.frame().await.unwrap().unwrap();
        drop(body);
        tokio::task::spawn_blocking(move || done.recv_timeout(Duration::from_secs(5)))
            .await
            .unwrap()
            .expect("the encoder gave up once the body was dropped");
    }

    #[tokio::test]
    async fn the_encoder_stops_when_the_client_leaves() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        struct Endless(std::sync::mpsc::Sender<()>);
        impl serde::Serialize for Endless {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeSeq;
                let mut seq = s.serialize_seq(None)?;
                loop {
                    if let Err(error) = seq.serialize_element("x".repeat(1024).as_str()) {
                        let _ = self.0.send(());
                        return Err(error);
                    }
                }
            }
        }
        let body = json(move |out| serde_json::to_writer(out, &Endless(done_tx)));
        gives_up_once_dropped(body, done_rx).await;
    }

    #[tokio::test]
    async fn a_client_that_takes_nothing_is_given_up_and_sees_the_answer_cut_short() {
        let answer: Vec<String> = (0..100_000).map(|i| format!("route-{i:05}")).collect();
        let mut body = stream(
            move |out| serde_json::to_writer(out, &answer),
            Wait::PerPiece(Duration::from_millis(100)),
        );
        // The client takes nothing while the encoder fills what it may
        // encode ahead, and waits, and gives up: wait for the pieces
        // ahead, then ten times the patience.
        let deadline = Instant::now() + Duration::from_secs(10);
        while body.pieces.len() < AHEAD {
            assert!(
                Instant::now() < deadline,
                "the encoder never filled its room"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut pieces = 0;
        let end = loop {
            match body.frame().await {
                Some(Ok(_)) => pieces += 1,
                other => break other,
            }
        };
        assert_eq!(pieces, AHEAD, "what was encoded ahead, nothing more");
        assert!(
            matches!(end, Some(Err(_))),
            "an error, not the end of a whole answer: {end:?}"
        );
    }

    #[tokio::test]
    async fn an_encoding_error_cuts_the_answer_short() {
        struct Fails;
        impl serde::Serialize for Fails {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        let mut body = json(move |out| serde_json::to_writer(out, &Fails));
        assert!(matches!(body.frame().await, Some(Err(_))));
    }

    fn lines(count: usize) -> String {
        (0..count)
            .map(|i| format!("picket_requests_total{{route=\"r{i}\",class=\"2xx\"}} {i}\n"))
            .collect()
    }

    async fn whole(mut body: Streamed) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            got.extend_from_slice(&frame.unwrap().into_data().unwrap());
        }
        got
    }

    #[tokio::test]
    async fn a_text_is_the_whole_text_in_pieces() {
        let expected = lines(40_000);
        let given = expected.clone();
        let body = text(move |out| {
            for line in given.split_inclusive('\n') {
                fmt::Write::write_str(out, line)?;
            }
            Ok(())
        });
        assert_eq!(whole(body).await, expected.as_bytes());
    }

    #[tokio::test]
    async fn a_text_encoder_lets_go_of_its_lock_when_the_client_is_slow() {
        let expected = lines(40_000);
        assert!(expected.len() > 8 * PIECE, "more than is encoded ahead");
        let lock = Arc::new(std::sync::Mutex::new(()));
        let held = Arc::clone(&lock);
        let given = expected.clone();
        let body = text_within(
            move |out| {
                let _guard = held.lock().unwrap();
                for line in given.split_inclusive('\n') {
                    fmt::Write::write_str(out, line)?;
                }
                Ok(())
            },
            Duration::from_millis(100),
        );
        // The client takes nothing: the encoder waits 100 ms in all, then
        // encodes the rest ahead and lets go of the lock.
        let started = Instant::now();
        let waited = tokio::task::spawn_blocking(move || {
            while started.elapsed() < Duration::from_secs(10) {
                if lock.try_lock().is_ok() {
                    return Some(started.elapsed());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        })
        .await
        .unwrap();
        let waited = waited.expect("the encoder let go of its lock");
        assert!(waited < Duration::from_secs(5), "held for {waited:?}");
        // And the client, reading at last, gets the whole text.
        assert_eq!(whole(body).await, expected.as_bytes());
    }

    #[tokio::test]
    async fn a_text_encoder_stops_when_the_client_leaves() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let body = text_within(
            move |out| {
                let line = "x".repeat(1024);
                loop {
                    if let Err(error) = fmt::Write::write_str(out, &line) {
                        let _ = done_tx.send(());
                        return Err(error);
                    }
                }
            },
            Duration::from_secs(60),
        );
        gives_up_once_dropped(body, done_rx).await;
    }

    #[test]
    fn a_slow_client_does_not_hold_the_encoders_thread() {
        // One blocking thread: a second answer is encoded only once the
        // first has given it back.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(1)
            .build()
            .unwrap();
        runtime.block_on(async {
            let expected = lines(40_000);
            let given = expected.clone();
            let slow = text_within(
                move |out| {
                    for line in given.split_inclusive('\n') {
                        fmt::Write::write_str(out, line)?;
                    }
                    Ok(())
                },
                Duration::from_millis(50),
            );
            // The first client takes nothing; the second is answered.
            let second = text(|out| fmt::Write::write_str(out, "second\n"));
            let answered = tokio::time::timeout(Duration::from_secs(10), whole(second)).await;
            assert_eq!(
                answered.expect("the second answer was encoded"),
                b"second\n"
            );
            assert_eq!(whole(slow).await, expected.as_bytes());
        });
    }
}
