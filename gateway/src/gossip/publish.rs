//! Writing this node's verdicts into its own gossip state: a route's key
//! set when its value changed, deleted when the route went, nothing else
//! touched. Only this node's own keys are ever written.

use std::collections::BTreeMap;
use std::sync::Arc;

use picket_proto::gossip::{self, ROUTE_PREFIX, TABLE_KEY};
use picket_proto::{TableGeneration, Verdict};
use tokio::sync::watch;

use super::Chitchat;
use crate::shutdown::Shutdown;

/// Gossip values by route, as written.
pub(super) type Written = BTreeMap<String, String>;

/// What to write to go from one set of values to the next.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Writes {
    /// Routes whose value is new or changed, with the value.
    pub set: Vec<(String, String)>,
    /// Routes no longer there.
    pub gone: Vec<String>,
}

impl Writes {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.gone.is_empty()
    }
}

/// The writes that turn `written` into `now`.
pub(super) fn diff(written: &Written, now: &Written) -> Writes {
    Writes {
        set: now
            .iter()
            .filter(|(route, value)| written.get(*route) != Some(*value))
            .map(|(route, value)| (route.clone(), value.clone()))
            .collect(),
        gone: written
            .keys()
            .filter(|route| !now.contains_key(*route))
            .cloned()
            .collect(),
    }
}

/// Each verdict's gossip value, by route; one that does not fit is left
/// out (and logged).
pub(super) fn values(verdicts: &[Verdict]) -> Written {
    verdicts
        .iter()
        .filter_map(|v| Some((v.route.to_string(), encoded(&gossip::fit(v.clone()))?)))
        .collect()
}

/// A value as gossip text, or `None` (logged) when it does not fit.
pub(super) fn encoded<T: serde::Serialize>(value: &T) -> Option<String> {
    match gossip::encode_value(value) {
        Ok(text) => Some(text),
        Err(error) => {
            tracing::warn!(%error, "a gossip value does not fit; not published");
            None
        }
    }
}

/// Writes this node's verdicts and the generation of its route table when
/// they change, until `shutdown`.
pub(super) async fn run(
    chitchat: Chitchat,
    mut verdicts: watch::Receiver<Arc<Vec<Verdict>>>,
    mut table: watch::Receiver<Option<TableGeneration>>,
    mut written: Written,
    mut shutdown: Shutdown,
) {
    loop {
        tokio::select! {
            changed = verdicts.changed() => if changed.is_err() { return },
            // A table no one tells any more keeps its last value.
            Ok(()) = table.changed() => {
                let value = table.borrow_and_update().as_ref().and_then(encoded);
                if let Some(value) = value {
                    chitchat.lock().await.self_node_state().set(TABLE_KEY, value);
                }
                continue;
            }
            () = shutdown.wait() => return,
        }
        let now = values(&verdicts.borrow_and_update());
        let writes = diff(&written, &now);
        if writes.is_empty() {
            continue;
        }
        {
            let mut chitchat = chitchat.lock().await;
            let own = chitchat.self_node_state();
            for (route, value) in &writes.set {
                own.set(format!("{ROUTE_PREFIX}{route}"), value);
            }
            for route in &writes.gone {
                own.delete(&format!("{ROUTE_PREFIX}{route}"));
            }
        }
        written = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(pairs: &[(&str, &str)]) -> Written {
        pairs
            .iter()
            .map(|(r, v)| (r.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_changed_and_new_routes_are_set_and_gone_ones_deleted() {
        let before = written(&[("api", "green"), ("web", "red"), ("old", "green")]);
        let now = written(&[("api", "green"), ("web", "green"), ("new", "orange")]);
        assert_eq!(
            diff(&before, &now),
            Writes {
                set: vec![
                    ("new".to_string(), "orange".to_string()),
                    ("web".to_string(), "green".to_string())
                ],
                gone: vec!["old".to_string()],
            }
        );
    }

    #[test]
    fn the_same_values_write_nothing() {
        let same = written(&[("api", "green"), ("web", "red")]);
        assert!(diff(&same, &same).is_empty());
        assert!(diff(&Written::new(), &Written::new()).is_empty());
    }

    #[test]
    fn from_nothing_every_route_is_set_and_to_nothing_every_route_goes() {
        let some = written(&[("api", "green"), ("web", "red")]);
        let up = diff(&Written::new(), &some);
        assert_eq!(up.set.len(), 2);
        assert!(up.gone.is_empty());
        let down = diff(&some, &Written::new());
        assert!(down.set.is_empty());
        assert_eq!(down.gone, vec!["api".to_string(), "web".to_string()]);
    }
}
