//! A real gRPC stack for tests: grpcio's server and client, driven by
//! `tests/grpc/echo.py` (see its header for the service it serves).
//!
//! Its Python comes from `PICKET_GRPC_PYTHON` (set by `tests/run.sh`,
//! which installs grpcio in a virtual environment), else `python3` when
//! it can import grpcio.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::ports::free_port;

/// The script, in the repository.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("grpc/echo.py")
}

/// A Python that can import grpcio and its health service, if any.
pub fn python() -> Option<PathBuf> {
    let candidates = std::env::var_os("PICKET_GRPC_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("python3")]);
    for python in candidates {
        let imports = Command::new(&python)
            .args(["-c", "import grpc, grpc_health"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if imports.is_ok_and(|s| s.success()) {
            return Some(python);
        }
    }
    None
}

/// A grpcio server on loopback, stopped when dropped.
#[derive(Debug)]
pub struct GrpcServer {
    pub addr: SocketAddr,
    pub name: String,
    child: Child,
}

impl GrpcServer {
    /// Starts a server named `name` with the script's `flags`
    /// (`--not-serving`, `--unavailable`); returns once it serves.
    pub fn start(python: &Path, name: &str, flags: &[&str]) -> GrpcServer {
        let port = free_port();
        let mut child = Command::new(python)
            .arg(script())
            .args(["serve", "--port", &port.to_string(), "--name", name])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the gRPC server starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the gRPC server says it serves");
        assert_eq!(
            line.trim(),
            "serving",
            "the gRPC server {name} did not start"
        );
        GrpcServer {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            name: name.to_string(),
            child,
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes the `calls` (see the script) on one channel to `target`, in
/// order; their results. Blocking: call it from `spawn_blocking`.
pub fn calls(python: &Path, target: SocketAddr, calls: &Value) -> Vec<Value> {
    let mut child = Command::new(python)
        .arg(script())
        .args(["calls", "--target", &target.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the gRPC client starts");
    child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(calls.to_string().as_bytes())
        .expect("the calls are written");
    let output = child.wait_with_output().expect("the gRPC client ends");
    assert!(output.status.success(), "the gRPC client failed");
    let results: Value = serde_json::from_slice(&output.stdout).expect("results in JSON");
    results.as_array().cloned().expect("a list of results")
}
