//! The node's ACME cache, a directory on a volume: its account at each CA
//! and each certificate it serves, so that a restarted node serves at
//! once and orders nothing it already has.
//!
//! ```text
//! account-<8 bytes of SHA-256 of the directory URL, hex>.json
//! <first name>.pem      the chain, then the key
//! <first name>.json     the directory that issued it, and the node that
//!                       ordered it
//! <first name>.failure  the last order's failure: when to order again
//!                       (Unix seconds), then the error; gone once served
//! ```
//! The failure outlives a restart, so a node that restarts in a loop
//! does not ask the CA again before its back-off ends.
//! Files are written whole (a temporary file of a name no other write
//! shares, then a rename) and readable by the node's user only.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file of the certificate named `name`.
pub fn certificate_file(cache: &Path, name: &str) -> PathBuf {
    cache.join(format!("{name}.pem"))
}

/// What the cache says of the certificate named `name`.
pub fn meta_file(cache: &Path, name: &str) -> PathBuf {
    cache.join(format!("{name}.json"))
}

/// What a certificate in the cache says of itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    /// The directory that issued it.
    pub directory: String,
    /// The node that ordered it.
    pub issued_by: String,
}

/// Keeps a certificate and what it says of itself.
pub fn write_certificate(cache: &Path, name: &str, pem: &str, meta: &Meta) -> std::io::Result<()> {
    let text = serde_json::to_string(meta).map_err(std::io::Error::other)?;
    write(&certificate_file(cache, name), pem)?;
    write(&meta_file(cache, name), &text)
}

/// A certificate of the cache: its PEM, and what it says of itself (`None`
/// from an earlier release, which kept nothing beside it).
pub fn read_certificate(
    cache: &Path,
    name: &str,
) -> std::io::Result<Option<(String, Option<Meta>)>> {
    let Some(pem) = read(&certificate_file(cache, name))? else {
        return Ok(None);
    };
    let meta = read(&meta_file(cache, name))
        .ok()
        .flatten()
        .and_then(|text| serde_json::from_str(&text).ok());
    Ok(Some((pem, meta)))
}

/// The file of the account at `directory`.
pub fn account_file(cache: &Path, directory: &str) -> PathBuf {
    let digest = picket_proto::feed::fingerprint(directory.as_bytes());
    cache.join(format!("account-{}.json", &digest[..16]))
}

/// The file of the last failed order of the certificate named `name`.
pub fn failure_file(cache: &Path, name: &str) -> PathBuf {
    cache.join(format!("{name}.failure"))
}

/// Keeps a failed order: when to order again, and why.
pub fn write_failure(path: &Path, retry_at: i64, error: &str) -> std::io::Result<()> {
    write(path, &format!("{retry_at}\n{error}\n"))
}

/// The failure kept at `path`, if any and readable.
pub fn read_failure(path: &Path) -> Option<(i64, String)> {
    let text = read(path).ok()??;
    let (retry_at, error) = text.split_once('\n')?;
    Some((retry_at.trim().parse().ok()?, error.trim_end().to_string()))
}

/// Forgets the failure at `path`: the certificate is served.
pub fn clear_failure(path: &Path) {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(file = %path.display(), error = %e, "cannot remove the kept ACME failure");
        }
        _ => {}
    }
}

/// Reads a file of the cache; `None` when there is none.
pub fn read(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `text` to `path` whole, readable by this user only; creates the
/// cache directory (this user's only) if it is not there, and takes it
/// back from the group and others if it was theirs too (a volume's mount
/// point, made 0755): it holds private keys.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & 0o700))?;
    }
    // A name of this write's own: two writes at once (a certificate and
    // its failure, two orders' accounts) never share a temporary file.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = dir.join(format!(".{file}.{}.{n}.partial", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_all());
    drop(file);
    match written.and_then(|()| std::fs::rename(&partial, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_whole_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("acme");
        let file = certificate_file(&cache, "shop.example.com");
        assert_eq!(read(&file).unwrap(), None);
        write(&file, "one").unwrap();
        write(&file, "two").unwrap();
        assert_eq!(read(&file).unwrap().as_deref(), Some("two"));
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // A directory that was the group's and others' too is taken back.
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
        write(&file, "three").unwrap();
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_ne!(
            account_file(&cache, "https://a/dir"),
            account_file(&cache, "https://b/dir")
        );
        let failure = failure_file(&cache, "shop.example.com");
        assert_eq!(read_failure(&failure), None);
        write_failure(&failure, 1_800_000_060, "the CA said no\nat length").unwrap();
        assert_eq!(
            read_failure(&failure),
            Some((1_800_000_060, "the CA said no\nat length".into()))
        );
        clear_failure(&failure);
        clear_failure(&failure);
        assert_eq!(read_failure(&failure), None);
        let meta = Meta {
            directory: "https://a/dir".into(),
            issued_by: "n1".into(),
        };
        write_certificate(&cache, "shop.example.com", "PEM", &meta).unwrap();
        assert_eq!(
            read_certificate(&cache, "shop.example.com").unwrap(),
            Some(("PEM".to_string(), Some(meta)))
        );
    }

    /// A certificate and its failure, written at once from many threads,
    /// each whole: no temporary file is shared, none is left behind.
    #[test]
    fn writes_at_once_share_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().to_path_buf();
        std::thread::scope(|scope| {
            for i in 0..8 {
                let cache = &cache;
                scope.spawn(move || {
                    for round in 0..50 {
                        let text = format!("{i}-{round}-").repeat(100);
                        write(&certificate_file(cache, "shop.example.com"), &text).unwrap();
                        write_failure(&failure_file(cache, "shop.example.com"), round, &text)
                            .unwrap();
                    }
                });
            }
        });
        let pem = read(&certificate_file(&cache, "shop.example.com"))
            .unwrap()
            .unwrap();
        let unit = pem.split('-').take(2).collect::<Vec<_>>().join("-") + "-";
        assert_eq!(pem, unit.repeat(100), "one write, whole");
        let left: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
