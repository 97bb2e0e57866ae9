//! One body codec for both sides of the proxy: the client's request body
//! and the upstream's response body are decoded by [`BodyDecoder`], and
//! every body that leaves, either way, is framed by [`BodyEncoder`].
//!
//! The proxy never forwards framing bytes: a chunked body is decoded to
//! its data and encoded again, extensions dropped, so what the next hop
//! sees is framed by what this side parsed, never by what the sender
//! wrote. Trailers are parsed (each line `name: value`) and handed on as
//! [`Decoded::Trailers`]; the proxy writes again those that may cross
//! ([`last_chunk_with`]).
//!
//! ## Limits
//! A chunk-size line (with its extensions, without its CRLF) is at most
//! [`MAX_CHUNK_LINE`] bytes and the trailers at most [`MAX_TRAILERS`] bytes
//! in all, however the bytes arrive: whole, or a byte at a time. A line
//! that trickles in is scanned for its end once, not again on every read. A chunk size is hex digits
//! only (no sign, no `0x`, at most 16 of them), and every line ends in
//! CRLF.

use bytes::buf::Chain;
use bytes::{Buf, Bytes, BytesMut};

use crate::{MAX_CHUNK_LINE, MAX_TRAILERS, ParseError};

/// What one decoding step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    Data(Bytes),
    /// The trailer lines of a chunked body, each `name: value` and CRLF
    /// between them ([`trailer_fields`] reads them); the body has ended.
    Trailers(Bytes),
    /// The buffer holds no complete next piece: read more.
    NeedMore,
    Done,
}

/// Where a chunked body decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data.
    Data(u64),
    /// After a chunk's data, expecting its CRLF.
    DataEnd,
    /// After the last chunk: bytes of whole trailer lines, kept at the
    /// front of the buffer until the blank line that ends them.
    Trailers(usize),
}

/// Decodes one body from the bytes of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDecoder {
    state: State,
    /// Bytes at the front of the buffer already searched for a line end.
    scanned: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    Chunked(Chunk),
    /// Until the sender closes (responses only).
    UntilClose,
    Done,
}

/// Where the first CRLF of `buf` starts, searching from `from` (the CR of
/// a CRLF may stand just before it).
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let from = from.saturating_sub(1).min(buf.len());
    buf[from..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|at| from + at)
}

/// Parses a chunk-size line without its CRLF: hex digits, then optional
/// extensions after `;` (whitespace allowed before it).
fn chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let bad = ParseError::Chunk("bad chunk size");
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 || digits > 16 {
        return Err(bad);
    }
    // Whitespace before an extension is spaces and tabs only: a bare CR
    // (which `trim_ascii` would skip) ends no line here.
    let rest = &line[digits..];
    let bws = rest
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(rest.len());
    let rest = &rest[bws..];
    if !rest.is_empty() && rest[0] != b';' {
        return Err(bad);
    }
    if rest.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(ParseError::Chunk("control character in a chunk extension"));
    }
    line[..digits]
        .iter()
        .try_fold(0u64, |n, &b| {
            let d = (b as char).to_digit(16)?;
            n.checked_mul(16)?.checked_add(u64::from(d))
        })
        .ok_or(bad)
}

impl BodyDecoder {
    /// A body of `n` bytes.
    pub fn length(n: u64) -> BodyDecoder {
        let state = if n == 0 {
            State::Done
        } else {
            State::Length(n)
        };
        BodyDecoder { state, scanned: 0 }
    }

    pub fn chunked() -> BodyDecoder {
        BodyDecoder {
            state: State::Chunked(Chunk::Size),
            scanned: 0,
        }
    }

    /// A body that ends when the sender closes the connection.
    pub fn until_close() -> BodyDecoder {
        BodyDecoder {
            state: State::UntilClose,
            scanned: 0,
        }
    }

    /// No body.
    pub fn empty() -> BodyDecoder {
        BodyDecoder {
            state: State::Done,
            scanned: 0,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes still to come, when known.
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            State::Chunked(_) | State::UntilClose => None,
        }
    }

    /// Decodes the next piece of the body from `buf`, taking what it uses
    /// out of it; what follows the body stays.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ParseError> {
        loop {
            match &mut self.state {
                State::Done => return Ok(Decoded::Done),
                State::UntilClose | State::Length(_) if buf.is_empty() => {
                    return Ok(Decoded::NeedMore);
                }
                State::UntilClose => return Ok(Decoded::Data(buf.split().freeze())),
                State::Length(remaining) => {
                    let take = usize::try_from(*remaining)
                        .unwrap_or(usize::MAX)
                        .min(buf.len());
                    *remaining -= take as u64;
                    if *remaining == 0 {
                        self.state = State::Done;
                    }
                    return Ok(Decoded::Data(buf.split_to(take).freeze()));
                }
                State::Chunked(chunk) => match decode_chunk(chunk, buf, &mut self.scanned)? {
                    Some(Decoded::Done) => self.state = State::Done,
                    Some(Decoded::Trailers(trailers)) => {
                        self.state = State::Done;
                        return Ok(Decoded::Trailers(trailers));
                    }
                    Some(decoded) => return Ok(decoded),
                    None => {}
                },
            }
        }
    }

    /// The sender closed the connection: the end of a body that runs until
    /// then, else a truncated body.
    pub fn at_eof(&mut self) -> Result<(), ParseError> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Ok(())
            }
            State::Length(_) | State::Chunked(_) => Err(ParseError::Truncated),
        }
    }
}

/// One step of a chunked body: `None` when the state moved and decoding
/// goes on.
fn decode_chunk(
    chunk: &mut Chunk,
    buf: &mut BytesMut,
    scanned: &mut usize,
) -> Result<Option<Decoded>, ParseError> {
    match *chunk {
        Chunk::Size => {
            let Some(end) = line_end(buf, *scanned) else {
                *scanned = buf.len();
                // The line so far, less a CR that may start its CRLF.
                let line = buf.len() - usize::from(buf.last() == Some(&b'\r'));
                if line > MAX_CHUNK_LINE {
                    return Err(ParseError::Chunk("chunk-size line too long"));
                }
                return Ok(Some(Decoded::NeedMore));
            };
            *scanned = 0;
            if end > MAX_CHUNK_LINE {
                return Err(ParseError::Chunk("chunk-size line too long"));
            }
            let size = chunk_size(&buf[..end])?;
            buf.advance(end + 2);
            *chunk = if size == 0 {
                Chunk::Trailers(0)
            } else {
                Chunk::Data(size)
            };
            Ok(None)
        }
        Chunk::Data(remaining) => {
            if buf.is_empty() {
                return Ok(Some(Decoded::NeedMore));
            }
            let take = usize::try_from(remaining)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let left = remaining - take as u64;
            *chunk = if left == 0 {
                Chunk::DataEnd
            } else {
                Chunk::Data(left)
            };
            Ok(Some(Decoded::Data(buf.split_to(take).freeze())))
        }
        Chunk::DataEnd => {
            if buf.len() < 2 {
                return Ok(Some(Decoded::NeedMore));
            }
            if &buf[..2] != b"\r\n" {
                return Err(ParseError::Chunk("missing CRLF after chunk data"));
            }
            buf.advance(2);
            *chunk = Chunk::Size;
            Ok(None)
        }
        Chunk::Trailers(seen) => {
            let rest = &buf[seen..];
            let Some(end) = line_end(rest, *scanned) else {
                *scanned = rest.len();
                if seen + rest.len() > MAX_TRAILERS {
                    return Err(ParseError::Chunk("trailers too large"));
                }
                return Ok(Some(Decoded::NeedMore));
            };
            *scanned = 0;
            if seen + end + 2 > MAX_TRAILERS {
                return Err(ParseError::Chunk("trailers too large"));
            }
            if end > 0 {
                if !is_field_line(&rest[..end]) {
                    return Err(ParseError::Chunk("malformed trailer line"));
                }
                *chunk = Chunk::Trailers(seen + end + 2);
                return Ok(None);
            }
            // The blank line: the end of the body.
            if seen == 0 {
                buf.advance(2);
                return Ok(Some(Decoded::Done));
            }
            let lines = buf.split_to(seen - 2).freeze();
            buf.advance(4);
            Ok(Some(Decoded::Trailers(lines)))
        }
    }
}

/// Each trailer line of a [`Decoded::Trailers`] as (name, value), the
/// value without the whitespace around it.
pub fn trailer_fields(lines: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    lines.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let value = line[colon + 1..].trim_ascii();
        Some((&line[..colon], value))
    })
}

/// The trailers that cross: those of the upstream's (or the client's)
/// trailers that are neither hop-by-hop nor about framing, routing or
/// the connection, which only a head may carry (RFC 9110 §6.5.1). Names
/// holding `_` only when `underscores`.
pub fn clean_trailers(mut trailers: http::HeaderMap, underscores: bool) -> http::HeaderMap {
    const HEAD_ONLY: [&str; 8] = [
        "content-length",
        "content-encoding",
        "content-type",
        "content-range",
        "host",
        "authorization",
        "set-cookie",
        "expect",
    ];
    let connection: Vec<Vec<u8>> = trailers
        .get_all(http::header::CONNECTION)
        .iter()
        .map(|v| v.as_bytes().to_vec())
        .collect();
    let names: Vec<http::header::HeaderName> = trailers.keys().cloned().collect();
    for name in names {
        let bytes = name.as_str().as_bytes();
        let named = crate::names(connection.iter().map(Vec::as_slice), bytes);
        if crate::is_hop_by_hop(bytes)
            || HEAD_ONLY.contains(&name.as_str())
            || named
            || (!underscores && bytes.contains(&b'_'))
        {
            trailers.remove(&name);
        }
    }
    trailers
}

/// Trailer lines as a header map; a field whose name or value the map
/// refuses is left out.
pub fn trailer_map(lines: &[u8]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (name, value) in trailer_fields(lines) {
        if let (Ok(name), Ok(value)) = (
            http::header::HeaderName::from_bytes(name),
            http::header::HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
    map
}

/// The end of a chunked body with trailers: the last chunk, each field,
/// and the blank line.
pub fn last_chunk_with<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut out = b"0\r\n".to_vec();
    for (name, value) in fields {
        crate::write_header(&mut out, name, value);
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Whether a trailer line is `name: value` with a token name.
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    colon > 0
        && line[..colon].iter().all(|&b| crate::is_token(b))
        && line[colon + 1..]
            .iter()
            .all(|&b| (b >= 0x20 && b != 0x7f) || b == b'\t')
}

/// The size line of one chunk, on the stack.
#[derive(Debug, Clone, Copy)]
pub struct ChunkSize {
    bytes: [u8; 18],
    start: u8,
}

impl ChunkSize {
    /// `{len:x}\r\n`, or nothing when `len` is `None`.
    fn new(len: Option<usize>) -> ChunkSize {
        let mut bytes = [0u8; 18];
        let Some(mut n) = len else {
            return ChunkSize { bytes, start: 18 };
        };
        bytes[16] = b'\r';
        bytes[17] = b'\n';
        let mut i = 16;
        loop {
            i -= 1;
            bytes[i] = b"0123456789abcdef"[n & 0xf];
            n >>= 4;
            if n == 0 {
                break;
            }
        }
        ChunkSize {
            bytes,
            start: i as u8,
        }
    }
}

impl Buf for ChunkSize {
    fn remaining(&self) -> usize {
        18 - self.start as usize
    }

    fn chunk(&self) -> &[u8] {
        &self.bytes[self.start as usize..]
    }

    fn advance(&mut self, cnt: usize) {
        self.start = (self.start as usize + cnt).min(18) as u8;
    }
}

/// One piece of a body, framed for the wire.
pub type Framed = Chain<Chain<ChunkSize, Bytes>, &'static [u8]>;

/// The end of a chunked body, without trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The end of a chunked body after its last piece of data.
const DATA_END_LAST_CHUNK: &[u8] = b"\r\n0\r\n\r\n";

/// Frames a body that leaves, the same way on both sides: as the length
/// the head declared (and never a byte more), chunked, or until close.
///
/// Every piece but the last goes through [`BodyEncoder::encode`]; the last
/// one through [`BodyEncoder::encode_last`] (or [`BodyEncoder::finish`]
/// when no data is left), which frames it together with what ends the
/// body. There is no separate check of the end before the last piece: a
/// length-framed body is complete exactly when its last piece has been
/// framed, so the check belongs to that call. Once ended, the encoder
/// refuses everything.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyEncoder {
    Length(u64),
    Chunked,
    UntilClose,
    /// The body has ended.
    Ended,
}

impl BodyEncoder {
    /// Frames one piece of the body that is not its last. A length-framed
    /// body refuses bytes past its declared length: they would be read as
    /// the next message.
    pub fn encode(&mut self, data: Bytes) -> Result<Framed, ParseError> {
        match self {
            BodyEncoder::Length(remaining) => {
                let len = data.len() as u64;
                *remaining = remaining.checked_sub(len).ok_or(ParseError::BodyLength)?;
                Ok(ChunkSize::new(None).chain(data).chain(&b""[..]))
            }
            BodyEncoder::Chunked if data.is_empty() => {
                Ok(ChunkSize::new(None).chain(data).chain(&b""[..]))
            }
            BodyEncoder::Chunked => Ok(ChunkSize::new(Some(data.len()))
                .chain(data)
                .chain(&b"\r\n"[..])),
            BodyEncoder::UntilClose => Ok(ChunkSize::new(None).chain(data).chain(&b""[..])),
            BodyEncoder::Ended => Err(ParseError::BodyLength),
        }
    }

    /// Frames the last piece of the body and what ends it (the last chunk,
    /// or nothing). A length-framed body must get exactly the bytes it
    /// still lacks: fewer or more is an error, and nothing is framed.
    pub fn encode_last(&mut self, data: Bytes) -> Result<Framed, ParseError> {
        let framed = match self {
            BodyEncoder::Length(remaining) if *remaining != data.len() as u64 => {
                return Err(ParseError::BodyLength);
            }
            BodyEncoder::Chunked if data.is_empty() => {
                ChunkSize::new(None).chain(data).chain(LAST_CHUNK)
            }
            BodyEncoder::Chunked => ChunkSize::new(Some(data.len()))
                .chain(data)
                .chain(DATA_END_LAST_CHUNK),
            BodyEncoder::Length(_) | BodyEncoder::UntilClose => {
                ChunkSize::new(None).chain(data).chain(&b""[..])
            }
            BodyEncoder::Ended => return Err(ParseError::BodyLength),
        };
        *self = BodyEncoder::Ended;
        Ok(framed)
    }

    /// Ends the body with no more data. A length-framed body that got
    /// fewer bytes than it declared is an error.
    pub fn finish(&mut self) -> Result<Framed, ParseError> {
        self.encode_last(Bytes::new())
    }

    /// Ends the body with trailers: after the last chunk of a chunked
    /// body; any other framing has no place for them, and they are left.
    pub fn finish_with<'a>(
        &mut self,
        trailers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<Bytes, ParseError> {
        if *self != BodyEncoder::Chunked {
            let mut end = self.finish()?;
            return Ok(end.copy_to_bytes(end.remaining()));
        }
        *self = BodyEncoder::Ended;
        Ok(Bytes::from(last_chunk_with(trailers)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(
        mut decoder: BodyDecoder,
        input: &[u8],
        step: usize,
    ) -> Result<Vec<u8>, ParseError> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut fed = 0;
        loop {
            match decoder.decode(&mut buf)? {
                Decoded::Data(data) => out.extend_from_slice(&data),
                Decoded::Trailers(_) | Decoded::Done => return Ok(out),
                Decoded::NeedMore if fed < input.len() => {
                    let end = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
                Decoded::NeedMore => {
                    decoder.at_eof()?;
                    return Ok(out);
                }
            }
        }
    }

    #[test]
    fn trailers_are_written_after_the_last_chunk() {
        let end =
            last_chunk_with([(&b"grpc-status"[..], &b"0"[..]), (b"x-sum", b"ab")].into_iter());
        assert_eq!(end, b"0\r\ngrpc-status: 0\r\nx-sum: ab\r\n\r\n");
        let map = trailer_map(b"grpc-status: 0\r\nX-Sum:ab\r\nbad name: x");
        assert_eq!(map.len(), 2, "{map:?}");
        assert_eq!(map["x-sum"], "ab");
    }

    fn drain(mut framed: Framed, out: &mut Vec<u8>) {
        while framed.has_remaining() {
            out.extend_from_slice(framed.chunk());
            let n = framed.chunk().len();
            framed.advance(n);
        }
    }

    /// Every piece through `encode`, then `finish`.
    fn encode_all(mut encoder: BodyEncoder, pieces: &[&[u8]]) -> Result<Vec<u8>, ParseError> {
        let mut out = Vec::new();
        for piece in pieces {
            drain(encoder.encode(Bytes::copy_from_slice(piece))?, &mut out);
        }
        drain(encoder.finish()?, &mut out);
        Ok(out)
    }

    /// Every piece but the last through `encode`, the last through
    /// `encode_last`: how a proxy writes a body whose end it sees with its
    /// last piece.
    fn encode_ending(mut encoder: BodyEncoder, pieces: &[&[u8]]) -> Result<Vec<u8>, ParseError> {
        let mut out = Vec::new();
        let Some((last, rest)) = pieces.split_last() else {
            drain(encoder.finish()?, &mut out);
            return Ok(out);
        };
        for piece in rest {
            drain(encoder.encode(Bytes::copy_from_slice(piece))?, &mut out);
        }
        drain(encoder.encode_last(Bytes::copy_from_slice(last))?, &mut out);
        assert_eq!(encoder, BodyEncoder::Ended);
        assert!(encoder.encode(Bytes::from_static(b"x")).is_err());
        assert!(encoder.finish().is_err());
        Ok(out)
    }

    #[test]
    fn chunked_bodies_decode_however_they_are_split() {
        let body = b"5;name=v\r\nhello\r\n7 ; x\r\n, world\r\n0\r\nx-trailer: 1\r\nGrpc-Status:  0 \r\n\r\nNEXT";
        for step in 1..body.len() {
            let mut buf = BytesMut::new();
            let mut decoder = BodyDecoder::chunked();
            let mut out = Vec::new();
            let mut trailers = Vec::new();
            let mut fed = 0;
            loop {
                match decoder.decode(&mut buf).unwrap() {
                    Decoded::Data(d) => out.extend_from_slice(&d),
                    Decoded::Trailers(lines) => {
                        assert!(decoder.is_done());
                        trailers = trailer_fields(&lines)
                            .map(|(n, v)| (n.to_vec(), v.to_vec()))
                            .collect();
                    }
                    Decoded::Done => break,
                    Decoded::NeedMore => {
                        let end = (fed + step).min(body.len());
                        buf.extend_from_slice(&body[fed..end]);
                        fed = end;
                    }
                }
            }
            assert_eq!(out, b"hello, world", "step {step}");
            assert_eq!(
                trailers,
                [
                    (b"x-trailer".to_vec(), b"1".to_vec()),
                    (b"Grpc-Status".to_vec(), b"0".to_vec())
                ],
                "step {step}"
            );
            // What follows the body stays for the next message.
            buf.extend_from_slice(&body[fed..]);
            assert_eq!(&buf[..], b"NEXT", "step {step}");
        }
    }

    #[test]
    fn malformed_chunks_are_errors() {
        for bad in [
            &b"zz\r\nhello\r\n"[..],
            b"5\r\nhelloXX",
            b"\r\n",
            b"+5\r\nhello\r\n0\r\n\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"-5\r\nhello\r\n",
            b" 5\r\nhello\r\n",
            b"5 x\r\nhello\r\n",
            b"11111111111111111\r\n",
            b"ffffffffffffffff0\r\n",
            b"5\nhello\n0\n\n",
            b"0\r\nno colon\r\n\r\n",
            b"0\r\n: empty name\r\n\r\n",
            b"1;a\x00b\r\nx\r\n0\r\n\r\n",
            b"0\r;;\r\n\r\n",
            b"5\r\r\nhello\r\n0\r\n\r\n",
        ] {
            for step in [1, 3, 1000] {
                assert!(
                    decode_all(BodyDecoder::chunked(), bad, step).is_err(),
                    "{:?} step {step}",
                    String::from_utf8_lossy(bad)
                );
            }
        }
    }

    #[test]
    fn limits_hold_however_the_bytes_arrive() {
        let long_line = [
            b"1;".as_slice(),
            &[b'x'; MAX_CHUNK_LINE],
            b"\r\nx\r\n0\r\n\r\n",
        ]
        .concat();
        let many_trailers: Vec<u8> = [b"0\r\n".as_slice()]
            .into_iter()
            .chain(std::iter::repeat_n(
                &b"x-t: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"[..],
                1000,
            ))
            .chain([&b"\r\n"[..]])
            .flatten()
            .copied()
            .collect();
        for input in [&long_line, &many_trailers] {
            for step in [1, 7, 4096, input.len()] {
                assert!(
                    decode_all(BodyDecoder::chunked(), input, step).is_err(),
                    "step {step}"
                );
            }
        }
        // Just under both limits passes.
        let fits = [
            b"1;".as_slice(),
            &[b'x'; MAX_CHUNK_LINE - 2],
            b"\r\nx\r\n0\r\n\r\n",
        ]
        .concat();
        assert_eq!(
            decode_all(BodyDecoder::chunked(), &fits, fits.len()).unwrap(),
            b"x"
        );
    }

    #[test]
    fn lengths_and_until_close() {
        assert_eq!(
            decode_all(BodyDecoder::length(5), b"helloGET", 3).unwrap(),
            b"hello"
        );
        assert_eq!(decode_all(BodyDecoder::length(0), b"GET", 3).unwrap(), b"");
        assert_eq!(
            decode_all(BodyDecoder::length(9), b"hello", 2),
            Err(ParseError::Truncated)
        );
        assert_eq!(
            decode_all(BodyDecoder::until_close(), b"all of it", 2).unwrap(),
            b"all of it"
        );
        assert_eq!(
            decode_all(BodyDecoder::chunked(), b"5\r\nhel", 2),
            Err(ParseError::Truncated)
        );
    }

    #[test]
    fn encoders_frame_what_they_are_given_and_no_more() {
        assert_eq!(
            encode_all(BodyEncoder::Chunked, &[b"hello", b"", b", world"]).unwrap(),
            b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n"
        );
        assert_eq!(
            encode_all(BodyEncoder::Length(5), &[b"hel", b"lo"]).unwrap(),
            b"hello"
        );
        assert_eq!(
            encode_all(BodyEncoder::Length(4), &[b"hello"]),
            Err(ParseError::BodyLength)
        );
        assert_eq!(
            encode_all(BodyEncoder::Length(6), &[b"hello"]),
            Err(ParseError::BodyLength)
        );
        let big = vec![b'a'; 0x1_0000];
        let framed = encode_all(BodyEncoder::Chunked, &[&big]).unwrap();
        assert!(framed.starts_with(b"10000\r\naaa"));
        // What one side encodes, the other decodes.
        let decoded = decode_all(BodyDecoder::chunked(), &framed, 999).unwrap();
        assert_eq!(decoded, big);
    }

    #[test]
    fn the_last_piece_is_framed_with_the_end() {
        // The body of several pieces whose end is known with its last
        // piece: every byte is framed, the end after it.
        assert_eq!(
            encode_ending(BodyEncoder::Length(10), &[b"hello", b"world"]).unwrap(),
            b"helloworld"
        );
        assert_eq!(
            encode_ending(BodyEncoder::Chunked, &[b"hello", b"world"]).unwrap(),
            b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n"
        );
        assert_eq!(
            encode_ending(BodyEncoder::Chunked, &[b"hello", b""]).unwrap(),
            b"5\r\nhello\r\n0\r\n\r\n"
        );
        assert_eq!(
            encode_ending(BodyEncoder::UntilClose, &[b"a", b"b"]).unwrap(),
            b"ab"
        );
        assert_eq!(encode_ending(BodyEncoder::Length(0), &[]).unwrap(), b"");
        // A last piece short of, or past, the declared length is refused.
        assert_eq!(
            encode_ending(BodyEncoder::Length(10), &[b"hello", b"worl"]),
            Err(ParseError::BodyLength)
        );
        assert_eq!(
            encode_ending(BodyEncoder::Length(10), &[b"hello", b"world!"]),
            Err(ParseError::BodyLength)
        );
        let mut encoder = BodyEncoder::Chunked;
        let end = encoder
            .finish_with([(&b"x-sum"[..], &b"1"[..])].into_iter())
            .unwrap();
        assert_eq!(&end[..], b"0\r\nx-sum: 1\r\n\r\n");
        assert!(encoder.encode(Bytes::from_static(b"x")).is_err());
        let mut encoder = BodyEncoder::Length(0);
        let end = encoder
            .finish_with([(&b"x-sum"[..], &b"1"[..])].into_iter())
            .unwrap();
        assert!(end.is_empty(), "no place for trailers");
    }
    #[test]
    fn only_trailers_that_may_cross_are_kept() {
        let mut trailers = http::HeaderMap::new();
        for (name, value) in [
            ("grpc-status", "0"),
            ("x-digest", "abc"),
            ("content-length", "5"),
            ("host", "elsewhere"),
            ("transfer-encoding", "chunked"),
            ("connection", "x-digest"),
            ("x_under", "1"),
        ] {
            trailers.append(
                http::header::HeaderName::from_static(name),
                http::HeaderValue::from_static(value),
            );
        }
        let kept = clean_trailers(trailers.clone(), false);
        let names: Vec<&str> = kept.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["grpc-status"]);
        let mut with_underscores = trailers;
        with_underscores.remove("connection");
        let kept = clean_trailers(with_underscores, true);
        let mut names: Vec<&str> = kept.keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["grpc-status", "x-digest", "x_under"]);
    }
}
