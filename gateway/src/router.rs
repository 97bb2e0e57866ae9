//! The route table: which route a request belongs to, by host and path.
//!
//! ## Matching
//! The most specific route wins: an exact host before a `*.suffix` host
//! before a route without host; among those, the longest path prefix. A
//! prefix matches at a segment boundary: `/api` matches `/api` and
//! `/api/users`, never `/apix`. When no route matches, there is no route: the
//! caller answers 404 and forwards nothing (never an open proxy).
//!
//! ## The file's hosts
//! A route is the file's or the runtime's ([`Owner`]). A host a file's
//! route names, or that a file's wildcard covers, is the file's: once a
//! request's host is found to be one, only the file's routes may take it,
//! whatever path it asks for, so a runtime's wildcard or hostless route
//! never takes a name the file serves (DESIGN.md, "Who may claim what").
//! What the runtime may add at all is decided before the table is built
//! ([`crate::config::ownership`]); this keeps the rule on the data path.
//!
//! The table is immutable; a reload builds a new one and swaps it whole.
//! Its keys come from the configuration, so a fast unkeyed hash is safe:
//! a client's host only ever probes it.

use std::borrow::Cow;

use rustc_hash::FxHashMap as HashMap;

use crate::config::HostMatch;

/// Routes grouped by host, each group sorted by prefix length, longest first.
#[derive(Debug)]
pub struct RouteTable<T> {
    exact: HashMap<Box<str>, Group<T>>,
    /// `(".example.com", entries)`, longest suffix first.
    suffix: Vec<(Box<str>, Group<T>)>,
    any: Vec<Entry<T>>,
    len: usize,
}

/// The routes of one host (or wildcard).
#[derive(Debug)]
struct Group<T> {
    entries: Vec<Entry<T>>,
    /// The host is the file's: a file's route names it, or a file's
    /// wildcard covers it.
    file: bool,
}

impl<T> Default for Group<T> {
    fn default() -> Self {
        Group {
            entries: Vec::new(),
            file: false,
        }
    }
}

#[derive(Debug)]
struct Entry<T> {
    prefix: Box<str>,
    /// The path must be the prefix itself (a Kubernetes `Exact` path).
    exact: bool,
    /// Declared by the runtime.
    runtime: bool,
    value: T,
}

/// Whose a route is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The operator's file.
    File,
    /// The runtime (labels, Ingress).
    Runtime,
}

/// How a route matches a path: from a prefix at a segment boundary, or
/// only the path as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathRule {
    Prefix(String),
    Exact(String),
}

impl From<String> for PathRule {
    fn from(prefix: String) -> PathRule {
        PathRule::Prefix(prefix)
    }
}

impl<T> Default for RouteTable<T> {
    fn default() -> Self {
        RouteTable {
            exact: HashMap::default(),
            suffix: Vec::new(),
            any: Vec::new(),
            len: 0,
        }
    }
}

impl<T> RouteTable<T> {
    /// Builds a table from `(host, path, value)` triples, every route the
    /// file's; a path is a prefix (a `String`) or a [`PathRule`].
    pub fn new<P: Into<PathRule>>(
        routes: impl IntoIterator<Item = (Option<HostMatch>, P, T)>,
    ) -> Self {
        Self::with_owners(
            routes
                .into_iter()
                .map(|(host, path, value)| (host, path, Owner::File, value)),
        )
    }

    /// Builds a table from `(host, path, owner, value)`.
    pub fn with_owners<P: Into<PathRule>>(
        routes: impl IntoIterator<Item = (Option<HostMatch>, P, Owner, T)>,
    ) -> Self {
        let mut table = RouteTable::default();
        for (host, path, owner, value) in routes {
            let (prefix, exact) = match path.into() {
                PathRule::Prefix(prefix) => (prefix, false),
                PathRule::Exact(path) => (path, true),
            };
            let entry = Entry {
                prefix: prefix.into_boxed_str(),
                exact,
                runtime: owner == Owner::Runtime,
                value,
            };
            let group = match host {
                None => {
                    table.any.push(entry);
                    table.len += 1;
                    continue;
                }
                Some(HostMatch::Exact(h)) => table.exact.entry(h.into_boxed_str()).or_default(),
                Some(HostMatch::Suffix(s)) => {
                    match table.suffix.iter().position(|(k, _)| **k == *s) {
                        Some(i) => &mut table.suffix[i].1,
                        None => {
                            table.suffix.push((s.into_boxed_str(), Group::default()));
                            let last = table.suffix.len() - 1;
                            &mut table.suffix[last].1
                        }
                    }
                }
            };
            group.file |= owner == Owner::File;
            group.entries.push(entry);
            table.len += 1;
        }
        // The file's wildcards make the hosts and wildcards under them the
        // file's.
        let file_wildcards: Vec<Box<str>> = table
            .suffix
            .iter()
            .filter(|(_, g)| g.file)
            .map(|(s, _)| s.clone())
            .collect();
        let covered = |host: &str| {
            file_wildcards
                .iter()
                .any(|s| host.len() > s.len() && host.ends_with(&**s))
        };
        for (host, group) in &mut table.exact {
            group.file |= covered(host);
        }
        for (suffix, group) in &mut table.suffix {
            group.file |= covered(suffix);
        }
        // Longest first; of two as long, the exact path first.
        let by_length =
            |a: &Entry<T>, b: &Entry<T>| (b.prefix.len(), b.exact).cmp(&(a.prefix.len(), a.exact));
        table.any.sort_by(by_length);
        table
            .exact
            .values_mut()
            .for_each(|g| g.entries.sort_by(by_length));
        table
            .suffix
            .iter_mut()
            .for_each(|(_, g)| g.entries.sort_by(by_length));
        table
            .suffix
            .sort_by_key(|(suffix, _)| std::cmp::Reverse(suffix.len()));
        table
    }

    /// The route for a request; `host` as the client sent it (any case, port
    /// allowed), `None` when the request named no host. Once the host is
    /// found to be the file's, the runtime's routes are passed over.
    pub fn find(&self, host: Option<&str>, path: &str) -> Option<&T> {
        let host = host.map(normalize_host);
        let mut file_host = false;
        if let Some(host) = host.as_deref() {
            if let Some(group) = self.exact.get(host) {
                file_host = group.file;
                if let Some(found) = longest(&group.entries, path, file_host) {
                    return Some(found);
                }
            }
            for (suffix, group) in &self.suffix {
                if host.len() > suffix.len() && host.ends_with(&**suffix) {
                    file_host |= group.file;
                    if let Some(found) = longest(&group.entries, path, file_host) {
                        return Some(found);
                    }
                }
            }
        }
        longest(&self.any, path, file_host)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every route in the table, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.exact
            .values()
            .map(|g| &g.entries)
            .chain(self.suffix.iter().map(|(_, g)| &g.entries))
            .chain(std::iter::once(&self.any))
            .flat_map(|g| g.iter().map(|e| &e.value))
    }
}

/// The first entry of `group` (longest first) that matches `path`; with
/// `file_only`, of the file's entries alone.
fn longest<'a, T>(group: &'a [Entry<T>], path: &str, file_only: bool) -> Option<&'a T> {
    group
        .iter()
        .find(|e| {
            if file_only && e.runtime {
                return false;
            }
            if e.exact {
                *e.prefix == *path
            } else {
                prefix_matches(&e.prefix, path)
            }
        })
        .map(|e| &e.value)
}

/// Whether `prefix` matches `path` at a segment boundary.
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        None => false,
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
    }
}

/// Lower-cases a host and strips its port and trailing dot.
pub fn normalize_host(host: &str) -> Cow<'_, str> {
    let without_port = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or(v6)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    let name = without_port.strip_suffix('.').unwrap_or(without_port);
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RouteTable<&'static str> {
        let exact = |h: &str| Some(HostMatch::Exact(h.into()));
        RouteTable::new([
            (None, "/".to_string(), "fallback"),
            (None, "/static".to_string(), "static"),
            (exact("api.example.com"), "/".to_string(), "api"),
            (exact("api.example.com"), "/v2/".to_string(), "api-v2"),
            (
                Some(HostMatch::Suffix(".example.com".into())),
                "/".to_string(),
                "wild",
            ),
            (
                Some(HostMatch::Suffix(".eu.example.com".into())),
                "/".to_string(),
                "wild-eu",
            ),
        ])
    }

    #[test]
    fn most_specific_route_wins() {
        let t = table();
        let cases = [
            (Some("api.example.com"), "/users", Some("api")),
            (Some("API.Example.COM:8080"), "/users", Some("api")),
            (Some("api.example.com."), "/users", Some("api")),
            (Some("api.example.com"), "/v2/users", Some("api-v2")),
            (Some("api.example.com"), "/v2", Some("api")),
            (Some("shop.example.com"), "/", Some("wild")),
            (Some("shop.eu.example.com"), "/", Some("wild-eu")),
            (Some("example.com"), "/", Some("fallback")),
            (Some("other.org"), "/static/app.js", Some("static")),
            (Some("other.org"), "/staticfiles", Some("fallback")),
            (None, "/static", Some("static")),
        ];
        for (host, path, expected) in cases {
            assert_eq!(t.find(host, path).copied(), expected, "{host:?} {path}");
        }
        assert_eq!(t.len(), 6);
        assert_eq!(t.values().count(), 6);
    }

    #[test]
    fn an_exact_path_matches_only_itself_and_wins_a_tie() {
        let host = || Some(HostMatch::Exact("shop.example.com".into()));
        let t = RouteTable::new([
            (host(), PathRule::Prefix("/".into()), "all"),
            (host(), PathRule::Exact("/cart".into()), "cart page"),
            (host(), PathRule::Prefix("/cart".into()), "cart api"),
        ]);
        let cases = [
            ("/cart", "cart page"),
            ("/cart/items", "cart api"),
            ("/cart/", "cart api"),
            ("/cartx", "all"),
            ("/", "all"),
        ];
        for (path, expected) in cases {
            assert_eq!(
                t.find(Some("shop.example.com"), path).copied(),
                Some(expected),
                "{path}"
            );
        }
        let only = RouteTable::new([(host(), PathRule::Exact("/cart".into()), 1)]);
        assert_eq!(only.find(Some("shop.example.com"), "/cart/x"), None);
        assert_eq!(only.find(Some("shop.example.com"), "/"), None);
    }

    /// A host the file serves is the file's for every path: the runtime's
    /// wildcard and hostless routes never take it, though they take the
    /// names the file does not serve.
    #[test]
    fn a_host_of_the_file_is_never_taken_by_the_runtime() {
        let exact = |h: &str| Some(HostMatch::Exact(h.into()));
        let wild = |s: &str| Some(HostMatch::Suffix(s.into()));
        let t = RouteTable::with_owners([
            (
                exact("a.example"),
                "/api".to_string(),
                Owner::File,
                "file a/api",
            ),
            (
                wild(".file.example"),
                "/only".to_string(),
                Owner::File,
                "file *.file",
            ),
            (
                wild(".example"),
                "/".to_string(),
                Owner::Runtime,
                "runtime *.example",
            ),
            (
                wild(".x.file.example"),
                "/".to_string(),
                Owner::Runtime,
                "runtime *.x.file",
            ),
            (
                exact("b.x.file.example"),
                "/".to_string(),
                Owner::Runtime,
                "runtime b.x.file",
            ),
            (
                None,
                "/login".to_string(),
                Owner::Runtime,
                "runtime any/login",
            ),
            (None, "/".to_string(), Owner::File, "file any"),
        ]);
        let cases = [
            // The file's host: its own route, else the file's fallback.
            ("a.example", "/api/x", "file a/api"),
            ("a.example", "/other", "file any"),
            ("a.example", "/login", "file any"),
            // Under the file's wildcard: never the runtime's, however
            // deep or specific its claim.
            ("q.file.example", "/only", "file *.file"),
            ("q.file.example", "/", "file any"),
            ("q.x.file.example", "/", "file any"),
            ("b.x.file.example", "/", "file any"),
            // Names the file does not serve.
            ("c.example", "/", "runtime *.example"),
            ("c.other", "/login", "runtime any/login"),
            ("c.other", "/", "file any"),
        ];
        for (host, path, expected) in cases {
            assert_eq!(
                t.find(Some(host), path).copied(),
                Some(expected),
                "{host}{path}"
            );
        }
    }

    #[test]
    fn no_route_means_none() {
        let exact = Some(HostMatch::Exact("api.example.com".into()));
        let t = RouteTable::new([(exact, "/".to_string(), 1)]);
        assert_eq!(t.find(Some("evil.example.org"), "/"), None);
        assert_eq!(t.find(None, "/"), None);
        assert_eq!(t.find(Some("api.example.com"), "/x"), Some(&1));
    }

    #[test]
    fn prefixes_match_at_segment_boundaries() {
        assert!(prefix_matches("/", "/anything"));
        assert!(prefix_matches("/api", "/api"));
        assert!(prefix_matches("/api", "/api/x"));
        assert!(!prefix_matches("/api", "/apix"));
        assert!(prefix_matches("/api/", "/api/x"));
        assert!(!prefix_matches("/api/", "/api"));
    }

    #[test]
    fn hosts_normalize() {
        assert_eq!(normalize_host("Example.com:80"), "example.com");
        assert_eq!(normalize_host("[::1]:8080"), "::1");
        assert_eq!(normalize_host("example.com."), "example.com");
        assert!(matches!(normalize_host("plain.org"), Cow::Borrowed(_)));
    }
}
