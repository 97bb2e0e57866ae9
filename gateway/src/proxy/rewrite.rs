//! Path rewriting of a route: `strip_prefix` takes the route's
//! `path_prefix` off the path before forwarding (`/` kept at least), and
//! `add_prefix` puts one in front, as Traefik's StripPrefix and AddPrefix
//! do. Redirects from the replica (`Location`, `Content-Location`) are
//! moved back under the client's prefix, as nginx's default
//! `proxy_redirect` does: a path-absolute reference, or an absolute URL
//! naming the host the client asked for (a URL naming the replica names
//! the client's origin by then: [`super::redirect`]).

use crate::config::RouteConfig;

/// How a route's paths are rewritten; none when it rewrites nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The route's `path_prefix`, when stripped.
    strip: Option<Box<str>>,
    /// `add_prefix`.
    add: Option<Box<str>>,
}

/// Splits a target or URL path at its query or fragment.
fn split(target: &[u8]) -> (&[u8], &[u8]) {
    let end = target
        .iter()
        .position(|b| *b == b'?' || *b == b'#')
        .unwrap_or(target.len());
    target.split_at(end)
}

/// `path` without `prefix` when it starts with it at a segment boundary;
/// always starting with `/`.
fn without<'a>(path: &'a [u8], prefix: &str) -> Option<&'a [u8]> {
    let rest = path.strip_prefix(prefix.as_bytes())?;
    let boundary = prefix.ends_with('/') || rest.is_empty() || rest.starts_with(b"/");
    boundary.then_some(rest)
}

impl Rewrite {
    pub fn new(config: &RouteConfig) -> Option<Rewrite> {
        let strip = config
            .strip_prefix
            .then(|| config.path_prefix.clone().into_boxed_str());
        let add = config.add_prefix.clone().map(String::into_boxed_str);
        (strip.is_some() || add.is_some()).then_some(Rewrite { strip, add })
    }

    /// The target (path and query) the replica gets for the client's.
    pub fn upstream_path(&self, target: &[u8]) -> Vec<u8> {
        let (path, query) = split(target);
        let mut rest = path;
        if let Some(prefix) = &self.strip {
            rest = without(path, prefix).unwrap_or(path);
        }
        let mut out = Vec::with_capacity(target.len() + self.add.as_ref().map_or(0, |a| a.len()));
        if let Some(add) = &self.add {
            out.extend_from_slice(add.as_bytes());
        }
        if !rest.starts_with(b"/") {
            out.push(b'/');
        }
        out.extend_from_slice(rest);
        out.extend_from_slice(query);
        out
    }

    /// A replica's `Location` (or `Content-Location`) moved back under the
    /// client's prefix; `None` when it is left as it is: a relative
    /// reference, another host's URL, or a path outside `add_prefix`.
    pub fn location_back(&self, value: &[u8], host: Option<&[u8]>) -> Option<Vec<u8>> {
        let (origin, reference) = if value.starts_with(b"/") && !value.starts_with(b"//") {
            (&b""[..], value)
        } else {
            let scheme_end = if value.len() >= 7 && value[..7].eq_ignore_ascii_case(b"http://") {
                7
            } else if value.len() >= 8 && value[..8].eq_ignore_ascii_case(b"https://") {
                8
            } else {
                return None;
            };
            let authority_end = value[scheme_end..]
                .iter()
                .position(|b| matches!(b, b'/' | b'?' | b'#'))
                .map_or(value.len(), |i| scheme_end + i);
            let authority = &value[scheme_end..authority_end];
            if !host.is_some_and(|h| h.eq_ignore_ascii_case(authority)) {
                return None;
            }
            value.split_at(authority_end)
        };
        let (path, suffix) = split(reference);
        let path = if path.is_empty() { &b"/"[..] } else { path };
        let mut rest = path;
        if let Some(add) = &self.add {
            rest = without(path, add)?;
        }
        let mut out = Vec::with_capacity(value.len() + 16);
        out.extend_from_slice(origin);
        if let Some(prefix) = &self.strip {
            out.extend_from_slice(prefix.trim_end_matches('/').as_bytes());
        }
        if !rest.starts_with(b"/") {
            out.push(b'/');
        }
        out.extend_from_slice(rest);
        out.extend_from_slice(suffix);
        (out != value).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(strip: Option<&str>, add: Option<&str>) -> Rewrite {
        Rewrite {
            strip: strip.map(Into::into),
            add: add.map(Into::into),
        }
    }

    fn up(r: &Rewrite, target: &str) -> String {
        String::from_utf8(r.upstream_path(target.as_bytes())).unwrap()
    }

    fn back(r: &Rewrite, location: &str, host: Option<&str>) -> Option<String> {
        r.location_back(location.as_bytes(), host.map(str::as_bytes))
            .map(|l| String::from_utf8(l).unwrap())
    }

    #[test]
    fn the_prefix_is_stripped_keeping_a_slash() {
        let r = rewrite(Some("/api"), None);
        assert_eq!(up(&r, "/api/users?x=1"), "/users?x=1");
        assert_eq!(up(&r, "/api"), "/");
        assert_eq!(up(&r, "/api?x"), "/?x");
        assert_eq!(up(&r, "/api/"), "/");
        let slash = rewrite(Some("/api/"), None);
        assert_eq!(up(&slash, "/api/users"), "/users");
    }

    #[test]
    fn a_prefix_is_added_after_stripping() {
        let r = rewrite(Some("/api"), Some("/v2"));
        assert_eq!(up(&r, "/api/users?x=1"), "/v2/users?x=1");
        assert_eq!(up(&r, "/api"), "/v2/");
        let add = rewrite(None, Some("/v2"));
        assert_eq!(up(&add, "/users"), "/v2/users");
        assert_eq!(up(&add, "/"), "/v2/");
    }

    #[test]
    fn redirects_come_back_under_the_prefix() {
        let r = rewrite(Some("/api"), Some("/v2"));
        assert_eq!(
            back(&r, "/v2/users/1", None).as_deref(),
            Some("/api/users/1")
        );
        assert_eq!(
            back(&r, "/v2/login?next=/v2/x", None).as_deref(),
            Some("/api/login?next=/v2/x")
        );
        assert_eq!(back(&r, "/v2", None).as_deref(), Some("/api/"));
        assert_eq!(back(&r, "/other", None), None, "outside add_prefix");
        assert_eq!(back(&r, "/v2x", None), None, "not at a segment boundary");
        assert_eq!(
            back(
                &r,
                "http://shop.example.com/v2/cart",
                Some("shop.example.com")
            )
            .as_deref(),
            Some("http://shop.example.com/api/cart")
        );
        assert_eq!(
            back(
                &r,
                "https://elsewhere.example/v2/cart",
                Some("shop.example.com")
            ),
            None
        );
        assert_eq!(
            back(&r, "//shop.example.com/v2", Some("shop.example.com")),
            None
        );
        assert_eq!(
            back(&r, "users/1", None),
            None,
            "relative: resolved by the client"
        );
        let strip = rewrite(Some("/api"), None);
        assert_eq!(back(&strip, "/users", None).as_deref(), Some("/api/users"));
        assert_eq!(back(&strip, "/", None).as_deref(), Some("/api/"));
        assert_eq!(
            back(
                &strip,
                "HTTPS://Shop.Example.com?x=1",
                Some("shop.example.com")
            )
            .as_deref(),
            Some("HTTPS://Shop.Example.com/api/?x=1")
        );
    }
}
