//! A JSON answer sent as it is encoded.
//!
//! The whole cluster view at 100 nodes × 1,000 routes is 18 MB of JSON.
//! Encoded into one buffer and then sent, a script waited for the encoding
//! and then for the transfer, and the node grew by the buffer (and by its
//! doublings) for every such request. Encoded on a blocking thread into
//! 64 KiB pieces that go out as they are made, the transfer runs beside
//! the encoding, and a request holds at most a few pieces: the encoder
//! waits while the client reads.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// Bytes of one piece.
const PIECE: usize = 64 * 1024;
/// Pieces encoded ahead of the client.
const AHEAD: usize = 4;
/// How long the encoder waits for a client to take a piece before it
/// gives up, freeing its thread and the view it holds (nginx's
/// `send_timeout` is 60 s too).
const PATIENCE: Duration = Duration::from_secs(60);

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
    json_within(encode, PATIENCE)
}

fn json_within<F>(encode: F, patience: Duration) -> Streamed
where
    F: FnOnce(&mut Pieces) -> serde_json::Result<()> + Send + 'static,
{
    let (tx, pieces) = mpsc::channel(AHEAD);
    let finished = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&finished);
    tokio::task::spawn_blocking(move || {
        let mut out = Pieces {
            tx,
            runtime: tokio::runtime::Handle::current(),
            patience,
            piece: Vec::with_capacity(PIECE),
        };
        let encoded = encode(&mut out).map_err(io::Error::from).and_then(|()| {
            out.piece.push(b'\n');
            out.send()
        });
        match encoded {
            Ok(()) => done.store(true, Ordering::Release),
            Err(error) => tracing::debug!(%error, "a streamed answer was not finished"),
        }
    });
    Streamed { pieces, finished }
}

/// The encoder's output, cut into pieces. A type of its own, not a
/// `dyn Write`: the encoder writes millions of fragments (a brace, a key,
/// a number), and through a `dyn Write` each was a call of its own, which
/// made the whole view three times slower to encode.
pub struct Pieces {
    tx: mpsc::Sender<Bytes>,
    runtime: tokio::runtime::Handle,
    patience: Duration,
    piece: Vec<u8>,
}

impl Pieces {
    /// Sends the piece so far; waits while the client is behind, for
    /// `patience` at most.
    fn send(&mut self) -> io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(
            &mut self.piece,
            Vec::with_capacity(PIECE),
        ));
        let sent = self
            .runtime
            .block_on(tokio::time::timeout(self.patience, self.tx.send(piece)));
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client left")),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing for too long",
            )),
        }
    }
}

impl io::Write for Pieces {
    #[inline]
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.piece.extend_from_slice(data);
        if self.piece.len() >= PIECE {
            self.send()?;
        }
        Ok(data.len())
    }

    #[inline]
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.write(data).map(|_| ())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
        let mut body = json(move |out| serde_json::to_writer(out, &Endless(done_tx)));
        body.frame().await.unwrap().unwrap();
        drop(body);
        tokio::task::spawn_blocking(move || done_rx.recv_timeout(Duration::from_secs(5)))
            .await
            .unwrap()
            .expect("the encoder gave up once the body was dropped");
    }

    #[tokio::test]
    async fn a_client_that_takes_nothing_is_given_up_and_sees_the_answer_cut_short() {
        let answer: Vec<String> = (0..100_000).map(|i| format!("route-{i:05}")).collect();
        let mut body = json_within(
            move |out| serde_json::to_writer(out, &answer),
            Duration::from_millis(100),
        );
        // The client takes nothing while the encoder fills what it may
        // encode ahead, and waits, and gives up.
        tokio::time::sleep(Duration::from_millis(500)).await;
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
}
