//! Raw file model → typed [`Config`], collecting every problem with its
//! position instead of stopping at the first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use super::error::{Positions, Problem};
use super::raw::{
    RawBreaker, RawCertificate, RawCluster, RawConfig, RawGlobal, RawHeaderRules, RawNode, RawPort,
    RawRate, RawRoute, RawRuntime, RawRuntimeBreaker, RawSize, RawUpstreamTls,
};
use super::{
    AccessLogFormat, AccessLogTarget, BreakerSettings, CertificateConfig, CheckKind, Cidr,
    ClientIdentity, ClusterSettings, Config, DEFAULT_BODY_TIMEOUT, DEFAULT_BREAKER_COOLDOWN,
    DEFAULT_BREAKER_FAILURES, DEFAULT_CHECK_EVERY, DEFAULT_CHECK_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_CONSECUTIVE_GATEWAY_ERRORS, DEFAULT_EJECT_FOR, DEFAULT_FIRST_ANSWER_TIMEOUT,
    DEFAULT_GOSSIP, DEFAULT_GOSSIP_INTERVAL, DEFAULT_MAX_TRIES, ExternalHost, FeedSettings,
    GlobalSettings, HeaderRules, HostMatch, NodeSettings, Origin, Protocol, RateKey, RateSettings,
    RouteConfig, RuntimeBreakerSettings, RuntimeKind, RuntimeSettings, ServicePort, Setting,
    TrustedProxies, UpstreamConfig, UpstreamTls,
};
use crate::certificate::Culprit;

const SECOND: Duration = Duration::from_secs(1);

/// Allowed values of each bounded duration, as `(field, min, max)`.
pub(super) const CONNECT_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(30));
pub(super) const FIRST_ANSWER_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(600));
pub(super) const EJECT_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(3600));
pub(super) const TRIES_RANGE: RangeInclusive<i64> = 1..=10;
pub(super) const BREAKER_FAILURES_RANGE: RangeInclusive<i64> = 2..=100;
pub(super) const GATEWAY_ERRORS_RANGE: RangeInclusive<i64> = 2..=100;
pub(super) const BREAKER_COOLDOWN_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(300));
pub const RUNTIME_BREAKER_FAILURES_RANGE: RangeInclusive<i64> = 1..=100;
pub const RUNTIME_BREAKER_COOLDOWN_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(600));
pub(super) const CHECK_EVERY_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(600));
pub(super) const CHECK_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(30));
pub const WORKERS_RANGE: RangeInclusive<i64> = 1..=256;
pub(super) const MAX_CONNECTIONS_RANGE: RangeInclusive<i64> = 1..=1_000_000;
pub(super) const HEADER_TIMEOUT_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(300));
pub(super) const IDLE_TIMEOUT_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(3600));
pub(super) const BODY_TIMEOUT_RANGE: (Duration, Duration) = (SECOND, Duration::from_secs(600));
pub(super) const GOSSIP_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_secs(10));

/// Allowed request body limits: a byte to a TiB.
pub(super) const MAX_BODY_RANGE: RangeInclusive<u64> = 1..=(1 << 40);
pub(super) const ADMIN_MAX_CONNECTIONS_RANGE: RangeInclusive<i64> = 1..=65_536;
pub(super) const RATE_BURST_RANGE: RangeInclusive<i64> = 1..=1_000_000;
pub(super) const PORT_RANGE: RangeInclusive<i64> = 1..=65_535;

/// "`field` = `value` is out of range: a to b", from the range itself:
/// the one copy of every bound.
fn out_of_range(field: &str, value: impl std::fmt::Display, range: &RangeInclusive<i64>) -> String {
    format!(
        "{field} = {value} is out of range: {} to {}",
        range.start(),
        range.end()
    )
}

/// A size in bytes: a number with an optional unit, without case: `k`,
/// `m`, `g` and `KiB`, `MiB`, `GiB` count in 1024s (as nginx does), `KB`,
/// `MB`, `GB` in 1000s, `B` is bytes.
pub(super) fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

pub(super) const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
pub(super) const DEFAULT_ADMIN: &str = "127.0.0.1:9900";

/// Validates the text of the file named `file`; certificate files are
/// read (relative to its directory) and checked at `now` (Unix seconds).
pub fn validate(file: &str, text: &str, now: i64) -> Result<Config, Vec<Problem>> {
    let positions = Positions::new(text);
    // Every unknown key at once, each with the field it was likely meant
    // to be; then what serde says, unless it is one of those again.
    let mut unknown: Vec<Problem> = super::fields::unknown(text, known_fields())
        .into_iter()
        .map(|u| positions.problem(u.span, u.message))
        .collect();
    let raw: RawConfig = match toml::from_str(text) {
        Ok(raw) if unknown.is_empty() => raw,
        Ok(_) => return Err(unknown),
        Err(e) => {
            let message = e.message().trim();
            if unknown.is_empty() || !message.starts_with("unknown field") {
                let span = e.span().unwrap_or(0..0);
                let message = match duration_hint(text, span.clone(), message) {
                    Some(hint) => format!("{message}: {hint}"),
                    None => message.to_string(),
                };
                unknown.push(positions.problem(span, message));
                unknown.sort_by_key(|p| (p.line, p.column));
            }
            return Err(unknown);
        }
    };
    let mut v = Validator {
        positions,
        problems: Vec::new(),
    };
    let dir = Path::new(file).parent().unwrap_or(Path::new(""));
    let node = v.node(&raw.node, dir);
    let global = v.global(&raw.global);
    let runtime = v.runtime(&raw.runtime);
    let cluster = raw.cluster.as_ref().map(|c| v.cluster(c));
    let routes: Vec<RouteConfig> = raw
        .routes
        .iter()
        .filter_map(|route| v.route(route, &global, &runtime, dir, now))
        .collect();
    v.unique(&raw.routes);
    let certificates: Vec<CertificateConfig> = raw
        .certificates
        .iter()
        .filter_map(|certificate| v.certificate(certificate, dir, now))
        .collect();
    v.edge(&raw);
    if v.problems.is_empty() {
        Ok(Config {
            source: file.to_string(),
            node,
            global,
            runtime,
            cluster,
            routes,
            certificates,
        })
    } else {
        v.problems.sort_by_key(|p| (p.line, p.column));
        Err(v.problems)
    }
}

/// The field paths of the file, traced once from [`RawConfig`].
fn known_fields() -> &'static [String] {
    static KNOWN: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    KNOWN.get_or_init(super::fields::paths::<RawConfig>)
}

/// Fields whose values are durations, written as strings with a unit.
const DURATION_FIELDS: &[&str] = &[
    "header_timeout",
    "idle_timeout",
    "send_timeout",
    "connect_timeout",
    "first_answer_timeout",
    "eject_for",
    "check_every",
    "check_timeout",
    "body_timeout",
    "cooldown",
    "gossip_interval",
];

/// What to add when a duration was given as a bare number: serde only says
/// it wanted a string.
fn duration_hint(text: &str, span: std::ops::Range<usize>, message: &str) -> Option<String> {
    if !message.starts_with("invalid type") || !message.contains("expected a string") {
        return None;
    }
    let line_start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
    // The key just before ` = `, also inside an inline table.
    let before = text
        .get(line_start..span.start)?
        .trim_end()
        .strip_suffix('=')?;
    let before = before.trim_end();
    let key = before
        .rsplit(|c: char| c.is_whitespace() || c == '{' || c == ',')
        .next()?;
    let value = text.get(span)?.trim();
    DURATION_FIELDS.contains(&key).then(|| {
        format!("{key} is a duration: a string with its unit, such as \"{value}s\" or \"250ms\"")
    })
}

struct Validator<'a> {
    positions: Positions<'a>,
    problems: Vec<Problem>,
}

impl Validator<'_> {
    fn problem(&mut self, span: Range<usize>, message: impl Into<String>) {
        let problem = self.positions.problem(span, message);
        self.problems.push(problem);
    }

    fn node(&mut self, raw: &RawNode, dir: &Path) -> NodeSettings {
        let name = match &raw.name {
            Some(name) => {
                if !is_name(name.get_ref()) {
                    self.problem(
                        name.span(),
                        format!(
                            "node name {:?} must be 1 to 63 letters, digits, '.', '_' or '-'",
                            name.get_ref()
                        ),
                    );
                }
                Setting::new(name.get_ref().clone(), Origin::File)
            }
            None => Setting::new(default_node_name(), Origin::Default),
        };
        let listen = self.address(raw.listen.as_ref(), "listen", DEFAULT_LISTEN);
        let listen_tls = raw
            .listen_tls
            .as_ref()
            .map(|l| self.address(Some(l), "listen_tls", "0.0.0.0:8443"));
        let tls_groups = match &raw.tls_groups {
            None => Setting::new(None, Origin::Default),
            Some(list) => {
                let mut groups = Vec::new();
                for name in list.get_ref() {
                    match super::TLS_GROUPS
                        .iter()
                        .find(|g| g.eq_ignore_ascii_case(name.get_ref()))
                    {
                        Some(known) if groups.contains(&known.to_string()) => {
                            self.problem(name.span(), format!("tls_groups names {known} twice"))
                        }
                        Some(known) => groups.push(known.to_string()),
                        None => self.problem(
                            name.span(),
                            format!(
                                "tls_groups: unknown group {:?}; known: {}",
                                name.get_ref(),
                                super::TLS_GROUPS.join(", ")
                            ),
                        ),
                    }
                }
                if list.get_ref().is_empty() {
                    self.problem(list.span(), "tls_groups is empty: name at least one group");
                }
                Setting::new(Some(groups), Origin::File)
            }
        };
        let admin = self.address(raw.admin.as_ref(), "admin", DEFAULT_ADMIN);
        let workers = match &raw.workers {
            Some(w) => {
                let n = *w.get_ref();
                if !WORKERS_RANGE.contains(&n) {
                    self.problem(w.span(), out_of_range("workers", n, &WORKERS_RANGE));
                }
                Setting::new(usize::try_from(n).unwrap_or(1).max(1), Origin::File)
            }
            None => Setting::new(default_workers(), Origin::Default),
        };
        let max_connections = match &raw.max_connections {
            Some(m) => {
                let n = *m.get_ref();
                if !MAX_CONNECTIONS_RANGE.contains(&n) {
                    self.problem(
                        m.span(),
                        out_of_range("max_connections", n, &MAX_CONNECTIONS_RANGE),
                    );
                }
                Setting::new(usize::try_from(n).ok(), Origin::File)
            }
            None => Setting::new(None, Origin::Default),
        };
        let admin_max_connections = match &raw.admin_max_connections {
            Some(m) => {
                let n = *m.get_ref();
                if !ADMIN_MAX_CONNECTIONS_RANGE.contains(&n) {
                    self.problem(
                        m.span(),
                        out_of_range("admin_max_connections", n, &ADMIN_MAX_CONNECTIONS_RANGE),
                    );
                }
                Setting::new(
                    usize::try_from(n).unwrap_or(1).clamp(1, 65_536),
                    Origin::File,
                )
            }
            None => Setting::new(super::ADMIN_MAX_CONNECTIONS, Origin::Default),
        };
        let mut timeout = |raw: &Option<Spanned<String>>, field, range, default| match raw {
            Some(value) => Setting::new(
                self.duration(value, field, range).unwrap_or(default),
                Origin::File,
            ),
            None => Setting::new(default, Origin::Default),
        };
        let header_timeout = timeout(
            &raw.header_timeout,
            "header_timeout",
            HEADER_TIMEOUT_RANGE,
            super::HEADER_READ_TIMEOUT,
        );
        let idle_timeout = timeout(
            &raw.idle_timeout,
            "idle_timeout",
            IDLE_TIMEOUT_RANGE,
            super::IDLE_TIMEOUT,
        );
        let send_timeout = timeout(
            &raw.send_timeout,
            "send_timeout",
            IDLE_TIMEOUT_RANGE,
            super::SEND_TIMEOUT,
        );
        let feed = raw.feed.as_ref().map(|feed| FeedSettings {
            addr: self.address(Some(feed), "feed", "0.0.0.0:9901").value,
            cert: None,
            client_ca: None,
        });
        let client_ca = raw
            .feed_client_ca
            .as_ref()
            .map(|ca| PathBuf::from(ca.get_ref()));
        let cert = match (&raw.feed_cert, &raw.feed_key) {
            (Some(cert), Some(key)) => {
                Some((PathBuf::from(cert.get_ref()), PathBuf::from(key.get_ref())))
            }
            (None, None) => None,
            (Some(one), None) | (None, Some(one)) => {
                self.problem(
                    one.span(),
                    "`feed_cert` and `feed_key` go together: a certificate chain and its key",
                );
                None
            }
        };
        let feed = match (feed, cert) {
            (Some(feed), cert) => Some(FeedSettings {
                cert,
                client_ca,
                ..feed
            }),
            (None, cert) => {
                if let Some(ca) = raw.feed_client_ca.as_ref().filter(|_| cert.is_none()) {
                    self.problem(
                        ca.span(),
                        "`feed_client_ca` without `feed`: set the feed's address too",
                    );
                }
                if let Some(cert) = &raw.feed_cert {
                    self.problem(
                        cert.span(),
                        "`feed_cert` without `feed`: set the feed's address too",
                    );
                }
                None
            }
        };
        NodeSettings {
            name,
            listen,
            listen_tls,
            tls_groups,
            admin,
            workers,
            max_connections,
            header_timeout,
            idle_timeout,
            send_timeout,
            admin_max_connections,
            feed,
            access_log: self.access_log(raw.access_log.as_ref(), dir),
            access_log_format: self.access_log_format(raw.access_log_format.as_ref()),
        }
    }

    /// `access_log`: `"stdout"`, `"off"`, or a file (relative to the
    /// configuration's directory) in a directory that exists.
    fn access_log(
        &mut self,
        raw: Option<&Spanned<String>>,
        dir: &Path,
    ) -> Setting<AccessLogTarget> {
        let Some(raw) = raw else {
            return Setting::new(AccessLogTarget::Stdout, Origin::Default);
        };
        let target = match raw.get_ref().as_str() {
            "stdout" => AccessLogTarget::Stdout,
            "off" => AccessLogTarget::Off,
            "" => {
                self.problem(
                    raw.span(),
                    "access_log is \"stdout\", \"off\" or a file's path",
                );
                AccessLogTarget::Off
            }
            path => {
                let path = dir.join(path);
                let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
                if parent.is_some_and(|p| !p.is_dir()) {
                    self.problem(
                        raw.span(),
                        format!(
                            "access_log = {:?}: its directory does not exist",
                            raw.get_ref()
                        ),
                    );
                }
                AccessLogTarget::File(path)
            }
        };
        Setting::new(target, Origin::File)
    }

    fn access_log_format(&mut self, raw: Option<&Spanned<String>>) -> Setting<AccessLogFormat> {
        let Some(raw) = raw else {
            return Setting::new(AccessLogFormat::Json, Origin::Default);
        };
        let format = match raw.get_ref().as_str() {
            "json" => AccessLogFormat::Json,
            "combined" => AccessLogFormat::Combined,
            other => {
                self.problem(
                    raw.span(),
                    format!("access_log_format = {other:?}: it is \"json\" or \"combined\""),
                );
                AccessLogFormat::Json
            }
        };
        Setting::new(format, Origin::File)
    }

    /// A `max_body`: a size, or `"off"` for no limit.
    fn max_body(
        &mut self,
        raw: Option<&Spanned<RawSize>>,
        inherited: &Setting<Option<u64>>,
        from: Origin,
    ) -> Setting<Option<u64>> {
        let Some(raw) = raw else {
            return inherited.clone();
        };
        let value = match raw.get_ref() {
            RawSize::Text(text) if text == "off" => return Setting::new(None, from),
            RawSize::Bytes(n) => u64::try_from(*n).ok(),
            RawSize::Text(text) => parse_size(text),
        };
        match value {
            Some(n) if MAX_BODY_RANGE.contains(&n) => Setting::new(Some(n), from),
            _ => {
                self.problem(
                    raw.span(),
                    "max_body is a size from 1 byte to 1TiB, such as 1048576, \"512k\" or \"10MiB\" (or \"off\")",
                );
                inherited.clone()
            }
        }
    }

    /// `request_headers` or `response_headers`: valid names and values,
    /// none the node writes itself.
    fn header_rules(&mut self, raw: Option<&Spanned<RawHeaderRules>>, field: &str) -> HeaderRules {
        let mut rules = HeaderRules::default();
        let Some(raw) = raw else {
            return rules;
        };
        let name = |v: &mut Self, raw: &Spanned<String>| {
            let Ok(name) = http::header::HeaderName::from_bytes(raw.get_ref().as_bytes()) else {
                v.problem(
                    raw.span(),
                    format!("{field}: {:?} is not a header name", raw.get_ref()),
                );
                return None;
            };
            if HeaderRules::is_reserved(&name) {
                v.problem(
                    raw.span(),
                    format!(
                        "{field}: {name} is written by the node itself (framing, hop-by-hop, forwarding or the request ID) and cannot be set or removed"
                    ),
                );
                return None;
            }
            Some(name)
        };
        if let Some(set) = &raw.get_ref().set {
            for (key, value) in set.get_ref() {
                let Some(name) = name(self, key) else {
                    continue;
                };
                match http::header::HeaderValue::from_str(value.get_ref()) {
                    Ok(value) => rules.set.push((name, value)),
                    Err(_) => self.problem(
                        value.span(),
                        format!("{field}: the value of {name} holds a character a header cannot carry: control characters and non-ASCII"),
                    ),
                }
            }
        }
        if let Some(remove) = &raw.get_ref().remove {
            for key in remove.get_ref() {
                if let Some(name) = name(self, key) {
                    if rules.set.iter().any(|(n, _)| *n == name) {
                        self.problem(
                            key.span(),
                            format!("{field}: {name} is both set and removed"),
                        );
                    }
                    rules.remove.push(name);
                }
            }
        }
        rules
    }

    fn rate(&mut self, raw: &Spanned<RawRate>) -> Option<RateSettings> {
        let before = self.problems.len();
        let rate = raw.get_ref();
        let per_second = match &rate.per_second {
            Some(p) if p.get_ref().is_finite() && *p.get_ref() > 0.0 && *p.get_ref() <= 1e6 => {
                *p.get_ref()
            }
            Some(p) => {
                self.problem(
                    p.span(),
                    format!(
                        "rate.per_second = {} is out of range: above 0, at most 1000000",
                        p.get_ref()
                    ),
                );
                1.0
            }
            None => {
                self.problem(
                    raw.span(),
                    "rate needs per_second: the requests a second it refills",
                );
                1.0
            }
        };
        let burst = match &rate.burst {
            Some(b) if RATE_BURST_RANGE.contains(b.get_ref()) => {
                u32::try_from(*b.get_ref()).unwrap_or(1)
            }
            Some(b) => {
                self.problem(
                    b.span(),
                    out_of_range("rate.burst", b.get_ref(), &RATE_BURST_RANGE),
                );
                1
            }
            // A second's worth.
            None => (per_second.ceil() as u32).max(1),
        };
        let by = match rate.by.as_ref().map(|b| (b, b.get_ref().as_str())) {
            None | Some((_, "route")) => RateKey::Route,
            Some((_, "client")) => RateKey::Client,
            Some((b, other)) => {
                self.problem(
                    b.span(),
                    format!("rate.by = {other:?}: it is \"route\" or \"client\""),
                );
                RateKey::Route
            }
        };
        (self.problems.len() == before).then_some(RateSettings {
            per_second,
            burst,
            by,
        })
    }

    /// `add_prefix`: a normal path, without a trailing `/`.
    fn add_prefix(&mut self, raw: &Spanned<String>) -> String {
        let p = raw.get_ref();
        let normal =
            crate::h1::target::normalize(p.as_bytes()).is_ok_and(|n| n.as_ref() == p.as_bytes());
        if !normal || p.len() < 2 || p.ends_with('/') || p.contains(['?', '#', '%']) {
            self.problem(
                raw.span(),
                format!(
                    "add_prefix {p:?} must be a path such as \"/v2\": starting with '/', not ending with it, without '.' or '..' segments, '?', '#' or '%'"
                ),
            );
        }
        p.clone()
    }

    fn address(
        &mut self,
        raw: Option<&Spanned<String>>,
        field: &str,
        default: &str,
    ) -> Setting<SocketAddr> {
        let fallback = default
            .parse()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
        let Some(raw) = raw else {
            return Setting::new(fallback, Origin::Default);
        };
        match raw.get_ref().parse() {
            Ok(addr) => Setting::new(addr, Origin::File),
            Err(_) => {
                self.problem(
                    raw.span(),
                    format!(
                        "{field} = {:?} is not an address such as \"{default}\"",
                        raw.get_ref()
                    ),
                );
                Setting::new(fallback, Origin::File)
            }
        }
    }

    fn global(&mut self, raw: &RawGlobal) -> GlobalSettings {
        let defaults = BreakerSettings {
            enabled: Setting::new(false, Origin::Default),
            failures: Setting::new(DEFAULT_BREAKER_FAILURES, Origin::Default),
            cooldown: Setting::new(DEFAULT_BREAKER_COOLDOWN, Origin::Default),
        };
        let breaker = self.breaker(raw.breaker.as_ref(), &defaults, Origin::Global);
        let mut inherited = |raw: &Option<Spanned<String>>, field, range, default| match raw {
            Some(value) => Setting::new(
                self.duration(value, field, range).unwrap_or(default),
                Origin::Global,
            ),
            None => Setting::new(default, Origin::Default),
        };
        GlobalSettings {
            connect_timeout: inherited(
                &raw.connect_timeout,
                "connect_timeout",
                CONNECT_RANGE,
                DEFAULT_CONNECT_TIMEOUT,
            ),
            first_answer_timeout: inherited(
                &raw.first_answer_timeout,
                "first_answer_timeout",
                FIRST_ANSWER_RANGE,
                DEFAULT_FIRST_ANSWER_TIMEOUT,
            ),
            eject_for: inherited(&raw.eject_for, "eject_for", EJECT_RANGE, DEFAULT_EJECT_FOR),
            breaker,
            check_every: inherited(
                &raw.check_every,
                "check_every",
                CHECK_EVERY_RANGE,
                DEFAULT_CHECK_EVERY,
            ),
            check_timeout: inherited(
                &raw.check_timeout,
                "check_timeout",
                CHECK_TIMEOUT_RANGE,
                DEFAULT_CHECK_TIMEOUT,
            ),
            body_timeout: inherited(
                &raw.body_timeout,
                "body_timeout",
                BODY_TIMEOUT_RANGE,
                DEFAULT_BODY_TIMEOUT,
            ),
            consecutive_gateway_errors: self.gateway_errors(
                raw.consecutive_gateway_errors.as_ref(),
                &Setting::new(DEFAULT_CONSECUTIVE_GATEWAY_ERRORS, Origin::Default),
                Origin::Global,
            ),
            underscores_in_headers: match &raw.underscores_in_headers {
                Some(v) => Setting::new(*v.get_ref(), Origin::Global),
                None => Setting::new(false, Origin::Default),
            },
            trusted_proxies: self.trusted_proxies(raw.trusted_proxies.as_ref()),
            max_body: self.max_body(
                raw.max_body.as_ref(),
                &Setting::new(None, Origin::Default),
                Origin::Global,
            ),
            request_headers: self.header_rules(raw.request_headers.as_ref(), "request_headers"),
            response_headers: self.header_rules(raw.response_headers.as_ref(), "response_headers"),
        }
    }

    /// `trusted_proxies`: each entry a CIDR range or a single address; a
    /// bad one is a problem at its own line and column.
    fn trusted_proxies(
        &mut self,
        raw: Option<&Spanned<Vec<Spanned<String>>>>,
    ) -> Setting<TrustedProxies> {
        let Some(list) = raw else {
            return Setting::new(TrustedProxies::default(), Origin::Default);
        };
        let mut ranges = Vec::with_capacity(list.get_ref().len());
        for entry in list.get_ref() {
            match Cidr::parse(entry.get_ref()) {
                Ok(range) => ranges.push(range),
                Err(error) => self.problem(entry.span(), format!("trusted_proxies: {error}")),
            }
        }
        Setting::new(TrustedProxies::new(ranges), Origin::Global)
    }

    /// Breaker settings: each field given, else `inherited`'s.
    fn breaker(
        &mut self,
        raw: Option<&RawBreaker>,
        inherited: &BreakerSettings,
        from: Origin,
    ) -> BreakerSettings {
        let Some(raw) = raw else {
            return inherited.clone();
        };
        let enabled = match &raw.enabled {
            Some(e) => Setting::new(*e.get_ref(), from),
            None => inherited.enabled.clone(),
        };
        let failures = match &raw.failures {
            Some(f) if BREAKER_FAILURES_RANGE.contains(f.get_ref()) => Setting::new(
                u32::try_from(*f.get_ref()).unwrap_or(DEFAULT_BREAKER_FAILURES),
                from,
            ),
            Some(f) => {
                self.problem(
                    f.span(),
                    out_of_range("breaker failures", f.get_ref(), &BREAKER_FAILURES_RANGE),
                );
                inherited.failures.clone()
            }
            None => inherited.failures.clone(),
        };
        let cooldown = match &raw.cooldown {
            Some(c) => match self.duration(c, "breaker cooldown", BREAKER_COOLDOWN_RANGE) {
                Some(d) => Setting::new(d, from),
                None => inherited.cooldown.clone(),
            },
            None => inherited.cooldown.clone(),
        };
        BreakerSettings {
            enabled,
            failures,
            cooldown,
        }
    }

    fn duration(
        &mut self,
        raw: &Spanned<String>,
        field: &str,
        (min, max): (Duration, Duration),
    ) -> Option<Duration> {
        let text = raw.get_ref();
        let Ok(value) = humantime::parse_duration(text) else {
            self.problem(
                raw.span(),
                format!("{field} = {text:?} is not a duration such as \"5s\" or \"250ms\""),
            );
            return None;
        };
        if value < min || value > max {
            self.problem(
                raw.span(),
                format!(
                    "{field} = {text:?} is out of range: {} to {}",
                    humantime::format_duration(min),
                    humantime::format_duration(max)
                ),
            );
            return None;
        }
        Some(value)
    }

    /// The route's own value, else the inherited one.
    /// `consecutive_gateway_errors`: the value given, else `inherited`.
    fn gateway_errors(
        &mut self,
        raw: Option<&Spanned<i64>>,
        inherited: &Setting<u32>,
        from: Origin,
    ) -> Setting<u32> {
        match raw {
            Some(n) if GATEWAY_ERRORS_RANGE.contains(n.get_ref()) => {
                Setting::new(u32::try_from(*n.get_ref()).unwrap_or(5), from)
            }
            Some(n) => {
                self.problem(
                    n.span(),
                    out_of_range(
                        "consecutive_gateway_errors",
                        n.get_ref(),
                        &GATEWAY_ERRORS_RANGE,
                    ),
                );
                inherited.clone()
            }
            None => inherited.clone(),
        }
    }

    fn inherit(
        &mut self,
        raw: &Option<Spanned<String>>,
        field: &str,
        range: (Duration, Duration),
        inherited: &Setting<Duration>,
    ) -> Option<Setting<Duration>> {
        match raw {
            Some(value) => Some(Setting::new(
                self.duration(value, field, range)?,
                Origin::Route,
            )),
            None => Some(inherited.clone()),
        }
    }

    fn cluster(&mut self, spanned: &Spanned<RawCluster>) -> ClusterSettings {
        let raw = spanned.get_ref();
        let id = match &raw.id {
            Some(id) if is_name(id.get_ref()) => id.get_ref().clone(),
            Some(id) => {
                self.problem(
                    id.span(),
                    format!(
                        "cluster id {:?} must be 1 to 63 letters, digits, '.', '_' or '-'",
                        id.get_ref()
                    ),
                );
                String::new()
            }
            None => {
                self.problem(
                    spanned.span(),
                    "[cluster] needs an `id`, the same on every node of the cluster",
                );
                String::new()
            }
        };
        let gossip = self
            .address(raw.gossip.as_ref(), "gossip", DEFAULT_GOSSIP)
            .value;
        let advertise = raw.advertise.as_ref().map(|a| {
            let addr = self.address(Some(a), "advertise", "10.0.0.5:7946").value;
            if addr.ip().is_unspecified() || addr.port() == 0 {
                self.problem(
                    a.span(),
                    format!(
                        "advertise = {:?} must be an address peers can reach",
                        a.get_ref()
                    ),
                );
            }
            addr
        });
        let mut seeds = Vec::new();
        for seed in raw.seeds.iter().flatten() {
            let valid = seed
                .get_ref()
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if valid {
                seeds.push(seed.get_ref().clone());
            } else {
                self.problem(
                    seed.span(),
                    format!(
                        "seed {:?} is not a host:port such as \"tasks.picket:7946\"",
                        seed.get_ref()
                    ),
                );
            }
        }
        let insecure = raw.insecure.as_ref().is_some_and(|i| *i.get_ref());
        let key_file = raw.key_file.as_ref().map(|k| PathBuf::from(k.get_ref()));
        if let (Some(key), true) = (&raw.key_file, insecure) {
            self.problem(
                key.span(),
                "`key_file` and `insecure = true` contradict each other: gossip is either sealed or insecure",
            );
        }
        let gossip_interval = match &raw.gossip_interval {
            Some(i) => self
                .duration(i, "gossip_interval", GOSSIP_INTERVAL_RANGE)
                .unwrap_or(DEFAULT_GOSSIP_INTERVAL),
            None => DEFAULT_GOSSIP_INTERVAL,
        };
        ClusterSettings {
            id,
            gossip,
            advertise,
            seeds,
            key_file,
            insecure,
            gossip_interval,
        }
    }

    fn runtime(&mut self, raw: &RawRuntime) -> RuntimeSettings {
        let kind = match &raw.kind {
            None => RuntimeKind::None,
            Some(kind) => match kind.get_ref().as_str() {
                "none" => RuntimeKind::None,
                "docker" => RuntimeKind::Docker,
                "swarm" => RuntimeKind::Swarm,
                "kubernetes" => RuntimeKind::Kubernetes,
                other => {
                    self.problem(
                        kind.span(),
                        format!("runtime kind {other:?} is not one of \"kubernetes\", \"docker\", \"swarm\", \"none\""),
                    );
                    RuntimeKind::None
                }
            },
        };
        let mut only_for = |field: &Option<Spanned<String>>, name: &str, kinds: &[RuntimeKind]| {
            let value = field.as_ref()?;
            if !kinds.contains(&kind) {
                self.problem(
                    value.span(),
                    format!("`{name}` has no meaning for runtime kind \"{kind}\""),
                );
            }
            Some(value.get_ref().clone())
        };
        let endpoint = only_for(&raw.endpoint, "endpoint", &[RuntimeKind::Docker]);
        let namespace = only_for(&raw.namespace, "namespace", &[RuntimeKind::Kubernetes]);
        let api = only_for(&raw.api, "api", &[RuntimeKind::Kubernetes]);
        let network = only_for(
            &raw.network,
            "network",
            &[RuntimeKind::Docker, RuntimeKind::Swarm],
        );
        if let (Some(raw), Some(endpoint)) = (&raw.endpoint, &endpoint)
            && !["unix://", "tcp://", "http://"]
                .iter()
                .any(|s| endpoint.starts_with(s))
        {
            self.problem(
                raw.span(),
                format!("endpoint {endpoint:?} must start with unix://, tcp:// or http://"),
            );
        }
        if let (Some(raw), Some(api)) = (&raw.api, &api)
            && !(api.starts_with("https://") || api.starts_with("http://"))
        {
            self.problem(
                raw.span(),
                format!("api {api:?} must be an http:// or https:// URL"),
            );
        }
        let mut proxies = Vec::new();
        if let Some(list) = &raw.proxies {
            if kind != RuntimeKind::Swarm {
                self.problem(
                    list.span(),
                    format!("`proxies` has no meaning for runtime kind \"{kind}\""),
                );
            }
            for entry in list.get_ref() {
                let valid = entry
                    .get_ref()
                    .rsplit_once(':')
                    .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
                if valid {
                    proxies.push(entry.get_ref().clone());
                } else {
                    self.problem(
                        entry.span(),
                        format!(
                            "proxy {:?} is not a host:port such as \"tasks.socket-proxy:2375\"",
                            entry.get_ref()
                        ),
                    );
                }
            }
        }
        if kind == RuntimeKind::Swarm && proxies.is_empty() {
            let span = raw.kind.as_ref().map_or(0..0, |k| k.span());
            self.problem(
                span,
                "runtime kind \"swarm\" needs `proxies`: the socket proxy of every engine",
            );
        }
        let namespaces = self.namespaces(raw.namespaces.as_ref(), kind);
        let breaker = match &raw.breaker {
            Some(b) => self.runtime_breaker(b.get_ref()),
            None => RuntimeBreakerSettings::default(),
        };
        RuntimeSettings {
            kind,
            endpoint,
            namespace,
            api,
            proxies,
            network,
            namespaces,
            breaker,
        }
    }

    fn namespaces(
        &mut self,
        raw: Option<&Spanned<Vec<Spanned<String>>>>,
        kind: RuntimeKind,
    ) -> Vec<String> {
        let Some(list) = raw else {
            return Vec::new();
        };
        if kind != RuntimeKind::Kubernetes {
            self.problem(
                list.span(),
                format!("`namespaces` has no meaning for runtime kind \"{kind}\""),
            );
        }
        let mut namespaces = Vec::new();
        for entry in list.get_ref() {
            let name = entry.get_ref();
            if name == "*" || is_dns_label(name) {
                namespaces.push(name.clone());
            } else {
                self.problem(
                    entry.span(),
                    format!(
                        "namespace {name:?} is not a Kubernetes namespace name (lowercase letters, digits and '-', at most 63) nor \"*\" (every namespace)"
                    ),
                );
            }
        }
        if namespaces.iter().any(|n| n == "*") && namespaces.len() > 1 {
            self.problem(
                list.span(),
                "`namespaces` with \"*\" watches every namespace: list nothing else",
            );
        }
        namespaces.sort();
        namespaces.dedup();
        namespaces
    }

    fn runtime_breaker(&mut self, raw: &RawRuntimeBreaker) -> RuntimeBreakerSettings {
        let defaults = RuntimeBreakerSettings::default();
        let enabled = raw.enabled.as_ref().map_or(defaults.enabled, |e| {
            Setting::new(*e.get_ref(), Origin::File)
        });
        if let (Some(_), Some(old)) = (&raw.failures, &raw.threshold) {
            self.problem(
                old.span(),
                "`threshold` is what `failures` was called before: give one of them".to_string(),
            );
        }
        let failures = match raw.failures.as_ref().or(raw.threshold.as_ref()) {
            Some(t) if RUNTIME_BREAKER_FAILURES_RANGE.contains(t.get_ref()) => Setting::new(
                u32::try_from(*t.get_ref()).unwrap_or(defaults.failures.value),
                Origin::File,
            ),
            Some(t) => {
                self.problem(
                    t.span(),
                    out_of_range(
                        "breaker failures",
                        t.get_ref(),
                        &RUNTIME_BREAKER_FAILURES_RANGE,
                    ),
                );
                defaults.failures
            }
            None => defaults.failures,
        };
        let cooldown = match &raw.cooldown {
            Some(c) => match self.duration(c, "breaker cooldown", RUNTIME_BREAKER_COOLDOWN_RANGE) {
                Some(d) => Setting::new(d, Origin::File),
                None => defaults.cooldown,
            },
            None => defaults.cooldown,
        };
        RuntimeBreakerSettings {
            enabled,
            failures,
            cooldown,
        }
    }

    fn route(
        &mut self,
        raw: &Spanned<RawRoute>,
        global: &GlobalSettings,
        runtime: &RuntimeSettings,
        dir: &Path,
        now: i64,
    ) -> Option<RouteConfig> {
        let raw = raw.get_ref();
        let before = self.problems.len();
        let name = raw.name.get_ref().clone();
        if !is_name(&name) {
            self.problem(
                raw.name.span(),
                format!("route name {name:?} must be 1 to 63 letters, digits, '.', '_' or '-'"),
            );
        }
        let host = raw.host.as_ref().and_then(|h| self.host(h));
        let path_prefix = match &raw.path_prefix {
            Some(p) => self.path_prefix(p),
            None => "/".to_string(),
        };
        let upstream = self.upstream(raw, runtime);
        let connect_timeout = self.inherit(
            &raw.connect_timeout,
            "connect_timeout",
            CONNECT_RANGE,
            &global.connect_timeout,
        );
        let first_answer_timeout = self.inherit(
            &raw.first_answer_timeout,
            "first_answer_timeout",
            FIRST_ANSWER_RANGE,
            &global.first_answer_timeout,
        );
        let eject_for = self.inherit(&raw.eject_for, "eject_for", EJECT_RANGE, &global.eject_for);
        let consecutive_gateway_errors = self.gateway_errors(
            raw.consecutive_gateway_errors.as_ref(),
            &global.consecutive_gateway_errors,
            Origin::Route,
        );
        let breaker = self.breaker(raw.breaker.as_ref(), &global.breaker, Origin::Route);
        let tries = match &raw.tries {
            Some(t) if TRIES_RANGE.contains(t.get_ref()) => {
                Setting::new(u32::try_from(*t.get_ref()).unwrap_or(1), Origin::Route)
            }
            Some(t) => {
                self.problem(t.span(), out_of_range("tries", t.get_ref(), &TRIES_RANGE));
                Setting::new(1, Origin::Route)
            }
            None => Setting::new(default_tries(upstream.as_ref()), Origin::Default),
        };
        let tls = raw
            .tls
            .as_ref()
            .and_then(|tls| self.upstream_tls(tls, upstream.as_ref(), dir, now));
        let speaks_tls = raw.tls.is_some()
            || matches!(&upstream, Some(UpstreamConfig::External(ext)) if ext.tls);
        let protocol = self.protocol(raw.protocol.as_ref(), speaks_tls);
        let check = self.check(raw);
        if let (CheckKind::Grpc { .. }, Protocol::Http1, Some(span)) =
            (&check, protocol, raw.check.as_ref().map(|c| c.span()))
        {
            self.problem(
                span,
                "check = \"grpc\" speaks HTTP/2: set `protocol = \"h2c\"` (or \"h2\" over TLS)",
            );
        }
        let strip_prefix = raw.strip_prefix.as_ref().is_some_and(|s| *s.get_ref());
        if let Some(strip) = raw.strip_prefix.as_ref().filter(|s| *s.get_ref())
            && path_prefix == "/"
        {
            self.problem(
                strip.span(),
                "strip_prefix needs the route's path_prefix (other than \"/\") to strip",
            );
        }
        let add_prefix = raw.add_prefix.as_ref().map(|p| self.add_prefix(p));
        let request_headers = global
            .request_headers
            .then(&self.header_rules(raw.request_headers.as_ref(), "request_headers"));
        let response_headers = global
            .response_headers
            .then(&self.header_rules(raw.response_headers.as_ref(), "response_headers"));
        let max_body = self.max_body(raw.max_body.as_ref(), &global.max_body, Origin::Route);
        let rate = raw.rate.as_ref().and_then(|r| self.rate(r));
        if self.problems.len() > before {
            return None;
        }
        Some(RouteConfig {
            name,
            host,
            path_prefix,
            upstream: upstream?,
            connect_timeout: connect_timeout?,
            first_answer_timeout: first_answer_timeout?,
            tries,
            eject_for: eject_for?,
            consecutive_gateway_errors,
            breaker,
            body_timeout: global.body_timeout.value,
            underscores_in_headers: global.underscores_in_headers.value,
            trusted_proxies: global.trusted_proxies.value.clone(),
            https_only: raw.https_only.as_ref().is_some_and(|h| *h.get_ref()),
            tls,
            protocol,
            check,
            strip_prefix,
            add_prefix,
            request_headers,
            response_headers,
            max_body,
            rate,
        })
    }

    /// A route's `protocol`; `h2` and `auto` need TLS (ALPN), `h2c` is
    /// HTTP/2 in clear and cannot have it.
    fn protocol(&mut self, raw: Option<&Spanned<String>>, speaks_tls: bool) -> Protocol {
        let Some(raw) = raw else {
            return Protocol::Http1;
        };
        let protocol = match raw.get_ref().as_str() {
            "http1" => Protocol::Http1,
            "h2c" => Protocol::H2c,
            "h2" => Protocol::H2,
            "auto" => Protocol::Auto,
            other => {
                self.problem(
                    raw.span(),
                    format!(
                        "protocol {other:?} is not one of \"http1\", \"h2c\", \"h2\", \"auto\""
                    ),
                );
                return Protocol::Http1;
            }
        };
        match protocol {
            Protocol::H2 | Protocol::Auto if !speaks_tls => self.problem(
                raw.span(),
                format!(
                    "protocol = {:?} is HTTP/2 over TLS: give the route `tls = {{ ... }}` or an https:// upstream, or use \"h2c\" for HTTP/2 in clear",
                    protocol.name()
                ),
            ),
            Protocol::H2c if speaks_tls => self.problem(
                raw.span(),
                "protocol = \"h2c\" is HTTP/2 in clear, but this route speaks TLS: use \"h2\" (or \"auto\")",
            ),
            _ => {}
        }
        protocol
    }

    /// A route's `check` (and `grpc_service`).
    fn check(&mut self, raw: &RawRoute) -> CheckKind {
        let service = raw.grpc_service.as_ref();
        let kind = match raw.check.as_ref() {
            None => None,
            Some(check) => match check.get_ref().as_str() {
                "connect" => None,
                "grpc" => Some(check),
                other => {
                    self.problem(
                        check.span(),
                        format!("check {other:?} is not one of \"connect\", \"grpc\""),
                    );
                    return CheckKind::Connect;
                }
            },
        };
        match (kind, service) {
            (Some(_), service) => CheckKind::Grpc {
                service: service.map(|s| s.get_ref().clone()).unwrap_or_default(),
            },
            (None, Some(service)) => {
                self.problem(
                    service.span(),
                    "grpc_service is the service a gRPC health check asks for: set `check = \"grpc\"` too",
                );
                CheckKind::Connect
            }
            (None, None) => CheckKind::Connect,
        }
    }

    /// A route's `tls`: its files read from `dir` (when relative) and
    /// checked at `now`.
    fn upstream_tls(
        &mut self,
        raw: &Spanned<RawUpstreamTls>,
        upstream: Option<&UpstreamConfig>,
        dir: &Path,
        now: i64,
    ) -> Option<UpstreamTls> {
        let span = raw.span();
        let raw = raw.get_ref();
        let external = match upstream {
            Some(UpstreamConfig::External(ext)) if !ext.tls => {
                self.problem(
                    span,
                    format!(
                        "`tls` with the plain-HTTP upstream {ext}: write it https:// to speak TLS"
                    ),
                );
                return None;
            }
            Some(UpstreamConfig::External(_)) => true,
            _ => false,
        };
        let server_name = match &raw.server_name {
            Some(name) => {
                if rustls::pki_types::ServerName::try_from(name.get_ref().as_str()).is_err() {
                    self.problem(
                        name.span(),
                        format!(
                            "server_name {:?} is neither a DNS name nor an IP address",
                            name.get_ref()
                        ),
                    );
                    return None;
                }
                Some(name.get_ref().clone())
            }
            None if external => None,
            None => {
                self.problem(
                    span,
                    "`tls` needs `server_name`: the name the replicas' certificates carry",
                );
                return None;
            }
        };
        let mut read = |field: &Spanned<String>, what: &str| -> Option<(PathBuf, Vec<u8>)> {
            let path = dir.join(field.get_ref());
            match std::fs::read(&path) {
                Ok(pem) => Some((path, pem)),
                Err(e) => {
                    self.problem(
                        field.span(),
                        format!("cannot read {what} {}: {e}", path.display()),
                    );
                    None
                }
            }
        };
        let ca = match &raw.ca {
            Some(field) => {
                let (path, pem) = read(field, "CA certificates")?;
                let found = <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::pem_slice_iter(&pem)
                    .filter(Result::is_ok)
                    .count();
                if found == 0 {
                    self.problem(
                        field.span(),
                        format!("{}: no PEM certificate in it", path.display()),
                    );
                    return None;
                }
                Some((path, pem))
            }
            None => None,
        };
        let client = match (&raw.client_cert, &raw.client_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => {
                let (cert_path, cert_pem) = read(cert, "client certificate")?;
                let (key_path, key_pem) = read(key, "client key")?;
                if let Err(error) = crate::certificate::check(&cert_pem, &key_pem, None, now) {
                    let field = match error.culprit(None) {
                        Culprit::Key => key,
                        _ => cert,
                    };
                    self.problem(
                        field.span(),
                        format!("client certificate {}: {error}", cert_path.display()),
                    );
                    return None;
                }
                Some(ClientIdentity {
                    cert: cert_path,
                    key: key_path,
                    cert_pem,
                    key_pem,
                })
            }
            (Some(one), None) | (None, Some(one)) => {
                self.problem(
                    one.span(),
                    "`client_cert` and `client_key` go together: a certificate chain and its key",
                );
                return None;
            }
        };
        Some(UpstreamTls {
            ca,
            server_name,
            client,
        })
    }

    /// A `[[certificate]]`: its files read from `dir` (when relative) and
    /// checked at `now`; each problem at the value it is about.
    fn certificate(
        &mut self,
        raw: &Spanned<RawCertificate>,
        dir: &Path,
        now: i64,
    ) -> Option<CertificateConfig> {
        let raw = raw.get_ref();
        let hosts = match &raw.hosts {
            None => None,
            Some(list) if list.get_ref().is_empty() => {
                self.problem(
                    list.span(),
                    "hosts must name at least one host (leave it out to serve every name of the certificate)",
                );
                return None;
            }
            Some(list) => {
                let mut hosts = Vec::new();
                for host in list.get_ref() {
                    let name = host.get_ref().to_ascii_lowercase();
                    let bare = name.strip_prefix("*.").unwrap_or(&name);
                    if !is_dns_name(bare) {
                        self.problem(
                            host.span(),
                            format!(
                                "host {:?} must be a DNS name such as \"api.example.com\" or \"*.example.com\"",
                                host.get_ref()
                            ),
                        );
                        return None;
                    }
                    hosts.push(name);
                }
                Some(hosts)
            }
        };
        let path = |p: &Spanned<String>| std::path::absolute(dir.join(p.get_ref()));
        let (cert, key) = match (path(&raw.cert), path(&raw.key)) {
            (Ok(cert), Ok(key)) => (cert, key),
            (Err(e), _) | (_, Err(e)) => {
                self.problem(raw.cert.span(), format!("cannot resolve the path: {e}"));
                return None;
            }
        };
        let cert_pem = match std::fs::read(&cert) {
            Ok(pem) => pem,
            Err(e) => {
                self.problem(
                    raw.cert.span(),
                    format!("cannot read certificate {}: {e}", cert.display()),
                );
                return None;
            }
        };
        let key_pem = match std::fs::read(&key) {
            Ok(pem) => pem,
            Err(e) => {
                self.problem(
                    raw.key.span(),
                    format!("cannot read key {}: {e}", key.display()),
                );
                return None;
            }
        };
        match crate::certificate::check(&cert_pem, &key_pem, hosts.as_deref(), now) {
            Ok(current) => Some(CertificateConfig {
                cert,
                key,
                hosts,
                current: Arc::new(current),
            }),
            Err(error) => {
                let (span, file) = match error.culprit(hosts.as_deref()) {
                    Culprit::Cert => (raw.cert.span(), format!("certificate {}", cert.display())),
                    Culprit::Key => (
                        raw.key.span(),
                        format!("key {} (for certificate {})", key.display(), cert.display()),
                    ),
                    Culprit::Host(i) => (
                        raw.hosts
                            .as_ref()
                            .and_then(|h| h.get_ref().get(i))
                            .map_or(raw.cert.span(), Spanned::span),
                        format!("certificate {}", cert.display()),
                    ),
                };
                self.problem(span, format!("{file}: {error}"));
                None
            }
        }
    }

    /// The HTTPS settings hold together: a TLS listener has a certificate
    /// to serve, and an `https_only` route a TLS listener to send its
    /// clients to (which a flag may give, but not a certificate).
    fn edge(&mut self, raw: &RawConfig) {
        if raw.certificates.is_empty() {
            if let Some(listen_tls) = &raw.node.listen_tls {
                self.problem(
                    listen_tls.span(),
                    "listen_tls needs at least one [[certificate]] (cert and key) to serve",
                );
            }
            for route in &raw.routes {
                if let Some(https_only) = &route.get_ref().https_only
                    && *https_only.get_ref()
                {
                    self.problem(
                        https_only.span(),
                        "https_only needs this node to serve HTTPS: set `[node] listen_tls` and add a [[certificate]]",
                    );
                }
            }
        }
    }

    fn host(&mut self, raw: &Spanned<String>) -> Option<HostMatch> {
        let host = raw.get_ref().to_ascii_lowercase();
        let (suffix, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host.as_str()),
        };
        if !is_dns_name(name) {
            self.problem(
                raw.span(),
                format!(
                    "host {:?} must be a DNS name such as \"api.example.com\" or \"*.example.com\", without scheme or port",
                    raw.get_ref()
                ),
            );
            return None;
        }
        Some(if suffix {
            HostMatch::Suffix(format!(".{name}"))
        } else {
            HostMatch::Exact(name.to_string())
        })
    }

    fn path_prefix(&mut self, raw: &Spanned<String>) -> String {
        let p = raw.get_ref();
        if !p.starts_with('/') || p.contains(['?', '#']) || p.contains(char::is_whitespace) {
            self.problem(
                raw.span(),
                format!("path_prefix {p:?} must start with '/' and hold no '?', '#' or spaces"),
            );
        }
        p.clone()
    }

    fn upstream(&mut self, raw: &RawRoute, runtime: &RuntimeSettings) -> Option<UpstreamConfig> {
        let given = [
            raw.upstream.is_some(),
            raw.replicas.is_some(),
            raw.service.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            self.problem(
                raw.name.span(),
                format!(
                    "route {:?} has more than one of `upstream`, `replicas` and `service`; it takes one",
                    raw.name.get_ref()
                ),
            );
            return None;
        }
        if let (Some(port), None) = (&raw.port, &raw.service) {
            self.problem(port.span(), "`port` goes with `service`");
            return None;
        }
        if let Some(url) = &raw.upstream {
            return self.external(url).map(UpstreamConfig::External);
        }
        if let Some(list) = &raw.replicas {
            return self.replicas(list).map(UpstreamConfig::Replicas);
        }
        let Some(service) = &raw.service else {
            self.problem(
                raw.name.span(),
                format!(
                    "route {:?} needs an upstream: `service = \"api\"` with a `port`, `upstream = \"http://host:port\"` or `replicas = [\"10.0.0.7:8080\"]`",
                    raw.name.get_ref()
                ),
            );
            return None;
        };
        let name = service.get_ref();
        let (namespace, bare) = match name.split_once('/') {
            Some((namespace, bare)) => (Some(namespace), bare),
            None => (None, name.as_str()),
        };
        if !is_name(bare) {
            self.problem(
                service.span(),
                format!("service {name:?} must be 1 to 63 letters, digits, '.', '_' or '-', after an optional \"namespace/\""),
            );
            return None;
        }
        if let Some(namespace) = namespace {
            let watched = runtime
                .namespaces
                .iter()
                .any(|n| n == "*" || n == namespace)
                || runtime.namespace.as_deref() == Some(namespace);
            if runtime.kind != RuntimeKind::Kubernetes {
                self.problem(
                    service.span(),
                    format!("service {name:?} names a namespace: only runtime kind \"kubernetes\" has namespaces"),
                );
                return None;
            }
            if !is_dns_label(namespace) || !watched {
                self.problem(
                    service.span(),
                    format!(
                        "service {name:?} is in namespace {namespace:?}, which this node does not watch: add it to `[runtime] namespaces`"
                    ),
                );
                return None;
            }
        }
        if runtime.kind == RuntimeKind::None {
            self.problem(
                service.span(),
                format!(
                    "service {name:?} needs a runtime: set `[runtime] kind` to \"kubernetes\", \"docker\" or \"swarm\""
                ),
            );
            return None;
        }
        let Some(port) = &raw.port else {
            self.problem(service.span(), format!("service {name:?} needs a `port`"));
            return None;
        };
        let port = match port.get_ref() {
            RawPort::Number(n) => match u16::try_from(*n) {
                Ok(n) if PORT_RANGE.contains(&i64::from(n)) => ServicePort::Number(n),
                _ => {
                    self.problem(port.span(), out_of_range("port", n, &PORT_RANGE));
                    return None;
                }
            },
            RawPort::Name(named) if runtime.kind == RuntimeKind::Kubernetes => {
                if named.is_empty() || named.len() > 15 {
                    self.problem(
                        port.span(),
                        format!("port name {named:?} must be 1 to 15 characters"),
                    );
                    return None;
                }
                ServicePort::Name(named.clone())
            }
            RawPort::Name(named) => {
                self.problem(
                    port.span(),
                    format!("port {named:?}: ports by name are for Kubernetes; give a number"),
                );
                return None;
            }
        };
        Some(UpstreamConfig::Service {
            name: name.clone(),
            port,
        })
    }

    fn replicas(&mut self, list: &Spanned<Vec<Spanned<String>>>) -> Option<Vec<SocketAddr>> {
        if list.get_ref().is_empty() {
            self.problem(list.span(), "replicas must name at least one address");
            return None;
        }
        let mut out = Vec::with_capacity(list.get_ref().len());
        for entry in list.get_ref() {
            match entry.get_ref().parse::<SocketAddr>() {
                Ok(addr) if out.contains(&addr) => {
                    self.problem(entry.span(), format!("replica {addr} is listed twice"));
                }
                Ok(addr) => out.push(addr),
                Err(_) => self.problem(
                    entry.span(),
                    format!(
                        "replica {:?} is not an IP:port such as \"10.0.0.7:8080\" (use `upstream = \"http://name:port\"` for a name)",
                        entry.get_ref()
                    ),
                ),
            }
        }
        (out.len() == list.get_ref().len()).then_some(out)
    }

    fn external(&mut self, raw: &Spanned<String>) -> Option<ExternalHost> {
        let text = raw.get_ref();
        let bad = |why: &str| {
            format!(
                "upstream {text:?} {why}; expected a URL such as \"https://billing.example.net\""
            )
        };
        let Ok(uri) = text.parse::<http::Uri>() else {
            self.problem(raw.span(), bad("is not a URL"));
            return None;
        };
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                self.problem(raw.span(), bad("must start with http:// or https://"));
                return None;
            }
        };
        let Some(authority) = uri.authority() else {
            self.problem(raw.span(), bad("has no host"));
            return None;
        };
        if authority.as_str().contains('@') {
            self.problem(raw.span(), bad("must not carry credentials"));
            return None;
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            self.problem(raw.span(), bad("must not have a path or query"));
            return None;
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if tls && rustls::pki_types::ServerName::try_from(host).is_err() {
            self.problem(raw.span(), bad("has a host TLS cannot verify"));
            return None;
        }
        Some(ExternalHost {
            tls,
            host: host.to_ascii_lowercase(),
            port: authority.port_u16().unwrap_or(if tls { 443 } else { 80 }),
        })
    }

    /// Route names are unique, and no two routes have the same match.
    fn unique(&mut self, routes: &[Spanned<RawRoute>]) {
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut matches: HashMap<(String, &str), (&str, usize)> = HashMap::new();
        for route in routes {
            let raw = route.get_ref();
            let line = self.positions.problem(route.span(), "").line;
            let name = raw.name.get_ref().as_str();
            // A route given twice is one problem, not one per clash.
            let named_twice = names.insert(name, line);
            if let Some(first) = named_twice {
                self.problem(
                    raw.name.span(),
                    format!("route name {name:?} is already used by the route at line {first}"),
                );
            }
            let host = raw
                .host
                .as_ref()
                .map(|h| h.get_ref().to_ascii_lowercase())
                .unwrap_or_default();
            let prefix = raw
                .path_prefix
                .as_ref()
                .map_or("/", |p| p.get_ref().as_str());
            if let Some((other, first)) = matches.insert((host, prefix), (name, line))
                && named_twice.is_none()
            {
                self.problem(
                    raw.name.span(),
                    format!(
                        "route {name:?} has the same host and path_prefix as route {other:?} at line {first}"
                    ),
                );
            }
        }
    }
}

/// A DNS name: dot-separated labels of letters, digits and `-`.
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A Kubernetes namespace name (an RFC 1123 label).
fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn default_node_name() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    if is_name(&host) {
        host
    } else {
        "picket".to_string()
    }
}

fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn default_tries(upstream: Option<&UpstreamConfig>) -> u32 {
    match upstream {
        Some(UpstreamConfig::Replicas(list)) => u32::try_from(list.len())
            .unwrap_or(u32::MAX)
            .clamp(1, DEFAULT_MAX_TRIES),
        // As many as the runtime has replicas, at most this.
        Some(UpstreamConfig::Service { .. }) => DEFAULT_MAX_TRIES,
        _ => 1,
    }
}
