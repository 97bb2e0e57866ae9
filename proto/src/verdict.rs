//! A node's judgement of a route, as it travels between processes.
//!
//! Its texts are shared (`Arc`), not owned: a node holds every member's
//! verdict on each route, and the members of one cluster mostly name the
//! same routes, give the same reasons and run the same images. A node
//! that holds one copy of each such text and lets every verdict point to
//! it (see the gossip view's interner) holds 100,000 verdicts in a few
//! megabytes less per copy. On the wire they are plain strings and lists.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The colour of a verdict.
///
/// Ordered by severity so that sorting puts the worst first with `Reverse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Heart {
    /// Every replica is ready, or the external host accepts a connection.
    Green,
    /// Some replicas are ready, not all.
    Orange,
    /// None is ready, the host refuses, or the circuit is open.
    Red,
}

/// The state of a route's circuit breaker on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// The breaker is not enabled for this route.
    Disabled,
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    /// Its name, as logs, metrics, the status API and gossip's JSON say it.
    pub const fn label(self) -> &'static str {
        match self {
            BreakerState::Disabled => "disabled",
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// How many replicas run one image.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageCount {
    /// Its label: the name's last path part, the tag unless it is
    /// `latest`, and the start of the digest when one is known
    /// (`api:1.4@sha256:4c0f12ab9d2e`, `nginx@sha256:4c0f12ab9d2e`,
    /// `api:1.4`). Two builds under one tag are two labels.
    pub image: String,
    /// How many replicas run it; a replica with several images (a pod's
    /// app and sidecars) counts once under each.
    pub replicas: u32,
}

/// One node's verdict on one route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub route: Arc<str>,
    pub heart: Heart,
    /// Why the heart has its colour, in words an operator reads.
    pub reason: Arc<str>,
    pub ready: u32,
    pub total: u32,
    /// The images its replicas run, most replicas first, then by label.
    pub images: Arc<[ImageCount]>,
    pub circuit: BreakerState,
    /// When the heart or reason last changed, in milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// Since when the runtime's data is stale (its API unreachable), if it is.
    pub runtime_stale_since_unix_ms: Option<u64>,
}

/// The heart a verdict shows to a reader (the status API, its filters):
/// its own, or `Stale` while the runtime it was judged from is silent. A
/// verdict on data no one can refresh is never a current pass; the heart
/// it last had is shown beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShownHeart {
    Green,
    Orange,
    Red,
    Stale,
}

impl ShownHeart {
    /// Its name, as the status API says it.
    pub const fn label(self) -> &'static str {
        match self {
            ShownHeart::Green => "green",
            ShownHeart::Orange => "orange",
            ShownHeart::Red => "red",
            ShownHeart::Stale => "stale",
        }
    }
}

impl Verdict {
    /// The heart a reader is shown: `Stale` while the runtime is silent.
    pub fn shown_heart(&self) -> ShownHeart {
        match (self.runtime_stale_since_unix_ms, self.heart) {
            (Some(_), _) => ShownHeart::Stale,
            (None, Heart::Green) => ShownHeart::Green,
            (None, Heart::Orange) => ShownHeart::Orange,
            (None, Heart::Red) => ShownHeart::Red,
        }
    }
}

/// A verdict as the status API shows it: its fields as they travel, but
/// `heart` the [`ShownHeart`] and `last_heart` the verdict's own heart
/// while it is stale (`null` otherwise). Gossip carries the verdict as it
/// is; only readers see this shape.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a Verdict);

impl Serialize for Shown<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let v = self.0;
        let shown = v.shown_heart();
        let mut out = serializer.serialize_struct("Verdict", 10)?;
        out.serialize_field("route", &*v.route)?;
        out.serialize_field("heart", &shown)?;
        out.serialize_field(
            "last_heart",
            &(shown == ShownHeart::Stale).then_some(v.heart),
        )?;
        out.serialize_field("reason", &*v.reason)?;
        out.serialize_field("ready", &v.ready)?;
        out.serialize_field("total", &v.total)?;
        out.serialize_field("images", &*v.images)?;
        out.serialize_field("circuit", &v.circuit)?;
        out.serialize_field("since_unix_ms", &v.since_unix_ms)?;
        out.serialize_field(
            "runtime_stale_since_unix_ms",
            &v.runtime_stale_since_unix_ms,
        )?;
        out.end()
    }
}

/// `#[serde(serialize_with)]` for a verdict the status API shows.
pub fn serialize_shown<S: serde::Serializer>(
    verdict: &Verdict,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    Shown(verdict).serialize(serializer)
}

/// `#[serde(serialize_with)]` for an optional verdict the status API
/// shows.
pub fn serialize_shown_option<S: serde::Serializer>(
    verdict: &Option<Verdict>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    verdict.as_ref().map(Shown).serialize(serializer)
}

/// Every verdict of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub node: String,
    pub verdicts: Vec<Verdict>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(heart: Heart, stale: Option<u64>) -> Verdict {
        Verdict {
            route: "api".into(),
            heart,
            reason: "all 2 ready".into(),
            ready: 2,
            total: 2,
            images: [].into(),
            circuit: BreakerState::Closed,
            since_unix_ms: 7,
            runtime_stale_since_unix_ms: stale,
        }
    }

    #[test]
    fn a_stale_verdict_shows_a_heart_of_its_own_and_the_last_beside_it() {
        let fresh = serde_json::to_value(Shown(&verdict(Heart::Green, None))).unwrap();
        assert_eq!(fresh["heart"], "green");
        assert_eq!(fresh["last_heart"], serde_json::Value::Null);
        let stale = serde_json::to_value(Shown(&verdict(Heart::Green, Some(5)))).unwrap();
        assert_eq!(stale["heart"], "stale");
        assert_eq!(stale["last_heart"], "green");
        assert_eq!(stale["runtime_stale_since_unix_ms"], 5);
        // Every field of the verdict is shown, under its own name.
        let plain = serde_json::to_value(verdict(Heart::Red, Some(5))).unwrap();
        for (name, value) in plain.as_object().unwrap() {
            if name != "heart" {
                assert_eq!(&stale[name], value, "{name}");
            }
        }
        assert_eq!(
            verdict(Heart::Red, Some(1)).shown_heart(),
            ShownHeart::Stale
        );
        assert_eq!(
            verdict(Heart::Orange, None).shown_heart(),
            ShownHeart::Orange
        );
    }
}
