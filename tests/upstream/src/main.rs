//! A test upstream as a process of its own: for test hosts in network
//! namespaces, for containers built `FROM scratch`, and for benchmarks.
//! Answers every request with 200, naming itself and echoing what it got.
//!
//!   picket-test-upstream --listen 0.0.0.0:8080 --name api-1
//!   picket-test-upstream --check 127.0.0.1:8080     # a healthcheck: exit 0 if it accepts
//!   picket-test-upstream --check                    # the same, to $PICKET_TEST_CHECK or 127.0.0.1:8080

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use picket_test_upstream::{Behaviour, Upstream};

#[derive(Debug, Parser)]
struct Args {
    /// Where to listen.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// The name the upstream answers with.
    #[arg(long, default_value = "upstream")]
    name: String,
    /// Only check that `ADDR` accepts a TCP connection within a second.
    /// Without `ADDR`: the address in `PICKET_TEST_CHECK`, or
    /// 127.0.0.1:8080 (what an image's healthcheck runs).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
    check: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(addr) = args.check {
        let addr = match addr.as_str() {
            "" => std::env::var("PICKET_TEST_CHECK").unwrap_or_else(|_| "127.0.0.1:8080".into()),
            _ => addr,
        };
        let Ok(addr) = addr.parse::<SocketAddr>() else {
            eprintln!("picket-test-upstream: --check {addr}: not an address");
            return ExitCode::FAILURE;
        };
        let connected =
            tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
                .await;
        return if matches!(connected, Ok(Ok(_))) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("picket-test-upstream: binding {}: {error}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let _upstream = Upstream::on(listener, &args.name, Behaviour::Echo);
    // Until killed; SIGTERM (docker stop) ends it at once.
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
