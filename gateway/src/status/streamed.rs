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
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// Bytes of one piece.
const PIECE: usize = 64 * 1024;
/// Pieces encoded ahead of the client.
const AHEAD: usize = 4;

/// An answer's body, its pieces coming from the encoder.
#[derive(Debug)]
pub struct Streamed {
    pieces: mpsc::Receiver<io::Result<Bytes>>,
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        // An error ends the body without its last chunk: the client sees
        // an answer cut short, never a shorter answer that looks whole.
        self.pieces
            .poll_recv(cx)
            .map(|piece| piece.map(|piece| piece.map(Frame::data)))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Runs `encode` on a blocking thread, writing compact JSON (the status
/// API's encoding) to the body as it comes, then a closing newline. Must
/// be called within a tokio runtime.
pub fn json<F>(encode: F) -> Streamed
where
    F: FnOnce(&mut dyn io::Write) -> serde_json::Result<()> + Send + 'static,
{
    let (tx, pieces) = mpsc::channel(AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut out = Pieces {
            tx: tx.clone(),
            piece: Vec::with_capacity(PIECE),
        };
        let encoded = encode(&mut out).map_err(io::Error::from).and_then(|()| {
            out.piece.push(b'\n');
            out.send()
        });
        if let Err(error) = encoded {
            // Gone already if the client left; otherwise it ends the body.
            let _ = tx.blocking_send(Err(error));
        }
    });
    Streamed { pieces }
}

/// The encoder's output, cut into pieces.
struct Pieces {
    tx: mpsc::Sender<io::Result<Bytes>>,
    piece: Vec<u8>,
}

impl Pieces {
    /// Sends the piece so far; waits while the client is behind.
    fn send(&mut self) -> io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        let piece = std::mem::replace(&mut self.piece, Vec::with_capacity(PIECE));
        self.tx
            .blocking_send(Ok(Bytes::from(piece)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client left"))
    }
}

impl io::Write for Pieces {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.piece.extend_from_slice(data);
        if self.piece.len() >= PIECE {
            self.send()?;
        }
        Ok(data.len())
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
        done_rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the encoder gave up once the body was dropped");
    }
}
