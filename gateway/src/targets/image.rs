//! How a replica's image is shown in verdicts: a short label that tells
//! two builds under one tag apart.

/// How an image is shown: the last path part of its reference, its tag
/// unless that is `latest`, and the start of its digest whenever one is
/// known — `api:1.4@sha256:4c0f12ab9d2e`, `nginx@sha256:4c0f12ab9d2e`,
/// `api:1.4` (no digest known), `nginx:latest` (neither).
///
/// `digest` is what the runtime says the image is, in any of its spellings
/// (`sha256:…`, `repo@sha256:…`, `docker-pullable://repo@sha256:…`); a
/// digest pinned in the reference itself wins over it. Two builds pushed
/// under one tag differ in their digests, so their labels differ too.
pub fn label(reference: &str, digest: Option<&str>) -> String {
    let short = reference.rsplit('/').next().unwrap_or(reference);
    // Started by image ID: no name to show, only the ID.
    if short.starts_with("sha256:") {
        return digest_start(short).unwrap_or_else(|| short.to_string());
    }
    let (named, pinned) = match short.split_once('@') {
        Some((named, pinned)) => (named, Some(pinned)),
        None => (short, None),
    };
    let (name, tag) = match named.rsplit_once(':') {
        Some((name, tag)) => (name, Some(tag).filter(|t| *t != "latest")),
        None => (named, None),
    };
    match (tag, pinned.or(digest).and_then(digest_start)) {
        (Some(tag), Some(digest)) => format!("{name}:{tag}@{digest}"),
        (None, Some(digest)) => format!("{name}@{digest}"),
        (Some(tag), None) => format!("{name}:{tag}"),
        (None, None) => format!("{name}:latest"),
    }
}

/// `docker-pullable://api@sha256:4c0f12ab9d2e7f…` → `sha256:4c0f12ab9d2e`;
/// `None` when `text` holds no `algorithm:hex` digest.
fn digest_start(text: &str) -> Option<String> {
    let digest = text.rsplit('@').next().unwrap_or(text);
    let digest = digest.rsplit("://").next().unwrap_or(digest);
    let (algorithm, hex) = digest.split_once(':')?;
    if algorithm.is_empty() || hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    Some(format!("{algorithm}:{}", hex.get(..12).unwrap_or(hex)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_labels() {
        let digest = "sha256:4c0f12ab9d2e7f00aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
        let pinned = format!("docker.io/library/nginx@{digest}");
        let pullable = format!("docker-pullable://registry.example.com/team/api@{digest}");
        let other = "sha256:9b1d7e0c3a5500aa11bb22cc33dd44ee55ff66aa77bb88cc99dd00ee11ff22";
        let cases: &[(&str, Option<&str>, &str)] = &[
            // Tag and digest start, whatever spelling the runtime gives.
            (
                "registry.example.com/team/api:1.4",
                Some(digest),
                "api:1.4@sha256:4c0f12ab9d2e",
            ),
            ("api:1.4", Some(&pullable), "api:1.4@sha256:4c0f12ab9d2e"),
            (
                "api:1.4",
                Some(&format!("docker://{digest}")),
                "api:1.4@sha256:4c0f12ab9d2e",
            ),
            ("api:1.4", Some(other), "api:1.4@sha256:9b1d7e0c3a55"),
            (
                "localhost:5000/api:2",
                Some(digest),
                "api:2@sha256:4c0f12ab9d2e",
            ),
            // No digest known: the tag alone.
            ("registry.example.com/team/api:1.4", None, "api:1.4"),
            ("localhost:5000/api:2", None, "api:2"),
            ("api:1.4", Some("registry.example.com/api"), "api:1.4"),
            ("api:1.4", Some(""), "api:1.4"),
            // `latest` or no tag: the digest says which build.
            ("nginx", Some(digest), "nginx@sha256:4c0f12ab9d2e"),
            ("nginx:latest", Some(digest), "nginx@sha256:4c0f12ab9d2e"),
            ("nginx:latest", None, "nginx:latest"),
            ("nginx", None, "nginx:latest"),
            // A digest pinned in the reference wins.
            (&pinned, None, "nginx@sha256:4c0f12ab9d2e"),
            (&pinned, Some(other), "nginx@sha256:4c0f12ab9d2e"),
            (
                &format!("api:1.4@{digest}"),
                Some(other),
                "api:1.4@sha256:4c0f12ab9d2e",
            ),
            // Started by image ID: no name to show.
            (other, Some(other), "sha256:9b1d7e0c3a55"),
        ];
        for (reference, digest, shown) in cases {
            assert_eq!(label(reference, *digest), *shown, "{reference} {digest:?}");
        }
    }
}
