//! Routes a runtime declares: Docker and Swarm labels
//! (`picket.route.<name>.<setting>`) and Kubernetes Ingress rules.
//!
//! A declared route is checked as a file's `[[route]]` is, with the same
//! fields, ranges and messages: its settings are written out as one route
//! table and validated with `[global]` and `[runtime]` as the node runs
//! them. A problem names the label (or the Ingress) it comes from.
//!
//! ## Who wins
//! [`merge`] puts the file's routes and the declared ones side by side,
//! and [`ownership`] decides which declared ones the node serves: the
//! file's hosts and places are the file's, the runtime claims only what
//! `[runtime] hosts` allows, and between two declarers the one already
//! serving keeps its place. A refused route serves nothing; it is shown
//! red, with the rule that refused it.
//!
//! A declared route is named by its declarer: `service/name` for labels
//! (`shop/web/api` for the compose service `web` of project `shop`),
//! `namespace/ingress/rule.path` for an Ingress. A file's route names hold
//! no `/`, so a declaration can never take or refuse a name of the file's,
//! nor another declarer's.

use std::fmt::Write as _;

use super::ownership::{self, Claim, HostRules, Rule};
use super::{GlobalSettings, RouteConfig, RuntimeSettings};

/// A route as a runtime declares it, before it is checked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Declared {
    /// What declared it: `service` (labels of a compose or Swarm
    /// service), `container` (labels of a container of no service) or
    /// `ingress`.
    pub kind: &'static str,
    /// The declaring object: a service as routes name it (`shop/web`,
    /// `shop_web`, `container:blog`), or an Ingress's `namespace/name`.
    pub object: String,
    /// The tenant it belongs to: its namespace, in Kubernetes.
    pub tenant: Option<String>,
    /// When the declaring object was made (Unix ms), when known: between
    /// two declarers of one place that the node does not serve yet, the
    /// older one wins.
    pub since_ms: Option<i64>,
    /// The route's name within its declarer (a label's `<name>`, an
    /// Ingress's `rule.path`).
    pub name: String,
    /// The runtime service its requests go to (`namespace/name` on
    /// Kubernetes).
    pub service: String,
    /// Its settings, `(key, value)`, keyed as in a `[[route]]`
    /// (`host`, `breaker.failures`), in the order given.
    pub fields: Vec<(String, String)>,
    /// Where a key comes from, for messages: `picket.route.shop.` for
    /// labels; empty when the key is already the whole story.
    pub prefix: String,
    /// The path matches only as written (an Ingress `Exact` path).
    pub exact_path: bool,
    /// What the declarer already knows cannot be served (an Ingress
    /// backend that is not a Service): the route is refused with it.
    pub problem: Option<String>,
}

/// The longest name of a declared route: a DNS name's length, so that a
/// verdict and its key stay far within a gossip value.
const MAX_NAME: usize = 253;

impl Declared {
    /// `service shop_web`, `container blog`, `ingress shop/web`.
    pub fn source(&self) -> String {
        // A container's object is `container:NAME`, as routes name it.
        let object = self
            .object
            .strip_prefix("container:")
            .unwrap_or(&self.object);
        format!("{} {object}", self.kind)
    }

    /// The route's name in the table: its declarer's `object/name`, cut
    /// to [`MAX_NAME`] with a digest of the whole, so that every node
    /// names it alike.
    pub fn route_name(&self) -> String {
        let whole = format!("{}/{}", self.object, self.name);
        if whole.len() <= MAX_NAME {
            return whole;
        }
        let tag = &picket_proto::feed::fingerprint(whole.as_bytes())[..8];
        let mut end = MAX_NAME - tag.len() - 1;
        while !whole.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}-{tag}", &whole[..end])
    }
}

/// How a value is written for the route table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Integer,
    Bool,
    Number,
    /// An integer when it is one, else text (`port`: a number or a name;
    /// `max_body`: bytes or a size with a unit).
    IntegerOrText,
}

/// The settings a declared route takes: what makes sense on a service.
/// Files (TLS material) and header rules stay in the file.
const FIELDS: &[(&str, Kind)] = &[
    ("host", Kind::Text),
    ("path_prefix", Kind::Text),
    ("port", Kind::IntegerOrText),
    ("connect_timeout", Kind::Text),
    ("first_answer_timeout", Kind::Text),
    ("tries", Kind::Integer),
    ("eject_for", Kind::Text),
    ("consecutive_gateway_errors", Kind::Integer),
    ("breaker.enabled", Kind::Bool),
    ("breaker.failures", Kind::Integer),
    ("breaker.cooldown", Kind::Text),
    ("strip_prefix", Kind::Bool),
    ("add_prefix", Kind::Text),
    ("https_only", Kind::Bool),
    ("protocol", Kind::Text),
    ("check", Kind::Text),
    ("grpc_service", Kind::Text),
    ("check_path", Kind::Text),
    ("check_host", Kind::Text),
    ("check_statuses", Kind::Text),
    ("check_every", Kind::Text),
    ("check_timeout", Kind::Text),
    ("max_body", Kind::IntegerOrText),
    ("rate.per_second", Kind::Number),
    ("rate.burst", Kind::Integer),
    ("rate.by", Kind::Text),
];

/// The keys a declared route takes, for messages and docs.
pub fn keys() -> impl Iterator<Item = &'static str> {
    FIELDS.iter().map(|(key, _)| *key)
}

fn quoted(value: &str) -> String {
    toml::Value::String(value.to_string()).to_string()
}

fn value(kind: Kind, text: &str) -> String {
    let text = text.trim();
    let written = match kind {
        Kind::Text => None,
        Kind::Integer | Kind::IntegerOrText => text.parse::<i64>().ok().map(|n| n.to_string()),
        Kind::Bool => text.parse::<bool>().ok().map(|b| b.to_string()),
        Kind::Number => text
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map(|n| format!("{n:?}")),
    };
    // Text where a number or a boolean is expected is written as text:
    // the check says what was expected.
    written.unwrap_or_else(|| quoted(text))
}

/// What a declared route is checked against: the node's settings as it
/// runs them.
#[derive(Debug, Clone, Copy)]
pub struct Against<'a> {
    pub global: &'a GlobalSettings,
    pub runtime: &'a RuntimeSettings,
    /// What the operator lets the runtime claim.
    pub hosts: &'a HostRules,
    /// The node has an HTTPS listener to send `https_only` clients to.
    pub https: bool,
}

/// Checks a declared route; the reason names the label or field at fault.
pub fn check(declared: &Declared, against: Against<'_>) -> Result<RouteConfig, String> {
    if let Some(problem) = &declared.problem {
        return Err(format!("{}{problem}", declared.prefix));
    }
    let mut text = String::from("[route]\n");
    let _ = writeln!(text, "name = {}", quoted(&declared.name));
    let _ = writeln!(text, "service = {}", quoted(&declared.service));
    // The first line of each field (lines count from 1: the table is 1).
    const FIRST: usize = 4;
    for (key, raw) in &declared.fields {
        let Some((_, kind)) = FIELDS.iter().find(|(k, _)| k == key) else {
            let known: Vec<&str> = keys().collect();
            return Err(format!(
                "{}{key}: unknown setting; a declared route takes {}",
                declared.prefix,
                known.join(", ")
            ));
        };
        let _ = writeln!(text, "{key} = {}", value(*kind, raw));
    }
    let problems = match super::validate::declared(&text, against.global, against.runtime) {
        Ok(_)
            if !against.https
                && declared
                    .fields
                    .iter()
                    .any(|(k, v)| k == "https_only" && v.trim() == "true") =>
        {
            return Err(format!(
                "{}https_only: the node has no HTTPS listener to send clients to ([node] listen_tls)",
                declared.prefix
            ));
        }
        Ok(mut route) => {
            route.name = declared.route_name();
            route.exact_path = declared.exact_path;
            route.declared_by = Some(declared.source());
            return Ok(route);
        }
        Err(problems) => problems,
    };
    let reasons: Vec<String> = problems
        .iter()
        .map(|problem| match problem.line.checked_sub(FIRST) {
            Some(i) if i < declared.fields.len() => {
                format!(
                    "{}{}: {}",
                    declared.prefix, declared.fields[i].0, problem.message
                )
            }
            _ => problem.message.clone(),
        })
        .collect();
    Err(reasons.join("; "))
}

/// A declared route that serves nothing, and the rule that refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Its name, its declarer's ([`Declared::route_name`]): what its
    /// verdict is shown under.
    pub name: String,
    /// What declared it ([`Declared::source`]).
    pub declared_by: String,
    pub host: Option<String>,
    pub path: String,
    pub rule: Rule,
}

impl Refused {
    /// Why, in words.
    pub fn reason(&self) -> String {
        self.rule.to_string()
    }
}

/// The routes a node serves, and the declared ones it refused.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    /// The file's routes, then the runtime's it admitted.
    pub routes: Vec<RouteConfig>,
    /// The runtime's routes it admitted, with their declarers: what a
    /// runtime certificate is judged against.
    pub claims: Vec<Claim>,
    /// By name.
    pub refused: Vec<Refused>,
}

/// The file's routes and the declared ones, side by side, as
/// [`ownership::admit`] rules: the file wins every conflict, then the
/// declarer already `serving`, then the older object.
pub fn merge(
    file: &[RouteConfig],
    declared: &[Declared],
    against: Against<'_>,
    serving: &[RouteConfig],
) -> Merged {
    let mut claims = Vec::new();
    let mut refused = Vec::new();
    for declared in declared {
        match check(declared, against) {
            Ok(route) => claims.push(Claim {
                route,
                tenant: declared.tenant.clone(),
                since_ms: declared.since_ms,
            }),
            Err(reason) => refused.push(Refused {
                name: declared.route_name(),
                declared_by: declared.source(),
                host: declared
                    .fields
                    .iter()
                    .find(|(k, _)| k == "host")
                    .map(|(_, v)| v.clone()),
                path: declared
                    .fields
                    .iter()
                    .find(|(k, _)| k == "path_prefix")
                    .map_or_else(|| "/".to_string(), |(_, v)| v.clone()),
                rule: Rule::Invalid(reason),
            }),
        }
    }
    let (admitted, denied) = ownership::admit(file, claims, serving, against.hosts);
    refused.extend(denied.into_iter().map(|(claim, rule)| Refused {
        name: claim.route.name,
        declared_by: claim.route.declared_by.unwrap_or_default(),
        host: claim.route.host.map(|h| h.to_string()),
        path: claim.route.path_prefix,
        rule,
    }));
    refused.sort_by(|a, b| a.name.cmp(&b.name));
    let mut routes = file.to_vec();
    routes.extend(admitted.iter().map(|c| c.route.clone()));
    Merged {
        routes,
        claims: admitted,
        refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, HostMatch};

    fn node(file_routes: &str) -> Config {
        Config::parse(
            "t.toml",
            &format!("[runtime]\nkind = \"docker\"\n{file_routes}"),
        )
        .unwrap()
    }

    fn labels(object: &str, name: &str, fields: &[(&str, &str)]) -> Declared {
        Declared {
            kind: "service",
            object: object.into(),
            tenant: None,
            since_ms: None,
            name: name.into(),
            service: object.into(),
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            prefix: format!("picket.route.{name}."),
            exact_path: false,
            problem: None,
        }
    }

    fn against(config: &Config) -> Against<'_> {
        Against {
            global: &config.global,
            runtime: &config.runtime,
            hosts: &config.runtime.hosts,
            https: false,
        }
    }

    fn merged(config: &Config, declared: &[Declared]) -> Merged {
        merge(&config.routes, declared, against(config), &[])
    }

    #[test]
    fn labels_become_a_route_checked_as_the_file_checks_one() {
        let config = node("");
        let shop = labels(
            "shop_web",
            "shop",
            &[
                ("host", "shop.example.com"),
                ("path_prefix", "/cart"),
                ("port", "8080"),
                ("tries", "2"),
                ("connect_timeout", "2s"),
                ("breaker.enabled", "true"),
                ("breaker.failures", "7"),
                ("strip_prefix", "true"),
                ("https_only", "false"),
                ("rate.per_second", "50"),
                ("rate.burst", "100"),
                ("max_body", "1MiB"),
            ],
        );
        let route = check(&shop, against(&config)).unwrap();
        assert_eq!(route.name, "shop_web/shop");
        assert_eq!(
            route.host,
            Some(HostMatch::Exact("shop.example.com".into()))
        );
        assert_eq!(route.path_prefix, "/cart");
        assert_eq!(
            route.upstream,
            crate::config::UpstreamConfig::Service {
                name: "shop_web".into(),
                port: crate::config::ServicePort::Number(8080)
            }
        );
        assert_eq!(route.tries.value, 2);
        assert_eq!(
            route.connect_timeout.value,
            std::time::Duration::from_secs(2)
        );
        assert_eq!(route.breaker.failures.value, 7);
        assert!(route.breaker.enabled.value && route.strip_prefix && !route.https_only);
        assert_eq!(route.max_body.value, Some(1 << 20));
        assert_eq!(route.rate.map(|r| r.burst), Some(100));
        assert_eq!(route.declared_by.as_deref(), Some("service shop_web"));
        assert!(!route.exact_path);
    }

    #[test]
    fn a_bad_label_is_refused_with_the_label_and_the_reason() {
        let config = node("");
        let cases = [
            (
                ("tries", "0"),
                "picket.route.shop.tries: tries = 0 is out of range: 1 to 10",
            ),
            (
                ("tries", "two"),
                "picket.route.shop.tries: invalid type: string \"two\", expected i64",
            ),
            (
                ("connect_timeout", "90s"),
                "picket.route.shop.connect_timeout: connect_timeout",
            ),
            (("host", "shop example"), "picket.route.shop.host:"),
            (
                ("colour", "blue"),
                "picket.route.shop.colour: unknown setting",
            ),
            (
                ("breaker.enabled", "yes"),
                "picket.route.shop.breaker.enabled:",
            ),
        ];
        for ((key, value), expected) in cases {
            let declared = labels("shop_web", "shop", &[("port", "80"), (key, value)]);
            let reason = check(&declared, against(&config)).unwrap_err();
            assert!(
                reason.starts_with(expected),
                "{key}={value}: {reason:?} should start with {expected:?}"
            );
        }
        let unnamed = labels("shop_web", "shop!", &[("port", "80")]);
        let reason = check(&unnamed, against(&config)).unwrap_err();
        assert!(reason.contains("route name \"shop!\""), "{reason}");
        let portless = labels("shop_web", "shop", &[("host", "a.example")]);
        let reason = check(&portless, against(&config)).unwrap_err();
        assert!(reason.contains("port"), "{reason}");
        let https_only = labels(
            "shop_web",
            "shop",
            &[("port", "80"), ("https_only", "true")],
        );
        let reason = check(&https_only, against(&config)).unwrap_err();
        assert!(
            reason.starts_with("picket.route.shop.https_only: the node has no HTTPS listener"),
            "{reason}"
        );
        let with_tls = Against {
            https: true,
            ..against(&config)
        };
        assert!(check(&https_only, with_tls).is_ok_and(|r| r.https_only));
    }

    /// The file's names and places are its own; a declared route is named
    /// by its declarer, so a label can neither squat a file's route name
    /// nor another service's; refusals name their rule.
    #[test]
    fn declared_routes_are_named_by_their_declarer_and_judged_by_the_rule() {
        let config = node(
            "[[route]]\nname = \"shop\"\nhost = \"shop.example.com\"\nreplicas = [\"127.0.0.1:1\"]\n",
        );
        let declared = [
            // The file's name, elsewhere: a name of its own.
            labels(
                "c_web",
                "shop",
                &[("host", "c.example.com"), ("port", "80")],
            ),
            // Another service's name: a name of its own too.
            labels(
                "d_web",
                "shop",
                &[("host", "d.example.com"), ("port", "80")],
            ),
            // A path under the file's host.
            labels(
                "e_web",
                "login",
                &[
                    ("host", "shop.example.com"),
                    ("path_prefix", "/login"),
                    ("port", "80"),
                ],
            ),
            // Invalid.
            labels("f_web", "bad", &[("port", "0")]),
        ];
        let merged = merged(&config, &declared);
        let served: Vec<&str> = merged.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(served, ["shop", "c_web/shop", "d_web/shop"]);
        assert_eq!(merged.claims.len(), 2);
        let refused: Vec<(&str, &str, &str)> = merged
            .refused
            .iter()
            .map(|r| (r.name.as_str(), r.declared_by.as_str(), r.rule.slug()))
            .collect();
        assert_eq!(
            refused,
            [
                ("e_web/login", "service e_web", "file-host"),
                ("f_web/bad", "service f_web", "invalid"),
            ]
        );
        assert_eq!(
            merged.refused[0].reason(),
            "shop.example.com is served by route \"shop\" of the file: every path under it is the file's"
        );
        assert_eq!(merged.refused[0].path, "/login");
        // The same declarations in another order merge the same way.
        let mut reversed = declared.to_vec();
        reversed.reverse();
        let again = merge(&config.routes, &reversed, against(&config), &[]);
        assert_eq!(again.routes, merged.routes);
        assert_eq!(again.refused, merged.refused);
    }

    #[test]
    fn a_long_name_is_cut_with_a_digest_of_the_whole() {
        let long = labels(&"a".repeat(260), "0.0", &[]);
        let other = labels(&"a".repeat(260), "0.1", &[]);
        assert_eq!(long.route_name().len(), MAX_NAME);
        assert_ne!(long.route_name(), other.route_name(), "two keep two names");
        assert_eq!(long.route_name(), long.clone().route_name());
        assert_eq!(labels("web", "0.0", &[]).route_name(), "web/0.0");
    }

    #[test]
    fn an_exact_path_and_a_prefix_of_it_are_two_places() {
        let config = node("");
        let place = [
            ("host", "shop.example.com"),
            ("path_prefix", "/cart"),
            ("port", "80"),
        ];
        let mut exact = labels("a", "cart-page", &place);
        exact.exact_path = true;
        let prefix = labels("b", "cart-api", &place);
        let merged = merged(&config, &[exact, prefix]);
        assert_eq!(merged.routes.len(), 2);
        assert!(merged.refused.is_empty());
        assert!(merged.routes[0].exact_path);
    }
}
