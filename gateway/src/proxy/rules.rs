//! Header rules an operator sets (`request_headers`, `response_headers`),
//! the request ID, and the pass over an upstream's response head that
//! applies them.
//!
//! A rule can never name a header the node writes itself: the framing,
//! the hop-by-hop headers, `Host`, `X-Forwarded-For`, `-Proto`, `-Host`
//! and `X-Request-Id` ([`HeaderRules::is_reserved`]); the configuration
//! refuses such a rule with its line. So a rule cannot reopen a smuggling
//! path, nor lie about the client's address. The rest of the forwarding
//! family ([`FORWARDING`]) a rule may set or remove (`X-Forwarded-Prefix`
//! for a route that strips one): the rule then decides that header alone,
//! for every client.
//!
//! ## Trailers
//! A trailer crosses, either way, only when its field's definition lets
//! it come after a body ([`TRAILERS`]: gRPC's status, `Server-Timing`,
//! the digests; and gRPC's `-bin` metadata) or the route admits its name
//! (`response_headers = { trailers = ["x-checksum"] }`, and the same in
//! `request_headers`); in a gRPC call, every one (its metadata). Even then, no trailer carries what the node owns
//! or a rule sets or removes, and none the forwarding family, not even a
//! trusted proxy's: the replica has read who the client is from the head.
//!
//! ## Request IDs
//! A client's `X-Request-Id` is kept when it is 1 to [`MAX_ID`] visible
//! characters from a safe set ([`RequestId::from_client`]); otherwise the
//! node makes one (32 hex digits, 128 random bits). The ID goes upstream,
//! back to the client (replacing any the replica sent), into the access
//! log and onto the node's own pages. `traceparent` and `tracestate` are
//! end-to-end headers and cross untouched.

use crate::config::HeaderRules;

/// Whether a rule set removes or replaces a header of this name.
pub fn overridden(rules: &HeaderRules, name: &[u8]) -> bool {
    rules
        .remove
        .iter()
        .any(|n| n.as_str().as_bytes().eq_ignore_ascii_case(name))
        || rules
            .set
            .iter()
            .any(|(n, _)| n.as_str().as_bytes().eq_ignore_ascii_case(name))
}

pub use crate::config::forwarding::{FORWARDING, PASSED, WRITTEN, is_forwarding};

/// Headers the node owns on a request besides the forwarding family:
/// written from what it saw, never taken from a client.
const OWNED_REQUEST: [&str; 2] = ["x-request-id", "via"];

/// Headers the node owns on an answer: the request ID it gives, and the
/// locations it moves back under the route's prefix.
const OWNED_RESPONSE: [&str; 3] = ["x-request-id", "location", "content-location"];

/// The fields whose definitions let them come after a body (RFC 9110
/// §6.5.1): gRPC's status, message and details, `Server-Timing` (W3C),
/// and the digests of RFC 9530 and RFC 3230. With them, a name ending in
/// `-bin`: gRPC's binary metadata, which no HTTP field is.
pub const TRAILERS: [&str; 7] = [
    "grpc-status",
    "grpc-message",
    "grpc-status-details-bin",
    "server-timing",
    "content-digest",
    "repr-digest",
    "digest",
];

/// Whether a trailer named `name` may cross: its definition allows a
/// trailer ([`TRAILERS`]), a rule of the route admits it (`trailers` of
/// `request_headers` or `response_headers`), or the exchange is a gRPC
/// call, whose trailers are its metadata (gRPC over HTTP/2: custom
/// metadata rides in the trailers, and a gRPC client reads it as such,
/// never as a head). Anything else (a `Strict-Transport-Security`, a
/// `WWW-Authenticate`, a `Set-Cookie`) means something only in a head,
/// and a client or cache that merged it into the head would obey it.
fn admitted(name: &http::header::HeaderName, rules: &HeaderRules, grpc: bool) -> bool {
    grpc || TRAILERS.contains(&name.as_str())
        || name.as_str().ends_with("-bin")
        || rules.trailers.contains(name)
}

/// Trailers cross by admission ([`admitted`]), less the ones the node
/// owns and those a rule of the route removes or sets, as in a head (a
/// `Cookie` a rule removes does not come back in a trailer).
fn crossing(
    mut trailers: http::HeaderMap,
    rules: &HeaderRules,
    grpc: bool,
    owned: &[&str],
) -> http::HeaderMap {
    let names: Vec<http::header::HeaderName> = trailers.keys().cloned().collect();
    for name in names {
        let cross = admitted(&name, rules, grpc)
            && !owned.contains(&name.as_str())
            && !is_forwarding(name.as_str().as_bytes())
            && !overridden(rules, name.as_str().as_bytes());
        if !cross {
            trailers.remove(&name);
        }
    }
    trailers
}

/// A client's trailers, as they may reach a replica under `rules` (the
/// route's `request_headers`) in a gRPC call or not, never with a header
/// of the forwarding family.
pub fn request_trailers(
    trailers: http::HeaderMap,
    rules: &HeaderRules,
    grpc: bool,
) -> http::HeaderMap {
    crossing(trailers, rules, grpc, &OWNED_REQUEST)
}

/// A replica's trailers, as they may reach the client under `rules` (the
/// route's `response_headers`) in a gRPC call or not.
pub fn response_trailers(
    trailers: http::HeaderMap,
    rules: &HeaderRules,
    grpc: bool,
) -> http::HeaderMap {
    crossing(trailers, rules, grpc, &OWNED_RESPONSE)
}

/// The longest request ID kept from a client.
pub const MAX_ID: usize = 128;

/// A request's ID, held inline: no allocation per request.
#[derive(Clone, Copy)]
pub struct RequestId {
    bytes: [u8; MAX_ID],
    len: u8,
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RequestId {
    /// The client's `X-Request-Id` when it is one to keep: 1 to
    /// [`MAX_ID`] letters, digits or `-_.:+/=@`.
    pub fn from_client(value: &[u8]) -> Option<RequestId> {
        let valid = !value.is_empty()
            && value.len() <= MAX_ID
            && value
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:+/=@".contains(b));
        valid.then(|| {
            let mut bytes = [0; MAX_ID];
            bytes[..value.len()].copy_from_slice(value);
            RequestId {
                bytes,
                len: value.len() as u8,
            }
        })
    }

    /// A new ID: 128 random bits as 32 lower-case hex digits.
    pub fn generate() -> RequestId {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut n = fastrand::u128(..);
        let mut bytes = [0; MAX_ID];
        for b in bytes[..32].iter_mut() {
            *b = HEX[(n & 0xf) as usize];
            n >>= 4;
        }
        RequestId { bytes, len: 32 }
    }

    /// The client's ID if valid, else a new one.
    pub fn of_request(value: Option<&[u8]>) -> RequestId {
        value
            .and_then(RequestId::from_client)
            .unwrap_or_else(RequestId::generate)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored.
        std::str::from_utf8(self.as_bytes()).unwrap_or("-")
    }

    pub fn header_value(&self) -> http::header::HeaderValue {
        http::header::HeaderValue::from_bytes(self.as_bytes())
            .unwrap_or(http::header::HeaderValue::from_static("-"))
    }
}

/// What the client gets of an upstream's response head besides its
/// status: calls `emit` with each header the replica sent that neither the
/// route's rules nor the request ID replace (`Location` and
/// `Content-Location` moved back under the route's prefix), then with the
/// rules' own headers and the request ID.
pub fn response_fields<'a>(
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    route: &super::Route,
    request_id: &RequestId,
    host: Option<&[u8]>,
    mut emit: impl FnMut(&[u8], &[u8]),
) {
    let rules = &route.config.response_headers;
    let plain = !rules.changes_head() && route.rewrite.is_none();
    for (name, value) in fields {
        if name.eq_ignore_ascii_case(b"x-request-id") {
            continue;
        }
        if plain {
            emit(name, value);
            continue;
        }
        if overridden(rules, name) {
            continue;
        }
        let moved = route.rewrite.as_ref().filter(|_| {
            name.eq_ignore_ascii_case(b"location") || name.eq_ignore_ascii_case(b"content-location")
        });
        match moved.and_then(|rewrite| rewrite.location_back(value, host)) {
            Some(location) => emit(name, &location),
            None => emit(name, value),
        }
    }
    for (name, value) in &rules.set {
        emit(name.as_str().as_bytes(), value.as_bytes());
    }
    emit(b"x-request-id", request_id.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::header::HeaderName::from_static(name),
                http::HeaderValue::from_static(value),
            );
        }
        map
    }

    fn names(map: &http::HeaderMap) -> Vec<String> {
        let mut names: Vec<String> = map.keys().map(|n| n.to_string()).collect();
        names.sort();
        names
    }

    #[test]
    fn trailers_cross_by_admission_never_by_default() {
        let trailers = map(&[
            ("grpc-status", "0"),
            ("grpc-message", "ok"),
            ("grpc-status-details-bin", "AAAA"),
            ("x-trace-bin", "AAAA"),
            ("server-timing", "db;dur=53"),
            ("content-digest", "sha-256=:AAAA:"),
            ("repr-digest", "sha-256=:AAAA:"),
            ("digest", "SHA-256=AAAA"),
            ("strict-transport-security", "max-age=0"),
            ("www-authenticate", "Basic realm=x"),
            ("content-security-policy", "default-src *"),
            ("set-cookie", "session=planted"),
            ("content-type", "text/html"),
            ("content-encoding", "gzip"),
            ("cache-control", "no-store"),
            ("x-sum", "1"),
        ]);
        let admitted = [
            "content-digest",
            "digest",
            "grpc-message",
            "grpc-status",
            "grpc-status-details-bin",
            "repr-digest",
            "server-timing",
            "x-trace-bin",
        ];
        let none = HeaderRules::default();
        assert_eq!(
            names(&response_trailers(trailers.clone(), &none, false)),
            admitted
        );
        assert_eq!(
            names(&request_trailers(trailers.clone(), &none, false)),
            admitted
        );
        // A rule of the route admits a name of its own.
        let rules = HeaderRules {
            trailers: vec![http::header::HeaderName::from_static("x-sum")],
            ..HeaderRules::default()
        };
        let mut with_sum = admitted.to_vec();
        with_sum.push("x-sum");
        with_sum.sort();
        assert_eq!(
            names(&response_trailers(trailers.clone(), &rules, false)),
            with_sum
        );
        // A gRPC call's trailers are its metadata: all of them cross.
        assert_eq!(
            names(&response_trailers(trailers.clone(), &none, true)),
            names(&trailers)
        );
    }

    #[test]
    fn admitted_trailers_still_carry_nothing_the_node_owns_or_a_rule_decides() {
        let admitting = |names: &[&'static str]| {
            names
                .iter()
                .map(|n| http::header::HeaderName::from_static(n))
                .collect::<Vec<_>>()
        };
        let rules = HeaderRules {
            set: vec![(
                http::header::HeaderName::from_static("x-tenant"),
                http::HeaderValue::from_static("a"),
            )],
            remove: vec![http::header::HeaderName::from_static("cookie")],
            trailers: admitting(&[
                "x-sum",
                "x-tenant",
                "cookie",
                "x-request-id",
                "location",
                "via",
            ]),
        };
        let mut pairs = vec![
            ("x-sum", "1"),
            ("x-request-id", "forged"),
            ("cookie", "session=stolen"),
            ("x-tenant", "b"),
            ("location", "http://elsewhere/"),
            ("via", "1.1 elsewhere"),
        ];
        for name in FORWARDING {
            pairs.push((name, "6.6.6.6"));
        }
        let trailers = map(&pairs);
        assert_eq!(
            names(&request_trailers(trailers.clone(), &rules, false)),
            ["location", "x-sum"]
        );
        assert_eq!(
            names(&response_trailers(trailers.clone(), &rules, false)),
            ["via", "x-sum"]
        );
        // Not even in a gRPC call.
        assert_eq!(
            names(&request_trailers(trailers.clone(), &rules, true)),
            ["location", "x-sum"]
        );
        assert_eq!(
            names(&response_trailers(trailers, &rules, true)),
            ["via", "x-sum"]
        );
    }

    #[test]
    fn the_family_is_known_in_any_case_and_nothing_else_is() {
        for name in FORWARDING {
            assert!(is_forwarding(name.as_bytes()), "{name}");
            assert!(
                is_forwarding(name.to_ascii_uppercase().as_bytes()),
                "{name}"
            );
        }
        for other in [
            "x-forwarded",
            "x-sum",
            "accept",
            "cookie",
            "",
            "f",
            "x-request-id",
        ] {
            assert_eq!(
                is_forwarding(other.as_bytes()),
                other == "x-forwarded",
                "{other}"
            );
        }
        assert_eq!(FORWARDING.len(), WRITTEN.len() + PASSED.len());
        assert!(FORWARDING.iter().all(|name| !name.is_empty()));
    }

    #[test]
    fn a_client_id_is_kept_only_when_safe() {
        for kept in [
            &b"abc"[..],
            b"0f8fad5b-d9cb-469f-a165-70867728950e",
            b"req:1/2+3=4@x_y.z",
            &[b'a'; MAX_ID],
        ] {
            let id = RequestId::of_request(Some(kept));
            assert_eq!(id.as_bytes(), kept);
        }
        for refused in [
            &b""[..],
            b"a b",
            b"a\"b",
            b"<script>",
            b"a\xffb",
            b"a,b",
            &[b'a'; MAX_ID + 1],
        ] {
            let id = RequestId::of_request(Some(refused));
            assert_ne!(id.as_bytes(), refused);
            assert_eq!(id.as_bytes().len(), 32);
        }
    }

    #[test]
    fn generated_ids_are_hex_and_differ() {
        let a = RequestId::generate();
        let b = RequestId::generate();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_bytes().iter().all(u8::is_ascii_hexdigit));
        assert_ne!(a.as_str(), b.as_str());
        assert!(a.header_value().to_str().is_ok());
    }

    #[test]
    fn the_nodes_own_headers_are_reserved() {
        for name in [
            "content-length",
            "transfer-encoding",
            "connection",
            "host",
            "x-forwarded-for",
            "x-request-id",
            "upgrade",
        ] {
            assert!(HeaderRules::is_reserved(
                &http::header::HeaderName::from_static(name)
            ));
        }
        for name in [
            "x-frame-options",
            "cache-control",
            "server",
            "authorization",
        ] {
            assert!(!HeaderRules::is_reserved(
                &http::header::HeaderName::from_static(name)
            ));
        }
    }
}
