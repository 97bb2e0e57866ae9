//! Routes from Docker and Swarm labels.
//!
//! A service whose containers carry `picket.enable=true` declares one
//! route per name in its `picket.route.<name>.<setting>` labels: `host`,
//! `path_prefix`, `port` and the settings [`declared::keys`] lists. The
//! route sends to the service itself, and is named by it
//! (`shop/web/api`: route `api` of the compose service `web` of project
//! `shop`). A container of no compose or Swarm service is a service of
//! its own, named after the container (`container:blog`), as Traefik
//! names it. Without `picket.enable=true` the labels are ignored, so a
//! label set by mistake exposes nothing.
//!
//! The labels are read off the containers the node already follows, from
//! the inventory and the event stream: nothing polls. In a Swarm they are
//! the container labels of a service (`labels:` of the service in a stack
//! file, `--container-label-add`), which every task's container carries;
//! a service's `deploy.labels` stay with the service object, which only
//! managers can read. While a service rolls from one set of labels to the
//! next, its newest container's labels are the ones that count.

use std::collections::BTreeMap;

use crate::config::declared::{self, Declared};

/// The label that turns routes from labels on.
pub const ENABLE: &str = "picket.enable";
/// The prefix of a route's labels.
pub const ROUTE: &str = "picket.route.";
/// What a container of no service is named as one: `container:NAME`.
pub const CONTAINER_PREFIX: &str = "container:";

/// Whether a label is one of Picket's (the inventory keeps only those).
pub fn ours(key: &str) -> bool {
    key.starts_with("picket.")
}

/// The routes `labels` declare for `service` (as Docker names it:
/// `shop/web`, `shop_web`, `container:blog`).
pub fn routes(service: &str, labels: &BTreeMap<String, String>) -> Vec<Declared> {
    if labels.get(ENABLE).map(|v| v.trim()) != Some("true") {
        return Vec::new();
    }
    let mut by_name: BTreeMap<&str, Vec<(String, String)>> = BTreeMap::new();
    for (key, value) in labels {
        let Some(rest) = key.strip_prefix(ROUTE) else {
            continue;
        };
        let (name, setting) = split(rest);
        by_name
            .entry(name)
            .or_default()
            .push((setting.to_string(), value.clone()));
    }
    let kind = if service.starts_with(CONTAINER_PREFIX) {
        "container"
    } else {
        "service"
    };
    by_name
        .into_iter()
        .map(|(name, fields)| Declared {
            kind,
            object: service.to_string(),
            tenant: None,
            since_ms: None,
            name: name.to_string(),
            service: service.to_string(),
            fields,
            prefix: format!("{ROUTE}{name}."),
            exact_path: false,
            problem: None,
        })
        .collect()
}

/// `name.setting`: a route's name may hold dots, so the setting is the
/// longest known one it ends with; else the name ends at the first dot.
fn split(rest: &str) -> (&str, &str) {
    let known = declared::keys()
        .filter_map(|key| {
            let name = rest.strip_suffix(key)?.strip_suffix('.')?;
            (!name.is_empty()).then_some((name, key))
        })
        .max_by_key(|(_, key)| key.len());
    match known {
        Some((name, key)) => (name, key),
        None => rest.split_once('.').unwrap_or((rest, "")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_declare_a_route_per_name_only_when_enabled() {
        let set = [
            ("picket.route.shop.host", "shop.example.com"),
            ("picket.route.shop.port", "8080"),
            ("picket.route.shop.breaker.failures", "7"),
            ("picket.route.api.v2.path_prefix", "/v2"),
            ("picket.route.api.v2.port", "9000"),
            ("com.docker.compose.service", "web"),
        ];
        assert!(routes("shop_web", &labels(&set)).is_empty(), "not enabled");
        let mut enabled = set.to_vec();
        enabled.push((ENABLE, "true"));
        let declared = routes("shop_web", &labels(&enabled));
        let got: Vec<(&str, Vec<(&str, &str)>)> = declared
            .iter()
            .map(|d| {
                (
                    d.name.as_str(),
                    d.fields
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("api.v2", vec![("path_prefix", "/v2"), ("port", "9000")]),
                (
                    "shop",
                    vec![
                        ("breaker.failures", "7"),
                        ("host", "shop.example.com"),
                        ("port", "8080")
                    ]
                ),
            ]
        );
        assert!(declared.iter().all(|d| d.service == "shop_web"));
        assert_eq!(declared[1].prefix, "picket.route.shop.");
        assert_eq!(declared[1].source(), "service shop_web");
    }

    #[test]
    fn an_unknown_setting_stays_with_its_name_for_the_check_to_refuse() {
        let declared = routes(
            "web",
            &labels(&[(ENABLE, "true"), ("picket.route.shop.colour", "blue")]),
        );
        assert_eq!(declared.len(), 1);
        assert_eq!(declared[0].name, "shop");
        assert_eq!(
            declared[0].fields,
            [("colour".to_string(), "blue".to_string())]
        );
    }
}
