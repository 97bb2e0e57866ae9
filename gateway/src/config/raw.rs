//! The file as serde reads it: every field optional where the file may omit
//! it, unknown fields refused, values still spanned so that validation can
//! point at the line and column of a bad value.

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub node: RawNode,
    #[serde(default)]
    pub global: RawGlobal,
    #[serde(default)]
    pub runtime: RawRuntime,
    pub cluster: Option<Spanned<RawCluster>>,
    #[serde(default, rename = "route")]
    pub routes: Vec<Spanned<RawRoute>>,
    #[serde(default, rename = "certificate")]
    pub certificates: Vec<Spanned<RawCertificate>>,
    pub acme: Option<Spanned<RawAcme>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNode {
    pub name: Option<Spanned<String>>,
    pub listen: Option<Spanned<String>>,
    pub listen_tls: Option<Spanned<String>>,
    pub tls_groups: Option<Spanned<Vec<Spanned<String>>>>,
    pub admin: Option<Spanned<String>>,
    pub workers: Option<Spanned<i64>>,
    pub max_connections: Option<Spanned<i64>>,
    pub header_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub send_timeout: Option<Spanned<String>>,
    pub admin_max_connections: Option<Spanned<i64>>,
    pub feed: Option<Spanned<String>>,
    pub feed_cert: Option<Spanned<String>>,
    pub feed_key: Option<Spanned<String>>,
    pub feed_client_ca: Option<Spanned<String>>,
    /// `"stdout"`, `"off"`, or a file's path.
    pub access_log: Option<Spanned<String>>,
    /// `"json"` or `"combined"`.
    pub access_log_format: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGlobal {
    pub connect_timeout: Option<Spanned<String>>,
    pub first_answer_timeout: Option<Spanned<String>>,
    pub eject_for: Option<Spanned<String>>,
    pub breaker: Option<RawBreaker>,
    pub check_every: Option<Spanned<String>>,
    pub check_timeout: Option<Spanned<String>>,
    pub body_timeout: Option<Spanned<String>>,
    pub consecutive_gateway_errors: Option<Spanned<i64>>,
    pub underscores_in_headers: Option<Spanned<bool>>,
    /// CIDR ranges or addresses of the proxies in front of the node.
    pub trusted_proxies: Option<Spanned<Vec<Spanned<String>>>>,
    pub max_body: Option<Spanned<RawSize>>,
    pub request_headers: Option<Spanned<RawHeaderRules>>,
    pub response_headers: Option<Spanned<RawHeaderRules>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRuntime {
    pub kind: Option<Spanned<String>>,
    /// Docker: the engine's address.
    pub endpoint: Option<Spanned<String>>,
    /// Kubernetes: the namespace watched.
    pub namespace: Option<Spanned<String>>,
    /// Kubernetes: the API server's URL.
    pub api: Option<Spanned<String>>,
    /// Swarm: the socket proxies of the swarm's engines.
    pub proxies: Option<Spanned<Vec<Spanned<String>>>>,
    /// Docker and Swarm: the network the node reaches containers on.
    pub network: Option<Spanned<String>>,
    /// Kubernetes: every namespace watched (`"*"`: all), as a list, or as
    /// a table of each namespace's host patterns.
    pub namespaces: Option<Spanned<RawNamespaces>>,
    /// The hosts the runtime may claim, as patterns.
    pub hosts: Option<Spanned<Vec<Spanned<String>>>>,
    /// Kubernetes: the `ingressClassName` of the Ingresses the node serves.
    pub ingress_class: Option<Spanned<String>>,
    /// The breaker in front of each runtime API endpoint.
    pub breaker: Option<Spanned<RawRuntimeBreaker>>,
}

/// A list of strings, each spanned.
pub type RawList = Spanned<Vec<Spanned<String>>>;

/// `[runtime] namespaces`: a list of namespaces, or a table of each
/// namespace's host patterns (`[runtime.namespaces] team-a = [...]`).
#[derive(Debug)]
pub enum RawNamespaces {
    List(Vec<Spanned<String>>),
    Hosts(Vec<(Spanned<String>, RawList)>),
}

impl<'de> Deserialize<'de> for RawNamespaces {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = RawNamespaces;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of namespaces, or a table of each namespace's hosts")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut list = Vec::new();
                while let Some(item) = seq.next_element()? {
                    list.push(item);
                }
                Ok(RawNamespaces::List(list))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut table = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    table.push(entry);
                }
                Ok(RawNamespaces::Hosts(table))
            }
        }
        // TOML says which it is, whatever is asked; asking for a map lets
        // the tracer of `fields` take it for a leaf whose keys are the
        // user's.
        deserializer.deserialize_map(Either)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRuntimeBreaker {
    pub enabled: Option<Spanned<bool>>,
    pub failures: Option<Spanned<i64>>,
    /// What `failures` was called before the route breaker's name became
    /// the name of both: still read.
    pub threshold: Option<Spanned<i64>>,
    pub cooldown: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub id: Option<Spanned<String>>,
    pub gossip: Option<Spanned<String>>,
    pub advertise: Option<Spanned<String>>,
    pub seeds: Option<Vec<Spanned<String>>>,
    pub key_file: Option<Spanned<String>>,
    pub insecure: Option<Spanned<bool>>,
    pub gossip_interval: Option<Spanned<String>>,
}

/// A service's port: a number, or (Kubernetes) a port's name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawPort {
    Number(i64),
    Name(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    pub enabled: Option<Spanned<bool>>,
    pub failures: Option<Spanned<i64>>,
    pub cooldown: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: Spanned<String>,
    pub host: Option<Spanned<String>>,
    pub path_prefix: Option<Spanned<String>>,
    pub upstream: Option<Spanned<String>>,
    pub replicas: Option<Spanned<Vec<Spanned<String>>>>,
    pub service: Option<Spanned<String>>,
    pub port: Option<Spanned<RawPort>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub first_answer_timeout: Option<Spanned<String>>,
    pub tries: Option<Spanned<i64>>,
    pub eject_for: Option<Spanned<String>>,
    pub consecutive_gateway_errors: Option<Spanned<i64>>,
    pub breaker: Option<RawBreaker>,
    pub https_only: Option<Spanned<bool>>,
    pub tls: Option<Spanned<RawUpstreamTls>>,
    pub protocol: Option<Spanned<String>>,
    pub check: Option<Spanned<String>>,
    pub grpc_service: Option<Spanned<String>>,
    pub check_path: Option<Spanned<String>>,
    pub check_host: Option<Spanned<String>>,
    pub check_statuses: Option<Spanned<RawStatuses>>,
    pub check_every: Option<Spanned<String>>,
    pub check_timeout: Option<Spanned<String>>,
    pub strip_prefix: Option<Spanned<bool>>,
    pub add_prefix: Option<Spanned<String>>,
    pub request_headers: Option<Spanned<RawHeaderRules>>,
    pub response_headers: Option<Spanned<RawHeaderRules>>,
    pub max_body: Option<Spanned<RawSize>>,
    pub rate: Option<Spanned<RawRate>>,
}

/// `check_statuses`: a list (`["2xx", 401]`), one status (`204`), or a
/// list in one text with commas (`"2xx, 401"`, as a label writes it).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawStatuses {
    One(i64),
    Text(String),
    List(Vec<RawStatus>),
}

/// One entry of `check_statuses`: a status, or a class or range as text.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawStatus {
    Code(i64),
    Text(String),
}

/// A size: a number of bytes, or text with a unit (`"10MiB"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    Bytes(i64),
    Text(String),
}

/// `request_headers` / `response_headers`: `{ set = { name = "value" },
/// remove = ["name"], trailers = ["name"] }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderRules {
    pub set: Option<Spanned<std::collections::BTreeMap<Spanned<String>, Spanned<String>>>>,
    pub remove: Option<Spanned<Vec<Spanned<String>>>>,
    pub trailers: Option<Spanned<Vec<Spanned<String>>>>,
}

/// A route's `rate = { per_second, burst, by }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRate {
    pub per_second: Option<Spanned<f64>>,
    pub burst: Option<Spanned<i64>>,
    pub by: Option<Spanned<String>>,
}

/// A route's `tls = { ca, server_name, client_cert, client_key }`: TLS to
/// its replicas.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    pub ca: Option<Spanned<String>>,
    pub server_name: Option<Spanned<String>>,
    pub client_cert: Option<Spanned<String>>,
    pub client_key: Option<Spanned<String>>,
}

/// `[[certificate]]`: a PEM chain and its key, served to HTTPS clients;
/// or the names of one the cluster obtains from ACME.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertificate {
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub hosts: Option<Spanned<Vec<Spanned<String>>>>,
    pub acme: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[acme]`: where the cluster obtains certificates.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    pub directory: Option<Spanned<String>>,
    pub email: Option<Spanned<String>>,
    pub ca: Option<Spanned<String>>,
    /// The roots the CA's certificates chain to.
    pub issuers: Option<Spanned<String>>,
    /// The longest lifetime a certificate of the CA may have.
    pub max_lifetime: Option<Spanned<String>>,
    pub cache: Option<Spanned<String>>,
    pub challenge: Option<Spanned<String>>,
}
