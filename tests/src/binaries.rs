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

/// What cargo tells a running test about its own package: a build script
/// that reads one of these (ring's reads `CARGO_MANIFEST_DIR`) would see
/// the test's package, not its own, and rebuild what `tests/run.sh` built
/// beforehand with the same arguments.
fn test_package_variable(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    matches!(
        name.as_ref(),
        "CARGO_MANIFEST_DIR"
            | "CARGO_MANIFEST_PATH"
            | "CARGO_CRATE_NAME"
            | "CARGO_BIN_NAME"
            | "CARGO_PRIMARY_PACKAGE"
            | "CARGO_TARGET_TMPDIR"
            | "OUT_DIR"
    ) || name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
}

fn cargo(args: &[&str], envs: &[(&str, &str)]) {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os().filter(|(name, _)| test_package_variable(name)) {
        command.env_remove(name);
    }
    let status = command
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(workspace())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo {} failed", args.join(" "));
}

/// This machine's target triple, as rustc names it.
fn host_triple() -> String {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .trim()
        .to_string()
}

/// Where every binary of the workspace that a test runs or puts into an
/// image was built: one debug build of `picket`, `picket-tui` and
/// `picket-test-upstream` per run, linked statically so that the same file
/// runs here and in an image `FROM scratch`. It has a target directory of
/// its own: its flags differ from the test build's, and, built alone, the
/// packages unify features differently; sharing one directory would
/// rebuild half the graph each time.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = target_root().join("bins");
        let triple = host_triple();
        cargo(
            &[
                "build",
                "--locked",
                "-p",
                "picket",
                "-p",
                "picket-tui",
                "-p",
                "picket-test-upstream",
                "--bins",
                "--target",
                &triple,
                "--target-dir",
                dir.to_str().expect("UTF-8 path"),
            ],
            &[
                ("RUSTFLAGS", "-C target-feature=+crt-static"),
                // Smaller and faster to link; the tests read their own
                // backtraces, not these binaries'.
                ("CARGO_PROFILE_DEV_DEBUG", "false"),
            ],
        );
        dir.join(triple).join("debug")
    })
}

/// `picket`, the gateway.
pub fn picket() -> PathBuf {
    built().join("picket")
}

/// `picket-tui`.
pub fn picket_tui() -> PathBuf {
    built().join("picket-tui")
}

/// `picket-test-upstream`: in-process servers serve most tests; this binary
/// serves those that need a process of its own or a container.
pub fn test_upstream() -> PathBuf {
    built().join("picket-test-upstream")
}

/// `picket` as released (the release profile, as `deploy/build-image.sh`
/// builds it), for benchmarks: what they measure is what operators run.
pub fn picket_release() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            cargo(
                &[
                    "build",
                    "--release",
                    "--locked",
                    "-p",
                    "picket",
                    "--bin",
                    "picket",
                ],
                &[],
            );
            target_root().join("release").join("picket")
        })
        .clone()
}

/// `picket` as the work-count guard measures it (`tests/tests/work.rs`):
/// the `work` profile, the release profile's optimisation without its
/// whole-program link, in a target directory of its own (built alone, the
/// package unifies features as a release build does).
pub fn picket_work() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = target_root().join("work");
            cargo(
                &[
                    "build",
                    "--profile",
                    "work",
                    "--locked",
                    "-p",
                    "picket",
                    "--bin",
                    "picket",
                    "--target-dir",
                    dir.to_str().expect("UTF-8 path"),
                ],
                &[],
            );
            dir.join("work").join("picket")
        })
        .clone()
}
