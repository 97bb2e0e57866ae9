//! A reload tells the truth. Every field the configuration structs read
//! (traced through serde, as the documentation test does) is changed by a
//! reload of a running node, one at a time, and either takes effect — what
//! the node's parts use ([`picket::node::InForce`]) changes — or is named
//! by the reload as needing a restart, and never both. A field added to
//! the structs without a sample here fails the test until someone decides
//! which it is.

use std::collections::BTreeSet;

use picket::config::fields;
use picket::config::raw::RawConfig;
use picket::config::{Config, NEEDS_RESTART, ReloadPlan};
use picket::node::InForce;
use picket_tests::node::TestNode;
use tracing_subscriber::util::SubscriberInitExt as _;

/// A route that sets nothing of its own, so that what `[global]` gives it
/// shows. Nothing needs to answer at its replica.
const ROUTE: &str = "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\n";

macro_rules! route {
    ($line:literal) => {
        concat!(
            "[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\n",
            $line
        )
    };
}

/// A sealed cluster, alone, on a port of its own.
macro_rules! cluster {
    ($line:literal) => {
        concat!(
            "[cluster]\nid = \"t\"\ngossip = \"127.0.0.1:0\"\nkey_file = \"{dir}/a.key\"\n",
            $line
        )
    };
}

/// A certificate for `localhost` and `edge.test`.
const CERTIFICATE: &str = "[[certificate]]\ncert = \"{dir}/feed.crt\"\nkey = \"{dir}/feed.key\"\n";

/// A Docker runtime whose engine is nowhere: the node follows nothing.
const DOCKER: &str = "[runtime]\nkind = \"docker\"\nendpoint = \"unix://{dir}/a.sock\"\n";

/// A field's path, a configuration with `$` where its value goes (a
/// section other than `[[route]]` gets [`ROUTE`] after it), and the value
/// the node starts with and the one a reload brings. `{dir}` is a
/// directory holding `a.key`, `b.key` (cluster keys), `feed.crt`,
/// `feed.key` (a certificate for `localhost` and `edge.test`) and copies
/// `other.crt`, `other.key`; `$CERTIFICATE` is a `[[certificate]]` of
/// `feed.crt`.
const SAMPLES: &[(&str, &str, &str, &str)] = &[
    ("node.name", "[node]\nname = $", "\"a\"", "\"b\""),
    (
        "node.listen",
        "[node]\nlisten = $",
        "\"127.0.0.1:8080\"",
        "\"127.0.0.1:8081\"",
    ),
    (
        "node.listen_tls",
        "[node]\nlisten_tls = $\n$CERTIFICATE",
        "\"127.0.0.1:0\"",
        "\"127.0.0.1:9\"",
    ),
    (
        "node.admin",
        "[node]\nadmin = $",
        "\"127.0.0.1:9900\"",
        "\"127.0.0.1:9909\"",
    ),
    ("node.workers", "[node]\nworkers = $", "1", "2"),
    (
        "node.max_connections",
        "[node]\nmax_connections = $",
        "100",
        "200",
    ),
    (
        "node.header_timeout",
        "[node]\nheader_timeout = $",
        "\"10s\"",
        "\"20s\"",
    ),
    (
        "node.idle_timeout",
        "[node]\nidle_timeout = $",
        "\"10s\"",
        "\"20s\"",
    ),
    (
        "node.send_timeout",
        "[node]\nsend_timeout = $",
        "\"10s\"",
        "\"20s\"",
    ),
    (
        "node.admin_max_connections",
        "[node]\nadmin_max_connections = $",
        "16",
        "32",
    ),
    (
        "node.tls_groups",
        "[node]\ntls_groups = $",
        "[\"X25519\"]",
        "[\"X25519MLKEM768\", \"X25519\"]",
    ),
    (
        "node.feed",
        "[node]\nfeed = $",
        "\"127.0.0.1:0\"",
        "\"127.0.0.1:9\"",
    ),
    (
        "node.feed_cert",
        "[node]\nfeed = \"127.0.0.1:0\"\nfeed_key = \"{dir}/feed.key\"\nfeed_cert = $",
        "\"{dir}/feed.crt\"",
        "\"{dir}/other.crt\"",
    ),
    (
        "node.feed_key",
        "[node]\nfeed = \"127.0.0.1:0\"\nfeed_cert = \"{dir}/feed.crt\"\nfeed_key = $",
        "\"{dir}/feed.key\"",
        "\"{dir}/other.key\"",
    ),
    (
        "node.feed_client_ca",
        "[node]\nfeed = \"127.0.0.1:0\"\nfeed_client_ca = $",
        "\"{dir}/feed.crt\"",
        "\"{dir}/other.crt\"",
    ),
    (
        "global.connect_timeout",
        "[global]\nconnect_timeout = $",
        "\"2s\"",
        "\"3s\"",
    ),
    (
        "global.first_answer_timeout",
        "[global]\nfirst_answer_timeout = $",
        "\"10s\"",
        "\"20s\"",
    ),
    (
        "global.eject_for",
        "[global]\neject_for = $",
        "\"10s\"",
        "\"20s\"",
    ),
    (
        "global.check_every",
        "[global]\ncheck_every = $",
        "\"30s\"",
        "\"1s\"",
    ),
    (
        "global.check_timeout",
        "[global]\ncheck_timeout = $",
        "\"2s\"",
        "\"1s\"",
    ),
    (
        "global.body_timeout",
        "[global]\nbody_timeout = $",
        "\"10s\"",
        "\"20s\"",
    ),
    (
        "global.consecutive_gateway_errors",
        "[global]\nconsecutive_gateway_errors = $",
        "5",
        "6",
    ),
    (
        "global.underscores_in_headers",
        "[global]\nunderscores_in_headers = $",
        "false",
        "true",
    ),
    (
        "global.trusted_proxies",
        "[global]\ntrusted_proxies = $",
        "[]",
        "[\"10.0.0.0/8\", \"2001:db8::/32\"]",
    ),
    (
        "global.breaker.enabled",
        "[global.breaker]\nenabled = $",
        "false",
        "true",
    ),
    (
        "global.breaker.failures",
        "[global.breaker]\nfailures = $",
        "5",
        "6",
    ),
    (
        "global.breaker.cooldown",
        "[global.breaker]\ncooldown = $",
        "\"15s\"",
        "\"20s\"",
    ),
    (
        "runtime.kind",
        "[runtime]\nkind = $",
        "\"none\"",
        "\"docker\"",
    ),
    (
        "runtime.endpoint",
        "[runtime]\nkind = \"docker\"\nendpoint = $",
        "\"unix://{dir}/a.sock\"",
        "\"unix://{dir}/b.sock\"",
    ),
    (
        "runtime.network",
        "[runtime]\nkind = \"docker\"\nendpoint = \"unix://{dir}/a.sock\"\nnetwork = $",
        "\"a\"",
        "\"b\"",
    ),
    (
        "runtime.proxies",
        "[runtime]\nkind = \"swarm\"\nproxies = $",
        "[\"127.0.0.1:1\"]",
        "[\"127.0.0.1:2\"]",
    ),
    (
        "runtime.namespace",
        "[runtime]\nkind = \"kubernetes\"\napi = \"http://127.0.0.1:1\"\nnamespace = $",
        "\"a\"",
        "\"b\"",
    ),
    (
        "runtime.api",
        "[runtime]\nkind = \"kubernetes\"\nnamespace = \"a\"\napi = $",
        "\"http://127.0.0.1:1\"",
        "\"http://127.0.0.1:2\"",
    ),
    (
        "runtime.namespaces",
        "[runtime]\nkind = \"kubernetes\"\nnamespace = \"a\"\napi = \"http://127.0.0.1:1\"\nnamespaces = $",
        "[\"b\"]",
        "[\"c\"]",
    ),
    (
        "runtime.hosts",
        "[runtime]\nkind = \"docker\"\nendpoint = \"unix://{dir}/a.sock\"\nhosts = $",
        "[\"a.example.com\"]",
        "[\"*.example.com\"]",
    ),
    (
        "runtime.ingress_class",
        "[runtime]\nkind = \"kubernetes\"\nnamespace = \"a\"\napi = \"http://127.0.0.1:1\"\ningress_class = $",
        "\"picket\"",
        "\"edge\"",
    ),
    (
        "runtime.breaker.enabled",
        "[runtime]\nkind = \"docker\"\nendpoint = \"unix://{dir}/a.sock\"\nbreaker = { enabled = $ }",
        "true",
        "false",
    ),
    (
        "runtime.breaker.failures",
        "[runtime]\nkind = \"docker\"\nendpoint = \"unix://{dir}/a.sock\"\nbreaker = { failures = $ }",
        "2",
        "3",
    ),
    (
        "runtime.breaker.cooldown",
        "[runtime]\nkind = \"docker\"\nendpoint = \"unix://{dir}/a.sock\"\nbreaker = { cooldown = $ }",
        "\"30s\"",
        "\"10s\"",
    ),
    (
        "cluster.id",
        "[cluster]\ngossip = \"127.0.0.1:0\"\nkey_file = \"{dir}/a.key\"\nid = $",
        "\"a\"",
        "\"b\"",
    ),
    (
        "cluster.gossip",
        "[cluster]\nid = \"t\"\nkey_file = \"{dir}/a.key\"\ngossip = $",
        "\"127.0.0.1:0\"",
        "\"127.0.0.1:9\"",
    ),
    (
        "cluster.advertise",
        cluster!("advertise = $"),
        "\"127.0.0.1:7946\"",
        "\"127.0.0.1:7947\"",
    ),
    (
        "cluster.seeds",
        cluster!("seeds = $"),
        "[]",
        "[\"127.0.0.1:9\"]",
    ),
    (
        "cluster.key_file",
        "[cluster]\nid = \"t\"\ngossip = \"127.0.0.1:0\"\nkey_file = $",
        "\"{dir}/a.key\"",
        "\"{dir}/b.key\"",
    ),
    (
        "cluster.insecure",
        "[cluster]\nid = \"t\"\ngossip = \"127.0.0.1:0\"\ninsecure = $",
        "true",
        "false",
    ),
    (
        "cluster.gossip_interval",
        cluster!("gossip_interval = $"),
        "\"1s\"",
        "\"2s\"",
    ),
    (
        "route.name",
        "[[route]]\nreplicas = [\"127.0.0.1:9\"]\nname = $",
        "\"a\"",
        "\"b\"",
    ),
    (
        "route.host",
        route!("host = $"),
        "\"a.example\"",
        "\"b.example\"",
    ),
    (
        "route.path_prefix",
        route!("path_prefix = $"),
        "\"/a\"",
        "\"/b\"",
    ),
    (
        "route.replicas",
        "[[route]]\nname = \"r\"\nreplicas = $",
        "[\"127.0.0.1:9\"]",
        "[\"127.0.0.1:10\"]",
    ),
    (
        "route.upstream",
        "[[route]]\nname = \"r\"\nupstream = $",
        "\"http://127.0.0.1:9\"",
        "\"http://127.0.0.1:10\"",
    ),
    (
        "route.service",
        "$DOCKER[[route]]\nname = \"r\"\nport = 80\nservice = $",
        "\"a\"",
        "\"b\"",
    ),
    (
        "route.port",
        "$DOCKER[[route]]\nname = \"r\"\nservice = \"a\"\nport = $",
        "80",
        "81",
    ),
    (
        "route.connect_timeout",
        route!("connect_timeout = $"),
        "\"2s\"",
        "\"3s\"",
    ),
    (
        "route.first_answer_timeout",
        route!("first_answer_timeout = $"),
        "\"10s\"",
        "\"20s\"",
    ),
    ("route.tries", route!("tries = $"), "1", "2"),
    (
        "route.eject_for",
        route!("eject_for = $"),
        "\"10s\"",
        "\"20s\"",
    ),
    (
        "route.consecutive_gateway_errors",
        route!("consecutive_gateway_errors = $"),
        "5",
        "6",
    ),
    (
        "node.access_log",
        "[node]\naccess_log = $",
        "\"off\"",
        "\"{dir}/access.log\"",
    ),
    (
        "node.access_log_format",
        "[node]\naccess_log = \"off\"\naccess_log_format = $",
        "\"json\"",
        "\"combined\"",
    ),
    (
        "global.max_body",
        "[global]\nmax_body = $",
        "\"1MiB\"",
        "\"2MiB\"",
    ),
    (
        "global.request_headers.set",
        "[global]\nrequest_headers = { set = $ }",
        "{ \"x-a\" = \"1\" }",
        "{ \"x-a\" = \"2\" }",
    ),
    (
        "global.request_headers.remove",
        "[global]\nrequest_headers = { remove = $ }",
        "[\"x-a\"]",
        "[\"x-b\"]",
    ),
    (
        "global.response_headers.set",
        "[global]\nresponse_headers = { set = $ }",
        "{ \"x-a\" = \"1\" }",
        "{ \"x-a\" = \"2\" }",
    ),
    (
        "global.response_headers.remove",
        "[global]\nresponse_headers = { remove = $ }",
        "[\"x-a\"]",
        "[\"x-b\"]",
    ),
    (
        "global.request_headers.trailers",
        "[global]\nrequest_headers = { trailers = $ }",
        "[\"x-a\"]",
        "[\"x-b\"]",
    ),
    (
        "global.response_headers.trailers",
        "[global]\nresponse_headers = { trailers = $ }",
        "[\"x-a\"]",
        "[\"x-b\"]",
    ),
    (
        "route.strip_prefix",
        route!("path_prefix = \"/p\"\nstrip_prefix = $"),
        "false",
        "true",
    ),
    (
        "route.add_prefix",
        route!("add_prefix = $"),
        "\"/v1\"",
        "\"/v2\"",
    ),
    (
        "route.request_headers.set",
        route!("request_headers = { set = $ }"),
        "{ \"x-a\" = \"1\" }",
        "{ \"x-a\" = \"2\" }",
    ),
    (
        "route.request_headers.remove",
        route!("request_headers = { remove = $ }"),
        "[\"x-a\"]",
        "[\"x-b\"]",
    ),
    (
        "route.response_headers.set",
        route!("response_headers = { set = $ }"),
        "{ \"x-a\" = \"1\" }",
        "{ \"x-a\" = \"2\" }",
    ),
    (
        "route.response_headers.remove",
        route!("response_headers = { remove = $ }"),
        "[\"x-a\"]",
        "[\"x-b\"]",
    ),
    (
        "route.request_headers.trailers",
        route!("request_headers = { trailers = $ }"),
        "[\"x-a\"]",
        "[\"x-b\"]",
    ),
    (
        "route.response_headers.trailers",
        route!("response_headers = { trailers = $ }"),
        "[\"x-a\"]",
        "[\"x-b\"]",
    ),
    ("route.max_body", route!("max_body = $"), "100", "\"off\""),
    (
        "route.rate.per_second",
        route!("rate = { per_second = $ }"),
        "1",
        "2.5",
    ),
    (
        "route.rate.burst",
        route!("rate = { per_second = 1, burst = $ }"),
        "1",
        "2",
    ),
    (
        "route.rate.by",
        route!("rate = { per_second = 1, by = $ }"),
        "\"route\"",
        "\"client\"",
    ),
    (
        "route.https_only",
        "$CERTIFICATE[[route]]\nname = \"r\"\nreplicas = [\"127.0.0.1:9\"]\nhttps_only = $",
        "false",
        "true",
    ),
    (
        "certificate.cert",
        "[[certificate]]\nkey = \"{dir}/feed.key\"\ncert = $",
        "\"{dir}/feed.crt\"",
        "\"{dir}/other.crt\"",
    ),
    (
        "certificate.key",
        "[[certificate]]\ncert = \"{dir}/feed.crt\"\nkey = $",
        "\"{dir}/feed.key\"",
        "\"{dir}/other.key\"",
    ),
    (
        "certificate.hosts",
        "$CERTIFICATE\nhosts = $",
        "[\"localhost\"]",
        "[\"edge.test\"]",
    ),
    (
        "acme.directory",
        "[acme]\ncache = \"{dir}/acme\"\ndirectory = $\n[[certificate]]\nacme = [\"shop.test\"]\n",
        "\"https://127.0.0.1:9/dir\"",
        "\"https://127.0.0.1:9/other\"",
    ),
    (
        "acme.email",
        "[acme]\ndirectory = \"https://127.0.0.1:9/dir\"\ncache = \"{dir}/acme\"\nemail = $\n[[certificate]]\nacme = [\"shop.test\"]\n",
        "\"a@example.com\"",
        "\"b@example.com\"",
    ),
    (
        "acme.ca",
        "[acme]\ndirectory = \"https://127.0.0.1:9/dir\"\ncache = \"{dir}/acme\"\nca = $\n[[certificate]]\nacme = [\"shop.test\"]\n",
        "\"{dir}/feed.crt\"",
        "\"{dir}/other.crt\"",
    ),
    (
        "acme.issuers",
        "[acme]\ndirectory = \"https://127.0.0.1:9/dir\"\ncache = \"{dir}/acme\"\nissuers = $\n[[certificate]]\nacme = [\"shop.test\"]\n",
        "\"{dir}/feed.crt\"",
        "\"{dir}/other.crt\"",
    ),
    (
        "acme.max_lifetime",
        "[acme]\ndirectory = \"https://127.0.0.1:9/dir\"\ncache = \"{dir}/acme\"\nmax_lifetime = $\n[[certificate]]\nacme = [\"shop.test\"]\n",
        "\"90d\"",
        "\"30d\"",
    ),
    (
        "acme.cache",
        "[acme]\ndirectory = \"https://127.0.0.1:9/dir\"\ncache = $\n[[certificate]]\nacme = [\"shop.test\"]\n",
        "\"{dir}/acme\"",
        "\"{dir}/acme2\"",
    ),
    (
        "acme.challenge",
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n[acme]\ndirectory = \"https://127.0.0.1:9/dir\"\ncache = \"{dir}/acme\"\nchallenge = $\n[[certificate]]\nacme = [\"shop.test\"]\n",
        "\"http-01\"",
        "\"tls-alpn-01\"",
    ),
    (
        "certificate.acme",
        "[acme]\ndirectory = \"https://127.0.0.1:9/dir\"\ncache = \"{dir}/acme\"\n[[certificate]]\nacme = $\n",
        "[\"shop.test\"]",
        "[\"www.shop.test\"]",
    ),
    (
        "route.tls.ca",
        route!("tls = { server_name = \"localhost\", ca = $ }"),
        "\"{dir}/feed.crt\"",
        "\"{dir}/other.crt\"",
    ),
    (
        "route.protocol",
        route!("protocol = $"),
        "\"http1\"",
        "\"h2c\"",
    ),
    (
        "route.check",
        route!("protocol = \"h2c\"\ncheck = $"),
        "\"connect\"",
        "\"grpc\"",
    ),
    (
        "route.grpc_service",
        route!("protocol = \"h2c\"\ncheck = \"grpc\"\ngrpc_service = $"),
        "\"a.v1.A\"",
        "\"b.v1.B\"",
    ),
    (
        "route.check_path",
        route!("check = \"http\"\ncheck_path = $"),
        "\"/healthz\"",
        "\"/ready\"",
    ),
    (
        "route.check_host",
        route!("check = \"http\"\ncheck_host = $"),
        "\"a.internal\"",
        "\"b.internal\"",
    ),
    (
        "route.check_statuses",
        route!("check = \"http\"\ncheck_statuses = $"),
        "[\"2xx\"]",
        "[\"2xx\", 401]",
    ),
    (
        "route.check_every",
        route!("check_every = $"),
        "\"5s\"",
        "\"7s\"",
    ),
    (
        "route.check_timeout",
        route!("check_timeout = $"),
        "\"1s\"",
        "\"2s\"",
    ),
    (
        "route.tls.server_name",
        route!("tls = { server_name = $ }"),
        "\"localhost\"",
        "\"edge.test\"",
    ),
    (
        "route.tls.client_cert",
        route!(
            "tls = { server_name = \"localhost\", client_key = \"{dir}/feed.key\", client_cert = $ }"
        ),
        "\"{dir}/feed.crt\"",
        "\"{dir}/other.crt\"",
    ),
    (
        "route.tls.client_key",
        route!(
            "tls = { server_name = \"localhost\", client_cert = \"{dir}/feed.crt\", client_key = $ }"
        ),
        "\"{dir}/feed.key\"",
        "\"{dir}/other.key\"",
    ),
    (
        "route.breaker.enabled",
        route!("[route.breaker]\nenabled = $"),
        "false",
        "true",
    ),
    (
        "route.breaker.failures",
        route!("[route.breaker]\nfailures = $"),
        "5",
        "6",
    ),
    (
        "route.breaker.cooldown",
        route!("[route.breaker]\ncooldown = $"),
        "\"15s\"",
        "\"20s\"",
    ),
];

/// Sections that come and go as a whole.
const SECTIONS: &[(&str, &str, &str, &str)] = &[
    ("cluster", "$", "", cluster!("")),
    ("cluster", "$", cluster!(""), ""),
];

/// Fields whose values are maps of the user's keys.
const MAPS: [&str; 4] = [
    "global.request_headers.set",
    "global.response_headers.set",
    "route.request_headers.set",
    "route.response_headers.set",
];

/// The files the samples name.
fn files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["a.key", "b.key"] {
        let key = picket::gossip::keys::generate().unwrap();
        std::fs::write(dir.path().join(name), format!("{key}\n")).unwrap();
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "edge.test".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
    for stem in ["feed", "other"] {
        std::fs::write(dir.path().join(format!("{stem}.crt")), cert.pem()).unwrap();
        std::fs::write(dir.path().join(format!("{stem}.key")), key.serialize_pem()).unwrap();
    }
    dir
}

/// The configuration of a sample with `value` in it.
fn text(template: &str, value: &str, dir: &str) -> String {
    let mut text = template
        .replace("$DOCKER", DOCKER)
        .replace("$CERTIFICATE", CERTIFICATE)
        .replace('$', value);
    if !text.contains("[[route]]") {
        text.push('\n');
        text.push_str(ROUTE);
    }
    text.replace("{dir}", dir)
}

/// The dotted paths at which two TOML documents differ; the entries of
/// an array of tables (`[[route]]`) share their array's path.
fn differences(a: &toml::Value, b: &toml::Value, path: &str, out: &mut BTreeSet<String>) {
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (toml::Value::Table(a), toml::Value::Table(b)) => {
            for key in a.keys().chain(b.keys()) {
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => differences(x, y, &at(key), out),
                    _ => {
                        out.insert(at(key));
                    }
                }
            }
        }
        (toml::Value::Array(a), toml::Value::Array(b))
            if a.len() == b.len() && a.iter().chain(b).all(toml::Value::is_table) =>
        {
            for (x, y) in a.iter().zip(b) {
                differences(x, y, path, out);
            }
        }
        _ if a != b => {
            out.insert(path.to_string());
        }
        _ => {}
    }
}

/// What a reload from `before` to `after` did on a node running `before`:
/// its plan, and what the node's parts used before and after.
async fn reload(before: &str, after: &str) -> (ReloadPlan, InForce, InForce) {
    let parse = |text: &str| Config::parse("t.toml", text).unwrap_or_else(|e| panic!("{e}"));
    let (base, variant) = (parse(before), parse(after));
    let node = TestNode::start(before);
    // Running: joined (gossip sealed with its keys), so that a reload
    // meets every part a node has.
    node.membership().await;
    let was = node.node().in_force();
    let plan = node.node().apply(variant);
    let now = node.node().in_force();
    node.node().apply(base);
    assert_eq!(
        node.node().in_force(),
        was,
        "reloading the first file again restores what the node used"
    );
    node.stop().await;
    (plan, was, now)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_takes_effect_on_reload_or_is_named_as_needing_a_restart() {
    /// Fields read under the names they had before: `runtime.breaker.failures`.
    const OLD_NAMES: &[&str] = &["runtime.breaker.threshold"];
    let traced = fields::paths::<RawConfig>();
    assert!(traced.len() > 40, "the tracer found the fields: {traced:?}");
    // Tables (`global.breaker`) are their fields; only those are changed.
    // An old name of a field is that field, sampled under its new name
    // (that both read alike: `cli::the_runtime_breaker_takes_its_settings_from_the_environment`).
    let leaves: BTreeSet<&str> = traced
        .iter()
        .filter(|p| !traced.iter().any(|q| q.starts_with(&format!("{p}."))))
        .map(String::as_str)
        .filter(|p| !OLD_NAMES.contains(p))
        .collect();
    let sampled: BTreeSet<&str> = SAMPLES.iter().map(|(path, ..)| *path).collect();
    assert_eq!(
        leaves.difference(&sampled).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "fields without a sample: add one to SAMPLES; the test then says whether a reload applies them or must name them"
    );
    assert_eq!(
        sampled.difference(&leaves).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "samples of fields the configuration no longer has"
    );

    let dir = files();
    let dir = dir.path().display().to_string();
    let mut wrong = Vec::new();
    let mut named = BTreeSet::new();
    for (path, template, a, b) in SAMPLES.iter().chain(SECTIONS) {
        let (before, after) = (text(template, a, &dir), text(template, b, &dir));
        let mut differ = BTreeSet::new();
        let document = |text: &str| toml::Value::Table(toml::from_str(text).unwrap());
        differences(&document(&before), &document(&after), "", &mut differ);
        // A map of the user's own keys (`set = { name = "value" }`) is one
        // field: a change to a key is a change to it.
        let differ: BTreeSet<String> = differ
            .into_iter()
            .map(
                |p| match MAPS.iter().find(|m| p.starts_with(&format!("{m}."))) {
                    Some(map) => map.to_string(),
                    None => p,
                },
            )
            .collect();
        assert_eq!(
            differ,
            BTreeSet::from([path.to_string()]),
            "the sample of {path} changes that and nothing else"
        );
        let (plan, was, now) = reload(&before, &after).await;
        let restart = plan.needs_restart.contains(path);
        match (was != now, restart) {
            (true, false) | (false, true) => {}
            (false, false) => wrong.push(format!(
                "{path}: a reload changes nothing, and does not say it needs a restart ({plan:?})"
            )),
            (true, true) => wrong.push(format!(
                "{path}: took effect, yet the reload says it needs a restart"
            )),
        }
        for name in &plan.needs_restart {
            assert!(
                NEEDS_RESTART.contains(name),
                "{name} is not in NEEDS_RESTART"
            );
            named.insert(*name);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let listed: BTreeSet<&str> = NEEDS_RESTART.iter().copied().collect();
    assert_eq!(
        named, listed,
        "NEEDS_RESTART lists what reloads name, nothing more"
    );
}

/// The lines (at `info` and above) logged while `apply` runs on this thread.
fn logged(apply: impl FnOnce() -> ReloadPlan) -> Vec<serde_json::Value> {
    let lines = picket_tests::logs::Captured::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_writer(move || writer.clone())
        .finish();
    {
        let _default = subscriber.set_default();
        apply();
    }
    let text = lines.text();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_logs_one_line_naming_every_setting_that_needs_a_restart() {
    let dir = files();
    let dir = dir.path().display().to_string();
    let first = format!("{}\n{ROUTE}", cluster!("")).replace("{dir}", &dir);
    let node = TestNode::start(&first);
    node.membership().await;
    // Five settings that need a restart, a new check period, a new key
    // file, and the route's `tries`.
    let restarting = |tries: u32| {
        let text = format!(
            "[node]\nname = \"renamed\"\nidle_timeout = \"5s\"\n\
             [runtime]\nkind = \"swarm\"\nproxies = [\"127.0.0.1:1\"]\n\
             [global]\ncheck_every = \"1s\"\n\
             [cluster]\nid = \"t\"\ngossip = \"127.0.0.1:0\"\nkey_file = \"{dir}/b.key\"\nseeds = [\"127.0.0.1:9\"]\n\
             {ROUTE}tries = {tries}\n"
        );
        Config::parse("t.toml", &text).unwrap_or_else(|e| panic!("{e}"))
    };
    let waiting = "node.name, node.idle_timeout, runtime.kind, runtime.proxies, cluster.seeds";

    let lines = logged(|| node.node().apply(restarting(2)));
    assert_eq!(lines.len(), 1, "one line per reload: {lines:#?}");
    let line = &lines[0];
    assert_eq!(line["level"], "WARN", "{line}");
    let fields = &line["fields"];
    assert_eq!(fields["message"], "configuration reloaded", "{line}");
    assert_eq!(fields["needs_restart"], waiting, "{line}");
    assert_eq!(
        fields["settings"], "global.check_every, cluster.key_file",
        "{line}"
    );
    assert!(
        fields["cluster_keys"]
            .as_str()
            .is_some_and(|k| k.starts_with("replaced: ")),
        "{line}"
    );
    assert_eq!(fields["changed"], 1, "{line}");

    // Reloaded again with only the route changed, the settings that still
    // wait for a restart are named again: the line compares with what runs.
    let lines = logged(|| node.node().apply(restarting(1)));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let fields = &lines[0]["fields"];
    assert_eq!(fields["needs_restart"], waiting, "{}", lines[0]);
    assert!(fields.get("settings").is_none(), "{}", lines[0]);
    assert!(fields.get("cluster_keys").is_none(), "{}", lines[0]);

    // Back to the first file: nothing waits, one line at info.
    let lines = logged(|| node.node().apply(Config::parse("t.toml", &first).unwrap()));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["level"], "INFO", "{}", lines[0]);
    assert!(
        lines[0]["fields"].get("needs_restart").is_none(),
        "{}",
        lines[0]
    );
    node.stop().await;
}
