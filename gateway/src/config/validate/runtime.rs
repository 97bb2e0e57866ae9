//! `[runtime]`: where replicas come from, and the breaker in front of its API.

use super::*;

impl Validator<'_> {
    pub(super) fn runtime(&mut self, raw: &RawRuntime) -> RuntimeSettings {
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
        let ingress_class = only_for(
            &raw.ingress_class,
            "ingress_class",
            &[RuntimeKind::Kubernetes],
        );
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
        let (namespaces, namespace_hosts) = self.namespaces(raw.namespaces.as_ref(), kind);
        let hosts = raw.hosts.as_ref().map(|list| {
            if kind == RuntimeKind::None {
                self.problem(
                    list.span(),
                    "`hosts` has no meaning for runtime kind \"none\": no route comes from a runtime",
                );
            }
            self.host_patterns(list)
        });
        let ingress_class = match ingress_class {
            // An IngressClass's name: a DNS subdomain of lowercase labels.
            Some(class) if class.len() <= 253 && class.split('.').all(is_dns_label) => class,
            Some(class) => {
                let span = raw.ingress_class.as_ref().map_or(0..0, |c| c.span());
                self.problem(
                    span,
                    format!("ingress_class {class:?} is not an IngressClass name (lowercase letters, digits, '-' and '.')"),
                );
                class
            }
            None => DEFAULT_INGRESS_CLASS.to_string(),
        };
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
            ingress_class,
            breaker,
            hosts: HostRules {
                hosts,
                namespaces: namespace_hosts,
            },
        }
    }

    pub(super) fn namespaces(
        &mut self,
        raw: Option<&Spanned<RawNamespaces>>,
        kind: RuntimeKind,
    ) -> (Vec<String>, Vec<(String, Vec<HostPattern>)>) {
        let Some(raw) = raw else {
            return (Vec::new(), Vec::new());
        };
        if kind != RuntimeKind::Kubernetes {
            self.problem(
                raw.span(),
                format!("`namespaces` has no meaning for runtime kind \"{kind}\""),
            );
        }
        let (names, mut hosts): (Vec<&Spanned<String>>, _) = match raw.get_ref() {
            RawNamespaces::List(list) => (list.iter().collect(), Vec::new()),
            RawNamespaces::Hosts(table) => {
                let mut hosts = Vec::new();
                for (namespace, patterns) in table {
                    hosts.push((namespace.get_ref().clone(), self.host_patterns(patterns)));
                }
                (table.iter().map(|(n, _)| n).collect(), hosts)
            }
        };
        let mut namespaces = Vec::new();
        for entry in names {
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
        if matches!(raw.get_ref(), RawNamespaces::List(_))
            && namespaces.iter().any(|n| n == "*")
            && namespaces.len() > 1
        {
            self.problem(
                raw.span(),
                "`namespaces` with \"*\" watches every namespace: list nothing else",
            );
        }
        // In the table form, "*" holds the namespaces it does not list, and
        // watches every namespace.
        if namespaces.iter().any(|n| n == "*") {
            namespaces = vec!["*".to_string()];
        }
        namespaces.sort();
        namespaces.dedup();
        hosts.sort_by(|a, b| a.0.cmp(&b.0));
        (namespaces, hosts)
    }

    /// Host patterns: `"*"`, `"*.example.com"` or a host name.
    pub(super) fn host_patterns(
        &mut self,
        raw: &Spanned<Vec<Spanned<String>>>,
    ) -> Vec<HostPattern> {
        let mut patterns = Vec::new();
        for entry in raw.get_ref() {
            if entry.get_ref() == "*" {
                patterns.push(HostPattern::Any);
                continue;
            }
            match self.host(entry) {
                Some(HostMatch::Exact(name)) => patterns.push(HostPattern::Exact(name)),
                Some(HostMatch::Suffix(suffix)) => patterns.push(HostPattern::Under(suffix)),
                None => {}
            }
        }
        patterns
    }

    pub(super) fn runtime_breaker(&mut self, raw: &RawRuntimeBreaker) -> RuntimeBreakerSettings {
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
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ROUTE, problems, valid};

    #[test]
    fn the_breaker_reads_failures_and_its_old_name() {
        let text = |breaker: &str| {
            format!("[runtime]\nkind = \"docker\"\nbreaker = {{ {breaker} }}\n{ROUTE}")
        };
        let breaker = |config: crate::config::Config| config.runtime.breaker.failures.value;
        assert_eq!(breaker(valid(&text("failures = 4"))), 4);
        assert_eq!(breaker(valid(&text("threshold = 5"))), 5);
        assert_eq!(
            problems(&text("failures = 4, threshold = 5")),
            ["3:39: `threshold` is what `failures` was called before: give one of them"]
        );
        assert_eq!(
            problems(&text("failures = 0")),
            ["3:24: breaker failures = 0 is out of range: 1 to 100"]
        );
    }

    #[test]
    fn namespaces_are_kubernetes_names() {
        let text = format!(
            "[runtime]\nkind = \"kubernetes\"\nnamespaces = [\"shop\", \"Not_A_Label\"]\n{ROUTE}"
        );
        let found = problems(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("3:23: "), "{found:?}");
        assert!(found[0].contains("Not_A_Label"), "{found:?}");
    }

    #[test]
    fn the_ingress_class_is_a_kubernetes_name_for_kubernetes_alone() {
        let text = |rest: &str| format!("[runtime]\nkind = \"kubernetes\"\n{rest}{ROUTE}");
        assert_eq!(valid(&text("")).runtime.ingress_class, "picket");
        assert_eq!(
            valid(&text("ingress_class = \"edge.example.com\"\n"))
                .runtime
                .ingress_class,
            "edge.example.com"
        );
        for bad in ["Edge", "-edge", "edge_1", "edge..x", ""] {
            let found = problems(&text(&format!("ingress_class = {bad:?}\n")));
            assert_eq!(found.len(), 1, "{bad:?}: {found:?}");
            assert!(found[0].starts_with("3:17: "), "{found:?}");
            assert!(found[0].contains("not an IngressClass name"), "{found:?}");
        }
        let found = problems(&format!(
            "[runtime]\nkind = \"docker\"\ningress_class = \"edge\"\n{ROUTE}"
        ));
        assert_eq!(
            found,
            ["3:17: `ingress_class` has no meaning for runtime kind \"docker\""]
        );
    }

    #[test]
    fn hosts_and_each_namespaces_own_are_patterns() {
        use crate::config::ownership::HostPattern;
        let text = format!(
            "[runtime]\nkind = \"kubernetes\"\nhosts = [\"shop.example.com\", \"*.apps.example.com\", \"*\"]\n\
             [runtime.namespaces]\nteam-a = [\"*.a.example.com\"]\n\"*\" = [\"x.example.com\"]\n{ROUTE}"
        );
        let config = valid(&text);
        let hosts = &config.runtime.hosts;
        assert_eq!(
            hosts.hosts,
            Some(vec![
                HostPattern::Exact("shop.example.com".into()),
                HostPattern::Under(".apps.example.com".into()),
                HostPattern::Any,
            ])
        );
        assert_eq!(
            hosts.namespaces,
            [
                (
                    "*".to_string(),
                    vec![HostPattern::Exact("x.example.com".into())]
                ),
                (
                    "team-a".to_string(),
                    vec![HostPattern::Under(".a.example.com".into())]
                ),
            ]
        );
        assert_eq!(
            config.runtime.namespaces,
            ["*"],
            "\"*\" watches every namespace"
        );
        // What `picket check` prints reads back the same.
        let again = valid(&crate::config::render(&config));
        assert_eq!(again.runtime.hosts, config.runtime.hosts);

        let found = problems(&format!(
            "[runtime]\nkind = \"docker\"\nhosts = [\"shop example\", \"ok.example.com\"]\n{ROUTE}"
        ));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("3:10: host \"shop example\""),
            "{found:?}"
        );
        let found = problems(&format!("[runtime]\nhosts = [\"*\"]\n{ROUTE}"));
        assert!(
            found
                .iter()
                .any(|p| p.contains("`hosts` has no meaning for runtime kind \"none\"")),
            "{found:?}"
        );
        let found = problems(&format!(
            "[runtime]\nkind = \"docker\"\n[runtime.namespaces]\nteam-a = [\"a.example.com\"]\n{ROUTE}"
        ));
        assert!(
            found
                .iter()
                .any(|p| p.contains("`namespaces` has no meaning for runtime kind \"docker\"")),
            "{found:?}"
        );
    }

    #[test]
    fn an_unknown_kind_is_refused() {
        let found = problems(&format!("[runtime]\nkind = \"nomad\"\n{ROUTE}"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("2:8: "), "{found:?}");
    }
}
