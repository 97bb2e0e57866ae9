//! Gossip values: chitchat carries strings, so a value is the base64 text
//! of a [`codec`](crate::codec) message, bounded in size on both ends.
//!
//! A node's keys: [`NODE_KEY`] holds its [`NodeInfo`](crate::NodeInfo),
//! [`TABLE_KEY`] the generation of its route table, and `route/NAME`
//! ([`ROUTE_PREFIX`]) its verdict on route `NAME` (the value leaves the
//! name to the key).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use serde::{Serialize, de::DeserializeOwned};

use crate::codec::{self, CodecError};
use std::sync::Arc;

use crate::{ImageCount, Verdict};

/// The key of a node's description.
pub const NODE_KEY: &str = "node";
/// The key of the generation of a node's route table
/// ([`TableGeneration`](crate::TableGeneration)). Nodes that do not know
/// it ignore it.
pub const TABLE_KEY: &str = "table";
/// The prefix of the keys of a node's verdicts.
pub const ROUTE_PREFIX: &str = "route/";

/// The longest value, in bytes of text. A chitchat value that does not fit
/// one datagram blocks every later key of its node, so values are kept far
/// below that.
pub const MAX_VALUE: usize = 2048;

/// The longest reason a verdict carries in gossip, in bytes.
pub const MAX_REASON: usize = 240;
/// The most image counts a verdict carries in gossip (the largest kept).
pub const MAX_IMAGES: usize = 8;
/// The longest image label carried, in bytes; a longer one loses its
/// start, not the tag and digest at its end that tell builds apart.
pub const MAX_IMAGE: usize = 96;

/// Encodes a value as gossip text.
pub fn encode_value<T: Serialize>(value: &T) -> Result<String, CodecError> {
    let text = STANDARD_NO_PAD.encode(codec::encode(value)?);
    if text.len() > MAX_VALUE {
        return Err(CodecError::TooLarge { len: text.len() });
    }
    Ok(text)
}

/// Decodes gossip text, refusing it unread when it is over the limit.
pub fn decode_value<T: DeserializeOwned>(text: &str) -> Result<T, CodecError> {
    if text.len() > MAX_VALUE {
        return Err(CodecError::TooLarge { len: text.len() });
    }
    let bytes = STANDARD_NO_PAD
        .decode(text)
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    codec::decode(&bytes)
}

/// `text` cut to its first `max` bytes, ending with `…` when cut; `None`
/// when it fits.
pub fn cut(text: &str, max: usize) -> Option<String> {
    if text.len() <= max {
        return None;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}…", &text[..end]))
}

/// `text` cut to its last `max` bytes, starting with `…` when cut.
fn cut_start(text: &str, max: usize) -> Option<String> {
    if text.len() <= max {
        return None;
    }
    let mut start = text.len() - max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    Some(format!("…{}", &text[start..]))
}

/// A verdict cut to what gossip carries: its reason and image list bounded
/// (the images with the most replicas kept), so that its value always fits,
/// and its route name left out: the key names the route, and a reader takes
/// the name from the key (as readers always have, so a value with the name
/// in it, from an older node, reads the same). At 100 nodes x 1,000 routes
/// that is 100,000 names fewer to carry to every node. Texts that fit
/// already are kept as they are, still shared.
pub fn fit(mut verdict: Verdict) -> Verdict {
    if let Some(reason) = cut(&verdict.reason, MAX_REASON) {
        verdict.reason = reason.into();
    }
    verdict.route = Arc::from("");
    let too_long = |i: &ImageCount| i.image.len() > MAX_IMAGE;
    if verdict.images.len() > MAX_IMAGES || verdict.images.iter().any(too_long) {
        let mut images = verdict.images.to_vec();
        if images.len() > MAX_IMAGES {
            images.sort_by_key(|i| std::cmp::Reverse(i.replicas));
            images.truncate(MAX_IMAGES);
        }
        for image in &mut images {
            if let Some(label) = cut_start(&image.image, MAX_IMAGE) {
                image.image = label;
            }
        }
        verdict.images = images.into();
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BreakerState, Heart, NodeInfo};

    fn verdict() -> Verdict {
        Verdict {
            route: "api".into(),
            heart: Heart::Orange,
            reason: "2 of 3 ready (1 not ready)".into(),
            ready: 2,
            total: 3,
            images: [ImageCount {
                image: "api:1.4".into(),
                replicas: 3,
            }]
            .into(),
            circuit: BreakerState::Closed,
            since_unix_ms: 1_796_000_000_000,
            runtime_stale_since_unix_ms: None,
        }
    }

    #[test]
    fn values_round_trip() {
        let text = encode_value(&verdict()).unwrap();
        assert_eq!(decode_value::<Verdict>(&text).unwrap(), verdict());
        let info = NodeInfo {
            name: "n1".into(),
            version: "0.1.0".into(),
            admin: "10.0.0.5:9900".into(),
            feed: Some("10.0.0.5:9901".into()),
            feed_fingerprint: None,
            runtime: "docker".into(),
            started_unix_ms: 1,
        };
        assert_eq!(
            decode_value::<NodeInfo>(&encode_value(&info).unwrap()).unwrap(),
            info
        );
    }

    #[test]
    fn the_largest_verdict_fits() {
        let mut huge = verdict();
        huge.route = "r".repeat(500).into();
        huge.reason = "é".repeat(5000).into();
        huge.images = (0..1000)
            .map(|i| ImageCount {
                image: format!("{}:{i}", "x".repeat(300)),
                replicas: i,
            })
            .collect();
        assert!(encode_value(&huge).is_err(), "unbounded, it does not fit");
        let fitted = fit(huge);
        let text = encode_value(&fitted).unwrap();
        assert!(text.len() <= MAX_VALUE);
        assert_eq!(fitted.images.len(), MAX_IMAGES);
        assert_eq!(fitted.images[0].replicas, 999, "the largest kept");
        assert!(fitted.reason.ends_with('…') && fitted.reason.len() <= MAX_REASON);
    }

    #[test]
    fn fitting_keeps_the_order_and_the_ends_of_labels() {
        let mut rollout = verdict();
        // Nine builds under one tag, the newest on most replicas, and a
        // label longer than gossip carries.
        let mut images: Vec<ImageCount> = (0..9)
            .map(|i| ImageCount {
                image: format!("api:1.4@sha256:{i}c0f12ab9d2e"),
                replicas: if i == 8 { 1 } else { 3 },
            })
            .collect();
        let long = format!("{}/api:1.4@sha256:9b1d7e0c3a55", "é".repeat(60));
        images.insert(
            0,
            ImageCount {
                image: long,
                replicas: 4,
            },
        );
        rollout.images = images.into();
        let fitted = fit(rollout);
        let labels: Vec<&str> = fitted.images.iter().map(|i| i.image.as_str()).collect();
        assert_eq!(labels.len(), MAX_IMAGES);
        assert!(labels[0].starts_with('…') && labels[0].ends_with("é/api:1.4@sha256:9b1d7e0c3a55"));
        assert!(labels[0].len() <= MAX_IMAGE, "{}", labels[0]);
        assert_eq!(
            labels[1..],
            (0..7)
                .map(|i| format!("api:1.4@sha256:{i}c0f12ab9d2e"))
                .collect::<Vec<_>>(),
            "most replicas first, ties in their order, the fewest left out"
        );
    }

    #[test]
    fn a_value_leaves_the_route_to_its_key() {
        let mut verdict = verdict();
        verdict.route = "checkout-api-eu-west".into();
        let text = encode_value(&fit(verdict.clone())).unwrap();
        let read: Verdict = decode_value(&text).unwrap();
        assert_eq!(&*read.route, "", "the key names it");
        let whole = encode_value(&verdict).unwrap();
        assert_eq!(
            decode_value::<Verdict>(&whole).unwrap(),
            verdict,
            "older values read as ever"
        );
        assert!(
            text.len() + 20 < whole.len(),
            "{} vs {}",
            text.len(),
            whole.len()
        );
    }

    #[test]
    fn a_verdict_that_fits_keeps_its_shared_texts() {
        let verdict = verdict();
        let fitted = fit(verdict.clone());
        assert!(Arc::ptr_eq(&fitted.reason, &verdict.reason));
        assert!(Arc::ptr_eq(&fitted.images, &verdict.images));
    }

    #[test]
    fn oversized_and_garbage_text_are_refused() {
        assert!(matches!(
            decode_value::<Verdict>(&"A".repeat(MAX_VALUE + 1)),
            Err(CodecError::TooLarge { .. })
        ));
        for text in ["", "!!!", "AQ", "not base64 at all", "AAAAAAAAAAAA"] {
            assert!(decode_value::<Verdict>(text).is_err(), "{text:?}");
        }
    }
}
