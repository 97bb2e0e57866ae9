//! Who may claim what: the one rule between the operator's file and what
//! the runtime declares (Docker and Swarm labels, Kubernetes Ingress
//! objects and the TLS Secrets they name).
//!
//! Only the file is trusted whole. A declared route passes [`merge`], a
//! runtime certificate [`certificate_names`]; nothing else admits them, and
//! each refusal names its [`Rule`].
//!
//! ## Hosts
//! - A host the file's routes serve (by name, or under a wildcard of the
//!   file) is the file's, with every path under it and its `https_only`:
//!   no runtime route takes any part of it ([`Rule::FileHost`]). A
//!   runtime wildcard or hostless route never takes such a name either:
//!   the router looks no further than the file's routes for it
//!   ([`crate::router`]).
//! - The runtime claims only what the operator allows ([`HostRules`]):
//!   `[runtime] hosts`, and in Kubernetes per namespace
//!   (`[runtime.namespaces]`). Without either, any host name the file does
//!   not serve, but no wildcard and no route without host: those take
//!   every name nobody else serves, which is the operator's to give
//!   ([`Rule::NotAllowed`]).
//!
//! ## Places
//! - A place (host, path, exact or prefix) a file's route has is the
//!   file's ([`Rule::FilePlace`]): a route without host included.
//! - Between two runtime declarers of one place, the one already serving
//!   keeps it, then the older object, then the first by name
//!   ([`Rule::PlaceHeld`]).
//! - In Kubernetes the namespace is the tenant: a host one namespace
//!   serves is that namespace's, every path under it ([`Rule::HostHeld`]).
//! - A runtime route's name is its declarer's (`service/name`,
//!   `namespace/ingress/rule.path`): a file's names have no `/`, so no
//!   declared name can refuse a file's route or another declarer's.
//!
//! ## Certificates
//! A runtime certificate serves only the names its Ingress lists in
//! `tls.hosts` that its namespace may claim, serves a route for, and that
//! no certificate of the file covers (exact or wildcard), among its own
//! names; never as the default for a client that names no host.

use std::fmt;

use super::{HostMatch, RouteConfig};

/// A pattern of hosts the runtime may claim (`[runtime] hosts`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// `"*"`: any host, wildcards and routes without host included.
    Any,
    /// `"shop.example.com"`: that host.
    Exact(String),
    /// `"*.example.com"`, kept as `.example.com`: any name under it, and
    /// wildcards at or under it.
    Under(String),
}

impl HostPattern {
    /// Whether a claim of `host` (`None`: a route for any host) is within
    /// the pattern.
    pub fn admits(&self, host: Option<&HostMatch>) -> bool {
        match (self, host) {
            (HostPattern::Any, _) => true,
            (_, None) => false,
            (HostPattern::Exact(name), Some(HostMatch::Exact(host))) => name == host,
            (HostPattern::Exact(_), Some(HostMatch::Suffix(_))) => false,
            (HostPattern::Under(suffix), Some(HostMatch::Exact(host))) => under(host, suffix),
            (HostPattern::Under(suffix), Some(HostMatch::Suffix(claim))) => {
                claim == suffix || claim.ends_with(suffix.as_str())
            }
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Any => f.write_str("*"),
            HostPattern::Exact(name) => f.write_str(name),
            HostPattern::Under(suffix) => write!(f, "*{suffix}"),
        }
    }
}

/// `name` is a subdomain of `suffix` (`.example.com`), at any depth, as a
/// route's wildcard matches.
fn under(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() && name.ends_with(suffix)
}

/// What the operator lets the runtime claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostRules {
    /// `[runtime] hosts`; `None`: any host name the file does not serve.
    pub hosts: Option<Vec<HostPattern>>,
    /// `[runtime.namespaces]` in its table form: each namespace's own
    /// patterns, `"*"` for the namespaces it does not list. A namespace
    /// listed here is held to its list, not to `hosts`.
    pub namespaces: Vec<(String, Vec<HostPattern>)>,
}

impl HostRules {
    /// The patterns that hold for `tenant`; `None`: the default.
    fn patterns(&self, tenant: Option<&str>) -> Option<(&[HostPattern], String)> {
        if let Some(tenant) = tenant {
            let own = self.namespaces.iter().find(|(n, _)| n == tenant);
            let any = || self.namespaces.iter().find(|(n, _)| n == "*");
            if let Some((namespace, patterns)) = own.or_else(any) {
                return Some((patterns, format!("[runtime.namespaces] {namespace}")));
            }
        }
        self.hosts
            .as_deref()
            .map(|patterns| (patterns, "[runtime] hosts".to_string()))
    }

    /// Whether `tenant` may claim `host`; else the rule that refuses it.
    pub fn allows(&self, tenant: Option<&str>, host: Option<&HostMatch>) -> Result<(), Rule> {
        let allowed = match self.patterns(tenant) {
            Some((patterns, _)) => patterns.iter().any(|p| p.admits(host)),
            None => matches!(host, Some(HostMatch::Exact(_))),
        };
        if allowed {
            return Ok(());
        }
        let (setting, list) = match self.patterns(tenant) {
            Some((patterns, setting)) => {
                let list: Vec<String> = patterns
                    .iter()
                    .map(|p| format!("{:?}", p.to_string()))
                    .collect();
                (setting, format!("[{}]", list.join(", ")))
            }
            None => (
                "[runtime] hosts".to_string(),
                "not set: host names only, no wildcard and no route for any host".to_string(),
            ),
        };
        Err(Rule::NotAllowed {
            host: shown(host),
            setting,
            list,
        })
    }
}

/// Why the runtime may not have what it claims. Its text is the reason
/// shown in `/v1/routes`, the verdict and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// The declaration itself is wrong (a label's value, an Ingress's
    /// backend).
    Invalid(String),
    /// The file serves the host.
    FileHost { host: String, route: String },
    /// A file's route has the place (a route for any host included).
    FilePlace { place: String, route: String },
    /// Outside what the operator lets the runtime claim.
    NotAllowed {
        host: String,
        setting: String,
        list: String,
    },
    /// Another declarer serves the place.
    PlaceHeld { place: String, holder: String },
    /// Another namespace serves the host.
    HostHeld { host: String, holder: String },
    /// A certificate of the file covers the name.
    FileCertificate { name: String, certificate: String },
    /// The namespace serves no route for the name.
    NoRoute { name: String },
    /// The certificate does not name it.
    NotNamed { name: String },
}

impl Rule {
    /// A short name of the rule, for scripts and metrics.
    pub fn slug(&self) -> &'static str {
        match self {
            Rule::Invalid(_) => "invalid",
            Rule::FileHost { .. } => "file-host",
            Rule::FilePlace { .. } => "file-place",
            Rule::NotAllowed { .. } => "not-allowed",
            Rule::PlaceHeld { .. } => "place-held",
            Rule::HostHeld { .. } => "host-held",
            Rule::FileCertificate { .. } => "file-certificate",
            Rule::NoRoute { .. } => "no-route",
            Rule::NotNamed { .. } => "not-named",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Invalid(reason) => f.write_str(reason),
            Rule::FileHost { host, route } => write!(
                f,
                "{host} is served by route {route:?} of the file: every path under it is the file's"
            ),
            Rule::FilePlace { place, route } => {
                write!(
                    f,
                    "{place} is served by route {route:?} of the file; the file wins"
                )
            }
            Rule::NotAllowed {
                host,
                setting,
                list,
            } => write!(
                f,
                "{host} is not a host the runtime may claim ({setting}: {list})"
            ),
            Rule::PlaceHeld { place, holder } => {
                write!(f, "{place} is served by {holder}, which was there first")
            }
            Rule::HostHeld { host, holder } => write!(
                f,
                "{host} is served by {holder}: another namespace claims no path under it"
            ),
            Rule::FileCertificate { name, certificate } => write!(
                f,
                "{name} is covered by the file's certificate {certificate:?}"
            ),
            Rule::NoRoute { name } => write!(f, "its namespace serves no route for {name}"),
            Rule::NotNamed { name } => write!(f, "{name} is not among the certificate's names"),
        }
    }
}

fn shown(host: Option<&HostMatch>) -> String {
    match host {
        Some(host) => host.to_string(),
        None => "a route for any host".to_string(),
    }
}

/// `host` and `path` as a refusal names them.
pub fn place(host: Option<&HostMatch>, path: &str, exact: bool) -> String {
    let host = match host {
        Some(host) => host.to_string(),
        None => "any host, ".to_string(),
    };
    let exact = if exact { " (exact)" } else { "" };
    format!("{host}{path}{exact}")
}

fn same_place(a: &RouteConfig, b: &RouteConfig) -> bool {
    a.host == b.host && a.path_prefix == b.path_prefix && a.exact_path == b.exact_path
}

/// The file's route that serves `host`: by the same name, or a wildcard of
/// the file that covers it (a wildcard claim at or under the file's).
pub fn file_host<'a>(file: &'a [RouteConfig], host: &HostMatch) -> Option<&'a RouteConfig> {
    file.iter().find(|route| match (&route.host, host) {
        (Some(HostMatch::Exact(ours)), HostMatch::Exact(claim)) => ours == claim,
        (Some(HostMatch::Suffix(ours)), HostMatch::Exact(claim)) => under(claim, ours),
        (Some(HostMatch::Suffix(ours)), HostMatch::Suffix(claim)) => claim.ends_with(ours.as_str()),
        _ => false,
    })
}

/// A route the runtime declares, checked, with who declares it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub route: RouteConfig,
    /// Its namespace, in Kubernetes.
    pub tenant: Option<String>,
    /// When its object was made (Unix ms), when known: older wins.
    pub since_ms: Option<i64>,
}

/// The rule for one claim, against the file's routes and the claims
/// admitted before it.
fn judge(
    claim: &Claim,
    file: &[RouteConfig],
    admitted: &[Claim],
    rules: &HostRules,
) -> Result<(), Rule> {
    let route = &claim.route;
    if let Some(host) = &route.host
        && let Some(owner) = file_host(file, host)
    {
        return Err(Rule::FileHost {
            host: host.to_string(),
            route: owner.name.clone(),
        });
    }
    rules.allows(claim.tenant.as_deref(), route.host.as_ref())?;
    let place = || place(route.host.as_ref(), &route.path_prefix, route.exact_path);
    if let Some(owner) = file.iter().find(|r| same_place(r, route)) {
        return Err(Rule::FilePlace {
            place: place(),
            route: owner.name.clone(),
        });
    }
    if let Some(holder) = admitted.iter().find(|c| same_place(&c.route, route)) {
        return Err(Rule::PlaceHeld {
            place: place(),
            holder: holder_of(&holder.route),
        });
    }
    if let (Some(host), Some(tenant)) = (&route.host, &claim.tenant)
        && let Some(holder) = admitted.iter().find(|c| {
            c.route.host.as_ref() == Some(host) && c.tenant.as_ref().is_some_and(|t| t != tenant)
        })
    {
        return Err(Rule::HostHeld {
            host: host.to_string(),
            holder: format!(
                "namespace {} ({})",
                holder.tenant.as_deref().unwrap_or_default(),
                holder_of(&holder.route)
            ),
        });
    }
    Ok(())
}

fn holder_of(route: &RouteConfig) -> String {
    format!(
        "route {:?} of {}",
        route.name,
        route.declared_by.as_deref().unwrap_or("the file")
    )
}

/// The claims admitted beside the file's routes, in the order they were
/// judged, and the refused ones with the rule that refused each.
///
/// `serving` are the runtime's routes the node serves now: a claim of the
/// same name and place keeps it against newcomers, whatever their age or
/// name. Among the others, the older object first, then by name: the same
/// claims in any order give the same answer.
pub fn admit(
    file: &[RouteConfig],
    claims: Vec<Claim>,
    serving: &[RouteConfig],
    rules: &HostRules,
) -> (Vec<Claim>, Vec<(Claim, Rule)>) {
    let mut claims = claims;
    let holds = |c: &Claim| {
        serving
            .iter()
            .any(|s| s.name == c.route.name && same_place(s, &c.route))
    };
    claims.sort_by(|a, b| {
        (!holds(a), a.since_ms.is_none(), a.since_ms, &a.route.name).cmp(&(
            !holds(b),
            b.since_ms.is_none(),
            b.since_ms,
            &b.route.name,
        ))
    });
    let mut admitted: Vec<Claim> = Vec::new();
    let mut refused = Vec::new();
    for claim in claims {
        match judge(&claim, file, &admitted, rules) {
            Ok(()) => admitted.push(claim),
            Err(rule) => refused.push((claim, rule)),
        }
    }
    (admitted, refused)
}

/// A certificate from the runtime with the names [`admit_certificate`]
/// lets it serve: the only form in which one reaches the certificates a
/// node serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted<T> {
    value: T,
    names: Vec<String>,
    refused: Vec<(String, Rule)>,
}

impl<T> Admitted<T> {
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The names it may serve, lower case.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The names it may not serve, each with the rule that refuses it.
    pub fn refused(&self) -> &[(String, Rule)] {
        &self.refused
    }

    /// The same, serving only the names its own `sans` cover: the others
    /// are refused ([`Rule::NotNamed`]).
    pub fn narrowed(mut self, sans: &[String]) -> Admitted<T> {
        let (kept, gone): (Vec<String>, Vec<String>) = std::mem::take(&mut self.names)
            .into_iter()
            .partition(|name| sans.iter().any(|san| crate::certificate::covers(san, name)));
        self.names = kept;
        self.refused.extend(
            gone.into_iter()
                .map(|name| (name.clone(), Rule::NotNamed { name })),
        );
        self
    }
}

/// What the file serves that a runtime certificate is judged against.
#[derive(Debug, Clone, Copy)]
pub struct FileServes<'a> {
    pub routes: &'a [RouteConfig],
    /// Each certificate of the file (ACME's included: the file lists
    /// them): its label and its names.
    pub certificates: &'a [(String, Vec<String>)],
}

/// `value`, a runtime certificate asked to serve `hosts` (its Ingress's
/// `tls.hosts`), with the names of those that `tenant` may claim, serves
/// a route for, and no certificate of the file covers; the others with
/// the rule that refuses each. Its own names narrow it further when it is
/// read ([`Rule::NotNamed`]).
pub fn admit_certificate<T>(
    value: T,
    hosts: &[String],
    tenant: Option<&str>,
    file: FileServes<'_>,
    admitted: &[Claim],
    rules: &HostRules,
) -> Admitted<T> {
    let mut names = Vec::new();
    let mut refused = Vec::new();
    for host in hosts {
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        if names.contains(&name) || refused.iter().any(|(n, _)| *n == name) {
            continue;
        }
        match certificate_name(&name, tenant, file, admitted, rules) {
            Ok(()) => names.push(name),
            Err(rule) => refused.push((name, rule)),
        }
    }
    Admitted {
        value,
        names,
        refused,
    }
}

fn certificate_name(
    name: &str,
    tenant: Option<&str>,
    file: FileServes<'_>,
    admitted: &[Claim],
    rules: &HostRules,
) -> Result<(), Rule> {
    for (label, names) in file.certificates {
        if names
            .iter()
            .any(|ours| ours == name || crate::certificate::covers(ours, name))
        {
            return Err(Rule::FileCertificate {
                name: name.to_string(),
                certificate: label.clone(),
            });
        }
    }
    let host = match name.strip_prefix("*.") {
        Some(parent) => HostMatch::Suffix(format!(".{parent}")),
        None => HostMatch::Exact(name.to_string()),
    };
    if let Some(owner) = file_host(file.routes, &host) {
        return Err(Rule::FileHost {
            host: name.to_string(),
            route: owner.name.clone(),
        });
    }
    rules.allows(tenant, Some(&host))?;
    let serves = admitted
        .iter()
        .any(|c| c.tenant.as_deref() == tenant && c.route.host.as_ref() == Some(&host));
    if !serves {
        return Err(Rule::NoRoute {
            name: name.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
