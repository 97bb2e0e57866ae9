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
//! ## Reloads
//! The period and the bound are a watch the timer reads every round: a
//! reload that changes them takes effect at the next round, which is due
//! one new period after the last round started (at once if that is past),
//! never one old period later.
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
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::changes::Changes;
use crate::proxy::Proxy;
use crate::shutdown::{Shutdown, Tasks};
use crate::upstream::ConnectFailure;
use crate::upstream::health::Observation;

/// How often connect checks run, and how long each may take:
/// `[global] check_every` and `check_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub every: Duration,
    pub timeout: Duration,
}

impl Settings {
    /// When the round after one that started at `last` is due.
    pub fn due_after(&self, last: Instant) -> Instant {
        last + self.every
    }
}

/// The connect checks of a node.
#[derive(Debug)]
pub struct Checker {
    settings: watch::Sender<Settings>,
    timer: Mutex<Option<JoinHandle<()>>>,
}

impl Checker {
    pub fn new(settings: Settings) -> Checker {
        Checker {
            settings: watch::Sender::new(settings),
            timer: Mutex::new(None),
        }
    }

    /// The period and bound the checks use now.
    pub fn settings(&self) -> Settings {
        *self.settings.borrow()
    }

    /// New settings (a reload): the timer follows from its next round on.
    /// Returns whether they changed.
    pub fn set(&self, settings: Settings) -> bool {
        self.settings.send_if_modified(|current| {
            let changed = *current != settings;
            *current = settings;
            changed
        })
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
                tracing::debug!(every = ?self.settings().every, "connect checks started");
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
        let mut settings = self.settings.subscribe();
        loop {
            let started = Instant::now();
            self.round(&proxy).await;
            if !next_round(&mut settings, started).await {
                return;
            }
        }
    }

    /// One check of every checked replica, all at once.
    pub async fn round(&self, proxy: &Proxy) {
        let bound = self.settings().timeout;
        let mut checks = FuturesUnordered::new();
        for route in proxy.table().values() {
            let upstream = Arc::clone(&route.upstream);
            for replica in upstream.replicas().iter().filter(|r| r.checked) {
                let (upstream, replica) = (Arc::clone(&upstream), Arc::clone(replica));
                checks.push(async move {
                    let result = upstream.try_connect(&replica, bound).await;
                    let pooled = result.is_err() && upstream.pool.holds(&replica);
                    match checked(result, pooled) {
                        Checked::Passed => {
                            upstream.name_resolves(&replica, None);
                            upstream.observe(&replica, Observation::CheckOk);
                        }
                        Checked::NameGone(why) => upstream.name_resolves(&replica, Some(why)),
                        Checked::NodeShort => {}
                        Checked::Failed(failure) => {
                            upstream.connect_failed(&replica, &failure, false);
                        }
                    }
                });
            }
        }
        while checks.next().await.is_some() {}
    }
}

/// Waits until the round after one that started at `last` is due, by the
/// period in force while it waits: a reload that shortens the period ends
/// the wait at once when the new period has already passed. False when the
/// settings have no sender any more.
async fn next_round(settings: &mut watch::Receiver<Settings>, last: Instant) -> bool {
    loop {
        let due = settings.borrow_and_update().due_after(last);
        tokio::select! {
            () = sleep_until(due) => return true,
            changed = settings.changed() => {
                if changed.is_err() {
                    return false;
                }
            }
        }
    }
}

/// Keeps the check timer running exactly while there is something to check.
pub fn supervise(
    checker: Arc<Checker>,
    proxy: Arc<Proxy>,
    changes: &Changes,
    mut shutdown: Shutdown,
    tasks: &mut Tasks,
) {
    let mut changes = changes.subscribe();
    tasks.spawn("checks", async move {
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

/// What one check says of its replica.
#[derive(Debug, PartialEq)]
enum Checked {
    /// A request could connect.
    Passed,
    /// Its name no longer resolves, but pooled connections still reach
    /// it: requests are served, and new connects would fail. Said, not
    /// ejected.
    NameGone(String),
    /// The node's own shortage: nothing of the replica, no verdict.
    NodeShort,
    Failed(ConnectFailure),
}

/// Decides what a check's `result` says, `pooled`: whether open
/// connections to the replica wait in the pool.
fn checked(result: Result<(), ConnectFailure>, pooled: bool) -> Checked {
    match result {
        Ok(()) => Checked::Passed,
        Err(ConnectFailure::Unresolvable(why)) if pooled => Checked::NameGone(why),
        Err(ConnectFailure::Local(_)) => Checked::NodeShort,
        Err(failure) => Checked::Failed(failure),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_gone_from_dns_is_said_while_pooled_connections_serve() {
        let gone = || {
            Err(ConnectFailure::Unresolvable(
                "resolving h: no such host".into(),
            ))
        };
        assert_eq!(checked(Ok(()), false), Checked::Passed);
        assert_eq!(
            checked(gone(), true),
            Checked::NameGone("resolving h: no such host".into())
        );
        // Nothing reaches it any more: a failed check, as any.
        assert!(matches!(
            checked(gone(), false),
            Checked::Failed(ConnectFailure::Unresolvable(_))
        ));
        assert!(matches!(
            checked(Err(ConnectFailure::Refused), true),
            Checked::Failed(ConnectFailure::Refused)
        ));
        assert_eq!(
            checked(Err(ConnectFailure::Local("EMFILE".into())), true),
            Checked::NodeShort
        );
    }

    fn every(secs: u64) -> Settings {
        Settings {
            every: Duration::from_secs(secs),
            timeout: Duration::from_secs(2),
        }
    }

    /// How long after `last` the wait for the next round ends, when the
    /// period becomes `to` seconds `at` seconds into the wait.
    async fn wait_with_change(from: u64, at: u64, to: u64) -> Duration {
        let (sender, mut settings) = watch::channel(every(from));
        let last = Instant::now();
        let wait = tokio::spawn(async move {
            assert!(next_round(&mut settings, last).await);
            last.elapsed()
        });
        tokio::time::sleep(Duration::from_secs(at)).await;
        sender.send_replace(every(to));
        wait.await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_period_moves_the_next_round() {
        let s = Duration::from_secs;
        // (period before, change after, period after) → round due after
        let cases = [
            // Shortened past its new end: the round is due at once.
            ((30, 5, 1), s(5)),
            // Shortened, not yet past: due one new period after the last.
            ((30, 5, 10), s(10)),
            // Lengthened: the old due time no longer holds.
            ((10, 5, 30), s(30)),
            // No change until the round is due.
            ((3, 10, 1), s(3)),
        ];
        for ((from, at, to), due) in cases {
            assert_eq!(
                wait_with_change(from, at, to).await,
                due,
                "{from}s, then {to}s after {at}s"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_when_the_checker_is_gone() {
        let (sender, mut settings) = watch::channel(every(30));
        drop(sender);
        assert!(!next_round(&mut settings, Instant::now()).await);
    }
}
