//! The node's verdict board: recomputes every route's verdict when
//! something that can move one changes, and publishes a snapshot that the
//! status API (and gossip) read without waiting on anything.
//!
//! Changes arrive as wake-ups on one `Notify`: replica sets and states,
//! circuit transitions, reloads, the runtime's reachability. A burst of
//! them is folded into one recomputation.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use picket_proto::Verdict;
use tokio::sync::watch;

use super::{BreakerFacts, ReplicaFacts, Verdicts, judge};
use crate::changes::Changes;
use crate::clock::now_unix_ms;
use crate::proxy::{Proxy, Route};
use crate::shutdown::{Shutdown, Tasks};
use crate::targets::runtime_status::RuntimeStatus;
use crate::upstream::Source;
use crate::upstream::health::Health;

/// Quiet time folding a burst of changes into one recomputation.
pub const SETTLE: Duration = Duration::from_millis(5);
/// Recomputation even without a change, so that nothing can be missed.
pub const EVERY: Duration = Duration::from_secs(5);

/// Every route's verdict on this node.
#[derive(Debug)]
pub struct Board {
    verdicts: Mutex<Verdicts>,
    published: ArcSwap<Vec<Verdict>>,
    changes: watch::Sender<Arc<Vec<Verdict>>>,
    pub runtime: Arc<RuntimeStatus>,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            verdicts: Mutex::default(),
            published: ArcSwap::default(),
            changes: watch::channel(Arc::default()).0,
            runtime: Arc::default(),
        }
    }
}

/// A replica's facts, owning what the judgement borrows.
struct Owned {
    ready: bool,
    ejected: Option<crate::upstream::health::EjectReason>,
    failing: Option<crate::upstream::health::EjectReason>,
    new_refused: Option<Arc<str>>,
    images: Arc<[String]>,
}

fn breaker_facts(route: &Route) -> BreakerFacts {
    match &route.breaker {
        None => BreakerFacts::DISABLED,
        Some(circuit) => {
            let view = circuit.view();
            BreakerFacts {
                state: view.phase,
                reason: view.last_transition.map(|t| t.reason),
            }
        }
    }
}

fn replica_facts(route: &Route) -> Vec<Owned> {
    route
        .upstream
        .replicas()
        .iter()
        .map(|r| {
            // On trial is not serving yet: counted with the ejected, for
            // what it was ejected for.
            let ejected = match r.health() {
                Health::Ejected { reason, .. } => Some(reason),
                Health::Probation { after, .. } => Some(after),
                _ => None,
            };
            Owned {
                ready: r.ready(),
                ejected,
                failing: r.failing(),
                new_refused: r.new_refused(),
                images: r.images(),
            }
        })
        .collect()
}

impl Board {
    /// Judges every route of the proxy's table; returns whether any verdict
    /// changed.
    pub fn recompute(&self, proxy: &Proxy) -> bool {
        let table = proxy.table();
        let now = now_unix_ms();
        let stale = self.runtime.stale_since();
        let reached = self.runtime.reached();
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed = false;
        let mut names = Vec::with_capacity(table.len());
        for route in table.values() {
            let (source, owned, circuit) = (
                route.upstream.source,
                replica_facts(route),
                breaker_facts(route),
            );
            let replica_facts: Vec<ReplicaFacts<'_>> = owned
                .iter()
                .map(|o| ReplicaFacts {
                    ready: o.ready,
                    ejected: o.ejected,
                    failing: o.failing,
                    new_refused: o.new_refused.as_deref(),
                    images: o.images.iter().map(String::as_str).collect(),
                })
                .collect();
            let mut judgement = judge(source, reached, &replica_facts, &circuit);
            // Nothing to judge, and the node knows why: it says so rather
            // than "scaled to zero".
            if replica_facts.is_empty()
                && let Some(why) = route.upstream.unresolved()
            {
                judgement.heart = picket_proto::Heart::Red;
                judgement.reason = why.to_string();
            }
            let route_stale = if source == Source::Runtime {
                stale
            } else {
                None
            };
            changed |= verdicts.update(&route.config.name, judgement, route_stale, now);
            names.push(route.config.name.as_str());
        }
        // A route the runtime declared but the node refused serves
        // nothing: red, with why.
        let refused = proxy.refused();
        for refusal in refused.iter() {
            let judgement = super::Judgement {
                heart: picket_proto::Heart::Red,
                reason: format!("refused ({}): {}", refusal.declared_by, refusal.rule),
                ready: 0,
                total: 0,
                images: Vec::new(),
                circuit: picket_proto::BreakerState::Disabled,
            };
            changed |= verdicts.update(&refusal.name, judgement, None, now);
            names.push(refusal.name.as_str());
        }
        changed |= verdicts.retain(&names);
        if changed {
            let all = Arc::new(verdicts.all());
            self.published.store(Arc::clone(&all));
            self.changes.send_replace(all);
        }
        changed
    }

    /// The verdicts as last published, by route name.
    pub fn snapshot(&self) -> Arc<Vec<Verdict>> {
        self.published.load_full()
    }

    /// Every published snapshot, as it is published: what gossip reads.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Vec<Verdict>>> {
        self.changes.subscribe()
    }
}

/// Keeps `board` current until `shutdown`.
pub fn spawn(
    board: Arc<Board>,
    proxy: Arc<Proxy>,
    changes: &Changes,
    mut shutdown: Shutdown,
    tasks: &mut Tasks,
) {
    let mut changes = changes.subscribe();
    tasks.spawn("verdict board", async move {
        board.recompute(&proxy);
        loop {
            tokio::select! {
                Ok(()) = changes.changed() => tokio::time::sleep(SETTLE).await,
                () = tokio::time::sleep(EVERY) => {}
                () = shutdown.wait() => return,
            }
            board.recompute(&proxy);
        }
    });
}
