//! Connect checks: a connect to every static replica, external host, and
//! runtime endpoint marked `checked`, every `every`, each bounded by
//! `timeout` — no HTTP request. The connect is the one requests make
//! ([`Upstream::try_connect`](crate::upstream::Upstream::try_connect)): for
//! an `https://` upstream it completes the TLS handshake, verified with the
//! route's own TLS settings, so a host whose certificate fails verification
//! fails its check with the TLS reason. A check is one more observation of
//! the replica's health, like the node's own connects: a failed check
//! ejects it (and its probe re-admits it within one ejection period once it
//! answers), a passing check re-admits an ejected one.
//!
//! The timer runs only while there is something to check: a supervisor
//! (which waits on changes, not on a clock) starts it when a route with
//! such a target appears and stops it when the last one goes.
//!
//! Behind `HTTP_PROXY`/`HTTPS_PROXY`, an external host is reached through
//! the proxy, by requests and checks alike
//! ([`forward_proxy`](crate::upstream::forward_proxy)): the proxy is what
//! gets dialled for an `http://` host, and an `https://` host is checked
//! through a `CONNECT` tunnel, handshake included.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::task::JoinHandle;
use tokio::time::{MissedTickBehavior, interval};

use crate::changes::Changes;
use crate::proxy::Proxy;
use crate::shutdown::Shutdown;
use crate::upstream::ConnectFailure;
use crate::upstream::health::Observation;

/// The connect checks of a node.
#[derive(Debug)]
pub struct Checker {
    every: Duration,
    timeout: Duration,
    timer: Mutex<Option<JoinHandle<()>>>,
}

impl Checker {
    pub fn new(every: Duration, timeout: Duration) -> Checker {
        Checker {
            every,
            timeout,
            timer: Mutex::new(None),
        }
    }

    /// Whether the check timer runs.
    pub fn running(&self) -> bool {
        self.timer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    /// Starts or stops the timer as the route table needs.
    fn ensure(self: &Arc<Self>, proxy: &Arc<Proxy>) {
        let needed = proxy
            .table()
            .values()
            .any(|route| route.upstream.replicas().iter().any(|r| r.checked));
        let mut timer = self.timer.lock().unwrap_or_else(|e| e.into_inner());
        match (needed, timer.is_some()) {
            (true, false) => {
                let (checker, proxy) = (Arc::clone(self), Arc::clone(proxy));
                *timer = Some(tokio::spawn(async move { checker.run(proxy).await }));
                tracing::debug!(every = ?self.every, "connect checks started");
            }
            (false, true) => {
                if let Some(task) = timer.take() {
                    task.abort();
                }
                tracing::debug!("connect checks stopped: nothing to check");
            }
            _ => {}
        }
    }

    async fn run(&self, proxy: Arc<Proxy>) {
        let mut ticks = interval(self.every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.round(&proxy).await;
        }
    }

    /// One check of every checked replica, all at once.
    pub async fn round(&self, proxy: &Proxy) {
        let mut checks = FuturesUnordered::new();
        for route in proxy.table().values() {
            let upstream = Arc::clone(&route.upstream);
            for replica in upstream.replicas().iter().filter(|r| r.checked) {
                let (upstream, replica, bound) =
                    (Arc::clone(&upstream), Arc::clone(replica), self.timeout);
                checks.push(async move {
                    match upstream.try_connect(&replica, bound).await {
                        Ok(()) => upstream.observe(&replica, Observation::ProbeOk),
                        // The node's own shortage says nothing of the
                        // replica: no verdict this round.
                        Err(ConnectFailure::Local(_)) => {}
                        Err(failure) => upstream.connect_failed(&replica, &failure, false),
                    }
                });
            }
        }
        while checks.next().await.is_some() {}
    }
}

/// Keeps the check timer running exactly while there is something to check.
pub fn supervise(
    checker: Arc<Checker>,
    proxy: Arc<Proxy>,
    changes: &Changes,
    mut shutdown: Shutdown,
) {
    let mut changes = changes.subscribe();
    tokio::spawn(async move {
        loop {
            checker.ensure(&proxy);
            tokio::select! {
                Ok(()) = changes.changed() => {}
                () = shutdown.wait() => break,
            }
        }
        if let Some(task) = checker
            .timer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    });
}
