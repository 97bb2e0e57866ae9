//! The effective configuration as `picket check` prints it: valid TOML,
//! every inherited value written out, with where it came from.

use std::fmt::Write;
use std::time::Duration;

use super::{
    BreakerSettings, CertificateConfig, Config, Origin, RouteConfig, RuntimeKind, Setting,
    UpstreamConfig,
};

/// Renders `config` as TOML with an origin comment on each inherited value.
pub fn render(config: &Config) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# effective configuration of {}", config.source);
    let node = &config.node;
    out.push_str("\n[node]\n");
    line(&mut out, "name", &quoted(&node.name.value), node.name.from);
    line(
        &mut out,
        "listen",
        &quoted(node.listen.value),
        node.listen.from,
    );
    if let Some(listen_tls) = &node.listen_tls {
        line(
            &mut out,
            "listen_tls",
            &quoted(listen_tls.value),
            listen_tls.from,
        );
    }
    line(
        &mut out,
        "admin",
        &quoted(node.admin.value),
        node.admin.from,
    );
    line(
        &mut out,
        "workers",
        &node.workers.value.to_string(),
        node.workers.from,
    );
    duration(&mut out, "header_timeout", &node.header_timeout);
    duration(&mut out, "idle_timeout", &node.idle_timeout);
    duration(&mut out, "send_timeout", &node.send_timeout);
    if let Some(groups) = &node.tls_groups.value {
        let list: Vec<String> = groups.iter().map(|g| format!("\"{g}\"")).collect();
        line(
            &mut out,
            "tls_groups",
            &format!("[{}]", list.join(", ")),
            node.tls_groups.from,
        );
    }
    line(
        &mut out,
        "admin_max_connections",
        &node.admin_max_connections.value.to_string(),
        node.admin_max_connections.from,
    );
    if let Some(max) = node.max_connections.value {
        line(
            &mut out,
            "max_connections",
            &max.to_string(),
            node.max_connections.from,
        );
    }
    line(
        &mut out,
        "access_log",
        &quoted(&node.access_log.value),
        node.access_log.from,
    );
    line(
        &mut out,
        "access_log_format",
        &quoted(node.access_log_format.value.name()),
        node.access_log_format.from,
    );
    if let Some(feed) = &node.feed {
        line(&mut out, "feed", &quoted(feed.addr), Origin::File);
        if let Some((cert, key)) = &feed.cert {
            line(&mut out, "feed_cert", &quoted(cert.display()), Origin::File);
            line(&mut out, "feed_key", &quoted(key.display()), Origin::File);
        }
        if let Some(ca) = &feed.client_ca {
            line(
                &mut out,
                "feed_client_ca",
                &quoted(ca.display()),
                Origin::File,
            );
        }
    }

    let runtime = &config.runtime;
    out.push_str("\n[runtime]\n");
    let kind_from = if runtime.kind == RuntimeKind::None {
        Origin::Default
    } else {
        Origin::File
    };
    line(&mut out, "kind", &quoted(runtime.kind), kind_from);
    for (key, value) in [
        ("endpoint", &runtime.endpoint),
        ("namespace", &runtime.namespace),
        ("api", &runtime.api),
        ("network", &runtime.network),
        (
            "ingress_class",
            &(runtime.ingress_class != crate::config::DEFAULT_INGRESS_CLASS)
                .then(|| runtime.ingress_class.clone()),
        ),
    ] {
        if let Some(value) = value {
            line(&mut out, key, &quoted(value), Origin::File);
        }
    }
    let namespaces = if runtime.hosts.namespaces.is_empty() {
        runtime.namespaces.clone()
    } else {
        Vec::new()
    };
    for (key, list) in [("proxies", &runtime.proxies), ("namespaces", &namespaces)] {
        if !list.is_empty() {
            let list: Vec<String> = list.iter().map(quoted).collect();
            line(
                &mut out,
                key,
                &format!("[{}]", list.join(", ")),
                Origin::File,
            );
        }
    }
    if let Some(hosts) = &runtime.hosts.hosts {
        line(&mut out, "hosts", &patterns(hosts), Origin::File);
    } else if runtime.kind != RuntimeKind::None {
        out.push_str(
            "# hosts: not set: the runtime may claim host names the file does not serve, no wildcard, no route for any host\n",
        );
    }
    if runtime.kind != RuntimeKind::None {
        let b = &runtime.breaker;
        out.push_str("\n[runtime.breaker]\n");
        line(
            &mut out,
            "enabled",
            &b.enabled.value.to_string(),
            b.enabled.from,
        );
        line(
            &mut out,
            "failures",
            &b.failures.value.to_string(),
            b.failures.from,
        );
        duration(&mut out, "cooldown", &b.cooldown);
    }
    if !runtime.hosts.namespaces.is_empty() {
        out.push_str("\n[runtime.namespaces]\n");
        for (namespace, hosts) in &runtime.hosts.namespaces {
            let key = if namespace == "*" {
                quoted(namespace)
            } else {
                namespace.clone()
            };
            line(&mut out, &key, &patterns(hosts), Origin::File);
        }
    }

    if let Some(cluster) = &config.cluster {
        out.push_str("\n[cluster]\n");
        line(&mut out, "id", &quoted(&cluster.id), Origin::File);
        line(&mut out, "gossip", &quoted(cluster.gossip), Origin::File);
        if let Some(advertise) = cluster.advertise {
            line(&mut out, "advertise", &quoted(advertise), Origin::File);
        }
        let seeds: Vec<String> = cluster.seeds.iter().map(quoted).collect();
        line(
            &mut out,
            "seeds",
            &format!("[{}]", seeds.join(", ")),
            Origin::File,
        );
        if let Some(key_file) = &cluster.key_file {
            line(
                &mut out,
                "key_file",
                &quoted(key_file.display()),
                Origin::File,
            );
        }
        if cluster.insecure {
            line(&mut out, "insecure", "true", Origin::File);
        }
        line(
            &mut out,
            "gossip_interval",
            &quoted(humantime::format_duration(cluster.gossip_interval)),
            Origin::File,
        );
    }

    // In `[global]` itself, a value from `[global]` is simply the file's.
    let global = &config.global;
    out.push_str("\n[global]\n");
    duration(
        &mut out,
        "connect_timeout",
        &in_global(&global.connect_timeout),
    );
    duration(
        &mut out,
        "first_answer_timeout",
        &in_global(&global.first_answer_timeout),
    );
    duration(&mut out, "eject_for", &in_global(&global.eject_for));
    line(
        &mut out,
        "consecutive_gateway_errors",
        &global.consecutive_gateway_errors.value.to_string(),
        in_global(&global.consecutive_gateway_errors).from,
    );
    duration(&mut out, "check_every", &in_global(&global.check_every));
    duration(&mut out, "check_timeout", &in_global(&global.check_timeout));
    duration(&mut out, "body_timeout", &in_global(&global.body_timeout));
    line(
        &mut out,
        "underscores_in_headers",
        &global.underscores_in_headers.value.to_string(),
        in_global(&global.underscores_in_headers).from,
    );
    let trusted: Vec<String> = global
        .trusted_proxies
        .value
        .ranges()
        .iter()
        .map(quoted)
        .collect();
    line(
        &mut out,
        "trusted_proxies",
        &format!("[{}]", trusted.join(", ")),
        in_global(&global.trusted_proxies).from,
    );
    max_body(&mut out, &in_global(&global.max_body));
    header_rules(&mut out, "request_headers", &global.request_headers);
    header_rules(&mut out, "response_headers", &global.response_headers);
    out.push_str("\n[global.breaker]\n");
    breaker(
        &mut out,
        &BreakerSettings {
            enabled: in_global(&global.breaker.enabled),
            failures: in_global(&global.breaker.failures),
            cooldown: in_global(&global.breaker.cooldown),
        },
    );

    for (i, certificate) in config.certificates.iter().enumerate() {
        out.push('\n');
        render_certificate(&mut out, certificate, i == 0);
    }

    for route in &config.routes {
        out.push('\n');
        render_route(&mut out, route);
    }
    out
}

/// A `[[certificate]]` with absolute paths, and what it serves in a
/// comment.
fn render_certificate(out: &mut String, certificate: &CertificateConfig, default: bool) {
    let current = &certificate.current;
    let names = if current.names.is_empty() {
        "no name".to_string()
    } else {
        current.names.join(", ")
    };
    let _ = writeln!(
        out,
        "# serves {names}{}; serial {}; expires {}",
        if default { " (and is the default)" } else { "" },
        current.serial,
        crate::certificate::rfc3339(current.not_after)
    );
    out.push_str("[[certificate]]\n");
    line(
        out,
        "cert",
        &quoted(certificate.cert.display()),
        Origin::File,
    );
    line(out, "key", &quoted(certificate.key.display()), Origin::File);
    if let Some(hosts) = &certificate.hosts {
        let hosts: Vec<String> = hosts.iter().map(quoted).collect();
        line(
            out,
            "hosts",
            &format!("[{}]", hosts.join(", ")),
            Origin::File,
        );
    }
}

fn in_global<T: Clone>(setting: &Setting<T>) -> Setting<T> {
    let from = match setting.from {
        Origin::Global => Origin::File,
        other => other,
    };
    Setting::new(setting.value.clone(), from)
}

/// One route as the file would say it (a route the runtime declared says
/// what declared it, and an exact path, in comments).
pub fn render_route(out: &mut String, route: &RouteConfig) {
    out.push_str("[[route]]\n");
    if let Some(by) = &route.declared_by {
        out.push_str(&format!("# declared by {by}\n"));
    }
    if route.exact_path {
        out.push_str("# the path below matches exactly, not as a prefix\n");
    }
    line(out, "name", &quoted(&route.name), Origin::File);
    if let Some(host) = &route.host {
        line(out, "host", &quoted(host), Origin::File);
    }
    line(
        out,
        "path_prefix",
        &quoted(&route.path_prefix),
        Origin::File,
    );
    match &route.upstream {
        UpstreamConfig::Replicas(list) => {
            let list: Vec<String> = list.iter().map(quoted).collect();
            line(
                out,
                "replicas",
                &format!("[{}]", list.join(", ")),
                Origin::File,
            );
        }
        UpstreamConfig::External(host) => line(out, "upstream", &quoted(host), Origin::File),
        UpstreamConfig::Service { name, port } => {
            line(out, "service", &quoted(name), Origin::File);
            line(out, "port", &port.to_string(), Origin::File);
        }
    }
    duration(out, "connect_timeout", &route.connect_timeout);
    duration(out, "first_answer_timeout", &route.first_answer_timeout);
    line(
        out,
        "tries",
        &route.tries.value.to_string(),
        route.tries.from,
    );
    duration(out, "eject_for", &route.eject_for);
    line(
        out,
        "consecutive_gateway_errors",
        &route.consecutive_gateway_errors.value.to_string(),
        route.consecutive_gateway_errors.from,
    );
    if route.https_only {
        line(out, "https_only", "true", Origin::File);
    }
    if route.protocol != crate::config::Protocol::Http1 {
        line(
            out,
            "protocol",
            &quoted(route.protocol.name()),
            Origin::File,
        );
    }
    match &route.check {
        crate::config::CheckKind::Connect => {}
        crate::config::CheckKind::Grpc { service } => {
            line(out, "check", &quoted("grpc"), Origin::File);
            if !service.is_empty() {
                line(out, "grpc_service", &quoted(service), Origin::File);
            }
        }
        crate::config::CheckKind::Http(http) => {
            line(out, "check", &quoted("http"), Origin::File);
            line(out, "check_path", &quoted(&http.path), Origin::File);
            if let Some(host) = &http.host {
                line(out, "check_host", &quoted(host), Origin::File);
            }
            let statuses: Vec<String> = http.statuses.to_string().split(", ").map(quoted).collect();
            line(
                out,
                "check_statuses",
                &format!("[{}]", statuses.join(", ")),
                Origin::File,
            );
        }
    }
    if let Some(every) = route.check_every {
        line(
            out,
            "check_every",
            &quoted(humantime::format_duration(every)),
            Origin::File,
        );
    }
    if let Some(timeout) = route.check_timeout {
        line(
            out,
            "check_timeout",
            &quoted(humantime::format_duration(timeout)),
            Origin::File,
        );
    }
    if let Some(tls) = &route.tls {
        let mut fields = Vec::new();
        if let Some((ca, _)) = &tls.ca {
            fields.push(format!("ca = {}", quoted(ca.display())));
        }
        if let Some(name) = &tls.server_name {
            fields.push(format!("server_name = {}", quoted(name)));
        }
        if let Some(client) = &tls.client {
            fields.push(format!("client_cert = {}", quoted(client.cert.display())));
            fields.push(format!("client_key = {}", quoted(client.key.display())));
        }
        line(
            out,
            "tls",
            &format!("{{ {} }}", fields.join(", ")),
            Origin::File,
        );
    }
    if route.strip_prefix {
        line(out, "strip_prefix", "true", Origin::File);
    }
    if let Some(add) = &route.add_prefix {
        line(out, "add_prefix", &quoted(add), Origin::File);
    }
    max_body(out, &route.max_body);
    if let Some(rate) = &route.rate {
        line(
            out,
            "rate",
            &format!(
                "{{ per_second = {}, burst = {}, by = {} }}",
                rate.per_second,
                rate.burst,
                quoted(rate.by.name())
            ),
            Origin::File,
        );
    }
    // With `[global]`'s rules in.
    header_rules(out, "request_headers", &route.request_headers);
    header_rules(out, "response_headers", &route.response_headers);
    // A sub-table of the route just written.
    out.push_str("[route.breaker]\n");
    breaker(out, &route.breaker);
}

fn max_body(out: &mut String, setting: &Setting<Option<u64>>) {
    match setting.value {
        Some(n) => line(out, "max_body", &n.to_string(), setting.from),
        None => line(out, "max_body", &quoted("off"), setting.from),
    }
}

fn header_rules(out: &mut String, key: &str, rules: &crate::config::HeaderRules) {
    if rules.is_empty() {
        return;
    }
    let set: Vec<String> = rules
        .set
        .iter()
        .map(|(n, v)| format!("{} = {}", quoted(n), quoted(v.to_str().unwrap_or(""))))
        .collect();
    let remove: Vec<String> = rules.remove.iter().map(quoted).collect();
    let trailers: Vec<String> = rules.trailers.iter().map(quoted).collect();
    line(
        out,
        key,
        &format!(
            "{{ set = {{ {} }}, remove = [{}], trailers = [{}] }}",
            set.join(", "),
            remove.join(", "),
            trailers.join(", ")
        ),
        Origin::File,
    );
}

fn breaker(out: &mut String, b: &BreakerSettings) {
    line(out, "enabled", &b.enabled.value.to_string(), b.enabled.from);
    line(
        out,
        "failures",
        &b.failures.value.to_string(),
        b.failures.from,
    );
    duration(out, "cooldown", &b.cooldown);
}

fn duration(out: &mut String, key: &str, setting: &Setting<Duration>) {
    line(
        out,
        key,
        &quoted(humantime::format_duration(setting.value)),
        setting.from,
    );
}

fn patterns(list: &[crate::config::ownership::HostPattern]) -> String {
    let list: Vec<String> = list.iter().map(quoted).collect();
    format!("[{}]", list.join(", "))
}

fn quoted(value: impl ToString) -> String {
    format!("{:?}", value.to_string())
}

fn line(out: &mut String, key: &str, value: &str, from: Origin) {
    let assignment = format!("{key} = {value}");
    let comment = match from {
        Origin::File => None,
        Origin::Default => Some("default"),
        Origin::Global => Some("inherited from [global]"),
        Origin::Route => Some("set on the route"),
        Origin::Override => Some("flag or environment"),
    };
    match comment {
        Some(c) => {
            let _ = writeln!(out, "{assignment:<44} # {c}");
        }
        None => {
            let _ = writeln!(out, "{assignment}");
        }
    }
}
