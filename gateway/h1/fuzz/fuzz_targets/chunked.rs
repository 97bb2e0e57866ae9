//! Whatever a peer sends as a chunked body, however its bytes arrive: the
//! decoder never panics, decodes the same data to the same end, holds
//! nothing beyond its limits, and what the encoder frames of that data
//! decodes to it again.
//!
//! ## Checked
//! - Fed in pieces of the sizes the input chooses, the decoder yields the
//!   same data, ends at the same byte (the rest stays for the next
//!   message), or refuses, or waits for more, exactly as when fed the
//!   whole input at once.
//! - When it waits for more, it leaves at most `MAX_CHUNK_LINE` or
//!   `MAX_TRAILERS` bytes unconsumed: a peer cannot make the proxy buffer
//!   without bound. A body cut short is `Truncated` at end of input.
//! - What it accepts, the grammar `body.rs` documents accepts too, to the
//!   same data and rest: hex digits (at most 16), optional spaces or tabs,
//!   an optional `;` extension without control characters, CRLF; chunk
//!   data and its CRLF; trailer lines `name: value` with a token name; an
//!   empty line.
//! - The decoded data, framed again by `BodyEncoder::Chunked` in pieces,
//!   decodes to the same data with nothing left over.
//!
//! ## Input
//! Byte 0: its low three bits plus one is the number of piece sizes that
//! follow, one byte each (0 means all that is left); bit 3 asks for a run
//! of one byte inserted into the body, described by the three bytes after
//! the sizes (where, as a fraction of 256; how long, times 128; which
//! byte), so that long lines and trailers reach the limits although the
//! fuzzer's inputs are a few KiB. The rest is the body.

#![no_main]

use bytes::{Buf, Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use picket_h1::body::{BodyDecoder, BodyEncoder, Decoded, LAST_CHUNK};
use picket_h1::{MAX_CHUNK_LINE, MAX_TRAILERS, ParseError, is_token};

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let count = usize::from(control & 7) + 1;
    if rest.len() < count {
        return;
    }
    let (sizes, rest) = rest.split_at(count);
    let pieces: Vec<usize> = sizes
        .iter()
        .map(|&s| if s == 0 { usize::MAX } else { usize::from(s) })
        .collect();
    let body = match (control & 8 != 0, rest) {
        (true, [at, len, byte, body @ ..]) => {
            let at = body.len() * usize::from(*at) / 256;
            let mut padded = body[..at].to_vec();
            padded.resize(at + usize::from(*len) * 128, *byte);
            padded.extend_from_slice(&body[at..]);
            padded
        }
        (true, _) => return,
        (false, body) => body.to_vec(),
    };

    let at_once = decode(&body, &[usize::MAX]);
    let piecewise = decode(&body, &pieces);
    assert_eq!(
        piecewise, at_once,
        "the body depends on how its bytes arrive ({pieces:?})"
    );

    if let End::Done(rest) = &at_once.end {
        assert_eq!(
            documented(&body),
            Some((at_once.data.clone(), &rest[..])),
            "accepted beyond the documented chunked grammar"
        );
        let framed = encode(&at_once.data, &pieces);
        let again = decode(&framed, &[usize::MAX]);
        assert_eq!(again.data, at_once.data, "framed again, the data changes");
        assert_eq!(
            again.end,
            End::Done(Bytes::new()),
            "framed again, the end moves"
        );
    }
});

/// How a body ended.
#[derive(Debug, PartialEq)]
enum End {
    /// With what followed it.
    Done(Bytes),
    /// The input ended first.
    Truncated,
    Refused(ParseError),
}

#[derive(Debug, PartialEq)]
struct Decoding {
    data: Vec<u8>,
    end: End,
}

/// Decodes `input` fed in pieces of the given sizes, in turn.
fn decode(input: &[u8], pieces: &[usize]) -> Decoding {
    let mut decoder = BodyDecoder::chunked();
    assert_eq!(decoder.remaining(), None);
    let mut buf = BytesMut::new();
    let mut data = Vec::new();
    let mut fed = 0;
    let mut sizes = pieces.iter().cycle();
    loop {
        match decoder.decode(&mut buf) {
            Ok(Decoded::Data(piece)) => {
                assert!(!piece.is_empty(), "an empty piece of data");
                data.extend_from_slice(&piece);
            }
            Ok(Decoded::Trailers(lines)) => {
                assert!(decoder.is_done(), "trailers end the body");
                assert!(!lines.is_empty());
            }
            Ok(Decoded::Done) => {
                assert!(decoder.is_done());
                assert_eq!(decoder.decode(&mut buf), Ok(Decoded::Done));
                buf.extend_from_slice(&input[fed..]);
                return Decoding {
                    data,
                    end: End::Done(buf.freeze()),
                };
            }
            Ok(Decoded::NeedMore) => {
                assert!(
                    buf.len() <= MAX_CHUNK_LINE.max(MAX_TRAILERS),
                    "{} bytes held while waiting for more",
                    buf.len()
                );
                if fed == input.len() {
                    assert_eq!(decoder.at_eof(), Err(ParseError::Truncated));
                    return Decoding {
                        data,
                        end: End::Truncated,
                    };
                }
                let size = (*sizes.next().unwrap_or(&usize::MAX)).min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + size]);
                fed += size;
            }
            Err(e) => {
                return Decoding {
                    data,
                    end: End::Refused(e),
                };
            }
        }
    }
}

/// Frames `data` as a chunked body, cut into pieces of the given sizes.
fn encode(data: &[u8], pieces: &[usize]) -> Vec<u8> {
    let mut encoder = BodyEncoder::Chunked;
    let mut out = Vec::new();
    let mut at = 0;
    let mut sizes = pieces.iter().cycle();
    while at < data.len() {
        let size = (*sizes.next().unwrap_or(&usize::MAX)).min(data.len() - at);
        let Ok(mut framed) = encoder.encode(Bytes::copy_from_slice(&data[at..at + size])) else {
            panic!("a chunked encoder refuses data");
        };
        while framed.has_remaining() {
            let chunk = framed.chunk();
            out.extend_from_slice(chunk);
            let n = chunk.len();
            framed.advance(n);
        }
        at += size;
    }
    let Ok(mut end) = encoder.finish() else {
        panic!("a chunked encoder refuses its end");
    };
    assert_eq!(end.copy_to_bytes(end.remaining()), LAST_CHUNK);
    out.extend_from_slice(LAST_CHUNK);
    out
}

/// The chunked grammar as `body.rs` documents it, at once and without
/// limits: the body's data and what follows it, or `None`.
fn documented(input: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    fn line(at: &[u8]) -> Option<(&[u8], &[u8])> {
        let end = at.windows(2).position(|w| w == b"\r\n")?;
        Some((&at[..end], &at[end + 2..]))
    }
    let visible = |b: &u8| *b == b'\t' || (*b >= 0x20 && *b != 0x7f);
    let mut data = Vec::new();
    let mut at = input;
    loop {
        let (size_line, after) = line(at)?;
        let digits = size_line
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        if digits == 0 || digits > 16 {
            return None;
        }
        let blanks = size_line[digits..]
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        let extension = &size_line[digits + blanks..];
        if !extension.is_empty() && (extension[0] != b';' || !extension.iter().all(visible)) {
            return None;
        }
        let size = std::str::from_utf8(&size_line[..digits])
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())?;
        at = after;
        if size == 0 {
            break;
        }
        let chunk = at.get(..size)?;
        if at.get(size..size + 2)? != b"\r\n" {
            return None;
        }
        data.extend_from_slice(chunk);
        at = &at[size + 2..];
    }
    loop {
        let (trailer, after) = line(at)?;
        at = after;
        if trailer.is_empty() {
            break;
        }
        let colon = trailer.iter().position(|&b| b == b':')?;
        let (name, value) = (&trailer[..colon], &trailer[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) || !value.iter().all(visible) {
            return None;
        }
    }
    Some((data, at))
}
