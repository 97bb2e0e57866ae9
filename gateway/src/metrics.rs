//! The node's metrics, in Prometheus text format on `/metrics`.
//!
//! Families are registered once at start. The request path never looks a
//! label set up: each route holds its own counters and histogram, resolved
//! when the route table is built, so counting a request is an atomic add.

use picket_proto::BreakerState;
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
struct EjectionLabels {
    route: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    route: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    route: String,
    cause: String,
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

/// Where a route of the table comes from, and whether it serves.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabels {
    source: &'static str,
    state: &'static str,
}

/// An ACME certificate (by its first name) and one of its phases.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AcmePhaseLabels {
    certificate: String,
    phase: &'static str,
}

/// An ACME certificate and how an order of it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AcmeOrderLabels {
    certificate: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AcmeRefusedLabels {
    certificate: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointStateLabels {
    endpoint: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LivenessLabels {
    liveness: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    name: String,
}

/// The gossip transport's counters.
#[derive(Debug, Clone, Default)]
pub struct GossipMetrics {
    packets_sent: Counter,
    packets_received: Counter,
    bytes_sent: Counter,
    bytes_received: Counter,
    /// By [`Dropped::ALL`]'s order.
    dropped: [Counter; Dropped::ALL.len()],
}

impl GossipMetrics {
    pub fn sent(&self, packets: usize, bytes: usize) {
        self.packets_sent.inc_by(packets as u64);
        self.bytes_sent.inc_by(bytes as u64);
    }

    pub fn received(&self, bytes: usize) {
        self.packets_received.inc();
        self.bytes_received.inc_by(bytes as u64);
    }

    pub fn dropped(&self, why: Dropped) {
        if let Some(i) = Dropped::ALL.iter().position(|d| *d == why) {
            self.dropped[i].inc();
        }
    }

    /// Packets dropped for `why` so far.
    pub fn dropped_count(&self, why: Dropped) -> u64 {
        Dropped::ALL
            .iter()
            .position(|d| *d == why)
            .map_or(0, |i| self.dropped[i].get())
    }

    /// Every dropped packet so far.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().map(Counter::get).sum()
    }

    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.get()
    }

    pub fn packets_received(&self) -> u64 {
        self.packets_received.get()
    }
}

/// The QUIC feed's counters.
#[derive(Debug, Clone, Default)]
pub struct FeedMetrics {
    clients: Gauge,
    frames: Counter,
    bytes: Counter,
    snapshots: Counter,
    slow: Counter,
    refused: Counter,
    evicted: Counter,
}

impl FeedMetrics {
    /// A handshake in progress that gave its place to a newer one.
    pub fn handshake_evicted(&self) {
        self.evicted.inc();
    }

    pub fn evicted_count(&self) -> u64 {
        self.evicted.get()
    }

    pub fn attached(&self) {
        self.clients.inc();
    }

    pub fn detached(&self) {
        self.clients.dec();
    }

    pub fn sent(&self, frames: usize, bytes: usize, snapshot: bool) {
        self.frames.inc_by(frames as u64);
        self.bytes.inc_by(bytes as u64);
        if snapshot {
            self.snapshots.inc();
        }
    }

    /// A client that took nothing for too long, and was let go.
    pub fn slow(&self) {
        self.slow.inc();
    }

    /// A connection that did not speak the feed protocol.
    pub fn refused(&self) {
        self.refused.inc();
    }

    pub fn clients(&self) -> i64 {
        self.clients.get()
    }

    pub fn slow_count(&self) -> u64 {
        self.slow.get()
    }

    pub fn refused_count(&self) -> u64 {
        self.refused.get()
    }
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
    ejection_reasons: Family<EjectionLabels, Counter>,
    readmissions: Family<ReplicaLabels, Counter>,
    in_rotation: Family<RouteLabels, Gauge>,
    retries: Family<RetryLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    table: Family<TableLabels, Gauge>,
    unrouted: Counter,
    breaker_transitions: Family<StateLabels, Counter>,
    breaker_refused: Family<RouteLabels, Counter>,
    breaker_state: Family<StateLabels, Gauge>,
    gossip: GossipMetrics,
    members: Family<LivenessLabels, Gauge>,
    values_refused: Counter,
    catch_up: Counter,
    feed: FeedMetrics,
    runtime_breaker_state: Family<EndpointStateLabels, Gauge>,
    runtime_breaker_trips: Family<EndpointLabels, Counter>,
    runtime_calls_refused: Family<EndpointLabels, Counter>,
    runtime_reachable: Family<EndpointLabels, Gauge>,
    runtime_reachability_changes: Family<EndpointStateLabels, Counter>,
    certificate_expiry: Family<NameLabels, Gauge>,
    certificate_names_refused: Gauge,
    replica_certificate_expiry: Family<ReplicaLabels, Gauge>,
    acme_phase: Family<AcmePhaseLabels, Gauge>,
    acme_orders: Family<AcmeOrderLabels, Counter>,
    acme_refused: Family<AcmeRefusedLabels, Counter>,
    /// Client connections of the proxy listeners.
    pub connections: ConnectionMetrics,
    rate_limited: Family<RouteLabels, Counter>,
    too_large: Family<RouteLabels, Counter>,
    incomplete: Family<CauseLabels, Counter>,
    /// The access log's lines: written, and dropped when its buffer was
    /// full.
    pub access_log: AccessLogMetrics,
}

/// The access log's counters.
#[derive(Debug, Clone, Default)]
pub struct AccessLogMetrics {
    pub written: Counter,
    pub dropped: Counter,
    /// Writes or reopens that failed.
    pub failed: Counter,
}

/// The metric handles of one runtime API endpoint's breaker.
#[derive(Debug, Clone)]
pub struct RuntimeGateMetrics {
    /// 1 for the current state of [`CIRCUIT_STATES`], 0 for the others.
    pub state: [Gauge; 3],
    /// Times the breaker opened.
    pub trips: Counter,
    /// Calls refused before any I/O while it was open.
    pub refused: Counter,
}

/// The proxy listener's client connections.
#[derive(Debug, Clone, Default)]
pub struct ConnectionMetrics {
    /// Open now.
    pub open: Gauge,
    /// Times the listener reached `max_connections` and stopped accepting.
    pub limit_reached: Counter,
    /// Requests refused before routing: malformed heads and targets,
    /// heads over the limits, unsupported framing.
    pub refused: Counter,
    /// TLS handshakes that failed or did not finish within the header
    /// timeout.
    pub tls_handshake_failed: Counter,
    /// TLS handshakes finished, by [`TLS_HANDSHAKE_KINDS`]: a full one, or
    /// a session resumed from a ticket (this node's or another's).
    pub tls_handshakes: [Counter; 2],
    /// Admin connections open now.
    pub admin_open: Gauge,
    /// Admin connections closed to make room for a new one at
    /// `admin_max_connections`.
    pub admin_evicted: Counter,
    /// Admin connections closed at once: twice the limit held, every one
    /// answering.
    pub admin_refused: Counter,
}

/// The kinds of a finished TLS handshake, as metric labels, in the order
/// of [`ConnectionMetrics::tls_handshakes`].
pub const TLS_HANDSHAKE_KINDS: [&str; 2] = ["full", "resumed"];

/// The states of a circuit, as metric labels, in the order of
/// [`BreakerMetrics`]' arrays.
pub const CIRCUIT_STATES: [&str; 3] = [
    BreakerState::Closed.label(),
    BreakerState::Open.label(),
    BreakerState::HalfOpen.label(),
];

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
    /// An attempt that had no answer within the first-answer bound.
    pub retry_timeout: Counter,
    /// Requests refused by the route's rate limit (429).
    pub rate_limited: Counter,
    /// Requests refused for a body over `max_body` (413).
    pub too_large: Counter,
    /// Answers that did not reach the client whole, by cause: looked up
    /// when one happens (rarely), so that a route has no series for them
    /// until then.
    incomplete: Family<CauseLabels, Counter>,
    route: std::sync::Arc<str>,
}

impl RouteMetrics {
    /// Counts a response sent to the client.
    pub fn count(&self, status: http::StatusCode) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.by_class[class].inc();
    }

    /// Counts how an exchange ended, when its answer did not reach the
    /// client whole.
    pub fn ended(&self, ending: crate::ending::Ending) {
        if ending.incomplete() {
            self.incomplete
                .get_or_create(&CauseLabels {
                    route: self.route.to_string(),
                    cause: ending.cause.slug().into(),
                })
                .inc();
        }
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
            "Replicas taken out of this node's rotation, for any reason (see replica_ejections_by_reason)",
            ejections.clone(),
        );
        let ejection_reasons = Family::<EjectionLabels, Counter>::default();
        registry.register(
            "replica_ejections_by_reason",
            "Replicas taken out of this node's rotation, by route and reason: refused, timed_out, unreachable (a failed connect), silent (no answer within the first-answer bound), gateway_errors (502, 503 or 504 answers in a row)",
            ejection_reasons.clone(),
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
        let table = Family::<TableLabels, Gauge>::default();
        registry.register(
            "routes",
            "Routes of this node's table, by source (file or runtime) and state (served, or refused: declared by the runtime and not served)",
            table.clone(),
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
        let packets = Family::<DirectionLabels, Counter>::default();
        registry.register(
            "gossip_packets",
            "Gossip datagrams, by direction (sent or received)",
            packets.clone(),
        );
        let bytes = Family::<DirectionLabels, Counter>::default();
        registry.register(
            "gossip_bytes",
            "Gossip bytes on the wire, by direction (sent or received)",
            bytes.clone(),
        );
        let dropped = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "gossip_dropped_packets",
            "Gossip datagrams dropped before anything parsed them, by reason",
            dropped.clone(),
        );
        let direction = |family: &Family<DirectionLabels, Counter>, d: &str| {
            family
                .get_or_create(&DirectionLabels {
                    direction: d.into(),
                })
                .clone()
        };
        let gossip = GossipMetrics {
            packets_sent: direction(&packets, "sent"),
            packets_received: direction(&packets, "received"),
            bytes_sent: direction(&bytes, "sent"),
            bytes_received: direction(&bytes, "received"),
            dropped: Dropped::ALL.map(|why| {
                dropped
                    .get_or_create(&ReasonLabels {
                        reason: why.label().into(),
                    })
                    .clone()
            }),
        };
        let members = Family::<LivenessLabels, Gauge>::default();
        registry.register(
            "cluster_members",
            "Cluster members as this node sees them, by liveness",
            members.clone(),
        );
        let mut connections = ConnectionMetrics::default();
        registry.register(
            "client_connections",
            "Client connections the proxy serves now",
            connections.open.clone(),
        );
        registry.register(
            "connection_limit_reached",
            "Times the proxy reached max_connections and stopped accepting until a connection closed",
            connections.limit_reached.clone(),
        );
        registry.register(
            "client_requests_refused",
            "Requests refused before routing: malformed heads or targets, heads over the limits, unsupported framing",
            connections.refused.clone(),
        );
        registry.register(
            "tls_handshakes_failed",
            "TLS handshakes on the HTTPS listener that failed or did not finish within the header timeout",
            connections.tls_handshake_failed.clone(),
        );
        let handshakes = Family::<KindLabels, Counter>::default();
        registry.register(
            "tls_handshakes",
            "TLS handshakes finished on the HTTPS listener, by kind: full, or resumed from a session ticket any node of the cluster issued",
            handshakes.clone(),
        );
        connections.tls_handshakes = TLS_HANDSHAKE_KINDS.map(|kind| {
            handshakes
                .get_or_create(&KindLabels { kind: kind.into() })
                .clone()
        });
        registry.register(
            "admin_connections",
            "Connections the admin listener serves now",
            connections.admin_open.clone(),
        );
        registry.register(
            "admin_connections_evicted",
            "Admin connections closed to make room for a new one at admin_max_connections: silent ones first, then stalled, then idle keep-alive ones; never one being answered",
            connections.admin_evicted.clone(),
        );
        registry.register(
            "admin_connections_refused",
            "New admin connections closed at once: twice admin_max_connections held, every one being answered",
            connections.admin_refused.clone(),
        );
        let certificate_expiry = Family::<NameLabels, Gauge>::default();
        registry.register(
            "certificate_expiry_seconds",
            "When each certificate served to HTTPS clients expires, in Unix seconds, by its first name",
            certificate_expiry.clone(),
        );
        let certificate_names_refused = Gauge::default();
        registry.register(
            "runtime_certificate_names_refused",
            "Names that certificates from the runtime ask to serve and the ownership rule refuses them (see /v1/node)",
            certificate_names_refused.clone(),
        );
        let replica_certificate_expiry = Family::<ReplicaLabels, Gauge>::default();
        registry.register(
            "replica_certificate_expiry_seconds",
            "When the certificate each TLS replica presented to this node's last check expires, in Unix seconds",
            replica_certificate_expiry.clone(),
        );
        let acme_phase = Family::<AcmePhaseLabels, Gauge>::default();
        registry.register(
            "acme_certificate_phase",
            "This node's phase for each ACME certificate: 1 for the phase it is in (waiting, ordering, serving, renewing, failing), 0 for the others",
            acme_phase.clone(),
        );
        let acme_orders = Family::<AcmeOrderLabels, Counter>::default();
        registry.register(
            "acme_orders",
            "Orders of ACME certificates this node placed, by how they ended (issued, failed)",
            acme_orders.clone(),
        );
        let acme_refused = Family::<AcmeRefusedLabels, Counter>::default();
        registry.register(
            "acme_certificates_refused",
            "Copies of ACME certificates (from a peer, the cache or an order) refused as not the CA's, by why: chain, lifetime, directory, unusable",
            acme_refused.clone(),
        );
        let local = &*crate::resources::LOCAL;
        registry.register(
            "local_resource_errors",
            "Errors from the node running out of its own resources (file descriptors, buffers, ports); never blamed on a replica",
            local.errors.clone(),
        );
        registry.register(
            "local_resource_exhaustions",
            "Times the node ran out of its own resources (each episode is logged once)",
            local.episodes.clone(),
        );
        let values_refused = Counter::default();
        registry.register(
            "gossip_values_refused",
            "Gossip values from peers that could not be decoded, and were ignored",
            values_refused.clone(),
        );
        let catch_up = Counter::default();
        registry.register(
            "gossip_catch_up_exchanges",
            "Gossip exchanges this node started beyond chitchat's three a round, while it was behind",
            catch_up.clone(),
        );
        let feed = FeedMetrics::default();
        for (name, help, counter) in [
            ("feed_frames", "Frames sent to feed clients", &feed.frames),
            (
                "feed_bytes",
                "Bytes of frames sent to feed clients",
                &feed.bytes,
            ),
            (
                "feed_snapshots",
                "Whole snapshots sent to feed clients: one per subscription, more for clients that fell behind",
                &feed.snapshots,
            ),
            (
                "feed_slow_clients",
                "Feed clients let go because they took nothing for too long",
                &feed.slow,
            ),
            (
                "feed_refused",
                "Feed connections refused: a handshake that failed or took too long, no place left, or not the feed protocol",
                &feed.refused,
            ),
            (
                "feed_handshakes_evicted",
                "Feed handshakes in progress that gave their place to a newer one (the oldest of its address, or of all)",
                &feed.evicted,
            ),
        ] {
            registry.register(name, help, counter.clone());
        }
        registry.register(
            "feed_clients",
            "Clients attached to the QUIC feed",
            feed.clients.clone(),
        );
        let runtime_breaker_state = Family::<EndpointStateLabels, Gauge>::default();
        registry.register(
            "runtime_breaker_state",
            "State of the breaker in front of each runtime API endpoint (API server, engine, socket proxy): 1 for the state it is in",
            runtime_breaker_state.clone(),
        );
        let runtime_breaker_trips = Family::<EndpointLabels, Counter>::default();
        registry.register(
            "runtime_breaker_trips",
            "Times a runtime API endpoint's breaker opened",
            runtime_breaker_trips.clone(),
        );
        let runtime_calls_refused = Family::<EndpointLabels, Counter>::default();
        registry.register(
            "runtime_calls_refused",
            "Calls to a runtime API endpoint refused before any I/O because its breaker was open",
            runtime_calls_refused.clone(),
        );
        let runtime_reachable = Family::<EndpointLabels, Gauge>::default();
        registry.register(
            "runtime_endpoint_reachable",
            "Whether each runtime API endpoint answers (1) or not (0)",
            runtime_reachable.clone(),
        );
        let runtime_reachability_changes = Family::<EndpointStateLabels, Counter>::default();
        registry.register(
            "runtime_reachability_changes",
            "Changes of a runtime API endpoint's reachability, by the state entered (reachable or unreachable)",
            runtime_reachability_changes.clone(),
        );
        let rate_limited = Family::<RouteLabels, Counter>::default();
        registry.register(
            "rate_limited_requests",
            "Requests this node refused with 429 under the route's rate limit",
            rate_limited.clone(),
        );
        let too_large = Family::<RouteLabels, Counter>::default();
        registry.register(
            "body_too_large_requests",
            "Requests this node refused with 413 for a body over the route's max_body",
            too_large.clone(),
        );
        let incomplete = Family::<CauseLabels, Counter>::default();
        registry.register(
            "responses_incomplete",
            "Answers that did not reach the client whole, by route and cause: client_gone, replica_closed, replica_unparsable, node_refused (to frame what the replica sent), or the bound that fired",
            incomplete.clone(),
        );
        let access_log = AccessLogMetrics::default();
        registry.register(
            "access_log_lines",
            "Access log lines written",
            access_log.written.clone(),
        );
        registry.register(
            "access_log_dropped_lines",
            "Access log lines dropped because the log's buffer was full (the request path never waits for the log)",
            access_log.dropped.clone(),
        );
        registry.register(
            "access_log_failures",
            "Access log writes or reopens that failed",
            access_log.failed.clone(),
        );
        Metrics {
            rate_limited,
            too_large,
            incomplete,
            access_log,
            runtime_breaker_state,
            runtime_breaker_trips,
            runtime_calls_refused,
            runtime_reachable,
            runtime_reachability_changes,
            feed,
            registry,
            requests,
            first_answer,
            ejections,
            ejection_reasons,
            readmissions,
            in_rotation,
            retries,
            reloads,
            table,
            unrouted,
            breaker_transitions,
            breaker_refused,
            breaker_state,
            gossip,
            members,
            values_refused,
            catch_up,
            connections,
            certificate_expiry,
            certificate_names_refused,
            replica_certificate_expiry,
            acme_phase,
            acme_orders,
            acme_refused,
        }
    }

    /// This node's phase for the ACME certificate `certificate`.
    pub fn acme_phase(&self, certificate: &str, phase: picket_proto::AcmePhase) {
        for each in picket_proto::AcmePhase::ALL {
            self.acme_phase
                .get_or_create(&AcmePhaseLabels {
                    certificate: certificate.into(),
                    phase: each.as_str(),
                })
                .set(i64::from(each == phase));
        }
    }

    /// The ACME certificate `certificate` is no longer managed.
    pub fn forget_acme(&self, certificate: &str) {
        for each in picket_proto::AcmePhase::ALL {
            self.acme_phase.remove(&AcmePhaseLabels {
                certificate: certificate.into(),
                phase: each.as_str(),
            });
        }
    }

    /// Counts an order this node placed, by how it ended.
    pub fn acme_order(&self, certificate: &str, issued: bool) {
        self.acme_orders
            .get_or_create(&AcmeOrderLabels {
                certificate: certificate.into(),
                result: if issued { "issued" } else { "failed" },
            })
            .inc();
    }

    /// Counts a copy of an ACME certificate refused as not the CA's.
    pub fn acme_refused(&self, certificate: &str, reason: &'static str) {
        self.acme_refused
            .get_or_create(&AcmeRefusedLabels {
                certificate: certificate.into(),
                reason,
            })
            .inc();
    }

    /// When the certificate a TLS replica presented to a check expires.
    pub fn replica_certificate_expiry(&self, route: &str, replica: &str, not_after: i64) {
        self.replica_certificate_expiry
            .get_or_create(&ReplicaLabels {
                route: route.into(),
                replica: replica.into(),
            })
            .set(not_after);
    }

    /// The QUIC feed's counters.
    pub fn feed(&self) -> &FeedMetrics {
        &self.feed
    }

    /// The gossip transport's counters.
    pub fn gossip(&self) -> &GossipMetrics {
        &self.gossip
    }

    /// Sets how many members of the cluster are in each state.
    pub fn members(&self, alive: usize, suspect: usize, dead: usize) {
        for (liveness, count) in [("alive", alive), ("suspect", suspect), ("dead", dead)] {
            self.members
                .get_or_create(&LivenessLabels {
                    liveness: liveness.into(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Counts a gossip value from a peer that could not be decoded.
    pub fn value_refused(&self) {
        self.values_refused.inc();
    }

    /// Counts an exchange started to catch up.
    pub fn catch_up_exchange(&self) {
        self.catch_up.inc();
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

    /// The breaker metric handles of one runtime API endpoint.
    pub fn runtime_gate(&self, endpoint: &str) -> RuntimeGateMetrics {
        let labels = |state: &str| EndpointStateLabels {
            endpoint: endpoint.into(),
            state: state.into(),
        };
        let endpoint = EndpointLabels {
            endpoint: endpoint.into(),
        };
        RuntimeGateMetrics {
            state: CIRCUIT_STATES
                .map(|s| self.runtime_breaker_state.get_or_create(&labels(s)).clone()),
            trips: self.runtime_breaker_trips.get_or_create(&endpoint).clone(),
            refused: self.runtime_calls_refused.get_or_create(&endpoint).clone(),
        }
    }

    /// Records whether a runtime API endpoint answers; `changed`: counts it
    /// as a change.
    pub fn runtime_reachable(&self, endpoint: &str, reachable: bool, changed: bool) {
        self.runtime_reachable
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.into(),
            })
            .set(i64::from(reachable));
        if changed {
            self.runtime_reachability_changes
                .get_or_create(&EndpointStateLabels {
                    endpoint: endpoint.into(),
                    state: if reachable {
                        "reachable"
                    } else {
                        "unreachable"
                    }
                    .into(),
                })
                .inc();
        }
    }

    /// Drops the reachability series of an endpoint the node no longer
    /// follows.
    pub fn forget_runtime_endpoint(&self, endpoint: &str) {
        self.runtime_reachable.remove(&EndpointLabels {
            endpoint: endpoint.into(),
        });
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
            retry_timeout: retry("first_answer_timeout"),
            rate_limited: self
                .rate_limited
                .get_or_create(&RouteLabels {
                    route: route.into(),
                })
                .clone(),
            too_large: self
                .too_large
                .get_or_create(&RouteLabels {
                    route: route.into(),
                })
                .clone(),
            incomplete: self.incomplete.clone(),
            route: route.into(),
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

    /// Counts an ejection on `route` by its reason.
    pub fn ejected(&self, route: &str, reason: &'static str) {
        self.ejection_reasons
            .get_or_create(&EjectionLabels {
                route: route.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Drops the series of a replica that left its route.
    pub fn forget_replica(&self, route: &str, replica: &str) {
        let labels = ReplicaLabels {
            route: route.into(),
            replica: replica.into(),
        };
        self.ejections.remove(&labels);
        self.readmissions.remove(&labels);
        self.replica_certificate_expiry.remove(&labels);
    }

    /// Drops every series of a route the configuration no longer has, and
    /// of its replicas (`replicas`: their labels): a removed route leaves
    /// nothing in `/metrics`. `ejection_reasons`: every label an ejection
    /// may carry.
    pub fn forget_route(&self, route: &str, replicas: &[String], ejection_reasons: &[&str]) {
        let labels = || RouteLabels {
            route: route.into(),
        };
        for class in CLASSES {
            self.requests.remove(&ClassLabels {
                route: route.into(),
                class: class.into(),
            });
        }
        for reason in ["connect", "answer", "first_answer_timeout"] {
            self.retries.remove(&RetryLabels {
                route: route.into(),
                reason: reason.into(),
            });
        }
        for reason in ejection_reasons {
            self.ejection_reasons.remove(&EjectionLabels {
                route: route.into(),
                reason: (*reason).into(),
            });
        }
        for state in CIRCUIT_STATES {
            let labels = StateLabels {
                route: route.into(),
                state: state.into(),
            };
            self.breaker_transitions.remove(&labels);
            self.breaker_state.remove(&labels);
        }
        self.first_answer.remove(&labels());
        self.in_rotation.remove(&labels());
        self.breaker_refused.remove(&labels());
        self.rate_limited.remove(&labels());
        self.too_large.remove(&labels());
        for cause in crate::ending::Cause::INCOMPLETE {
            self.incomplete.remove(&CauseLabels {
                route: route.into(),
                cause: cause.into(),
            });
        }
        for replica in replicas {
            self.forget_replica(route, replica);
        }
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

    /// The routes of the table just installed: from the file, from the
    /// runtime, and the runtime's refused.
    pub fn table(&self, file: usize, runtime: usize, refused: usize) {
        for (source, state, n) in [
            ("file", "served", file),
            ("runtime", "served", runtime),
            ("runtime", "refused", refused),
        ] {
            self.table
                .get_or_create(&TableLabels { source, state })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    pub fn unrouted(&self) {
        self.unrouted.inc();
    }

    /// Sets when the certificate named `name` expires (Unix seconds).
    pub fn certificate_expiry(&self, name: &str, not_after: i64) {
        self.certificate_expiry
            .get_or_create(&NameLabels { name: name.into() })
            .set(not_after);
    }

    /// How many names the runtime's certificates may not serve.
    pub fn certificate_names_refused(&self, n: usize) {
        self.certificate_names_refused
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Drops the series of a certificate no longer served.
    pub fn forget_certificate(&self, name: &str) {
        self.certificate_expiry
            .remove(&NameLabels { name: name.into() });
    }

    /// Writes the text exposition to `out`. prometheus-client encodes each
    /// family under its lock: the admin listener streams it with a bounded
    /// wait for its client (`status::streamed::text`).
    pub fn encode_to<W: std::fmt::Write>(&self, out: &mut W) -> std::fmt::Result {
        prometheus_client::encoding::text::encode(out, &self.registry)
    }

    /// The text exposition, whole.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if self.encode_to(&mut out).is_err() {
            out.clear();
        }
        out
    }
}

/// Why a gossip datagram was dropped, as counted in metrics: the sealed
/// transport decides, these are its labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dropped {
    /// Too short, an unknown format, or parts that do not add up.
    Malformed,
    /// Sealed with a key this node does not hold.
    UnknownKey,
    /// The tag does not verify: tampered, or not from the cluster.
    NotAuthentic,
    /// Sent too long ago, or too far in the future.
    Stale,
    /// A nonce already seen, or this node's own packet sent back to it.
    Replayed,
    /// Meant for another node: its recipient is not this node.
    Misdirected,
    /// Verified, but chitchat could not read it.
    Undecodable,
    /// From a local socket other than the node's own codec.
    Injected,
}

impl Dropped {
    pub const ALL: [Dropped; 8] = [
        Dropped::Malformed,
        Dropped::UnknownKey,
        Dropped::NotAuthentic,
        Dropped::Stale,
        Dropped::Replayed,
        Dropped::Misdirected,
        Dropped::Undecodable,
        Dropped::Injected,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Dropped::Malformed => "malformed",
            Dropped::UnknownKey => "unknown_key",
            Dropped::NotAuthentic => "not_authentic",
            Dropped::Stale => "stale",
            Dropped::Replayed => "replayed",
            Dropped::Misdirected => "misdirected",
            Dropped::Undecodable => "undecodable",
            Dropped::Injected => "injected",
        }
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
