//! What a reload changes, decided from the running and new configurations
//! alone.
//!
//! ## What a reload changes
//! Routes are compared by name and rebuilt when anything of theirs differs,
//! inherited values included. `[global]` reaches the node through the
//! routes that inherit it and through the connect checks, whose period and
//! bound a reload changes; the cluster keys are read again. The
//! certificates of `[[certificate]]` serve from the next handshake on.
//!
//! ## What needs a restart
//! The settings of [`NEEDS_RESTART`]: the parts that use them (listeners,
//! client limits, the feed, gossip, the runtime watch) are built once at
//! start. Each is named by its path in the file, so a reload's log line
//! says exactly which changes wait.

use super::{ClusterSettings, Config, GlobalSettings, NodeSettings, RouteConfig, RuntimeSettings};

/// Every setting that takes effect on restart only, by its path in the
/// file; `cluster` is the section itself, added or removed.
pub const NEEDS_RESTART: &[&str] = &[
    "node.name",
    "node.listen",
    "node.listen_tls",
    "node.admin",
    "node.workers",
    "node.max_connections",
    "node.header_timeout",
    "node.idle_timeout",
    "node.send_timeout",
    "node.tls_groups",
    "node.admin_max_connections",
    "node.feed",
    "node.feed_cert",
    "node.feed_key",
    "node.feed_client_ca",
    "node.access_log",
    "node.access_log_format",
    "runtime.kind",
    "runtime.endpoint",
    "runtime.namespace",
    "runtime.api",
    "runtime.proxies",
    "runtime.network",
    "runtime.namespaces",
    "runtime.ingress_class",
    "runtime.breaker.enabled",
    "runtime.breaker.failures",
    "runtime.breaker.cooldown",
    "cluster",
    "cluster.id",
    "cluster.gossip",
    "cluster.advertise",
    "cluster.seeds",
    "cluster.insecure",
    "cluster.gossip_interval",
];

/// The difference between two configurations, for logging and for keeping
/// the state of routes that did not change.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadPlan {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same name, different match, upstream or settings.
    pub changed: Vec<String>,
    pub unchanged: usize,
    /// Node-wide settings that changed and take effect now
    /// (`global.check_every`, `certificate`, `cluster.key_file`).
    pub applied: Vec<&'static str>,
    /// Settings that changed and take effect on restart only, each one of
    /// [`NEEDS_RESTART`].
    pub needs_restart: Vec<&'static str>,
}

impl ReloadPlan {
    /// True when the reload changes nothing at all.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.applied.is_empty()
            && self.needs_restart.is_empty()
    }
}

/// Compares what the node runs on (`old`: for settings that need a restart,
/// the values it started with) with a new configuration.
pub fn diff(old: &Config, new: &Config) -> ReloadPlan {
    let mut plan = ReloadPlan::default();
    let find = |routes: &[RouteConfig], name: &str| routes.iter().position(|r| r.name == name);
    for route in &new.routes {
        match find(&old.routes, &route.name).map(|i| &old.routes[i]) {
            None => plan.added.push(route.name.clone()),
            Some(before) if before != route => plan.changed.push(route.name.clone()),
            Some(_) => plan.unchanged += 1,
        }
    }
    for route in &old.routes {
        if find(&new.routes, &route.name).is_none() {
            plan.removed.push(route.name.clone());
        }
    }
    plan.applied = global(&old.global, &new.global);
    if old.certificates != new.certificates {
        plan.applied.push("certificate");
    }
    if old.acme != new.acme {
        plan.applied.push("acme");
    }
    if old.runtime.hosts != new.runtime.hosts {
        plan.applied.push("runtime.hosts");
    }
    plan.needs_restart = node(&old.node, &new.node);
    plan.needs_restart
        .extend(runtime(&old.runtime, &new.runtime));
    match (&old.cluster, &new.cluster) {
        (Some(a), Some(b)) => {
            let (applied, restart) = cluster(a, b);
            plan.applied.extend(applied);
            plan.needs_restart.extend(restart);
        }
        (None, None) => {}
        _ => plan.needs_restart.push("cluster"),
    }
    plan
}

/// The names of the settings that differ.
fn differing(settings: &[(&'static str, bool)]) -> Vec<&'static str> {
    settings
        .iter()
        .filter(|(_, differs)| *differs)
        .map(|(name, _)| *name)
        .collect()
}

fn global(a: &GlobalSettings, b: &GlobalSettings) -> Vec<&'static str> {
    differing(&[
        (
            "global.connect_timeout",
            a.connect_timeout.value != b.connect_timeout.value,
        ),
        (
            "global.first_answer_timeout",
            a.first_answer_timeout.value != b.first_answer_timeout.value,
        ),
        ("global.eject_for", a.eject_for.value != b.eject_for.value),
        (
            "global.breaker.enabled",
            a.breaker.enabled.value != b.breaker.enabled.value,
        ),
        (
            "global.breaker.failures",
            a.breaker.failures.value != b.breaker.failures.value,
        ),
        (
            "global.breaker.cooldown",
            a.breaker.cooldown.value != b.breaker.cooldown.value,
        ),
        (
            "global.check_every",
            a.check_every.value != b.check_every.value,
        ),
        (
            "global.check_timeout",
            a.check_timeout.value != b.check_timeout.value,
        ),
        (
            "global.body_timeout",
            a.body_timeout.value != b.body_timeout.value,
        ),
        (
            "global.underscores_in_headers",
            a.underscores_in_headers.value != b.underscores_in_headers.value,
        ),
        (
            "global.trusted_proxies",
            a.trusted_proxies.value != b.trusted_proxies.value,
        ),
        (
            "global.consecutive_gateway_errors",
            a.consecutive_gateway_errors.value != b.consecutive_gateway_errors.value,
        ),
        ("global.max_body", a.max_body.value != b.max_body.value),
        (
            "global.request_headers",
            a.request_headers != b.request_headers,
        ),
        (
            "global.response_headers",
            a.response_headers != b.response_headers,
        ),
    ])
}

fn node(a: &NodeSettings, b: &NodeSettings) -> Vec<&'static str> {
    let feed = |n: &NodeSettings| n.feed.as_ref().map(|f| f.addr);
    let cert = |n: &NodeSettings| n.feed.as_ref().and_then(|f| f.cert.clone());
    let (cert_a, cert_b) = (cert(a), cert(b));
    differing(&[
        ("node.name", a.name.value != b.name.value),
        ("node.listen", a.listen.value != b.listen.value),
        (
            "node.listen_tls",
            a.listen_tls.as_ref().map(|l| l.value) != b.listen_tls.as_ref().map(|l| l.value),
        ),
        ("node.admin", a.admin.value != b.admin.value),
        ("node.workers", a.workers.value != b.workers.value),
        (
            "node.max_connections",
            a.max_connections.value != b.max_connections.value,
        ),
        (
            "node.header_timeout",
            a.header_timeout.value != b.header_timeout.value,
        ),
        (
            "node.idle_timeout",
            a.idle_timeout.value != b.idle_timeout.value,
        ),
        (
            "node.send_timeout",
            a.send_timeout.value != b.send_timeout.value,
        ),
        ("node.tls_groups", a.tls_groups.value != b.tls_groups.value),
        (
            "node.admin_max_connections",
            a.admin_max_connections.value != b.admin_max_connections.value,
        ),
        ("node.feed", feed(a) != feed(b)),
        (
            "node.feed_cert",
            cert_a.as_ref().map(|(c, _)| c) != cert_b.as_ref().map(|(c, _)| c),
        ),
        (
            "node.feed_key",
            cert_a.as_ref().map(|(_, k)| k) != cert_b.as_ref().map(|(_, k)| k),
        ),
        (
            "node.feed_client_ca",
            a.feed.as_ref().and_then(|f| f.client_ca.as_ref())
                != b.feed.as_ref().and_then(|f| f.client_ca.as_ref()),
        ),
        ("node.access_log", a.access_log.value != b.access_log.value),
        (
            "node.access_log_format",
            a.access_log_format.value != b.access_log_format.value,
        ),
    ])
}

fn runtime(a: &RuntimeSettings, b: &RuntimeSettings) -> Vec<&'static str> {
    differing(&[
        ("runtime.kind", a.kind != b.kind),
        ("runtime.endpoint", a.endpoint != b.endpoint),
        ("runtime.namespace", a.namespace != b.namespace),
        ("runtime.api", a.api != b.api),
        ("runtime.proxies", a.proxies != b.proxies),
        ("runtime.network", a.network != b.network),
        ("runtime.namespaces", a.namespaces != b.namespaces),
        ("runtime.ingress_class", a.ingress_class != b.ingress_class),
        (
            "runtime.breaker.enabled",
            a.breaker.enabled.value != b.breaker.enabled.value,
        ),
        (
            "runtime.breaker.failures",
            a.breaker.failures.value != b.breaker.failures.value,
        ),
        (
            "runtime.breaker.cooldown",
            a.breaker.cooldown.value != b.breaker.cooldown.value,
        ),
    ])
}

/// What of `[cluster]` changed: applied now, and waiting for a restart.
/// The key file is read again at every reload, so a new one takes effect
/// at once, unless gossip changes between sealed and insecure, which
/// needs a restart.
fn cluster(a: &ClusterSettings, b: &ClusterSettings) -> (Vec<&'static str>, Vec<&'static str>) {
    let sealed = !a.insecure && !b.insecure;
    let applied = differing(&[("cluster.key_file", sealed && a.key_file != b.key_file)]);
    let restart = differing(&[
        ("cluster.id", a.id != b.id),
        ("cluster.gossip", a.gossip != b.gossip),
        ("cluster.advertise", a.advertise != b.advertise),
        ("cluster.seeds", a.seeds != b.seeds),
        ("cluster.insecure", a.insecure != b.insecure),
        (
            "cluster.gossip_interval",
            a.gossip_interval != b.gossip_interval,
        ),
    ]);
    (applied, restart)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse("t.toml", text).unwrap()
    }

    const BASE: &str = r#"
        [node]
        name = "n1"
        listen = "127.0.0.1:8080"
        [[route]]
        name = "a"
        replicas = ["127.0.0.1:9001"]
        [[route]]
        name = "b"
        path_prefix = "/b"
        replicas = ["127.0.0.1:9002"]
    "#;

    #[test]
    fn reload_plans() {
        let cases: &[(&str, &str, ReloadPlan)] = &[
            (
                "identical",
                BASE,
                ReloadPlan {
                    unchanged: 2,
                    ..Default::default()
                },
            ),
            (
                "route added",
                &format!(
                    "{BASE}\n[[route]]\nname = \"c\"\npath_prefix = \"/c\"\nreplicas = [\"127.0.0.1:9003\"]"
                ),
                ReloadPlan {
                    added: vec!["c".into()],
                    unchanged: 2,
                    ..Default::default()
                },
            ),
            (
                "route removed",
                "[node]\nname = \"n1\"\nlisten = \"127.0.0.1:8080\"\n[[route]]\nname = \"a\"\nreplicas = [\"127.0.0.1:9001\"]",
                ReloadPlan {
                    removed: vec!["b".into()],
                    unchanged: 1,
                    ..Default::default()
                },
            ),
            (
                "bound changed",
                &BASE.replace(
                    "path_prefix = \"/b\"",
                    "path_prefix = \"/b\"\nconnect_timeout = \"2s\"",
                ),
                ReloadPlan {
                    changed: vec!["b".into()],
                    unchanged: 1,
                    ..Default::default()
                },
            ),
            (
                "listener moved",
                &BASE.replace("127.0.0.1:8080", "127.0.0.1:8081"),
                ReloadPlan {
                    unchanged: 2,
                    needs_restart: vec!["node.listen"],
                    ..Default::default()
                },
            ),
            (
                "checks re-paced",
                &format!("{BASE}\n[global]\ncheck_every = \"1s\"\ncheck_timeout = \"1s\""),
                ReloadPlan {
                    unchanged: 2,
                    applied: vec!["global.check_every", "global.check_timeout"],
                    ..Default::default()
                },
            ),
            (
                "inherited bound changed",
                &format!("{BASE}\n[global]\nconnect_timeout = \"2s\""),
                ReloadPlan {
                    changed: vec!["a".into(), "b".into()],
                    applied: vec!["global.connect_timeout"],
                    ..Default::default()
                },
            ),
            (
                "trusted proxies changed: every route takes them",
                &format!("{BASE}\n[global]\ntrusted_proxies = [\"10.0.0.0/8\"]"),
                ReloadPlan {
                    changed: vec!["a".into(), "b".into()],
                    applied: vec!["global.trusted_proxies"],
                    ..Default::default()
                },
            ),
            (
                "feed certificate and client limits",
                &BASE.replace(
                    "listen = \"127.0.0.1:8080\"",
                    "listen = \"127.0.0.1:8080\"\nfeed = \"127.0.0.1:9901\"\nfeed_cert = \"c.pem\"\nfeed_key = \"k.pem\"\nidle_timeout = \"5s\"",
                ),
                ReloadPlan {
                    unchanged: 2,
                    needs_restart: vec![
                        "node.idle_timeout",
                        "node.feed",
                        "node.feed_cert",
                        "node.feed_key",
                    ],
                    ..Default::default()
                },
            ),
            (
                "runtime",
                &format!("{BASE}\n[runtime]\nkind = \"docker\"\nnetwork = \"edge\""),
                ReloadPlan {
                    unchanged: 2,
                    needs_restart: vec!["runtime.kind", "runtime.network"],
                    ..Default::default()
                },
            ),
            (
                "cluster joined",
                &format!("{BASE}\n[cluster]\nid = \"c\"\ninsecure = true"),
                ReloadPlan {
                    unchanged: 2,
                    needs_restart: vec!["cluster"],
                    ..Default::default()
                },
            ),
        ];
        let old = config(BASE);
        for (what, new, expected) in cases {
            assert_eq!(&diff(&old, &config(new)), expected, "{what}");
        }
        assert!(diff(&old, &old).is_empty());
    }

    #[test]
    fn certificates_apply_and_the_https_listener_waits() {
        let certificate = |hosts: &str| {
            format!(
                "[[certificate]]\ncert = \"{dir}/edge.pem\"\nkey = \"{dir}/edge.key\"\n{hosts}\n",
                dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/certs"),
            )
        };
        let with = |node: &str, certificates: &str| {
            config(&format!(
                "{}\n{certificates}",
                BASE.replace("[node]", &format!("[node]\n{node}"))
            ))
        };
        let old = with("", "");
        let cases: &[(&str, Config, &[&str], &[&str])] = &[
            (
                "a certificate",
                with("", &certificate("")),
                &["certificate"],
                &[],
            ),
            (
                "an HTTPS listener",
                with("listen_tls = \"127.0.0.1:8443\"", &certificate("")),
                &["certificate"],
                &["node.listen_tls"],
            ),
        ];
        for (what, new, applied, restart) in cases {
            let plan = diff(&old, new);
            assert_eq!(
                (plan.applied.as_slice(), plan.needs_restart.as_slice()),
                (*applied, *restart),
                "{what}"
            );
        }
        let served = with("", &certificate(""));
        let narrowed = with("", &certificate("hosts = [\"a.example.test\"]"));
        assert!(diff(&served, &with("", &certificate(""))).is_empty());
        assert_eq!(diff(&served, &narrowed).applied, ["certificate"]);
    }

    #[test]
    fn cluster_changes_apply_the_key_file_and_wait_for_the_rest() {
        const CLUSTER: &str = "[cluster]\nid = \"c\"\nkey_file = \"a.key\"\n";
        let cases: &[(&str, &str, &[&str], &[&str])] = &[
            ("identical", CLUSTER, &[], &[]),
            (
                "key file",
                "[cluster]\nid = \"c\"\nkey_file = \"b.key\"\n",
                &["cluster.key_file"],
                &[],
            ),
            (
                "seeds and interval",
                "[cluster]\nid = \"c\"\nkey_file = \"a.key\"\nseeds = [\"n2:7946\"]\ngossip_interval = \"2s\"\n",
                &[],
                &["cluster.seeds", "cluster.gossip_interval"],
            ),
            // Unsealed, the keys are not read again: the key file's change
            // is part of going insecure.
            (
                "insecure",
                "[cluster]\nid = \"c\"\ninsecure = true\n",
                &[],
                &["cluster.insecure"],
            ),
            ("left", "", &[], &["cluster"]),
        ];
        let old = config(&format!("{BASE}\n{CLUSTER}"));
        for (what, cluster, applied, restart) in cases {
            let plan = diff(&old, &config(&format!("{BASE}\n{cluster}")));
            assert_eq!(
                (plan.applied.as_slice(), plan.needs_restart.as_slice()),
                (*applied, *restart),
                "{what}"
            );
            assert_eq!(plan.unchanged, 2, "{what}: routes stay");
        }
    }
}
