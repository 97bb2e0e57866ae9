//! `/v1/routes`: this node's own view of each of its routes, read from
//! the route table the proxy uses and the node's verdict board. Reading it
//! changes nothing.

use picket_proto::Verdict;
use serde::Serialize;

use crate::config::UpstreamConfig;
use crate::config::declared::Refused;
use crate::proxy::{Route, Table};
use crate::upstream::health::Health;

#[derive(Debug, Serialize)]
pub struct RoutesView {
    pub node: String,
    pub routes: Vec<RouteView>,
}

#[derive(Debug, Serialize)]
pub struct RouteView {
    pub name: String,
    pub host: Option<String>,
    pub path_prefix: String,
    /// `replicas`, the external host's URL, or the runtime service.
    pub upstream: String,
    pub connect_timeout_ms: u64,
    pub first_answer_timeout_ms: u64,
    pub tries: usize,
    pub replicas: Vec<ReplicaView>,
    pub breaker: BreakerView,
    /// This node's limits of the route, and what they refused.
    pub limits: LimitsView,
    /// What in the runtime declared it (`service shop_web`, `ingress
    /// shop/web`); absent for a route of the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared_by: Option<String>,
    /// Why the node refused it: it serves nothing (its verdict is red).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The ownership rule that refused it (`file-host`, `not-allowed`,
    /// `place-held`, …), for scripts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_by: Option<&'static str>,
    /// This node's verdict on the route, as last judged (a stale one with
    /// a heart of its own).
    #[serde(serialize_with = "picket_proto::verdict::serialize_shown_option")]
    pub verdict: Option<Verdict>,
    /// The route's runtime has gone silent: the verdict is its last pass,
    /// not a current one.
    pub stale: bool,
    /// Why it is stale and what it last saw: `runtime silent for 12 s;
    /// last seen: all 2 ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_reason: Option<String>,
}

/// What a verdict on data from a silent runtime says, at `now_unix_ms`.
pub fn stale_reason(verdict: &Verdict, now_unix_ms: u64) -> Option<String> {
    let since = verdict.runtime_stale_since_unix_ms?;
    let silent = now_unix_ms.saturating_sub(since) / 1000;
    Some(format!(
        "runtime silent for {silent} s; last seen: {}",
        verdict.reason
    ))
}

#[derive(Debug, Serialize)]
pub struct LimitsView {
    /// `max_body` in bytes; `null`: none.
    pub max_body: Option<u64>,
    /// Requests refused with 413 on this node.
    pub too_large: u64,
    /// `null`: no rate limit.
    pub rate: Option<RateView>,
}

#[derive(Debug, Serialize)]
pub struct RateView {
    pub per_second: f64,
    pub burst: u32,
    /// `route` or `client`.
    pub by: &'static str,
    /// Requests refused with 429 on this node.
    pub limited: u64,
    /// Clients with a bucket now (`by = "client"`).
    pub clients: usize,
}

#[derive(Debug, Serialize)]
pub struct ReplicaView {
    pub address: String,
    /// Ready, as the runtime or the connect check says.
    pub ready: bool,
    /// This node's view: `in_rotation`, `stalled` or `ejected`.
    pub state: &'static str,
    /// Why it is ejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The labels of every image it runs, as in the verdict's `images`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    /// A TLS replica's certificate, as this node's last check saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate: Option<ReplicaCertificate>,
}

#[derive(Debug, Serialize)]
pub struct ReplicaCertificate {
    pub not_after_unix: i64,
    /// Whole days left (negative once expired); within 14 the node warns.
    pub days_left: i64,
}

#[derive(Debug, Serialize)]
pub struct BreakerView {
    pub enabled: bool,
    /// `disabled`, `closed`, `open` or `half_open`.
    pub state: String,
    pub consecutive_failures: u32,
    pub failures_to_open: u32,
    pub cooldown_ms: u64,
    /// Until an open circuit lets its one trial request through.
    pub time_left_ms: u64,
    pub last_transition: Option<TransitionJson>,
}

#[derive(Debug, Serialize)]
pub struct TransitionJson {
    pub from: String,
    pub to: String,
    pub reason: String,
    pub at_unix_ms: u64,
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn breaker(route: &Route) -> BreakerView {
    let Some(circuit) = &route.breaker else {
        return BreakerView {
            enabled: false,
            state: "disabled".into(),
            consecutive_failures: 0,
            failures_to_open: route.config.breaker.failures.value,
            cooldown_ms: millis(route.config.breaker.cooldown.value),
            time_left_ms: 0,
            last_transition: None,
        };
    };
    let view = circuit.view();
    BreakerView {
        enabled: true,
        state: view.phase.to_string(),
        consecutive_failures: view.consecutive_failures,
        failures_to_open: view.settings.failures,
        cooldown_ms: millis(view.settings.cooldown),
        time_left_ms: millis(view.time_left),
        last_transition: view.last_transition.map(|t| TransitionJson {
            from: t.from.to_string(),
            to: t.to.to_string(),
            reason: t.reason,
            at_unix_ms: t.unix_ms,
        }),
    }
}

fn route(route: &Route, verdicts: &[Verdict], now_unix_ms: u64) -> RouteView {
    let config = &route.config;
    let replicas = route
        .upstream
        .replicas()
        .iter()
        .map(|r| {
            let (state, reason) = match r.health() {
                Health::InRotation => ("in_rotation", None),
                Health::Stalled { .. } => ("stalled", None),
                Health::Ejected { reason, .. } => ("ejected", Some(reason.to_string())),
                Health::Probation { after, .. } => ("probation", Some(after.to_string())),
            };
            ReplicaView {
                address: r.label.clone(),
                ready: r.ready(),
                state,
                reason,
                images: r.images().to_vec(),
                certificate: r
                    .certificate_not_after()
                    .map(|not_after| ReplicaCertificate {
                        not_after_unix: not_after,
                        days_left: (not_after - now_unix_ms as i64 / 1000).div_euclid(86_400),
                    }),
            }
        })
        .collect();
    let verdict = verdicts.iter().find(|v| *v.route == *config.name);
    let stale_reason = verdict.and_then(|v| stale_reason(v, now_unix_ms));
    RouteView {
        name: config.name.clone(),
        host: config.host.as_ref().map(ToString::to_string),
        path_prefix: config.path_prefix.clone(),
        upstream: match &config.upstream {
            UpstreamConfig::Replicas(_) => "replicas".into(),
            UpstreamConfig::External(host) => host.to_string(),
            UpstreamConfig::Service { name, port } => format!("service {name}, port {port}"),
        },
        connect_timeout_ms: millis(config.connect_timeout.value),
        first_answer_timeout_ms: millis(config.first_answer_timeout.value),
        tries: route.upstream.tries(),
        replicas,
        breaker: breaker(route),
        limits: LimitsView {
            max_body: config.max_body.value,
            too_large: route.metrics.too_large.get(),
            rate: route.rate.as_ref().map(|rate| RateView {
                per_second: rate.settings.per_second,
                burst: rate.settings.burst,
                by: rate.settings.by.name(),
                limited: route.metrics.rate_limited.get(),
                clients: rate.clients(),
            }),
        },
        declared_by: config.declared_by.clone(),
        refused: None,
        refused_by: None,
        verdict: verdict.cloned(),
        stale: stale_reason.is_some(),
        stale_reason,
    }
}

/// A route the runtime declared and the node refused.
fn refused(refusal: &Refused, verdicts: &[Verdict]) -> RouteView {
    RouteView {
        name: refusal.name.clone(),
        host: refusal.host.clone(),
        path_prefix: refusal.path.clone(),
        upstream: String::new(),
        connect_timeout_ms: 0,
        first_answer_timeout_ms: 0,
        tries: 0,
        replicas: Vec::new(),
        breaker: BreakerView {
            enabled: false,
            state: "disabled".into(),
            consecutive_failures: 0,
            failures_to_open: 0,
            cooldown_ms: 0,
            time_left_ms: 0,
            last_transition: None,
        },
        limits: LimitsView {
            max_body: None,
            too_large: 0,
            rate: None,
        },
        declared_by: Some(refusal.declared_by.clone()),
        refused: Some(refusal.reason()),
        refused_by: Some(refusal.rule.slug()),
        verdict: verdicts.iter().find(|v| *v.route == *refusal.name).cloned(),
        stale: false,
        stale_reason: None,
    }
}

/// Every route of `table`, and every declared route refused beside it,
/// by name, at `now_unix_ms`.
pub fn routes(
    node: &str,
    table: &Table,
    refusals: &[Refused],
    verdicts: &[Verdict],
    now_unix_ms: u64,
) -> RoutesView {
    let mut routes: Vec<RouteView> = table
        .values()
        .map(|r| route(r, verdicts, now_unix_ms))
        .chain(refusals.iter().map(|r| refused(r, verdicts)))
        .collect();
    routes.sort_by(|a, b| a.name.cmp(&b.name));
    RoutesView {
        node: node.to_string(),
        routes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_proto::{BreakerState, Heart};

    #[test]
    fn a_verdict_on_a_silent_runtime_says_so_and_what_it_last_saw() {
        let mut verdict = Verdict {
            route: "api".into(),
            heart: Heart::Green,
            reason: "all 2 ready".into(),
            ready: 2,
            total: 2,
            images: Vec::new().into(),
            circuit: BreakerState::Disabled,
            since_unix_ms: 1_000,
            runtime_stale_since_unix_ms: None,
        };
        assert_eq!(stale_reason(&verdict, 50_000), None);
        verdict.runtime_stale_since_unix_ms = Some(38_000);
        assert_eq!(
            stale_reason(&verdict, 50_400).as_deref(),
            Some("runtime silent for 12 s; last seen: all 2 ready")
        );
    }
}
