//! The gateway's source files, for tests that read the code itself (what
//! the data path may name, which modules import which).

use std::path::{Path, PathBuf};

/// `gateway/src`.
pub fn gateway_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway/src")
}

/// Every `.rs` file of a module under `root`: `NAME.rs` and everything
/// under `NAME/`.
pub fn module_files(root: &Path, module: &str) -> Vec<PathBuf> {
    let mut files = vec![root.join(format!("{module}.rs"))];
    let mut dirs = vec![root.join(module)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.retain(|f| f.exists());
    files
}
