//! The body codec's contract, over any input: whatever a sender frames,
//! under any framing and in any pieces, a receiver decodes to the same
//! bytes however the wire cuts them; and a length-framed encoder finishes
//! only on exactly the bytes it declared.

// A test: an expectation that does not hold is the failure it reports.
#![allow(clippy::expect_used)]

use bytes::{Buf, Bytes, BytesMut};
use picket_h1::ParseError;
use picket_h1::body::{BodyDecoder, BodyEncoder, Decoded, Framed, trailer_fields};
use proptest::prelude::*;

/// What follows the body on the connection: the next message.
const NEXT: &[u8] = b"GET /next HTTP/1.1\r\n\r\n";

#[derive(Debug, Clone, Copy)]
enum Framing {
    Length,
    Chunked,
    ChunkedWithTrailers,
    UntilClose,
}

fn framing() -> impl Strategy<Value = Framing> {
    prop_oneof![
        Just(Framing::Length),
        Just(Framing::Chunked),
        Just(Framing::ChunkedWithTrailers),
        Just(Framing::UntilClose),
    ]
}

/// Bodies of every small size, and some past the buffer sizes the proxy
/// reads with.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..300),
        1 => prop::collection::vec(any::<u8>(), 8000..20_000),
    ]
}

/// Sizes to cut into; each at least 1, cycled.
fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![3 => 1usize..8, 2 => 1usize..2000, 1 => 1usize..70_000],
        1..12,
    )
}

fn drain(mut framed: Framed, out: &mut Vec<u8>) {
    out.extend_from_slice(&framed.copy_to_bytes(framed.remaining()));
}

const TRAILERS: [(&[u8], &[u8]); 2] = [(b"x-sum", b"abc"), (b"grpc-status", b"0")];

/// The wire bytes of `body` framed as `framing`, handed to the encoder in
/// pieces of the sizes `pieces` cycles through; the last piece framed with
/// the end (`with_last`) or followed by `finish`.
fn encode(framing: Framing, body: &[u8], pieces: &[usize], with_last: bool) -> Vec<u8> {
    let mut encoder = match framing {
        Framing::Length => BodyEncoder::Length(body.len() as u64),
        Framing::Chunked | Framing::ChunkedWithTrailers => BodyEncoder::Chunked,
        Framing::UntilClose => BodyEncoder::UntilClose,
    };
    let mut out = Vec::new();
    let mut at = 0;
    let mut sizes = pieces.iter().cycle();
    let trailers = matches!(framing, Framing::ChunkedWithTrailers);
    while at < body.len() {
        let size = (*sizes.next().unwrap_or(&1)).min(body.len() - at);
        let piece = Bytes::copy_from_slice(&body[at..at + size]);
        at += size;
        let framed = if at == body.len() && with_last && !trailers {
            encoder.encode_last(piece)
        } else {
            encoder.encode(piece)
        };
        drain(
            framed.expect("the encoder takes the declared bytes"),
            &mut out,
        );
    }
    if trailers {
        let end = encoder
            .finish_with(TRAILERS.into_iter())
            .expect("trailers end a chunked body");
        out.extend_from_slice(&end);
    } else if encoder != BodyEncoder::Ended {
        drain(encoder.finish().expect("a whole body finishes"), &mut out);
    }
    assert_eq!(encoder, BodyEncoder::Ended);
    out
}

/// A body as a receiver decoded it: its data, its trailers (name, value),
/// and the bytes left after it.
type Received = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>, Vec<u8>);

/// What a receiver makes of `wire`, fed in pieces of the sizes `cuts`
/// cycles through.
fn decode(
    framing: Framing,
    declared: u64,
    wire: &[u8],
    cuts: &[usize],
) -> Result<Received, ParseError> {
    let mut decoder = match framing {
        Framing::Length => BodyDecoder::length(declared),
        Framing::Chunked | Framing::ChunkedWithTrailers => BodyDecoder::chunked(),
        Framing::UntilClose => BodyDecoder::until_close(),
    };
    let mut buf = BytesMut::new();
    let mut data = Vec::new();
    let mut trailers = Vec::new();
    let mut fed = 0;
    let mut sizes = cuts.iter().cycle();
    loop {
        match decoder.decode(&mut buf)? {
            Decoded::Data(piece) => data.extend_from_slice(&piece),
            Decoded::Trailers(lines) => {
                trailers = trailer_fields(&lines)
                    .map(|(n, v)| (n.to_vec(), v.to_vec()))
                    .collect();
            }
            Decoded::Done => break,
            Decoded::NeedMore if fed < wire.len() => {
                let size = (*sizes.next().unwrap_or(&1)).min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + size]);
                fed += size;
            }
            Decoded::NeedMore => {
                decoder.at_eof()?;
                break;
            }
        }
    }
    let mut rest = buf.to_vec();
    rest.extend_from_slice(&wire[fed..]);
    Ok((data, trailers, rest))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_body_under_any_framing_cut_anywhere_decodes_to_itself(
        framing in framing(),
        body in body(),
        pieces in cuts(),
        cuts in cuts(),
        with_last in any::<bool>(),
    ) {
        let mut wire = encode(framing, &body, &pieces, with_last);
        let until_close = matches!(framing, Framing::UntilClose);
        if !until_close {
            wire.extend_from_slice(NEXT);
        }
        let (data, trailers, rest) = decode(framing, body.len() as u64, &wire, &cuts)
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(data, body);
        if matches!(framing, Framing::ChunkedWithTrailers) {
            let expected: Vec<(Vec<u8>, Vec<u8>)> =
                TRAILERS.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            prop_assert_eq!(trailers, expected);
        } else {
            prop_assert!(trailers.is_empty());
        }
        // What follows the body is the next message's, untouched.
        let expected_rest: &[u8] = if until_close { b"" } else { NEXT };
        prop_assert_eq!(rest, expected_rest);
    }

    #[test]
    fn a_body_cut_short_is_never_taken_for_whole(
        framing in prop_oneof![
            Just(Framing::Length),
            Just(Framing::Chunked),
            Just(Framing::ChunkedWithTrailers),
        ],
        body in body(),
        pieces in cuts(),
        cuts in cuts(),
        keep in any::<prop::sample::Index>(),
    ) {
        let wire = encode(framing, &body, &pieces, true);
        // The sender closes anywhere before its last byte.
        let kept = keep.index(wire.len().max(1)).min(wire.len().saturating_sub(1));
        prop_assume!(!wire.is_empty());
        let cut = decode(framing, body.len() as u64, &wire[..kept], &cuts);
        prop_assert!(cut.is_err(), "{} of {} bytes decoded as whole", kept, wire.len());
    }

    #[test]
    fn a_length_encoder_finishes_on_exactly_its_declared_bytes(
        declared in 0u64..5000,
        pieces in prop::collection::vec(0usize..3000, 0..8),
        with_last in any::<bool>(),
    ) {
        let mut encoder = BodyEncoder::Length(declared);
        let total: u64 = pieces.iter().map(|n| *n as u64).sum();
        let mut sent = 0u64;
        let mut refused = false;
        for (i, n) in pieces.iter().enumerate() {
            let piece = Bytes::from(vec![b'x'; *n]);
            let last = with_last && i + 1 == pieces.len();
            let framed = if last { encoder.encode_last(piece) } else { encoder.encode(piece) };
            match framed {
                Ok(framed) => {
                    sent += *n as u64;
                    prop_assert_eq!(framed.remaining(), *n, "nothing but the data");
                }
                Err(e) => {
                    prop_assert_eq!(e, ParseError::BodyLength);
                    refused = true;
                    break;
                }
            }
        }
        // Never a byte past the declared length.
        prop_assert!(sent <= declared);
        if refused {
            // Refused only what did not fit: past the length, or a last
            // piece that left it short.
            prop_assert!(total != declared || with_last);
        } else if encoder != BodyEncoder::Ended {
            prop_assert_eq!(encoder.finish().is_ok(), total == declared);
        } else {
            prop_assert_eq!(total, declared);
        }
    }
}
