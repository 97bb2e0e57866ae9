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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::changes::Changes;
use crate::proxy::{Proxy, Route};
use crate::shutdown::{Shutdown, Tasks};
use crate::upstream::health::{EjectReason, Observation};
use crate::upstream::{ConnectFailure, Replica, Upstream};

/// How often connect checks run, and how long each may take:
/// `[global] check_every` and `check_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub every: Duration,
    pub timeout: Duration,
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
    fn ensure(self: &Arc<Self>, proxy: &Arc<Proxy>, changes: &watch::Receiver<u64>) {
        let needed = proxy.table().values().any(|route| checks_any(route));
        let mut timer = self.timer.lock().unwrap_or_else(|e| e.into_inner());
        match (needed, timer.is_some()) {
            (true, false) => {
                let (checker, proxy) = (Arc::clone(self), Arc::clone(proxy));
                let changes = changes.clone();
                *timer = Some(tokio::spawn(
                    async move { checker.run(proxy, changes).await },
                ));
                tracing::debug!(every = ?self.settings().every, "checks started");
            }
            (false, true) => {
                if let Some(task) = timer.take() {
                    task.abort();
                }
                tracing::debug!("checks stopped: nothing to check");
            }
            _ => {}
        }
    }

    /// Checks each route when it is due, by its own period or the
    /// node's; wakes when a check ends, the settings change, or anything
    /// that may change the table does.
    async fn run(&self, proxy: Arc<Proxy>, mut changes: watch::Receiver<u64>) {
        let mut settings = self.settings.subscribe();
        let mut schedule = Schedule::default();
        let mut running = FuturesUnordered::new();
        loop {
            let node = *settings.borrow_and_update();
            let table = proxy.table();
            let routes: Vec<&Arc<Route>> = table.values().filter(|r| checks_any(r)).collect();
            let periods: Vec<(&str, Duration)> = routes
                .iter()
                .map(|r| {
                    let every = r.config.check_every.unwrap_or(node.every);
                    (r.config.name.as_str(), period(every, refusing_new(r)))
                })
                .collect();
            let (due, next) = schedule.due(&periods, Instant::now());
            for i in due {
                let route = Arc::clone(routes[i]);
                let bound = route.config.check_timeout.unwrap_or(node.timeout);
                running.push(async move {
                    check_route(&route, bound).await;
                    route.config.name.clone()
                });
            }
            drop(periods);
            drop(routes);
            drop(table);
            let next = next.unwrap_or_else(|| Instant::now() + node.every);
            tokio::select! {
                Some(name) = running.next() => schedule.done(&name),
                () = sleep_until(next) => {}
                changed = settings.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                Ok(()) = changes.changed() => {}
            }
        }
    }

    /// One check of every checked replica of every route, all at once, by
    /// the node's bound: what a test asks for.
    pub async fn round(&self, proxy: &Proxy) {
        let bound = self.settings().timeout;
        let table = proxy.table();
        let mut checks: FuturesUnordered<_> = table
            .values()
            .filter(|r| checks_any(r))
            .map(|route| check_route(route, route.config.check_timeout.unwrap_or(bound)))
            .collect();
        while checks.next().await.is_some() {}
    }
}

/// How often a route is checked while a replica refuses new connections
/// (orange: its name gone, its certificate refused) at the most: what ends
/// it (the name back, the certificate renewed) is seen within this.
pub const WHILE_REFUSED: Duration = Duration::from_secs(2);

/// A route's period: `every`, or at most [`WHILE_REFUSED`] while one of
/// its replicas refuses new connections.
fn period(every: Duration, refusing: bool) -> Duration {
    match refusing {
        true => every.min(WHILE_REFUSED),
        false => every,
    }
}

/// Whether a replica of the route refuses new connections while pooled
/// ones serve.
fn refusing_new(route: &Route) -> bool {
    route
        .upstream
        .replicas()
        .iter()
        .any(|r| r.new_refused().is_some())
}

/// Whether the route has a replica this node checks.
fn checks_any(route: &Route) -> bool {
    let upstream = &route.upstream;
    upstream.replicas().iter().any(|r| is_checked(upstream, r))
}

/// Whether this node checks `replica`: a connect check for one no runtime
/// reports on; an HTTP or gRPC check, asked for by its route, for every
/// replica (the runtime says it runs, the check that it answers).
fn is_checked(upstream: &Upstream, replica: &Replica) -> bool {
    replica.checked || upstream.check.answers()
}

/// One check of every checked replica of `route`, all at once, each
/// within `bound`. A check that the replica answered (HTTP, gRPC) also
/// lets an open circuit past its cool-down close.
async fn check_route(route: &Route, bound: Duration) {
    let upstream = &route.upstream;
    let answers = upstream.check.answers();
    let mut checks = FuturesUnordered::new();
    for replica in upstream
        .replicas()
        .iter()
        .filter(|r| is_checked(upstream, r))
    {
        let replica = Arc::clone(replica);
        checks.push(async move {
            let result = upstream.try_connect(&replica, bound).await;
            let pooled = result.is_err() && upstream.pool.holds(&replica);
            match checked(result, pooled) {
                Checked::Passed => {
                    upstream.new_connections(&replica, None);
                    match answers {
                        true => upstream.check_answered(&replica),
                        false => upstream.observe(&replica, Observation::CheckOk),
                    }
                    return answers;
                }
                Checked::NewRefused(why) => upstream.new_connections(&replica, Some(why)),
                Checked::NodeShort => {}
                Checked::Failed(failure) => {
                    // Nothing serves it any more: the ejection says so.
                    upstream.pooled_gone(&replica);
                    upstream.connect_failed(&replica, &failure, false);
                }
            }
            false
        });
    }
    let mut answered = false;
    while let Some(one) = checks.next().await {
        answered |= one;
    }
    if answered && let Some(breaker) = &route.breaker {
        breaker.check_answered();
    }
}

/// When each route's checks last started, and which are under way: the
/// pure part of the timer.
#[derive(Debug, Default)]
struct Schedule {
    last: HashMap<String, Instant>,
    busy: HashSet<String>,
}

impl Schedule {
    /// Of `routes` (each a name and its period), the indices of those due
    /// at `now` (one period after their last start, or never checked) and
    /// not still being checked, each marked as started now; and when the
    /// next one is due. The period is read afresh each time: a reload that
    /// shortens it makes a round due at once when the new period has
    /// passed, and one that lengthens it moves the round later. A route
    /// gone from `routes` is forgotten.
    fn due(&mut self, routes: &[(&str, Duration)], now: Instant) -> (Vec<usize>, Option<Instant>) {
        self.last
            .retain(|name, _| routes.iter().any(|(n, _)| *n == name.as_str()));
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (i, &(name, every)) in routes.iter().enumerate() {
            let at = self.last.get(name).map_or(now, |last| *last + every);
            let wake = if at > now {
                at
            } else if self.busy.contains(name) {
                // Due while its last check is under way: looked at again
                // when that check ends.
                continue;
            } else {
                self.last.insert(name.to_string(), now);
                self.busy.insert(name.to_string());
                due.push(i);
                now + every
            };
            next = Some(next.map_or(wake, |n| n.min(wake)));
        }
        (due, next)
    }

    /// The check of `name` ended.
    fn done(&mut self, name: &str) {
        self.busy.remove(name);
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
            checker.ensure(&proxy, &changes);
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
    /// New connections fail (its name no longer resolves, its certificate
    /// is refused), but pooled connections still reach it: requests are
    /// served over those. Said, not ejected; red once only new
    /// connections are left.
    NewRefused(String),
    /// The node's own shortage: nothing of the replica, no verdict.
    NodeShort,
    Failed(ConnectFailure),
}

/// Decides what a check's `result` says, `pooled`: whether connections
/// to the replica are open in the pool or in use.
fn checked(result: Result<(), ConnectFailure>, pooled: bool) -> Checked {
    match result {
        Ok(()) => Checked::Passed,
        Err(ConnectFailure::Unresolvable(why)) if pooled => {
            Checked::NewRefused(format!("name does not resolve ({why})"))
        }
        Err(ConnectFailure::Tls { failure, .. }) if pooled && failure.is_certificate() => {
            Checked::NewRefused(EjectReason::Tls(failure).to_string())
        }
        Err(ConnectFailure::Local(_)) => Checked::NodeShort,
        Err(failure) => Checked::Failed(failure),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_connections_refused_are_said_while_pooled_connections_serve() {
        use crate::upstream::handshake::TlsFailure;
        let gone = || {
            Err(ConnectFailure::Unresolvable(
                "resolving h: no such host".into(),
            ))
        };
        assert_eq!(checked(Ok(()), false), Checked::Passed);
        assert_eq!(
            checked(gone(), true),
            Checked::NewRefused("name does not resolve (resolving h: no such host)".into())
        );
        // A certificate refused to a new handshake, while connections made
        // before it serve: the same. Another TLS fault is a failure.
        let tls = |failure| {
            Err(ConnectFailure::Tls {
                failure,
                detail: "invalid peer certificate".into(),
            })
        };
        assert_eq!(
            checked(tls(TlsFailure::Expired), true),
            Checked::NewRefused(
                "TLS handshake: invalid peer certificate: certificate expired".into()
            )
        );
        assert!(matches!(
            checked(tls(TlsFailure::Expired), false),
            Checked::Failed(ConnectFailure::Tls { .. })
        ));
        assert!(matches!(
            checked(tls(TlsFailure::NotTls), true),
            Checked::Failed(ConnectFailure::Tls { .. })
        ));
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

    /// When each round of a route with period `from` seconds starts, in a
    /// schedule whose period becomes `to` seconds `at` seconds after the
    /// first round, each check taking no time.
    fn rounds_with_change(from: u64, at: u64, to: u64) -> Vec<u64> {
        let start = Instant::now();
        let mut schedule = Schedule::default();
        let mut rounds = Vec::new();
        let mut now = start;
        while now < start + Duration::from_secs(40) {
            let secs = (now - start).as_secs();
            let every = Duration::from_secs(if secs >= at { to } else { from });
            let (due, next) = schedule.due(&[("api", every)], now);
            if !due.is_empty() {
                rounds.push(secs);
                schedule.done("api");
            }
            // The timer wakes when the next round is due, or when the
            // settings change.
            let change = start + Duration::from_secs(at);
            now = match next {
                Some(next) if now < change && change < next => change,
                Some(next) => next,
                None => break,
            };
        }
        rounds
    }

    #[test]
    fn a_new_period_moves_the_next_round() {
        // (period before, change after, period after) → rounds
        let cases = [
            // Shortened past its new end: the round is due at once.
            ((30, 5, 1), vec![0, 5, 6, 7]),
            // Shortened, not yet past: due one new period after the last.
            ((30, 5, 10), vec![0, 10, 20, 30]),
            // Lengthened: the old due time no longer holds.
            ((10, 5, 30), vec![0, 30]),
            // No change until the round is due.
            ((3, 10, 1), vec![0, 3, 6, 9, 10, 11]),
        ];
        for ((from, at, to), rounds) in cases {
            let got = rounds_with_change(from, at, to);
            assert_eq!(
                got[..rounds.len().min(got.len())],
                rounds[..],
                "{from}s, then {to}s after {at}s"
            );
        }
    }

    /// Each route by its own period; one whose check is still under way
    /// is not started twice, and is due again when it ends.
    #[test]
    fn each_route_by_its_own_period_and_never_twice_at_once() {
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut schedule = Schedule::default();
        let routes = [("fast", s(1)), ("slow", s(30))];
        assert_eq!(schedule.due(&routes, t0), (vec![0, 1], Some(t0 + s(1))));
        schedule.done("fast");
        // "slow" is still being checked at its due time.
        assert_eq!(schedule.due(&routes, t0 + s(1)), (vec![0], Some(t0 + s(2))));
        schedule.done("fast");
        let (due, next) = schedule.due(&routes, t0 + s(31));
        assert_eq!(due, [0], "slow is busy: not started twice");
        assert_eq!(next, Some(t0 + s(32)));
        schedule.done("slow");
        assert_eq!(
            schedule.due(&routes, t0 + s(31)).0,
            [1],
            "due when its check ends"
        );
        // A route gone from the table is forgotten: back, it is due at once.
        schedule.done("fast");
        schedule.done("slow");
        assert_eq!(schedule.due(&routes[..1], t0 + s(32)).0, [0]);
        schedule.done("fast");
        assert_eq!(schedule.due(&routes, t0 + s(32)).0, [1]);
    }

    /// While a replica refuses new connections, its route is checked every
    /// 2 s at the most, so that a name back or a certificate renewed is
    /// seen soon; a shorter period stays.
    #[test]
    fn an_orange_route_is_checked_sooner() {
        let s = Duration::from_secs;
        assert_eq!(period(s(30), false), s(30));
        assert_eq!(period(s(30), true), WHILE_REFUSED);
        assert_eq!(period(s(1), true), s(1));
    }
}
