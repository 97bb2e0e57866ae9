//! A test upstream as a process of its own, for test hosts in network
//! namespaces and for benchmarks: answers every request with 200 and a
//! fixed body.

use std::net::SocketAddr;

use clap::Parser;
use picket_tests::upstream::{Behaviour, Upstream};

#[derive(Debug, Parser)]
struct Args {
    /// Where to listen.
    #[arg(long)]
    listen: SocketAddr,
    /// The name the upstream answers with.
    #[arg(long, default_value = "upstream")]
    name: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let _upstream = Upstream::on(listener, &args.name, Behaviour::Echo);
    std::future::pending::<()>().await;
    Ok(())
}
