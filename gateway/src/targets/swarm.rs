//! Swarm: a container's events come only from the engine it runs on, so a
//! node follows every engine of the swarm, each through the read-only
//! socket proxy (`picket socket-proxy`) deployed beside it, and merges
//! their inventories. The proxies' addresses come from the configuration;
//! a name there (`tasks.socket-proxy:2375`) may resolve to every proxy, and
//! is resolved again every [`RESOLVE_EVERY`] so that engines joining or
//! leaving the swarm are followed or dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::AbortOnDropHandle;

use super::Link;
use super::docker::{self, Engine, Engines};
use crate::shutdown::{Shutdown, Tasks};

/// How often the proxies' names are resolved again.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(30);

async fn resolve(proxies: &[String]) -> Vec<SocketAddr> {
    let mut found = Vec::new();
    for proxy in proxies {
        match tokio::net::lookup_host(proxy.as_str()).await {
            Ok(addrs) => found.extend(addrs),
            Err(error) => tracing::debug!(%proxy, %error, "socket proxy did not resolve"),
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Follows every engine of the swarm until `shutdown`.
pub fn spawn(
    proxies: Vec<String>,
    network: Option<String>,
    engines: Arc<Engines>,
    link: Arc<Link>,
    mut shutdown: Shutdown,
    tasks: &mut Tasks,
) {
    tasks.spawn("swarm", async move {
        // Each engine's task ends when its handle goes: gone from the
        // proxies' name, at shutdown, or with this task if it is aborted.
        let mut followed: HashMap<SocketAddr, AbortOnDropHandle<()>> = HashMap::new();
        loop {
            let found = resolve(&proxies).await;
            for addr in &found {
                if followed.contains_key(addr) {
                    continue;
                }
                let engine = format!("http://{addr}");
                match bollard::Docker::connect_with_http(&engine, 120, bollard::API_DEFAULT_VERSION)
                {
                    Ok(docker) => {
                        tracing::info!(%engine, "following a swarm engine through its socket proxy");
                        let task = AbortOnDropHandle::new(tokio::spawn(docker::run(
                            Engine {
                                gate: link.gates.get(&engine),
                                name: engine,
                                docker,
                            },
                            network.clone(),
                            Arc::clone(&engines),
                            Arc::clone(&link),
                            shutdown.clone(),
                        )));
                        followed.insert(*addr, task);
                    }
                    Err(error) => tracing::warn!(%engine, %error, "cannot follow a swarm engine"),
                }
            }
            followed.retain(|addr, task| {
                let keep = found.contains(addr);
                if !keep {
                    // Before its inventory is forgotten, so that it
                    // cannot write it again.
                    task.abort();
                    let engine = format!("http://{addr}");
                    engines.forget(&engine);
                    link.forget(&engine);
                    tracing::info!(engine = %addr, "swarm engine gone from the proxies' name");
                }
                keep
            });
            tokio::select! {
                () = tokio::time::sleep(RESOLVE_EVERY) => {}
                () = shutdown.wait() => break,
            }
        }
    });
}
