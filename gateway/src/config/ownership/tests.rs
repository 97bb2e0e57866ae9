//! The ownership rule as a table: the file's hosts and places against
//! every kind of claim the runtime can make.

use super::*;
use crate::config::Config;

/// The file these tests judge against: `a.example` (every path from
/// `/api`), `b.example` (`https_only`), every name under `*.w.example`,
/// and a route for any host at `/`.
fn file() -> Vec<RouteConfig> {
    let config = Config::parse(
        "t.toml",
        "[runtime]\nkind = \"docker\"\n\
         [[route]]\nname = \"a\"\nhost = \"a.example\"\npath_prefix = \"/api\"\nreplicas = [\"127.0.0.1:1\"]\n\
         [[route]]\nname = \"b\"\nhost = \"b.example\"\nreplicas = [\"127.0.0.1:1\"]\n\
         [[route]]\nname = \"wild\"\nhost = \"*.w.example\"\nreplicas = [\"127.0.0.1:1\"]\n\
         [[route]]\nname = \"fallback\"\nreplicas = [\"127.0.0.1:1\"]\n",
    )
    .unwrap();
    let mut routes = config.routes;
    // As a node with an HTTPS listener would take it.
    routes[1].https_only = true;
    routes
}

fn host(text: &str) -> Option<HostMatch> {
    match text {
        "" => None,
        _ => Some(match text.strip_prefix('*') {
            Some(suffix) => HostMatch::Suffix(suffix.to_string()),
            None => HostMatch::Exact(text.to_string()),
        }),
    }
}

/// A claim of `host` (`""`: any host) and `path` by `declarer`, of
/// `tenant`, made at `since_ms`.
fn claim(
    declarer: &str,
    tenant: Option<&str>,
    host_text: &str,
    path: &str,
    since_ms: i64,
) -> Claim {
    let mut route = file()[0].clone();
    route.name = format!("{declarer}/r");
    route.host = host(host_text);
    route.path_prefix = path.to_string();
    route.https_only = false;
    route.declared_by = Some(format!("service {declarer}"));
    Claim {
        route,
        tenant: tenant.map(str::to_string),
        since_ms: Some(since_ms),
    }
}

fn patterns(list: &[&str]) -> Vec<HostPattern> {
    list.iter()
        .map(|p| match *p {
            "*" => HostPattern::Any,
            p => match p.strip_prefix('*') {
                Some(suffix) => HostPattern::Under(suffix.to_string()),
                None => HostPattern::Exact(p.to_string()),
            },
        })
        .collect()
}

fn hosts(list: &[&str]) -> HostRules {
    HostRules {
        hosts: Some(patterns(list)),
        namespaces: Vec::new(),
    }
}

/// The rule's slug for one claim alone, or `served`.
fn judged(claim: Claim, rules: &HostRules) -> String {
    let (admitted, refused) = admit(&file(), vec![claim], &[], rules);
    match (admitted.len(), refused.first()) {
        (1, None) => "served".to_string(),
        (_, Some((_, rule))) => rule.slug().to_string(),
        _ => unreachable!(),
    }
}

#[test]
fn a_claim_against_the_file_and_the_operators_hosts() {
    let default = HostRules::default();
    let any = hosts(&["*"]);
    let apps = hosts(&["*.apps.example", "new.example"]);
    let cases: &[(&str, &str, &str, &HostRules, &str)] = &[
        // The file's host, at its path, under it, beside it: every path
        // is the file's, and its https_only with it.
        (
            "the file's host and path",
            "a.example",
            "/api",
            &default,
            "file-host",
        ),
        (
            "a longer path under the file's host",
            "a.example",
            "/api/login",
            &default,
            "file-host",
        ),
        (
            "a path of the file's host it does not route",
            "a.example",
            "/login",
            &any,
            "file-host",
        ),
        (
            "an https_only host of the file, another path",
            "b.example",
            "/pay",
            &any,
            "file-host",
        ),
        // Under the file's wildcard, at any depth; a wildcard at or under it.
        (
            "a name under the file's wildcard",
            "x.w.example",
            "/",
            &any,
            "file-host",
        ),
        (
            "a deeper name under it",
            "y.x.w.example",
            "/",
            &any,
            "file-host",
        ),
        (
            "the file's wildcard itself",
            "*.w.example",
            "/",
            &any,
            "file-host",
        ),
        (
            "a wildcard under the file's",
            "*.x.w.example",
            "/",
            &any,
            "file-host",
        ),
        // A name the file does not serve.
        (
            "a new host name, by default",
            "new.example",
            "/",
            &default,
            "served",
        ),
        (
            "a new host name the operator lists",
            "new.example",
            "/",
            &apps,
            "served",
        ),
        (
            "a name under a listed wildcard",
            "shop.apps.example",
            "/",
            &apps,
            "served",
        ),
        (
            "a wildcard under a listed wildcard",
            "*.eu.apps.example",
            "/",
            &apps,
            "served",
        ),
        (
            "a name outside the listed hosts",
            "other.example",
            "/",
            &apps,
            "not-allowed",
        ),
        (
            "the listed wildcard's parent",
            "apps.example",
            "/",
            &apps,
            "not-allowed",
        ),
        // Wildcards and routes for any host take every name nobody
        // serves: the operator's to give.
        (
            "a wildcard, by default",
            "*.example",
            "/",
            &default,
            "not-allowed",
        ),
        (
            "a wildcard the operator allows",
            "*.example",
            "/",
            &any,
            "served",
        ),
        (
            "a wildcard over a listed one",
            "*.example",
            "/",
            &apps,
            "not-allowed",
        ),
        ("any host, by default", "", "/app", &default, "not-allowed"),
        ("any host, allowed", "", "/app", &any, "served"),
        (
            "any host at the file's own place",
            "",
            "/",
            &any,
            "file-place",
        ),
    ];
    for (what, host_text, path, rules, expected) in cases {
        let got = judged(claim("svc", None, host_text, path, 1), rules);
        assert_eq!(got, *expected, "{what}: {host_text}{path}");
    }
}

#[test]
fn each_namespace_claims_what_its_own_patterns_allow() {
    let rules = HostRules {
        hosts: Some(patterns(&["*.shared.example"])),
        namespaces: vec![
            ("team-a".into(), patterns(&["*.a.example"])),
            ("team-b".into(), patterns(&["b.example", "*.b2.example"])),
        ],
    };
    let cases = [
        (Some("team-a"), "shop.a.example", "served"),
        (Some("team-a"), "shop.b2.example", "not-allowed"),
        (Some("team-a"), "x.shared.example", "not-allowed"),
        (Some("team-b"), "shop.b2.example", "served"),
        (Some("team-b"), "shop.a.example", "not-allowed"),
        // Another namespace: `[runtime] hosts`.
        (Some("team-c"), "x.shared.example", "served"),
        (Some("team-c"), "shop.a.example", "not-allowed"),
        // The file's host stays the file's, whatever a namespace lists.
        (Some("team-b"), "b.example", "file-host"),
    ];
    for (tenant, host_text, expected) in cases {
        let got = judged(claim("ing", tenant, host_text, "/", 1), &rules);
        assert_eq!(got, expected, "{tenant:?} {host_text}");
    }
    // "*" holds the namespaces the table does not list.
    let star = HostRules {
        hosts: None,
        namespaces: vec![("*".into(), patterns(&["*.tenants.example"]))],
    };
    assert_eq!(
        judged(
            claim("ing", Some("any"), "x.tenants.example", "/", 1),
            &star
        ),
        "served"
    );
    assert_eq!(
        judged(claim("ing", Some("any"), "x.example", "/", 1), &star),
        "not-allowed"
    );
}

#[test]
fn between_declarers_the_one_serving_keeps_its_place_then_the_older() {
    let rules = HostRules::default();
    // `web` serves shared.example; `aaa` comes later, sorts first, and is
    // even older: it is refused, naming the holder.
    let web = claim("web", None, "shared.example", "/", 20);
    let aaa = claim("aaa", None, "shared.example", "/", 10);
    let serving = [web.route.clone()];
    let (admitted, refused) = admit(&file(), vec![aaa.clone(), web.clone()], &serving, &rules);
    assert_eq!(admitted.len(), 1);
    assert_eq!(admitted[0].route.name, "web/r");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].0.route.name, "aaa/r");
    assert_eq!(
        refused[0].1.to_string(),
        "shared.example/ is served by route \"web/r\" of service web, which was there first"
    );
    // Neither serving (a node that starts): the older object wins,
    // whatever the order given or the names.
    for claims in [
        vec![aaa.clone(), web.clone()],
        vec![web.clone(), aaa.clone()],
    ] {
        let (admitted, _) = admit(&file(), claims, &[], &rules);
        assert_eq!(admitted[0].route.name, "aaa/r");
    }
    // Two paths of one host from two services: both serve (no tenants).
    let api = claim("api", None, "shared.example", "/api", 30);
    let (admitted, refused) = admit(&file(), vec![web.clone(), api], &serving, &rules);
    assert_eq!((admitted.len(), refused.len()), (2, 0));
}

#[test]
fn in_kubernetes_a_host_is_its_namespaces_every_path() {
    let rules = HostRules::default();
    let a = claim("team-a/shop", Some("team-a"), "s.example", "/", 10);
    let b = claim("team-b/evil", Some("team-b"), "s.example", "/admin", 5);
    let a2 = claim("team-a/api", Some("team-a"), "s.example", "/api", 30);
    let (admitted, refused) = admit(&file(), vec![b, a.clone(), a2], &[a.route], &rules);
    let served: Vec<&str> = admitted.iter().map(|c| c.route.name.as_str()).collect();
    assert_eq!(served, ["team-a/shop/r", "team-a/api/r"]);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].1.slug(), "host-held");
    assert!(
        refused[0].1.to_string().contains("namespace team-a"),
        "{}",
        refused[0].1
    );
}

#[test]
fn a_runtime_certificate_serves_its_namespaces_hosts_the_file_does_not_cover() {
    let rules = hosts(&["*"]);
    let file_routes = file();
    let file_certificates = vec![
        ("*.example".to_string(), vec!["*.example".to_string()]),
        ("acme".to_string(), vec!["pay.shop.test".to_string()]),
    ];
    let served = |tenant: &str, host_text: &str| claim(tenant, Some(tenant), host_text, "/", 1);
    let admitted = vec![
        served("team-a", "shop.example"),
        served("team-a", "www.shop.test"),
        served("team-a", "pay.shop.test"),
        served("team-a", "*.wild.test"),
        served("team-b", "b.test"),
    ];
    let given = [
        "shop.example",
        "www.shop.test",
        "pay.shop.test",
        "b.test",
        "none.test",
        "*.wild.test",
        "WWW.Shop.Test.",
        "a.example",
    ]
    .map(str::to_string);
    let file = FileServes {
        routes: &file_routes,
        certificates: &file_certificates,
    };
    let got = admit_certificate((), &given, Some("team-a"), file, &admitted, &rules);
    assert_eq!(got.names(), ["www.shop.test", "*.wild.test"]);
    let refused: Vec<(&str, &str)> = got
        .refused()
        .iter()
        .map(|(name, rule)| (name.as_str(), rule.slug()))
        .collect();
    assert_eq!(
        refused,
        [
            ("shop.example", "file-certificate"),
            ("pay.shop.test", "file-certificate"),
            ("b.test", "no-route"),
            ("none.test", "no-route"),
            ("a.example", "file-certificate"),
        ]
    );
    // A name the certificate itself does not carry is refused when read.
    let narrowed = got.narrowed(&["www.shop.test".to_string()]);
    assert_eq!(narrowed.names(), ["www.shop.test"]);
    assert_eq!(
        narrowed
            .refused()
            .last()
            .map(|(n, r)| (n.as_str(), r.slug())),
        Some(("*.wild.test", "not-named"))
    );
    // The file's route hosts are the file's too, certificate or not.
    let no_certificates = FileServes {
        routes: &file_routes,
        certificates: &[],
    };
    let got = admit_certificate(
        (),
        &["a.example".to_string(), "x.w.example".to_string()],
        Some("team-a"),
        no_certificates,
        &admitted,
        &rules,
    );
    assert!(got.names().is_empty());
    assert!(got.refused().iter().all(|(_, r)| r.slug() == "file-host"));
}
