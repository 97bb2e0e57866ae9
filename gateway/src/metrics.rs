//! The node's metrics, in Prometheus text format on `/metrics`.
//!
//! Families are registered once at start. The request path never looks a
//! label set up: each route holds its own counters and histogram, resolved
//! when the route table is built, so counting a request is an atomic add.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    route: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabels {
    route: String,
    replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    route: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    route: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

type HistogramFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

fn first_answer_histogram() -> Histogram {
    // 0.5 ms to 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Every metric of a node.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<ClassLabels, Counter>,
    first_answer: HistogramFamily,
    ejections: Family<ReplicaLabels, Counter>,
    readmissions: Family<ReplicaLabels, Counter>,
    in_rotation: Family<RouteLabels, Gauge>,
    retries: Family<RetryLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    unrouted: Counter,
    breaker_transitions: Family<StateLabels, Counter>,
    breaker_refused: Family<RouteLabels, Counter>,
    breaker_state: Family<StateLabels, Gauge>,
}

/// The states of a circuit, as metric labels, in the order of
/// [`BreakerMetrics`]' arrays.
pub const CIRCUIT_STATES: [&str; 3] = ["closed", "open", "half_open"];

/// A route's breaker metric handles.
#[derive(Debug, Clone)]
pub struct BreakerMetrics {
    /// Transitions into each state of [`CIRCUIT_STATES`].
    pub transitions: [Counter; 3],
    pub refused: Counter,
    /// 1 for the current state of [`CIRCUIT_STATES`], 0 for the others.
    pub state: [Gauge; 3],
}

/// The status classes a response is counted under.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// A route's own metric handles.
#[derive(Debug, Clone)]
pub struct RouteMetrics {
    by_class: [Counter; 5],
    pub first_answer: Histogram,
    pub retry_connect: Counter,
    pub retry_answer: Counter,
}

impl RouteMetrics {
    /// Counts a response sent to the client.
    pub fn count(&self, status: http::StatusCode) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.by_class[class].inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("picket");
        let requests = Family::<ClassLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by route and status class",
            requests.clone(),
        );
        let first_answer = HistogramFamily::new_with_constructor(first_answer_histogram);
        registry.register(
            "upstream_first_answer_seconds",
            "Time from sending a request upstream to its response head",
            first_answer.clone(),
        );
        let ejections = Family::<ReplicaLabels, Counter>::default();
        registry.register(
            "replica_ejections",
            "Replicas taken out of this node's rotation after a failed connect",
            ejections.clone(),
        );
        let readmissions = Family::<ReplicaLabels, Counter>::default();
        registry.register(
            "replica_readmissions",
            "Ejected replicas put back by a successful probe",
            readmissions.clone(),
        );
        let in_rotation = Family::<RouteLabels, Gauge>::default();
        registry.register(
            "replicas_in_rotation",
            "Replicas of a route that take requests on this node",
            in_rotation.clone(),
        );
        let retries = Family::<RetryLabels, Counter>::default();
        registry.register(
            "retries",
            "Attempts moved to another replica, by reason (connect or answer)",
            retries.clone(),
        );
        let reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Configuration reloads, by result (applied or refused)",
            reloads.clone(),
        );
        let unrouted = Counter::default();
        registry.register(
            "unrouted_requests",
            "Requests that matched no route and got 404",
            unrouted.clone(),
        );
        let breaker_transitions = Family::<StateLabels, Counter>::default();
        registry.register(
            "breaker_transitions",
            "Circuit breaker transitions, by route and the state entered",
            breaker_transitions.clone(),
        );
        let breaker_refused = Family::<RouteLabels, Counter>::default();
        registry.register(
            "breaker_refused_requests",
            "Requests answered 503 at once because the route's circuit is open",
            breaker_refused.clone(),
        );
        let breaker_state = Family::<StateLabels, Gauge>::default();
        registry.register(
            "breaker_state",
            "Current state of each route's circuit on this node: 1 for the state it is in",
            breaker_state.clone(),
        );
        Metrics {
            registry,
            requests,
            first_answer,
            ejections,
            readmissions,
            in_rotation,
            retries,
            reloads,
            unrouted,
            breaker_transitions,
            breaker_refused,
            breaker_state,
        }
    }

    /// The breaker metric handles of one route.
    pub fn breaker(&self, route: &str) -> BreakerMetrics {
        let labels = |state: &str| StateLabels {
            route: route.into(),
            state: state.into(),
        };
        BreakerMetrics {
            transitions: CIRCUIT_STATES
                .map(|s| self.breaker_transitions.get_or_create(&labels(s)).clone()),
            refused: self
                .breaker_refused
                .get_or_create(&RouteLabels {
                    route: route.into(),
                })
                .clone(),
            state: CIRCUIT_STATES.map(|s| self.breaker_state.get_or_create(&labels(s)).clone()),
        }
    }

    /// The metric handles of one route.
    pub fn route(&self, route: &str) -> RouteMetrics {
        let class = |c: &str| {
            self.requests
                .get_or_create(&ClassLabels {
                    route: route.into(),
                    class: c.into(),
                })
                .clone()
        };
        let retry = |reason: &str| {
            self.retries
                .get_or_create(&RetryLabels {
                    route: route.into(),
                    reason: reason.into(),
                })
                .clone()
        };
        RouteMetrics {
            by_class: CLASSES.map(class),
            first_answer: self
                .first_answer
                .get_or_create(&RouteLabels {
                    route: route.into(),
                })
                .clone(),
            retry_connect: retry("connect"),
            retry_answer: retry("answer"),
        }
    }

    /// Ejection and re-admission counters of one replica.
    pub fn replica(&self, route: &str, replica: &str) -> (Counter, Counter) {
        let labels = ReplicaLabels {
            route: route.into(),
            replica: replica.into(),
        };
        (
            self.ejections.get_or_create(&labels).clone(),
            self.readmissions.get_or_create(&labels).clone(),
        )
    }

    /// Drops the series of a replica that left its route.
    pub fn forget_replica(&self, route: &str, replica: &str) {
        let labels = ReplicaLabels {
            route: route.into(),
            replica: replica.into(),
        };
        self.ejections.remove(&labels);
        self.readmissions.remove(&labels);
    }

    pub fn replicas_in_rotation(&self, route: &str) -> Gauge {
        self.in_rotation
            .get_or_create(&RouteLabels {
                route: route.into(),
            })
            .clone()
    }

    pub fn reload(&self, applied: bool) {
        let result = if applied { "applied" } else { "refused" };
        self.reloads
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    pub fn unrouted(&self) {
        self.unrouted.inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_handles_feed_the_exposition() {
        let metrics = Metrics::new();
        let route = metrics.route("api");
        route.count(http::StatusCode::OK);
        route.count(http::StatusCode::BAD_GATEWAY);
        route.count(http::StatusCode::BAD_GATEWAY);
        route.first_answer.observe(0.002);
        metrics.reload(false);
        let text = metrics.encode();
        assert!(
            text.contains(r#"picket_requests_total{route="api",class="2xx"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"picket_requests_total{route="api",class="5xx"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"picket_upstream_first_answer_seconds_count{route="api"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"picket_config_reloads_total{result="refused"} 1"#),
            "{text}"
        );
    }
}
