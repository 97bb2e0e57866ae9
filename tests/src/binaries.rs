//! The project's own binaries that tests run as processes or put into
//! images, built on first use with the workspace's cargo.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory cargo builds into for this test run (`target`, or
/// `CARGO_TARGET_DIR`): the test binary sits in `<it>/<profile>/deps/`.
fn target_root() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .expect("a test binary under <target>/<profile>/deps")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn cargo(args: &[&str], envs: &[(&str, &str)]) {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(workspace())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo {} failed", args.join(" "));
}

/// `picket-test-upstream`, built for this machine.
pub fn test_upstream() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = target_root();
            cargo(
                &["build", "--locked", "-p", "picket-test-upstream"],
                &[("CARGO_TARGET_DIR", root.to_str().expect("UTF-8 path"))],
            );
            root.join("debug/picket-test-upstream")
        })
        .clone()
}

/// `picket-test-upstream`, linked statically, for an image `FROM scratch`.
pub fn test_upstream_static() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    static_binary("picket-test-upstream", "picket-test-upstream", &BUILT)
}

/// A binary of the workspace linked statically, for an image `FROM
/// scratch`: an optimised build without the release profile's
/// whole-program LTO, which would only slow the tests down. Built in a
/// target directory of its own, so that its flags do not invalidate the
/// main build; every static binary shares it, and so shares dependencies.
fn static_binary(package: &str, bin: &str, built: &'static OnceLock<PathBuf>) -> PathBuf {
    built
        .get_or_init(|| {
            let dir = target_root().join("static");
            let triple = "x86_64-unknown-linux-gnu";
            cargo(
                &[
                    "build",
                    "--release",
                    "--locked",
                    "-p",
                    package,
                    "--bin",
                    bin,
                    "--target",
                    triple,
                    "--target-dir",
                    dir.to_str().expect("UTF-8 path"),
                ],
                &[
                    ("RUSTFLAGS", "-C target-feature=+crt-static"),
                    ("CARGO_PROFILE_RELEASE_LTO", "false"),
                    ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16"),
                    ("CARGO_PROFILE_RELEASE_DEBUG", "false"),
                ],
            );
            dir.join(triple).join("release").join(bin)
        })
        .clone()
}

/// A binary of the workspace, built for this machine (debug).
fn workspace_binary(package: &str, bin: &str, built: &'static OnceLock<PathBuf>) -> PathBuf {
    built
        .get_or_init(|| {
            // A target directory of its own: built alone, a package unifies
            // features differently from the test build, and sharing one
            // directory would rebuild half the graph each time.
            let dir = target_root().join("bins");
            cargo(
                &["build", "--locked", "-p", package, "--bin", bin],
                &[("CARGO_TARGET_DIR", dir.to_str().expect("UTF-8 path"))],
            );
            dir.join("debug").join(bin)
        })
        .clone()
}

/// `picket`, the gateway.
pub fn picket() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    workspace_binary("picket", "picket", &BUILT)
}

/// `picket-tui`.
pub fn picket_tui() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    workspace_binary("picket-tui", "picket-tui", &BUILT)
}

/// `picket`, linked statically, for the image `FROM scratch` of
/// `deploy/Dockerfile`.
pub fn picket_static() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    static_binary("picket", "picket", &BUILT)
}

/// `picket-tui`, linked statically, for the same image.
pub fn picket_tui_static() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    static_binary("picket-tui", "picket-tui", &BUILT)
}
