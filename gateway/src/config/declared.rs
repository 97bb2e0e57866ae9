//! Routes a runtime declares: Docker and Swarm labels
//! (`picket.route.<name>.<setting>`) and Kubernetes Ingress rules.
//!
//! A declared route is checked as a file's `[[route]]` is, with the same
//! fields, ranges and messages: its settings are written out as one route
//! table and validated with `[global]` and `[runtime]` as the node runs
//! them. A problem names the label (or the Ingress) it comes from.
//!
//! ## Who wins
//! [`merge`] puts the file's routes and the declared ones side by side.
//! The file wins every conflict: a declared route with the name of a
//! file's route, or with its host and path, is refused. Between two
//! declared routes, the one whose declarer sorts first (`ingress a/b`
//! before `service web`, then by name) wins. A refused route serves
//! nothing; it is shown red, with its reason.

use std::fmt::Write as _;

use super::{GlobalSettings, HostMatch, RouteConfig, RuntimeSettings};

/// A route as a runtime declares it, before it is checked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Declared {
    /// What declared it: `service` (labels) or `ingress`.
    pub kind: &'static str,
    /// The declaring object: a service's name, or an Ingress's
    /// `namespace/name`.
    pub object: String,
    /// The route's name.
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

impl Declared {
    /// `service shop_web`, `ingress shop/web`.
    pub fn source(&self) -> String {
        format!("{} {}", self.kind, self.object)
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

/// A declared route that serves nothing, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The name its verdict is shown under: the route's name, or
    /// `name@object` when a served route has that name.
    pub shown_as: String,
    pub name: String,
    /// What declared it ([`Declared::source`]).
    pub declared_by: String,
    pub host: Option<String>,
    pub path: String,
    pub reason: String,
}

/// The routes a node serves, and the declared ones it refused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    pub routes: Vec<RouteConfig>,
    pub refused: Vec<Refused>,
}

fn same_place(a: &RouteConfig, b: &RouteConfig) -> bool {
    a.host == b.host && a.path_prefix == b.path_prefix && a.exact_path == b.exact_path
}

fn place(host: Option<&HostMatch>, path: &str) -> String {
    match host {
        Some(host) => format!("{host}{path}"),
        None => format!("any host, {path}"),
    }
}

/// The file's routes and the declared ones, side by side: the file wins
/// every conflict, then the declarer that sorts first.
pub fn merge(file: &[RouteConfig], declared: &[Declared], against: Against<'_>) -> Merged {
    let mut routes = file.to_vec();
    let mut refused: Vec<Refused> = Vec::new();
    let mut ordered: Vec<&Declared> = declared.iter().collect();
    ordered.sort();
    for declared in ordered {
        let source = declared.source();
        let checked = check(declared, against).and_then(|route| {
            let file_route = |r: &&RouteConfig| r.declared_by.is_none();
            let conflict = routes
                .iter()
                .find(|r| r.name == route.name)
                .map(|r| format!("the route name {:?} is taken by {}", r.name, owner(r)));
            let conflict = conflict.or_else(|| {
                routes.iter().find(|r| same_place(r, &route)).map(|r| {
                    format!(
                        "{} is served by route {:?} of {}",
                        place(route.host.as_ref(), &route.path_prefix),
                        r.name,
                        owner(r)
                    )
                })
            });
            match conflict {
                None => Ok(route),
                Some(conflict) => {
                    let rule = if routes
                        .iter()
                        .filter(file_route)
                        .any(|r| r.name == route.name || same_place(r, &route))
                    {
                        "the file wins"
                    } else {
                        "the declarer that sorts first wins"
                    };
                    Err(format!("{conflict}; {rule}"))
                }
            }
        });
        match checked {
            Ok(route) => routes.push(route),
            Err(reason) => {
                let host = declared
                    .fields
                    .iter()
                    .find(|(k, _)| k == "host")
                    .map(|(_, v)| v.clone());
                let path = declared
                    .fields
                    .iter()
                    .find(|(k, _)| k == "path_prefix")
                    .map_or_else(|| "/".to_string(), |(_, v)| v.clone());
                refused.push(Refused {
                    shown_as: declared.name.clone(),
                    name: declared.name.clone(),
                    declared_by: source,
                    host,
                    path,
                    reason,
                });
            }
        }
    }
    // A refused route is shown under its name unless a served route or
    // an earlier refusal has it.
    let mut taken: std::collections::HashSet<String> =
        routes.iter().map(|r| r.name.clone()).collect();
    for refusal in &mut refused {
        if !taken.insert(refusal.shown_as.clone()) {
            let object = refusal
                .declared_by
                .split_once(' ')
                .map_or(refusal.declared_by.as_str(), |(_, o)| o);
            refusal.shown_as = format!("{}@{object}", refusal.name);
            taken.insert(refusal.shown_as.clone());
        }
    }
    Merged { routes, refused }
}

fn owner(route: &RouteConfig) -> String {
    match &route.declared_by {
        None => "the file".to_string(),
        Some(by) => by.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

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
            https: false,
        }
    }

    fn merged(config: &Config, declared: &[Declared]) -> Merged {
        merge(&config.routes, declared, against(config))
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
        assert_eq!(route.name, "shop");
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

    #[test]
    fn the_file_wins_then_the_declarer_that_sorts_first() {
        let config = node(
            "[[route]]\nname = \"shop\"\nhost = \"shop.example.com\"\nreplicas = [\"127.0.0.1:1\"]\n",
        );
        let declared = [
            // The file's host and path, under another name.
            labels(
                "b_web",
                "shop-2",
                &[("host", "shop.example.com"), ("port", "80")],
            ),
            // The file's name, elsewhere.
            labels(
                "c_web",
                "shop",
                &[("host", "c.example.com"), ("port", "80")],
            ),
            // Two services, one place: the first by name wins.
            labels(
                "e_web",
                "blog-e",
                &[("host", "blog.example.com"), ("port", "80")],
            ),
            labels(
                "d_web",
                "blog-d",
                &[("host", "blog.example.com"), ("port", "80")],
            ),
            // Invalid.
            labels("f_web", "bad", &[("port", "0")]),
        ];
        let merged = merged(&config, &declared);
        let served: Vec<&str> = merged.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(served, ["shop", "blog-d"]);
        let refused: Vec<(&str, &str, &str)> = merged
            .refused
            .iter()
            .map(|r| {
                (
                    r.shown_as.as_str(),
                    r.declared_by.as_str(),
                    r.reason.as_str(),
                )
            })
            .collect();
        assert_eq!(refused.len(), 4, "{refused:#?}");
        assert_eq!(refused[0].0, "shop-2");
        assert!(
            refused[0].2.contains(
                "shop.example.com/ is served by route \"shop\" of the file; the file wins"
            ),
            "{}",
            refused[0].2
        );
        assert_eq!(refused[1].0, "shop@c_web", "a served route has its name");
        assert!(refused[1].2.contains("taken by the file; the file wins"));
        assert_eq!(merged.refused[2], Refused {
            shown_as: "blog-e".into(),
            name: "blog-e".into(),
            declared_by: "service e_web".into(),
            host: Some("blog.example.com".into()),
            path: "/".into(),
            reason: "blog.example.com/ is served by route \"blog-d\" of service d_web; the declarer that sorts first wins".into(),
        });
        assert!(refused[3].2.contains("port"), "{}", refused[3].2);
        // The same declarations in another order merge the same way.
        let mut reversed = declared.to_vec();
        reversed.reverse();
        assert_eq!(merge(&config.routes, &reversed, against(&config)), merged);
    }

    #[test]
    fn an_exact_path_and_a_prefix_of_it_are_two_places() {
        let config = node("");
        let mut exact = labels(
            "a",
            "cart-page",
            &[("path_prefix", "/cart"), ("port", "80")],
        );
        exact.exact_path = true;
        let prefix = labels("b", "cart-api", &[("path_prefix", "/cart"), ("port", "80")]);
        let merged = merged(&config, &[exact, prefix]);
        assert_eq!(merged.routes.len(), 2);
        assert!(merged.refused.is_empty());
        assert!(merged.routes[0].exact_path);
    }
}
