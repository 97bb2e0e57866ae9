//! The filters of `/v1/cluster`: `route=NAME`,
//! `heart=green|orange|red|stale` and `node=NAME`, each at most once, all
//! of them holding together. `heart` is the heart a reader is shown: a
//! verdict on data from a silent runtime is `stale`, never `green`. At
//! 100 nodes × 1,000 routes the whole view is 100,000 verdicts; a script
//! that wants one route's, or every red one, asks for those.

use picket_proto::{Member, ShownHeart, Verdict};

/// What a request to `/v1/cluster` keeps.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Filter {
    pub route: Option<String>,
    pub heart: Option<ShownHeart>,
    pub node: Option<String>,
}

/// Why a query is refused (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("unknown filter {0:?}: the filters are route, heart and node")]
    Unknown(String),
    #[error("heart={0:?}: green, orange, red or stale")]
    Heart(String),
    #[error("{0} is given twice")]
    Twice(&'static str),
}

impl Filter {
    /// The filters, as the OpenAPI description lists them.
    pub const NAMES: [&'static str; 3] = ["route", "heart", "node"];

    /// The filters of a query string (percent-decoded; `None`: none).
    pub fn parse(query: Option<&str>) -> Result<Filter, FilterError> {
        let mut filter = Filter::default();
        for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match name.as_ref() {
                "route" => set(&mut filter.route, "route", value.into_owned())?,
                "node" => set(&mut filter.node, "node", value.into_owned())?,
                "heart" => {
                    let heart = match value.as_ref() {
                        "green" => ShownHeart::Green,
                        "orange" => ShownHeart::Orange,
                        "red" => ShownHeart::Red,
                        "stale" => ShownHeart::Stale,
                        other => return Err(FilterError::Heart(other.to_string())),
                    };
                    set(&mut filter.heart, "heart", heart)?;
                }
                other => return Err(FilterError::Unknown(other.to_string())),
            }
        }
        Ok(filter)
    }

    /// Whether a node's entry is kept.
    pub fn keeps_member(&self, member: &Member) -> bool {
        self.node.as_ref().is_none_or(|node| *node == member.name)
    }

    /// Whether a verdict is kept.
    pub fn keeps_verdict(&self, verdict: &Verdict) -> bool {
        self.route
            .as_ref()
            .is_none_or(|route| **route == *verdict.route)
            && self
                .heart
                .is_none_or(|heart| heart == verdict.shown_heart())
    }

    /// Whether it keeps everything.
    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }
}

fn set<T>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), FilterError> {
    if slot.replace(value).is_some() {
        return Err(FilterError::Twice(name));
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use picket_proto::{BreakerState, Heart, Liveness};

    pub(in crate::status) fn verdict(route: &str, heart: Heart) -> Verdict {
        Verdict {
            route: route.into(),
            heart,
            reason: "".into(),
            ready: 0,
            total: 0,
            images: [].into(),
            circuit: BreakerState::Disabled,
            since_unix_ms: 0,
            runtime_stale_since_unix_ms: None,
        }
    }

    pub(in crate::status) fn member(name: &str, verdicts: Vec<Verdict>) -> Member {
        Member {
            name: name.to_string(),
            gossip: String::new(),
            generation: 1,
            liveness: Liveness::Alive,
            heard_unix_ms: 0,
            info: None,
            table: None,
            certificates: Vec::new(),
            verdicts: std::sync::Arc::new(verdicts),
        }
    }

    #[test]
    fn filters_parse_decoded_and_refuse_what_they_do_not_know() {
        assert!(Filter::parse(None).unwrap().is_empty());
        assert!(Filter::parse(Some("")).unwrap().is_empty());
        assert_eq!(
            Filter::parse(Some("route=api.v2&heart=red&node=n%2D1")).unwrap(),
            Filter {
                route: Some("api.v2".into()),
                heart: Some(ShownHeart::Red),
                node: Some("n-1".into()),
            }
        );
        assert_eq!(
            Filter::parse(Some("heart=pink")),
            Err(FilterError::Heart("pink".into()))
        );
        assert_eq!(
            Filter::parse(Some("routes=api")),
            Err(FilterError::Unknown("routes".into()))
        );
        assert_eq!(
            Filter::parse(Some("route=a&route=b")),
            Err(FilterError::Twice("route"))
        );
    }

    #[test]
    fn every_given_filter_must_hold() {
        let filter = Filter::parse(Some("route=api&heart=red&node=n1")).unwrap();
        assert!(filter.keeps_member(&member("n1", Vec::new())));
        assert!(!filter.keeps_member(&member("n2", Vec::new())));
        assert!(filter.keeps_verdict(&verdict("api", Heart::Red)));
        assert!(!filter.keeps_verdict(&verdict("api", Heart::Green)));
        assert!(!filter.keeps_verdict(&verdict("web", Heart::Red)));
        let none = Filter::default();
        assert!(none.keeps_member(&member("n2", Vec::new())));
        assert!(none.keeps_verdict(&verdict("web", Heart::Orange)));
    }

    /// A verdict on data from a silent runtime is no pass: `heart=green`
    /// leaves it out, `heart=stale` finds it.
    #[test]
    fn a_stale_verdict_is_never_green() {
        let stale = Verdict {
            runtime_stale_since_unix_ms: Some(1),
            ..verdict("api", Heart::Green)
        };
        let green = Filter::parse(Some("heart=green")).unwrap();
        let is_stale = Filter::parse(Some("heart=stale")).unwrap();
        assert!(!green.keeps_verdict(&stale));
        assert!(is_stale.keeps_verdict(&stale));
        assert!(green.keeps_verdict(&verdict("api", Heart::Green)));
        assert!(!is_stale.keeps_verdict(&verdict("api", Heart::Green)));
    }
}
