//! Raw file model → typed [`Config`], collecting every problem with its
//! position instead of stopping at the first.
//!
//! One file per section of the file: [`node`], [`global`], [`cluster`],
//! [`runtime`], [`route`], [`certificate`] and [`acme`], each with its unit
//! tests.
//! Here: the entry ([`validate`]), the ranges every bound is checked
//! against (the one copy: the command line's flags take theirs from here),
//! and what every section shares.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use super::error::{Positions, Problem};
use super::ownership::{HostPattern, HostRules};
use super::raw::{
    RawAcme, RawBreaker, RawCertificate, RawCluster, RawConfig, RawGlobal, RawHeaderRules,
    RawNamespaces, RawNode, RawPort, RawRate, RawRoute, RawRuntime, RawRuntimeBreaker, RawSize,
    RawStatus, RawStatuses, RawUpstreamTls,
};
use super::{
    AccessLogFormat, AccessLogTarget, AcmeChallenge, AcmeSettings, BreakerSettings,
    CertificateConfig, CheckKind, Cidr, ClientIdentity, ClusterSettings, Config,
    DEFAULT_ACME_MAX_LIFETIME, DEFAULT_BODY_TIMEOUT, DEFAULT_BREAKER_COOLDOWN,
    DEFAULT_BREAKER_FAILURES, DEFAULT_CHECK_EVERY, DEFAULT_CHECK_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_CONSECUTIVE_GATEWAY_ERRORS, DEFAULT_EJECT_FOR, DEFAULT_FIRST_ANSWER_TIMEOUT,
    DEFAULT_GOSSIP, DEFAULT_GOSSIP_INTERVAL, DEFAULT_INGRESS_CLASS, DEFAULT_MAX_TRIES,
    ExternalHost, FeedSettings, GlobalSettings, HeaderRules, HostMatch, HttpCheck, NodeSettings,
    Origin, Protocol, RateKey, RateSettings, RouteConfig, RuntimeBreakerSettings, RuntimeKind,
    RuntimeSettings, ServicePort, Setting, StatusSet, TrustedProxies, UpstreamConfig, UpstreamTls,
};
use crate::certificate::Culprit;

mod acme;
mod certificate;
mod cluster;
mod global;
mod node;
mod route;
mod runtime;

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
/// `[acme] max_lifetime`: an hour to ten years.
pub(super) const ACME_LIFETIME_RANGE: (Duration, Duration) = (
    Duration::from_secs(3600),
    Duration::from_secs(3650 * 86_400),
);
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
    let acme = v.acme(&raw, dir);
    if v.problems.is_empty() {
        Ok(Config {
            source: file.to_string(),
            node,
            global,
            runtime,
            cluster,
            routes,
            certificates,
            acme,
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

/// One `[route]` table of `text` (a route a runtime declared, written out
/// as a file's route would be), checked as a file's `[[route]]` is, with
/// `[global]` and `[runtime]` as the node runs them.
pub(super) fn declared(
    text: &str,
    global: &GlobalSettings,
    runtime: &RuntimeSettings,
) -> Result<RouteConfig, Vec<Problem>> {
    #[derive(serde::Deserialize)]
    struct One {
        route: Spanned<RawRoute>,
    }
    let positions = Positions::new(text);
    let one: One = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        vec![positions.problem(span, e.message().trim())]
    })?;
    let mut v = Validator {
        positions,
        problems: Vec::new(),
    };
    // A runtime's route reads no file: its directory is never used.
    let route = v.route(&one.route, global, runtime, Path::new(""), 0);
    match route {
        Some(route) if v.problems.is_empty() => Ok(route),
        _ => Err(v.problems),
    }
}

/// What the sections' tests share: a file's problems, each as
/// `line:column: message`, or its configuration.
#[cfg(test)]
mod testing {
    use super::*;

    /// Unix seconds the tests validate at.
    pub const NOW: i64 = 1_800_000_000;

    pub fn problems(text: &str) -> Vec<String> {
        match validate("t.toml", text, NOW) {
            Ok(_) => Vec::new(),
            Err(problems) => problems
                .into_iter()
                .map(|p| format!("{}:{}: {}", p.line, p.column, p.message))
                .collect(),
        }
    }

    pub fn valid(text: &str) -> Config {
        validate("t.toml", text, NOW).unwrap_or_else(|problems| panic!("{problems:?}"))
    }

    /// A route, after `before`, that every section's file can end with.
    pub const ROUTE: &str = "[[route]]\nname = \"api\"\nreplicas = [\"127.0.0.1:9000\"]\n";
}
