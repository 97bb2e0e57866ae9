//! The effective configuration as `picket check` prints it: valid TOML,
//! every inherited value written out, with where it came from.

use std::fmt::Write;
use std::time::Duration;

use super::{Config, Origin, RouteConfig, Setting, UpstreamConfig};

/// Renders `config` as TOML with an origin comment on each inherited value.
pub fn render(config: &Config) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# effective configuration of {}", config.source);
    out.push_str("\n[node]\n");
    line(
        &mut out,
        "name",
        &quoted(&config.node.name.value),
        config.node.name.from,
    );
    line(
        &mut out,
        "listen",
        &quoted(config.node.listen.value),
        config.node.listen.from,
    );
    line(
        &mut out,
        "admin",
        &quoted(config.node.admin.value),
        config.node.admin.from,
    );
    line(
        &mut out,
        "workers",
        &config.node.workers.value.to_string(),
        config.node.workers.from,
    );

    out.push_str("\n[global]\n");
    duration(&mut out, "connect_timeout", &config.global.connect_timeout);
    duration(
        &mut out,
        "first_answer_timeout",
        &config.global.first_answer_timeout,
    );
    duration(&mut out, "eject_for", &config.global.eject_for);

    for route in &config.routes {
        out.push('\n');
        render_route(&mut out, route);
    }
    out
}

fn render_route(out: &mut String, route: &RouteConfig) {
    out.push_str("[[route]]\n");
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
}

fn duration(out: &mut String, key: &str, setting: &Setting<Duration>) {
    line(
        out,
        key,
        &quoted(humantime::format_duration(setting.value)),
        setting.from,
    );
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
