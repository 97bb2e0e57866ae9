//! Request targets: the one path a request is routed by and forwarded
//! with.
//!
//! A path that routes one way at the gateway and reads another way at the
//! upstream is a way past routing (`/public/../admin` routed by `/public`,
//! served as `/admin`). So the path is normalised once, before routing,
//! and the normalised path is what the upstream gets, as Envoy's path
//! normalisation does:
//!
//! 1. percent-encoded unreserved characters (RFC 3986 §2.3: letters,
//!    digits, `-`, `.`, `_`, `~`) are decoded; other percent-encodings stay
//!    encoded (`%2F` is not a `/`), their hex digits in upper case;
//! 2. runs of `/` are merged into one, as nginx does;
//! 3. dot segments are removed (RFC 3986 §5.2.4): `/a/./b/../c` is `/a/c`,
//!    and nothing climbs above the root.
//!
//! The query is left as it is. Refused outright: a `#` anywhere (a
//! fragment never belongs in a request), a `%` not followed by two hex
//! digits, a backslash (some servers read it as `/`), and a segment that
//! is a dot segment once its `;` parameters are stripped (`..;x`, which
//! Java servlet containers climb with).

use std::borrow::Cow;

use crate::ParseError;

fn bad(why: &'static str) -> ParseError {
    ParseError::Target(why)
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// The byte a `%` at `i` encodes.
fn percent_at(path: &[u8], i: usize) -> Result<u8, ParseError> {
    match (
        path.get(i + 1).copied().and_then(hex),
        path.get(i + 2).copied().and_then(hex),
    ) {
        (Some(hi), Some(lo)) => Ok(hi << 4 | lo),
        _ => Err(bad("a % not followed by two hex digits")),
    }
}

/// Splits an origin-form target into its path and its query (with the
/// `?`, or empty).
pub fn split_query(target: &[u8]) -> (&[u8], &[u8]) {
    match target.iter().position(|&b| b == b'?') {
        Some(q) => target.split_at(q),
        None => (target, &[]),
    }
}

/// Normalises an origin-form target (`/path?query`); `Borrowed` when it was
/// normal already, which is the common case and costs one scan.
pub fn normalize(target: &[u8]) -> Result<Cow<'_, [u8]>, ParseError> {
    if target.contains(&b'#') {
        return Err(bad("a fragment (#) in the request target"));
    }
    let (path, query) = split_query(target);
    if path.first() != Some(&b'/') {
        return Err(bad("the path does not start with /"));
    }
    if path.contains(&b'\\') {
        return Err(bad("a backslash in the path"));
    }
    if is_normal(path)? {
        return Ok(Cow::Borrowed(target));
    }
    let decoded = decode_unreserved(path)?;
    let mut out = Vec::with_capacity(target.len());
    let mut segments: Vec<&[u8]> = Vec::new();
    let parts: Vec<&[u8]> = decoded[1..].split(|&b| b == b'/').collect();
    let last = parts.len() - 1;
    for (i, segment) in parts.into_iter().enumerate() {
        match segment {
            b"." | b".." => {
                if segment == b".." {
                    segments.pop();
                }
                if i == last {
                    segments.push(b"");
                }
            }
            b"" if i != last => {}
            _ => segments.push(segment),
        }
    }
    for segment in &segments {
        out.push(b'/');
        out.extend_from_slice(segment);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out.extend_from_slice(query);
    Ok(Cow::Owned(out))
}

/// Refuses a segment that is a dot segment once its `;` parameters are
/// stripped (`..;x`): servlet containers climb with it.
fn no_dot_with_parameters(segment: &[u8]) -> Result<(), ParseError> {
    let bare = segment.split(|&b| b == b';').next().unwrap_or(segment);
    if bare != segment && matches!(bare, b"." | b"..") {
        return Err(bad("a dot segment with parameters"));
    }
    Ok(())
}

/// Whether `path` needs no change; refuses what can never be normalised.
fn is_normal(path: &[u8]) -> Result<bool, ParseError> {
    let mut normal = true;
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' {
            let byte = percent_at(path, i)?;
            if is_unreserved(byte) || path[i + 1..i + 3].iter().any(u8::is_ascii_lowercase) {
                normal = false;
            }
            i += 3;
            continue;
        }
        i += 1;
    }
    let mut segments = path[1..].split(|&b| b == b'/').peekable();
    while let Some(segment) = segments.next() {
        no_dot_with_parameters(segment)?;
        let last = segments.peek().is_none();
        if matches!(segment, b"." | b"..") || (segment.is_empty() && !last) {
            normal = false;
        }
    }
    Ok(normal)
}

/// Decodes percent-encoded unreserved characters; upper-cases the hex of
/// the encodings that stay.
fn decode_unreserved(path: &[u8]) -> Result<Vec<u8>, ParseError> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' {
            let byte = percent_at(path, i)?;
            if is_unreserved(byte) {
                out.push(byte);
            } else {
                out.push(b'%');
                out.extend(path[i + 1..i + 3].iter().map(u8::to_ascii_uppercase));
            }
            i += 3;
        } else {
            out.push(path[i]);
            i += 1;
        }
    }
    // A decoded segment may itself be a dot segment with parameters.
    for segment in out[1..].split(|&b| b == b'/') {
        no_dot_with_parameters(segment)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(target: &str) -> Result<String, ParseError> {
        normalize(target.as_bytes()).map(|t| String::from_utf8_lossy(&t).into_owned())
    }

    #[test]
    fn paths_normalise_before_routing() {
        let cases = [
            ("/", "/"),
            ("/api/x?q=1", "/api/x?q=1"),
            ("/public/../api/x", "/api/x"),
            ("/./api/x", "/api/x"),
            ("/%61pi/x", "/api/x"),
            ("/%2e%2e/api", "/api"),
            ("/public/%2E%2E/api/x", "/api/x"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/..", "/"),
            ("/../../etc/passwd", "/etc/passwd"),
            ("//api//x", "/api/x"),
            ("/a/", "/a/"),
            ("/a%2fb", "/a%2Fb"),
            ("/a%2F..%2Fb", "/a%2F..%2Fb"),
            ("/x?a=/../b", "/x?a=/../b"),
            ("/x/..?a#", ""),
            ("/caf%C3%A9", "/caf%C3%A9"),
            ("/~user/%7euser", "/~user/~user"),
            ("/a;v=1/b", "/a;v=1/b"),
        ];
        for (target, want) in cases {
            match norm(target) {
                Ok(got) => assert_eq!(got, want, "{target}"),
                Err(_) => assert_eq!(want, "", "{target} was refused"),
            }
        }
    }

    #[test]
    fn normal_paths_are_not_copied() {
        for target in ["/", "/api/x?q=1", "/a/", "/a%2Fb", "/a;v=1/b"] {
            assert!(
                matches!(normalize(target.as_bytes()), Ok(Cow::Borrowed(_))),
                "{target}"
            );
        }
    }

    #[test]
    fn what_cannot_be_normalised_is_refused() {
        for target in [
            "/a#frag",
            "/a?q#frag",
            "/%zz",
            "/%4",
            "/a\\..\\admin",
            "/public/..;/admin",
            "/public/.;x/admin",
            "/public/%2e%2e;/admin",
            "api",
        ] {
            assert!(norm(target).is_err(), "{target}");
        }
    }
}
