//! The configuration: one TOML file, validated into typed settings.
//!
//! Two layers: [`raw`] is what serde reads (unknown fields refused, values
//! spanned), [`validate`] turns it into a [`Config`] whose values are typed
//! and in range, or into every [`Problem`] found, each with its line and
//! column. A configuration that has a problem is never partly applied.
//!
//! ## Inheritance
//! The two bounds and the ejection time are inherited separately: the
//! route's value, else `[global]`'s, else the product default. Each typed
//! value remembers where it came from ([`Origin`]) so that `picket check`
//! can show it.

mod cidr;
pub mod declared;
mod diff;
mod error;
pub mod fields;
pub mod forwarding;
pub mod ownership;
pub mod raw;
mod render;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use cidr::{Cidr, CidrError, TrustedProxies};
pub use diff::{NEEDS_RESTART, ReloadPlan, diff};
pub use error::{ConfigError, Problem};
pub use render::{render, render_route};
pub use validate::{RUNTIME_BREAKER_COOLDOWN_RANGE, RUNTIME_BREAKER_FAILURES_RANGE, WORKERS_RANGE};

/// Product default for the connect bound.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Product default for the first-answer bound.
pub const DEFAULT_FIRST_ANSWER_TIMEOUT: Duration = Duration::from_secs(15);
/// Product default for how long a replica that failed to connect stays out.
pub const DEFAULT_EJECT_FOR: Duration = Duration::from_secs(10);
/// The default number of attempts is the number of replicas, at most this.
pub const DEFAULT_MAX_TRIES: u32 = 3;
/// Product default: consecutive failures that open a circuit.
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;
/// Product default: how long an open circuit refuses.
pub const DEFAULT_BREAKER_COOLDOWN: Duration = Duration::from_secs(15);
/// Product default: how often static replicas and external hosts get a
/// connect check.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(30);
/// Product default: how long a connect check may take.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a request body may pause, either way, before the request is
/// given up.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Answers of 502, 503 or 504 in a row that eject a replica.
pub const DEFAULT_CONSECUTIVE_GATEWAY_ERRORS: u32 = 5;
/// Gossip: one round per node this often.
pub const DEFAULT_GOSSIP_INTERVAL: Duration = Duration::from_secs(1);
/// Gossip: where it listens (UDP).
pub const DEFAULT_GOSSIP: &str = "0.0.0.0:7946";

/// A fully validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it was read from, as named in errors and logs.
    pub source: String,
    pub node: NodeSettings,
    pub global: GlobalSettings,
    pub runtime: RuntimeSettings,
    /// `None`: the node runs alone, gossiping with nobody.
    pub cluster: Option<ClusterSettings>,
    pub routes: Vec<RouteConfig>,
    /// `[[certificate]]`: what the HTTPS listener serves, the default
    /// first.
    pub certificates: Vec<CertificateConfig>,
    /// `[acme]`, with the `[[certificate]]`s it obtains; `None` without.
    pub acme: Option<AcmeSettings>,
}

/// `[acme]`: where the cluster obtains certificates, and which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeSettings {
    /// The directory URL of the CA (`https://`).
    pub directory: String,
    /// The account's contact, if any.
    pub email: Option<String>,
    /// Roots that verify the directory's certificate instead of the
    /// Mozilla roots (a private CA): the file, and its PEM.
    pub ca: Option<(PathBuf, Vec<u8>)>,
    /// The roots the CA's certificates chain to, when not those of `ca`
    /// (else the Mozilla roots): every certificate served as this CA's,
    /// ordered here or passed on by a peer, must chain to them.
    pub issuers: Option<(PathBuf, Vec<u8>)>,
    /// The longest lifetime a certificate of the CA may have: one that
    /// claims more is refused.
    pub max_lifetime: Duration,
    /// Where the node keeps its account and its certificates; absolute.
    pub cache: PathBuf,
    pub challenge: AcmeChallenge,
    /// Each certificate's names, lower case, as the file lists them; the
    /// first names it.
    pub certificates: Vec<Vec<String>>,
}

/// The longest lifetime an ACME certificate may have by default: the
/// longest a publicly trusted CA may issue (398 days, CA/Browser Forum).
pub const DEFAULT_ACME_MAX_LIFETIME: Duration = Duration::from_secs(398 * 86_400);

/// Which challenge the ordering node asks the CA for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// `GET /.well-known/acme-challenge/TOKEN` on port 80: every node's
    /// plain listener answers.
    Http01,
    /// A TLS handshake on port 443 with ALPN `acme-tls/1`: every node's
    /// HTTPS listener answers.
    TlsAlpn01,
}

impl AcmeChallenge {
    pub fn as_str(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// `[[certificate]]`: a certificate chain and its key, served to HTTPS
/// clients, as read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CertificateConfig {
    /// The PEM chain, leaf first; absolute.
    pub cert: PathBuf,
    /// The PEM private key; absolute.
    pub key: PathBuf,
    /// The names served, when narrower than the certificate's own.
    pub hosts: Option<Vec<String>>,
    /// What the files held when last read, checked.
    pub current: Arc<crate::certificate::Certificate>,
}

/// `[cluster]`: how the node gossips its verdicts with its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// Peers with another id are not admitted.
    pub id: String,
    /// Where gossip listens (UDP).
    pub gossip: SocketAddr,
    /// The address peers reach this node's gossip at; `None`: derived
    /// from `gossip`, or from the route to the seeds when that is
    /// unspecified.
    pub advertise: Option<SocketAddr>,
    /// `host:port` of nodes to join through; a name may resolve to many
    /// and is resolved again over time.
    pub seeds: Vec<String>,
    /// The cluster key(s), base64, one per line: the first seals what the
    /// node sends, every one opens what it receives.
    pub key_file: Option<PathBuf>,
    /// Gossip without a key: explicitly insecure.
    pub insecure: bool,
    pub gossip_interval: Duration,
}

/// Where a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The product default.
    Default,
    /// The file, for settings that are not inherited.
    File,
    /// Inherited from `[global]`.
    Global,
    /// Set on the route itself.
    Route,
    /// A command-line flag or its environment variable.
    Override,
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting<T> {
    pub value: T,
    pub from: Origin,
}

impl<T> Setting<T> {
    pub fn new(value: T, from: Origin) -> Self {
        Setting { value, from }
    }
}

/// Time a client has to send a complete request head once it started
/// (default of `[node] header_timeout`).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Time an idle client connection waits for its next request (default of
/// `[node] idle_timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time a write to a client may make no progress before the answer is
/// given up (default of `[node] send_timeout`, as nginx's `send_timeout`).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// The key-exchange groups the HTTPS listener knows, in its default order
/// of preference: the post-quantum hybrid first, the classical ones kept
/// for older clients. `[node] tls_groups` narrows and orders them.
pub const TLS_GROUPS: [&str; 4] = ["X25519MLKEM768", "X25519", "secp256r1", "secp384r1"];

/// Connections the admin listener serves at once (default of `[node]
/// admin_max_connections`): health checks, scrapes and scripts need few.
pub const ADMIN_MAX_CONNECTIONS: usize = 256;

#[derive(Debug, Clone, PartialEq)]
pub struct NodeSettings {
    pub name: Setting<String>,
    /// The proxy listener.
    pub listen: Setting<SocketAddr>,
    /// The proxy's HTTPS listener; none when `None`.
    pub listen_tls: Option<Setting<SocketAddr>>,
    /// The key-exchange groups the HTTPS listener offers, in its order of
    /// preference; `None`: all it knows, the post-quantum hybrid first
    /// ([`TLS_GROUPS`]).
    pub tls_groups: Setting<Option<Vec<String>>>,
    /// Status API, `/healthz`, `/readyz`, `/metrics`.
    pub admin: Setting<SocketAddr>,
    /// Threads that serve proxied traffic.
    pub workers: Setting<usize>,
    /// Client connections served at once; `None`: derived from the file
    /// descriptor limit at start.
    pub max_connections: Setting<Option<usize>>,
    /// Time a client has to finish a request head it started.
    pub header_timeout: Setting<Duration>,
    /// Time an idle client connection (HTTP/1 keep-alive, or HTTP/2 with no
    /// request open) is kept.
    pub idle_timeout: Setting<Duration>,
    /// Time a write to a client (an HTTP/1 answer, an HTTP/2 stream) may
    /// make no progress: a client that stops reading keeps no replica
    /// connection past it. A body that keeps moving is never cut.
    pub send_timeout: Setting<Duration>,
    /// Connections the admin listener serves at once; at the limit the
    /// oldest is closed to make room for the new one.
    pub admin_max_connections: Setting<usize>,
    /// The QUIC feed for `picket-tui`; none when `None`.
    pub feed: Option<FeedSettings>,
    /// Where each request's line goes.
    pub access_log: Setting<AccessLogTarget>,
    pub access_log_format: Setting<AccessLogFormat>,
}

/// `[node] access_log`: where the access log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    Off,
    Stdout,
    /// A file, appended to, reopened on SIGUSR1.
    File(PathBuf),
}

impl fmt::Display for AccessLogTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessLogTarget::Off => f.write_str("off"),
            AccessLogTarget::Stdout => f.write_str("stdout"),
            AccessLogTarget::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// `[node] access_log_format`: one JSON object per line, or the combined
/// log format with Picket's fields after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccessLogFormat {
    #[default]
    Json,
    Combined,
}

impl AccessLogFormat {
    pub fn name(self) -> &'static str {
        match self {
            AccessLogFormat::Json => "json",
            AccessLogFormat::Combined => "combined",
        }
    }
}

/// `request_headers` / `response_headers`: headers set (replacing any of
/// the same name) and removed, and the trailers admitted besides those
/// whose definition allows a trailer. Names are lower case; none of them
/// is one the node writes itself ([`HeaderRules::is_reserved`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HeaderRules {
    pub set: Vec<(http::header::HeaderName, http::header::HeaderValue)>,
    pub remove: Vec<http::header::HeaderName>,
    /// Trailer names that may cross (`trailers = ["x-checksum"]`), besides
    /// [`crate::proxy::rules::TRAILERS`].
    pub trailers: Vec<http::header::HeaderName>,
}

impl HeaderRules {
    /// Headers the node writes itself; no rule sets or removes them.
    const RESERVED: [&str; 16] = [
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-request-id",
    ];

    /// Whether a header is the node's own, which no rule may touch.
    pub fn is_reserved(name: &http::header::HeaderName) -> bool {
        Self::RESERVED.contains(&name.as_str())
    }
}

impl HeaderRules {
    pub fn is_empty(&self) -> bool {
        !self.changes_head() && self.trailers.is_empty()
    }

    /// Whether the rules set or remove a header of a head.
    pub fn changes_head(&self) -> bool {
        !self.set.is_empty() || !self.remove.is_empty()
    }

    /// `[global]`'s rules, then the route's: the route's `set` of a name
    /// replaces the global one, and its `remove` takes one away.
    pub fn then(&self, route: &HeaderRules) -> HeaderRules {
        let mut set: Vec<_> = self
            .set
            .iter()
            .filter(|(name, _)| {
                !route.set.iter().any(|(n, _)| n == name) && !route.remove.contains(name)
            })
            .cloned()
            .collect();
        set.extend(route.set.iter().cloned());
        let mut remove = self.remove.clone();
        remove.extend(
            route
                .remove
                .iter()
                .filter(|n| !self.remove.contains(n))
                .cloned(),
        );
        remove.retain(|name| !set.iter().any(|(n, _)| n == name));
        let mut trailers = self.trailers.clone();
        trailers.extend(
            route
                .trailers
                .iter()
                .filter(|n| !self.trailers.contains(n))
                .cloned(),
        );
        HeaderRules {
            set,
            remove,
            trailers,
        }
    }
}

/// A route's `rate`: a token bucket of `burst` requests refilled at
/// `per_second`, on this node, for the route as a whole or per client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSettings {
    pub per_second: f64,
    pub burst: u32,
    pub by: RateKey,
}

/// What a rate limit counts requests of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateKey {
    Route,
    /// Each client address has a bucket of its own.
    Client,
}

impl RateKey {
    pub fn name(self) -> &'static str {
        match self {
            RateKey::Route => "route",
            RateKey::Client => "client",
        }
    }
}

/// The QUIC feed: where it listens and with which certificate.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedSettings {
    pub addr: SocketAddr,
    /// A PEM certificate chain and its key; a certificate is generated at
    /// start (and its fingerprint published) when `None`. Relative paths
    /// are read from the configuration file's directory.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// A PEM file of the CA whose client certificates may read the feed;
    /// anyone may when `None`. Relative to the configuration's directory.
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GlobalSettings {
    pub connect_timeout: Setting<Duration>,
    pub first_answer_timeout: Setting<Duration>,
    pub eject_for: Setting<Duration>,
    pub breaker: BreakerSettings,
    /// Connect checks of static replicas and external hosts: how often.
    pub check_every: Setting<Duration>,
    /// Connect checks: how long each may take.
    pub check_timeout: Setting<Duration>,
    /// Request bodies: the longest pause between two reads from the client,
    /// or two writes to the replica.
    pub body_timeout: Setting<Duration>,
    /// Client headers whose names hold `_` are forwarded (dropped when
    /// false, as nginx does).
    pub underscores_in_headers: Setting<bool>,
    /// Clients whose forwarding headers (`X-Forwarded-*`, `Forwarded`,
    /// `X-Real-IP`) the node appends to or keeps; every other client's are
    /// replaced by what the node saw.
    pub trusted_proxies: Setting<TrustedProxies>,
    /// A replica whose own answers are 502, 503 or 504 this many times in
    /// a row is ejected.
    pub consecutive_gateway_errors: Setting<u32>,
    /// The largest request body a route takes; `None`: no limit.
    pub max_body: Setting<Option<u64>>,
    /// Header rules every route applies before its own.
    pub request_headers: HeaderRules,
    pub response_headers: HeaderRules,
}

/// A route's circuit breaker; each field is inherited on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSettings {
    pub enabled: Setting<bool>,
    /// Consecutive failures that open the circuit.
    pub failures: Setting<u32>,
    /// How long an open circuit refuses before one trial request.
    pub cooldown: Setting<Duration>,
}

impl BreakerSettings {
    /// The breaker's settings when it is enabled.
    pub fn active(&self) -> Option<crate::breaker::Settings> {
        self.enabled.value.then_some(crate::breaker::Settings {
            failures: self.failures.value,
            cooldown: self.cooldown.value,
        })
    }
}

/// The two waits a node bounds for every upstream request.
///
/// Routes with the same bounds share one connection pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// TCP connect and TLS handshake.
    pub connect: Duration,
    /// From the request being sent to the response head.
    pub first_answer: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    pub name: String,
    /// `None` matches any host.
    pub host: Option<HostMatch>,
    pub path_prefix: String,
    /// The path must be `path_prefix` itself (a Kubernetes Ingress
    /// `Exact` path); a file's routes always match by prefix.
    pub exact_path: bool,
    /// What in the runtime declared the route (`service shop_web`,
    /// `ingress shop/web`); `None` for a route of the file.
    pub declared_by: Option<String>,
    pub upstream: UpstreamConfig,
    pub connect_timeout: Setting<Duration>,
    pub first_answer_timeout: Setting<Duration>,
    /// Attempts per request, each on a different replica.
    pub tries: Setting<u32>,
    pub eject_for: Setting<Duration>,
    pub consecutive_gateway_errors: Setting<u32>,
    pub breaker: BreakerSettings,
    /// `[global] body_timeout`, for the data path.
    pub body_timeout: Duration,
    /// `[global] underscores_in_headers`, for the data path.
    pub underscores_in_headers: bool,
    /// `[global] trusted_proxies`, for the data path.
    pub trusted_proxies: TrustedProxies,
    /// Plain-HTTP requests are redirected to HTTPS (308).
    pub https_only: bool,
    /// TLS to its replicas (`https://` external hosts speak TLS without
    /// it).
    pub tls: Option<UpstreamTls>,
    /// The protocol spoken to its replicas.
    pub protocol: Protocol,
    /// How this node checks its replicas: a connect for those no runtime
    /// reports on; an HTTP or gRPC check, when asked, for every replica.
    pub check: CheckKind,
    /// How often the route's checks run, and how long each may take:
    /// `None` follows `[global] check_every` and `check_timeout` (which a
    /// reload changes without touching the route).
    pub check_every: Option<Duration>,
    pub check_timeout: Option<Duration>,
    /// The `path_prefix` is taken off the path before forwarding.
    pub strip_prefix: bool,
    /// Put in front of the path (after stripping) before forwarding.
    pub add_prefix: Option<String>,
    /// `[global]`'s header rules, then the route's own.
    pub request_headers: HeaderRules,
    pub response_headers: HeaderRules,
    /// The largest request body, in bytes; `None`: no limit.
    pub max_body: Setting<Option<u64>>,
    /// This node's rate limit of the route.
    pub rate: Option<RateSettings>,
}

/// The protocol a route speaks to its replicas (`protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// HTTP/1.1, over TLS when the route has TLS.
    #[default]
    Http1,
    /// HTTP/2 in clear, with prior knowledge.
    H2c,
    /// HTTP/2 over TLS, asked for by ALPN.
    H2,
    /// Over TLS: HTTP/2 when the replica's ALPN picks it, else HTTP/1.1.
    Auto,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::H2c => "h2c",
            Protocol::H2 => "h2",
            Protocol::Auto => "auto",
        }
    }

    /// The ALPN protocols offered in the TLS handshake.
    pub fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Protocol::Http1 | Protocol::H2c => vec![b"http/1.1".to_vec()],
            Protocol::H2 => vec![b"h2".to_vec()],
            Protocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        }
    }
}

/// How a route's replicas are checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum CheckKind {
    /// A connect, made as requests make it (TLS and HTTP/2 handshakes
    /// included), of the replicas no runtime reports on.
    #[default]
    Connect,
    /// The gRPC health protocol: `grpc.health.v1.Health/Check` for this
    /// service name (empty: the server as a whole); anything but SERVING
    /// fails.
    Grpc { service: String },
    /// A `GET` of a path, whose status must be among those that pass.
    Http(HttpCheck),
}

impl CheckKind {
    /// Whether a passing check is an answer of the replica (not only a
    /// connection it accepted): proof enough to end an ejection for what
    /// it answered, and every replica is checked, the runtime's too.
    pub fn answers(&self) -> bool {
        !matches!(self, CheckKind::Connect)
    }
}

/// `check = "http"`: what is asked and what passes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HttpCheck {
    /// The path (and query) asked for: `check_path`, `/` by default.
    pub path: String,
    /// The `Host` sent: `check_host`; `None` sends the replica's
    /// authority (an external host's name).
    pub host: Option<String>,
    /// The statuses that pass: `check_statuses`, 2xx and 3xx by default.
    pub statuses: StatusSet,
}

/// A set of HTTP statuses, as inclusive ranges (`2xx` is 200 to 299).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StatusSet(pub Vec<(u16, u16)>);

impl StatusSet {
    /// 2xx and 3xx: what Traefik, HAProxy and Caddy pass by default.
    pub fn default_pass() -> StatusSet {
        StatusSet(vec![(200, 399)])
    }

    pub fn contains(&self, status: u16) -> bool {
        self.0
            .iter()
            .any(|&(low, high)| (low..=high).contains(&status))
    }

    /// Parses `2xx`, `404` or `200-204`; `None` for anything else or a
    /// status outside 100 to 599.
    pub fn entry(text: &str) -> Option<(u16, u16)> {
        let text = text.trim();
        let status = |s: &str| {
            s.parse::<u16>()
                .ok()
                .filter(|n| (100..=599).contains(n) && s.len() == 3)
        };
        if let Some(class) = text.strip_suffix("xx").or_else(|| text.strip_suffix("XX")) {
            let digit = status(&format!("{class}00"))?;
            return Some((digit, digit + 99));
        }
        if let Some((low, high)) = text.split_once('-') {
            let (low, high) = (status(low.trim())?, status(high.trim())?);
            return (low <= high).then_some((low, high));
        }
        status(text).map(|n| (n, n))
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(low, high)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match (low, high) {
                (low, high) if low == high => write!(f, "{low}")?,
                (low, high) if low % 100 == 0 && high == low + 99 => write!(f, "{}xx", low / 100)?,
                (low, high) => write!(f, "{low}-{high}")?,
            }
        }
        Ok(())
    }
}

impl RouteConfig {
    pub fn bounds(&self) -> Bounds {
        Bounds {
            connect: self.connect_timeout.value,
            first_answer: self.first_answer_timeout.value,
        }
    }

    /// Whether a route under `other` reaches the same replicas the same
    /// way: its replica set, their health and ejections, its pool, and its
    /// circuit (its state is about those replicas) carry over. Only what
    /// decides where and how requests go upstream counts; a node-wide
    /// field (`trusted_proxies`, `body_timeout`, `underscores_in_headers`,
    /// the global header rules) and a route's own request handling
    /// (matching, rewriting, header rules, `max_body`, `https_only`) never
    /// reset them. Every field is named here, so a new one must say which
    /// it is.
    pub fn same_upstream(&self, other: &RouteConfig) -> bool {
        let RouteConfig {
            name,
            declared_by,
            upstream,
            connect_timeout,
            first_answer_timeout,
            tries,
            eject_for,
            consecutive_gateway_errors,
            tls,
            protocol,
            check,
            // How often it is checked: the same replicas, judged as often
            // as asked from now on.
            check_every: _,
            check_timeout: _,
            // Where requests come from and what is done to them: not the
            // upstream's state.
            host: _,
            path_prefix: _,
            exact_path: _,
            breaker: _,
            body_timeout: _,
            underscores_in_headers: _,
            trusted_proxies: _,
            https_only: _,
            strip_prefix: _,
            add_prefix: _,
            request_headers: _,
            response_headers: _,
            max_body: _,
            rate: _,
        } = self;
        *name == other.name
            && *declared_by == other.declared_by
            && *upstream == other.upstream
            && connect_timeout.value == other.connect_timeout.value
            && first_answer_timeout.value == other.first_answer_timeout.value
            && tries.value == other.tries.value
            && eject_for.value == other.eject_for.value
            && consecutive_gateway_errors.value == other.consecutive_gateway_errors.value
            && *tls == other.tls
            && *protocol == other.protocol
            && *check == other.check
    }
}

/// A route's `tls`: how it speaks TLS to its replicas. The PEM files are
/// read, and checked, with the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamTls {
    /// Roots that verify the replicas' certificates, instead of the
    /// node's: the file, and its PEM.
    pub ca: Option<(PathBuf, Vec<u8>)>,
    /// The name the replicas' certificates must carry (and the SNI sent).
    pub server_name: Option<String>,
    /// For mutual TLS: the client certificate chain and its key, files
    /// and PEM.
    pub client: Option<ClientIdentity>,
}

/// A client certificate chain and its key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientIdentity {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

/// How a route matches the request's host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostMatch {
    /// `api.example.com`, compared without case.
    Exact(String),
    /// `*.example.com`: stored as `.example.com`; matches any subdomain.
    Suffix(String),
}

impl fmt::Display for HostMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostMatch::Exact(h) => f.write_str(h),
            HostMatch::Suffix(s) => write!(f, "*{s}"),
        }
    }
}

/// Where a route sends its traffic.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UpstreamConfig {
    /// A static list of replica addresses.
    Replicas(Vec<SocketAddr>),
    /// An external host, reached by name.
    External(ExternalHost),
    /// A service the runtime runs; its replicas come from the runtime.
    Service { name: String, port: ServicePort },
}

/// The port of a runtime service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServicePort {
    Number(u16),
    /// A Kubernetes Service's port by name.
    Name(String),
}

impl fmt::Display for ServicePort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServicePort::Number(n) => write!(f, "{n}"),
            ServicePort::Name(name) => write!(f, "{name:?}"),
        }
    }
}

/// Which runtime tells the node where a service's replicas are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuntimeKind {
    None,
    Docker,
    Swarm,
    Kubernetes,
}

impl fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuntimeKind::None => "none",
            RuntimeKind::Docker => "docker",
            RuntimeKind::Swarm => "swarm",
            RuntimeKind::Kubernetes => "kubernetes",
        })
    }
}

/// `[runtime]`: where runtime services are looked up.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSettings {
    pub kind: RuntimeKind,
    /// Docker: the engine (`unix:///var/run/docker.sock`, `tcp://host:2375`);
    /// `None`: `DOCKER_HOST`, else the local socket.
    pub endpoint: Option<String>,
    /// Kubernetes: the namespace; `None`: the pod's own.
    pub namespace: Option<String>,
    /// Kubernetes: the API server; `None`: in-cluster, else kubeconfig.
    pub api: Option<String>,
    /// Swarm: every engine's socket proxy (`host:port`; a name may resolve
    /// to many).
    pub proxies: Vec<String>,
    /// Docker and Swarm: the network the node reaches containers on: only
    /// containers attached to it are replicas, at their address there;
    /// `None`: every service container, at its first network's address.
    pub network: Option<String>,
    /// Kubernetes: the namespaces watched besides the node's own, which
    /// routes name as `service = "namespace/name"`; `["*"]`: every
    /// namespace (needs a ClusterRole).
    pub namespaces: Vec<String>,
    /// Kubernetes: the Ingresses the node serves are those whose
    /// `ingressClassName` is this.
    pub ingress_class: String,
    /// The breaker in front of each runtime API endpoint.
    pub breaker: RuntimeBreakerSettings,
    /// What the runtime may claim: `[runtime] hosts`, and each namespace's
    /// own in the table form of `[runtime.namespaces]`.
    pub hosts: ownership::HostRules,
}

/// The class of the Ingresses a node serves when `[runtime] ingress_class`
/// says none.
pub const DEFAULT_INGRESS_CLASS: &str = "picket";

/// `[runtime] breaker`: after `failures` consecutive calls to one runtime
/// API endpoint that got no HTTP answer (connect, DNS or timeout), no call
/// goes to it for `cooldown`.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeBreakerSettings {
    pub enabled: Setting<bool>,
    pub failures: Setting<u32>,
    pub cooldown: Setting<Duration>,
}

/// Consecutive unanswered calls that open a runtime endpoint's breaker.
pub const DEFAULT_RUNTIME_BREAKER_FAILURES: u32 = 2;
/// How long an open runtime breaker refuses every call. A gateway routes on
/// this data: 30 s bounds how long a runtime that came back goes unseen,
/// where a dashboard polling once a minute would accept twice that.
pub const DEFAULT_RUNTIME_BREAKER_COOLDOWN: Duration = Duration::from_secs(30);

impl Default for RuntimeBreakerSettings {
    fn default() -> Self {
        RuntimeBreakerSettings {
            enabled: Setting::new(true, Origin::Default),
            failures: Setting::new(DEFAULT_RUNTIME_BREAKER_FAILURES, Origin::Default),
            cooldown: Setting::new(DEFAULT_RUNTIME_BREAKER_COOLDOWN, Origin::Default),
        }
    }
}

impl RuntimeBreakerSettings {
    /// The breaker's settings when it is enabled.
    pub fn active(&self) -> Option<crate::breaker::Settings> {
        self.enabled.value.then_some(crate::breaker::Settings {
            failures: self.failures.value,
            cooldown: self.cooldown.value,
        })
    }
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        RuntimeSettings {
            kind: RuntimeKind::None,
            endpoint: None,
            namespace: None,
            api: None,
            proxies: Vec::new(),
            network: None,
            namespaces: Vec::new(),
            ingress_class: DEFAULT_INGRESS_CLASS.to_string(),
            breaker: RuntimeBreakerSettings::default(),
            hosts: ownership::HostRules::default(),
        }
    }
}

/// `http://host:port` or `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExternalHost {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl fmt::Display for ExternalHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

/// Per-deployment settings given as flags or environment variables; they win
/// over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub name: Option<String>,
    pub listen: Option<SocketAddr>,
    /// `[node] listen_tls`.
    pub listen_tls: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub workers: Option<usize>,
    /// `[cluster] advertise`.
    pub advertise: Option<SocketAddr>,
    /// `[runtime] breaker`'s fields.
    pub runtime_breaker_failures: Option<u32>,
    pub runtime_breaker_cooldown: Option<Duration>,
    /// `true`: no breaker in front of runtime API endpoints.
    pub runtime_breaker_disabled: Option<bool>,
    /// `[node] access_log`.
    pub access_log: Option<AccessLogTarget>,
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: file.clone(),
            source,
        })?;
        Config::parse(&file, &text)
    }

    /// Validates the text of a configuration; `file` names it in errors,
    /// and relative paths in it are read from its directory. Certificate
    /// files are read and checked now.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        validate::validate(file, text, crate::clock::now_unix()).map_err(|problems| {
            ConfigError::Invalid {
                file: file.to_string(),
                problems,
            }
        })
    }

    /// What the HTTPS settings lack once the overrides are in: a TLS
    /// listener without a certificate, or an `https_only` route without a
    /// TLS listener to send its clients to. (Within the file alone,
    /// validation already refuses these, with their lines.)
    pub fn edge_problem(&self) -> Option<String> {
        let from_acme = self
            .acme
            .as_ref()
            .is_some_and(|a| !a.certificates.is_empty());
        if self.node.listen_tls.is_some() && self.certificates.is_empty() && !from_acme {
            return Some(format!(
                "{}: the HTTPS listener (listen_tls) needs at least one [[certificate]]",
                self.source
            ));
        }
        if self.node.listen_tls.is_none()
            && let Some(route) = self.routes.iter().find(|r| r.https_only)
        {
            return Some(format!(
                "{}: route {:?} is https_only, but the node has no HTTPS listener: set `[node] listen_tls` (or PICKET_LISTEN_TLS)",
                self.source, route.name
            ));
        }
        None
    }

    /// Applies flag and environment overrides.
    pub fn apply(&mut self, overrides: &Overrides) {
        if let Some(name) = &overrides.name {
            self.node.name = Setting::new(name.clone(), Origin::Override);
        }
        if let Some(listen) = overrides.listen {
            self.node.listen = Setting::new(listen, Origin::Override);
        }
        if let Some(listen_tls) = overrides.listen_tls {
            self.node.listen_tls = Some(Setting::new(listen_tls, Origin::Override));
        }
        if let Some(admin) = overrides.admin {
            self.node.admin = Setting::new(admin, Origin::Override);
        }
        if let Some(workers) = overrides.workers {
            self.node.workers = Setting::new(workers.max(1), Origin::Override);
        }
        if let (Some(advertise), Some(cluster)) = (overrides.advertise, &mut self.cluster) {
            cluster.advertise = Some(advertise);
        }
        let breaker = &mut self.runtime.breaker;
        if let Some(failures) = overrides.runtime_breaker_failures {
            breaker.failures = Setting::new(failures.max(1), Origin::Override);
        }
        if let Some(cooldown) = overrides.runtime_breaker_cooldown {
            breaker.cooldown = Setting::new(cooldown, Origin::Override);
        }
        if let Some(access_log) = &overrides.access_log {
            self.node.access_log = Setting::new(access_log.clone(), Origin::Override);
        }
        if let Some(disabled) = overrides.runtime_breaker_disabled {
            breaker.enabled = Setting::new(!disabled, Origin::Override);
        }
    }
}
