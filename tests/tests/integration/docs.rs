//! The documentation cannot drift from the code: every field the
//! configuration structs read is in the reference, under its section, the
//! settings that need a restart are the ones a reload names, and every
//! example configuration passes `picket check`.

// Processes only: no runtime whose clock could be paused.
#![allow(clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::process::Command;

use picket::config::fields;
use picket::config::raw::RawConfig;
use picket_tests::binaries;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The part of `text` under `heading`, up to the next heading of its level
/// or above.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let body = &text[start + heading.len() + 2..];
    let level = heading.split(' ').next().unwrap_or("##").len();
    let end = body
        .match_indices("\n#")
        .find(|(i, _)| {
            let hashes = body[i + 1..].chars().take_while(|c| *c == '#').count();
            hashes <= level
        })
        .map_or(body.len(), |(i, _)| i);
    &body[..end]
}

#[test]
fn every_configuration_field_is_in_the_reference_under_its_section() {
    let reference = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let paths = fields::paths::<RawConfig>();
    assert!(paths.len() > 40, "the tracer found the fields: {paths:?}");
    let mut missing = Vec::new();
    for path in &paths {
        let (table, field) = path.rsplit_once('.').unwrap_or(("", path));
        let heading = match table {
            // The top-level tables are sections, not fields.
            "" => continue,
            "node" => "## `[node]`",
            "global" => "## `[global]`",
            "global.breaker" | "route.breaker" => "### `[global.breaker]`",
            "cluster" => "## `[cluster]`",
            "runtime" => "## `[runtime]`",
            "runtime.breaker" => "### `[runtime.breaker]`",
            "route.tls" => "### A route's `tls`",
            "global.request_headers"
            | "global.response_headers"
            | "route.request_headers"
            | "route.response_headers" => "### Header rules",
            "route.rate" => "### Limits",
            "route" => "## `[[route]]`",
            "certificate" => "## `[[certificate]]`",
            "acme" => "## `[acme]`",
            other => panic!("a table the reference has no section for: {other}"),
        };
        if matches!(field, "breaker") && table == "global" {
            continue; // its own section
        }
        let rows = section(&reference, heading);
        let named = rows.lines().filter(|l| l.starts_with('|')).any(|row| {
            row.split('|')
                .nth(1)
                .is_some_and(|cell| cell.contains(&format!("`{field}`")))
        });
        if !named {
            missing.push(format!("{path} (under {heading})"));
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:#?}"
    );
}

#[test]
fn the_reference_lists_exactly_the_settings_a_reload_names_as_needing_a_restart() {
    let reference = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let rows = section(&reference, "## Reloading");
    let mut listed: Vec<&str> = rows
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|row| row.split('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .collect();
    listed.sort_unstable();
    let mut named = picket::config::NEEDS_RESTART.to_vec();
    named.sort_unstable();
    assert_eq!(
        listed, named,
        "the restart table of docs/configuration.md and config::NEEDS_RESTART"
    );
}

/// Every ```toml block of the docs and the README, and the shipped
/// configurations.
fn examples() -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.push(root().join("README.md"));
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut rest = text.as_str();
        let mut n = 0;
        while let Some(start) = rest.find("```toml\n") {
            let block = &rest[start + 8..];
            let end = block.find("```").unwrap();
            n += 1;
            found.push((format!("{name}, toml block {n}"), block[..end].to_string()));
            rest = &block[end..];
        }
    }
    // The shipped configurations, their certificates where the examples'
    // are: the files the stack's secrets and the Kubernetes Secret mount.
    let shipped = |text: &str| {
        text.replace("/run/secrets/picket-tls.crt", "tls/example.com.crt")
            .replace("/run/secrets/picket-tls.key", "tls/example.com.key")
            .replace("/run/secrets/picket-tls/tls.crt", "tls/example.com.crt")
            .replace("/run/secrets/picket-tls/tls.key", "tls/example.com.key")
    };
    found.push((
        "docs/picket.example.toml".into(),
        std::fs::read_to_string(root().join("docs/picket.example.toml")).unwrap(),
    ));
    found.push((
        "deploy/swarm/picket.toml".into(),
        shipped(&std::fs::read_to_string(root().join("deploy/swarm/picket.toml")).unwrap()),
    ));
    found.push((
        "deploy/swarm/acme.toml".into(),
        std::fs::read_to_string(root().join("deploy/swarm/acme.toml")).unwrap(),
    ));
    let configmap =
        std::fs::read_to_string(root().join("deploy/kubernetes/configmap.yaml")).unwrap();
    let configmap: serde_json::Value = serde_norway::from_str(&configmap).unwrap();
    let text = configmap["data"]["picket.toml"].as_str().unwrap();
    found.push(("deploy/kubernetes/configmap.yaml".into(), shipped(text)));
    found
}

/// The certificates the examples name (`tls/example.com.crt` and so on),
/// made for the names the examples serve.
fn example_certificates(dir: &Path) {
    let tls = dir.join("tls");
    std::fs::create_dir(&tls).unwrap();
    for domain in ["example.com", "example.net"] {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![domain.to_string(), format!("*.{domain}")])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(tls.join(format!("{domain}.crt")), cert.pem()).unwrap();
        std::fs::write(tls.join(format!("{domain}.key")), key.serialize_pem()).unwrap();
    }
}

#[test]
fn every_example_configuration_passes_picket_check() {
    let examples = examples();
    assert!(examples.len() >= 3, "{examples:?}");
    let dir = tempfile::tempdir().unwrap();
    example_certificates(dir.path());
    let picket = binaries::picket();
    for (i, (name, text)) in examples.iter().enumerate() {
        let file = dir.path().join(format!("example-{i}.toml"));
        std::fs::write(&file, text).unwrap();
        let output = Command::new(&picket)
            .arg("check")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{name} fails picket check:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The Swarm stack with ACME is the stack without certificate secrets:
/// the same services, the configuration `acme.toml` (which passes `picket
/// check` above), the cache on a volume of each machine where that
/// configuration keeps it, and the CA's ports published.
#[test]
fn the_acme_stack_holds_no_certificate_and_keeps_its_cache_on_a_volume() {
    let read = |name: &str| {
        let text = std::fs::read_to_string(root().join("deploy/swarm").join(name)).unwrap();
        serde_norway::from_str::<serde_json::Value>(&text).unwrap()
    };
    let (base, acme) = (read("stack.yml"), read("stack-acme.yml"));
    let services = |stack: &serde_json::Value| {
        let mut names: Vec<String> = stack["services"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    };
    assert_eq!(services(&acme), services(&base));
    assert_eq!(
        acme["services"]["socket-proxy"], base["services"]["socket-proxy"],
        "the socket proxy as in the base stack"
    );
    let picket = &acme["services"]["picket"];
    let secrets: Vec<&str> = picket["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(secrets, ["picket-gossip-key"], "no certificate secrets");
    assert_eq!(
        acme["secrets"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["picket-gossip-key"]
    );
    let text = std::fs::read_to_string(root().join("deploy/swarm/acme.toml")).unwrap();
    let config: toml::Value = toml::from_str(&text).unwrap();
    let cache = config["acme"]["cache"].as_str().unwrap();
    let volume = &picket["volumes"][0];
    assert_eq!(volume["type"], "volume");
    assert_eq!(volume["target"], cache, "the cache is the volume");
    assert!(
        acme["volumes"]
            .get(volume["source"].as_str().unwrap())
            .is_some()
    );
    assert!(
        config["certificate"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c.get("acme").is_some() && c.get("cert").is_none()),
        "every certificate from ACME"
    );
    let published: Vec<(i64, i64)> = picket["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["published"].as_i64().unwrap(),
                p["target"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(published.contains(&(80, 8080)) && published.contains(&(443, 8443)));
    assert_eq!(
        acme["configs"]["picket-acme-config"]["file"], "./acme.toml",
        "the stack hands the nodes acme.toml"
    );
    // The image carries the volume's mount point, the node's user's own.
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("COPY --chown=65534:65534 acme {cache}")));
}
