//! The versioned binary codec and its length-prefixed frames.
//!
//! ## Encoding
//! A message is one version byte ([`VERSION`]) followed by the bincode 2
//! encoding of the value. A frame is a 4-byte big-endian length followed by
//! such a message.
//!
//! ## Invariants
//! - Decoding never allocates more than [`MAX_MESSAGE`] bytes for a message:
//!   an announced length above the limit is refused before any buffer grows,
//!   and bincode runs with the same limit.
//! - Garbage, truncation, an unknown version or trailing bytes are errors,
//!   never panics.

use serde::{Serialize, de::DeserializeOwned};

/// The version byte every message starts with.
pub const VERSION: u8 = 1;

/// The largest message, in bytes, that is encoded or decoded.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Bytes of the length prefix of a frame.
pub const FRAME_HEADER: usize = 4;

type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_MESSAGE>,
>;

fn config() -> Config {
    bincode::config::standard().with_limit::<MAX_MESSAGE>()
}

/// Why a message or frame was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("empty message")]
    Empty,
    #[error("unknown version {0} (this build speaks {VERSION})")]
    Version(u8),
    #[error("message of {len} bytes is over the limit of {MAX_MESSAGE}")]
    TooLarge { len: usize },
    #[error("frame is truncated: {have} of {need} bytes")]
    Truncated { have: usize, need: usize },
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// Encodes `value` as a versioned message.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = vec![VERSION];
    let body = bincode::serde::encode_to_vec(value, config())
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    if body.len() + 1 > MAX_MESSAGE {
        return Err(CodecError::TooLarge {
            len: body.len() + 1,
        });
    }
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes a versioned message; the whole slice must be one message.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if version != VERSION {
        return Err(CodecError::Version(version));
    }
    if bytes.len() > MAX_MESSAGE {
        return Err(CodecError::TooLarge { len: bytes.len() });
    }
    let (value, used) = bincode::serde::decode_from_slice(body, config())
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    match body.len() - used {
        0 => Ok(value),
        rest => Err(CodecError::Trailing(rest)),
    }
}

/// Encodes `value` as a frame: length prefix, then the message.
pub fn encode_frame<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let message = encode(value)?;
    let len =
        u32::try_from(message.len()).map_err(|_| CodecError::TooLarge { len: message.len() })?;
    let mut frame = Vec::with_capacity(FRAME_HEADER + message.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&message);
    Ok(frame)
}

/// Reads the length a frame header announces, refusing it if over the limit.
///
/// Returns `Ok(None)` while fewer than [`FRAME_HEADER`] bytes are buffered.
pub fn frame_len(buffered: &[u8]) -> Result<Option<usize>, CodecError> {
    let Some(header) = buffered.first_chunk::<FRAME_HEADER>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(*header) as usize;
    if len > MAX_MESSAGE {
        return Err(CodecError::TooLarge { len });
    }
    Ok(Some(len))
}

/// Decodes the first frame of `buffered`; returns the value and the bytes used.
pub fn decode_frame<T: DeserializeOwned>(buffered: &[u8]) -> Result<(T, usize), CodecError> {
    let len = frame_len(buffered)?.ok_or(CodecError::Truncated {
        have: buffered.len(),
        need: FRAME_HEADER,
    })?;
    let end = FRAME_HEADER + len;
    let message = buffered
        .get(FRAME_HEADER..end)
        .ok_or(CodecError::Truncated {
            have: buffered.len(),
            need: end,
        })?;
    Ok((decode(message)?, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BreakerState, Heart, ImageCount, NodeView, Verdict};

    fn view() -> NodeView {
        NodeView {
            node: "n1".into(),
            verdicts: vec![Verdict {
                route: "api".into(),
                heart: Heart::Orange,
                reason: "2 of 3 replicas ready".into(),
                ready: 2,
                total: 3,
                images: vec![ImageCount {
                    image: "api:1.4".into(),
                    replicas: 2,
                }]
                .into(),
                circuit: BreakerState::Closed,
                since_unix_ms: 1_790_000_000_000,
                runtime_stale_since_unix_ms: None,
            }],
        }
    }

    #[test]
    fn message_round_trips() {
        let bytes = encode(&view()).unwrap();
        assert_eq!(bytes[0], VERSION);
        assert_eq!(decode::<NodeView>(&bytes).unwrap(), view());
    }

    #[test]
    fn frame_round_trips_and_reports_its_length() {
        let mut buffered = encode_frame(&view()).unwrap();
        let whole = buffered.len();
        buffered.extend_from_slice(&[1, 2, 3]);
        let (decoded, used) = decode_frame::<NodeView>(&buffered).unwrap();
        assert_eq!(decoded, view());
        assert_eq!(used, whole);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let frame = encode_frame(&view()).unwrap();
        for cut in 0..frame.len() {
            assert!(
                decode_frame::<NodeView>(&frame[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn oversized_length_is_refused_before_reading() {
        let mut frame = u32::MAX.to_be_bytes().to_vec();
        frame.push(VERSION);
        assert_eq!(
            decode_frame::<NodeView>(&frame).unwrap_err(),
            CodecError::TooLarge {
                len: u32::MAX as usize
            }
        );
    }

    #[test]
    fn unknown_version_and_trailing_bytes_are_refused() {
        let mut bytes = encode(&view()).unwrap();
        bytes[0] = 9;
        assert_eq!(
            decode::<NodeView>(&bytes).unwrap_err(),
            CodecError::Version(9)
        );
        let mut bytes = encode(&view()).unwrap();
        bytes.push(0);
        assert_eq!(
            decode::<NodeView>(&bytes).unwrap_err(),
            CodecError::Trailing(1)
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9);
        let mut errors = 0;
        for len in 0..512 {
            let mut bytes = vec![0; len];
            rng.fill(&mut bytes);
            let mut message = vec![VERSION];
            message.extend_from_slice(&bytes);
            match decode::<NodeView>(&message) {
                Err(CodecError::Malformed(_) | CodecError::Trailing(_)) => errors += 1,
                Err(other) => panic!("{len} random bytes: {other:?}"),
                // Random bytes that happen to be a view are a view: the
                // same view again once encoded and decoded.
                Ok(view) => {
                    let again = encode(&view).expect("a decoded view encodes");
                    assert_eq!(decode::<NodeView>(&again).ok(), Some(view));
                }
            }
        }
        // Nearly all random messages are refused, as malformed or with
        // bytes left over (the empty one and a few short ones may decode).
        assert!(errors >= 500, "only {errors} of 512 refused");
    }

    #[test]
    fn a_huge_announced_string_does_not_allocate_it() {
        // A varint announcing a 2^40-byte route name, then nothing.
        let message = [VERSION, 0xFD, 0, 0, 0, 0, 0, 1, 0, 0];
        assert!(matches!(
            decode::<NodeView>(&message),
            Err(CodecError::Malformed(_))
        ));
    }

    #[test]
    fn json_names_are_snake_case() {
        assert_eq!(
            serde_json::to_string(&BreakerState::HalfOpen).unwrap(),
            "\"half_open\""
        );
        assert_eq!(serde_json::to_string(&Heart::Green).unwrap(), "\"green\"");
        // A circuit's state has one name: in JSON, logs and metrics alike.
        for state in [
            BreakerState::Disabled,
            BreakerState::Closed,
            BreakerState::Open,
            BreakerState::HalfOpen,
        ] {
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{}\"", state.label()));
            assert_eq!(state.to_string(), state.label());
        }
    }
}
