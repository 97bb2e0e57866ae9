//! The cluster key: read from the key file or the environment, checked,
//! and made (`picket gen-key`).

use std::path::{Path, PathBuf};

use base64::Engine as _;

use super::ClusterError;
use super::seal::{Key, Keys};
use crate::config::ClusterSettings;

/// The environment variable that may hold the cluster key(s).
pub const KEY_ENV: &str = "PICKET_CLUSTER_KEY";

/// Parses keys: base64 of 32 bytes each, one per line (`#` comments and
/// blank lines skipped) or separated by commas. `origin` names the source
/// in errors, with the line.
pub fn parse(text: &str) -> Result<Keys, String> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        for item in line.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(item)
                .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(item))
                .map_err(|_| format!("line {}: not base64", n + 1))?;
            let secret: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
                format!("line {}: a key is 32 bytes, this is {}", n + 1, b.len())
            })?;
            keys.push(Key::new(&secret));
        }
    }
    Keys::new(keys).ok_or_else(|| "no key".to_string())
}

/// The secret of a fresh random key; `None` if the system has no
/// randomness to give.
pub fn random_secret() -> Option<[u8; 32]> {
    use aws_lc_rs::rand::SecureRandom;
    let mut secret = [0u8; 32];
    aws_lc_rs::rand::SystemRandom::new()
        .fill(&mut secret)
        .ok()?;
    Some(secret)
}

/// A fresh random key, base64, for `picket gen-key`.
pub fn generate() -> Option<String> {
    random_secret().map(|secret| base64::engine::general_purpose::STANDARD.encode(secret))
}

/// The cluster's keys: the key file (relative to the configuration's
/// directory), else [`KEY_ENV`]; `None` when neither is set.
pub fn load(
    settings: &ClusterSettings,
    config_dir: Option<&Path>,
) -> Result<Option<Keys>, ClusterError> {
    if let Some(file) = &settings.key_file {
        let path: PathBuf = match config_dir {
            Some(dir) if file.is_relative() => dir.join(file),
            _ => file.clone(),
        };
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| ClusterError::KeyFile {
            file: shown.clone(),
            message: e.to_string(),
        })?;
        return parse(&text)
            .map(Some)
            .map_err(|message| ClusterError::KeyFile {
                file: shown,
                message,
            });
    }
    match std::env::var(KEY_ENV) {
        Ok(text) if !text.trim().is_empty() => parse(&text).map(Some).map_err(ClusterError::KeyEnv),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_from_lines_and_commas_and_say_where_they_are_wrong() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        let keys = parse(&format!("# rotation\n{a}\n\n{b}\n")).unwrap();
        assert_eq!(keys.labels().len(), 2);
        assert_eq!(parse(&format!("{a}, {b}")).unwrap().labels(), keys.labels());
        assert_eq!(
            parse(&format!("{a}\nnot-base64!")).unwrap_err(),
            "line 2: not base64"
        );
        assert_eq!(
            parse("c2hvcnQ=").unwrap_err(),
            "line 1: a key is 32 bytes, this is 5"
        );
        assert_eq!(parse("# nothing\n").unwrap_err(), "no key");
    }
}
