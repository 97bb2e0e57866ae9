//! The names of the forwarding family, which the node owns (how it writes
//! them is `proxy::headers`). They are the configuration's as much as the
//! data path's: header rules may set some, and may admit none as a
//! trailer.

/// The forwarding family: the headers that say who the client is and how
/// it reached the node. The node writes them from what it saw; a client's
/// cross only when it is a trusted proxy (see `proxy::headers`).
pub const FORWARDING: [&str; 6 + PASSED.len()] = {
    let mut all = [""; 6 + PASSED.len()];
    let mut i = 0;
    while i < WRITTEN.len() {
        all[i] = WRITTEN[i];
        i += 1;
    }
    while i < all.len() {
        all[i] = PASSED[i - WRITTEN.len()];
        i += 1;
    }
    all
};

/// The members of the family the node writes itself, in the order it
/// writes them.
pub const WRITTEN: [&str; 6] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-real-ip",
    "forwarded",
];

/// The members the node never writes, only passes on from a trusted
/// proxy: names that applications, frameworks and identity proxies read
/// as the client's address (`X-Client-IP`, `True-Client-IP`, ...), the
/// scheme it came by (`X-Forwarded-Scheme`, `X-Forwarded-Ssl`, ...), the
/// host or server it asked (`X-Forwarded-Server`, `X-Original-Host`) and
/// the path or method before a proxy changed them (`X-Forwarded-Uri`,
/// `X-Original-URL`, ...). From any other client they are dropped.
pub const PASSED: [&str; 22] = [
    "x-forwarded-prefix",
    "x-original-url",
    "x-rewrite-url",
    "x-client-ip",
    "true-client-ip",
    "x-cluster-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-original-forwarded-for",
    "forwarded-for",
    "x-forwarded",
    "x-envoy-external-address",
    "x-forwarded-scheme",
    "x-forwarded-ssl",
    "x-forwarded-protocol",
    "front-end-https",
    "x-url-scheme",
    "x-forwarded-server",
    "x-original-host",
    "x-forwarded-uri",
    "x-original-uri",
    "x-forwarded-method",
];

/// Whether `name` (any case) is one of the forwarding family.
pub fn is_forwarding(name: &[u8]) -> bool {
    // Every member starts with one of these: most names go at one byte.
    matches!(
        name.first().map(u8::to_ascii_lowercase),
        Some(b'x' | b'f' | b't' | b'c')
    ) && FORWARDING
        .iter()
        .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
}
