//! What a reload changes, decided from the old and new configurations alone.

use super::{Config, RouteConfig};

/// The difference between two configurations, for logging and for keeping
/// the state of routes that did not change.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadPlan {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same name, different match, upstream or settings.
    pub changed: Vec<String>,
    pub unchanged: usize,
    /// `[node]` settings that only take effect on restart.
    pub needs_restart: Vec<&'static str>,
}

impl ReloadPlan {
    /// True when the reload changes nothing at all.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.needs_restart.is_empty()
    }
}

/// Compares two configurations route by route (by name).
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
    let (a, b) = (&old.node, &new.node);
    for (field, differs) in [
        ("node.name", a.name.value != b.name.value),
        ("node.listen", a.listen.value != b.listen.value),
        ("node.admin", a.admin.value != b.admin.value),
        ("node.workers", a.workers.value != b.workers.value),
        (
            "node.header_timeout",
            a.header_timeout.value != b.header_timeout.value,
        ),
        (
            "node.idle_timeout",
            a.idle_timeout.value != b.idle_timeout.value,
        ),
        (
            "node.max_connections",
            a.max_connections.value != b.max_connections.value,
        ),
        ("node.feed", a.feed != b.feed),
        ("runtime", old.runtime != new.runtime),
        ("cluster", old.cluster != new.cluster),
    ] {
        if differs {
            plan.needs_restart.push(field);
        }
    }
    plan
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
        ];
        let old = config(BASE);
        for (what, new, expected) in cases {
            assert_eq!(&diff(&old, &config(new)), expected, "{what}");
        }
        assert!(diff(&old, &old).is_empty());
    }
}
