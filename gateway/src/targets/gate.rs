//! One choke point per runtime API endpoint (the Kubernetes API server;
//! each Docker engine or socket proxy): every call a node makes to it
//! passes a [`Gate`], which holds the endpoint's breaker
//! ([`crate::breaker::Machine`], the same state machine as a route's).
//!
//! - A call that gets no HTTP answer (connect refused, DNS, no answer in
//!   time, the connection dropped) is a failure; `failures` of them in a
//!   row open the breaker for `cooldown`. Any HTTP answer, a 4xx or 5xx
//!   included, proves the endpoint reachable: a success.
//! - While open, every call is refused before any I/O: no DNS, no connect,
//!   no watch reconnect, no probe. After the cool-down one call goes
//!   through as the trial; its answer closes the breaker.
//! - One log line when the breaker opens and one when it closes; none per
//!   refused call, none per failed trial (the endpoint is still down, as
//!   already said). Every opening counts as a trip in the metrics.
//!
//! The gate also keeps the time of the endpoint's last sign of life (a
//! response head or any bytes of a body, such as a watch event), so that a
//! probe goes out only when the endpoint has been quiet.
//!
//! For Kubernetes the gate is a tower layer ([`GateLayer`]) in the kube
//! client's stack, so the watchers, the reflectors and the probe all pass
//! through it; Docker calls take a [`Permit`] by hand.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::{self, BreakerState, Machine, Outcome, Transition};
use crate::metrics::{Metrics, RuntimeGateMetrics};

/// The gates of every runtime API endpoint of a node.
#[derive(Debug)]
pub struct Gates {
    /// `None`: disabled, every call goes through.
    settings: Option<breaker::Settings>,
    metrics: Arc<Metrics>,
    by_endpoint: Mutex<BTreeMap<String, Arc<Gate>>>,
}

impl Gates {
    pub fn new(settings: Option<breaker::Settings>, metrics: Arc<Metrics>) -> Gates {
        Gates {
            settings,
            metrics,
            by_endpoint: Mutex::default(),
        }
    }

    /// The gate of `endpoint`, made on first use.
    pub fn get(&self, endpoint: &str) -> Arc<Gate> {
        let mut by_endpoint = self.by_endpoint.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(by_endpoint.entry(endpoint.to_string()).or_insert_with(|| {
            Arc::new(Gate::new(
                endpoint,
                self.settings,
                self.metrics.runtime_gate(endpoint),
            ))
        }))
    }
}

/// A call refused before any I/O: the endpoint's breaker is open.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{endpoint}: not called while its breaker is open ({} s left)", .retry_after.as_secs())]
pub struct Refused {
    pub endpoint: String,
    pub retry_after: Duration,
}

/// A trial call with no answer after this long has failed: an endpoint
/// that hangs must not hold its breaker half-open, refusing every other
/// call, for as long as it hangs (a watch request has no time limit).
pub const TRIAL_BOUND: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct GateState {
    breaker: Option<Machine>,
    /// The last sign of life.
    alive: Instant,
    /// When the trial under way was let through.
    trial_since: Option<Instant>,
}

/// The choke point of one runtime API endpoint.
#[derive(Debug)]
pub struct Gate {
    endpoint: String,
    state: Mutex<GateState>,
    metrics: RuntimeGateMetrics,
}

impl Gate {
    fn new(
        endpoint: &str,
        settings: Option<breaker::Settings>,
        metrics: RuntimeGateMetrics,
    ) -> Gate {
        metrics.state[0].set(1);
        Gate {
            endpoint: endpoint.to_string(),
            state: Mutex::new(GateState {
                breaker: settings.map(Machine::new),
                alive: Instant::now(),
                trial_since: None,
            }),
            metrics,
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets one call through, or refuses it before any I/O.
    pub fn admit(self: &Arc<Self>) -> Result<Permit, Refused> {
        let now = Instant::now();
        let (gate, given_up, transition) = {
            let mut state = self.lock();
            let state = &mut *state;
            let given_up = match (state.breaker.as_mut(), state.trial_since) {
                (Some(breaker), Some(since)) if now >= since + TRIAL_BOUND => {
                    state.trial_since = None;
                    breaker.record(breaker::Admission::Trial, Outcome::Failure, now)
                }
                _ => None,
            };
            let (gate, transition) = match state.breaker.as_mut() {
                Some(breaker) => breaker.admit(now),
                None => (breaker::Admission::Pass, None),
            };
            if gate == breaker::Admission::Trial {
                state.trial_since = Some(now);
            }
            (gate, given_up, transition)
        };
        if let Some(given_up) = given_up {
            self.note(
                given_up,
                Some("the trial call had no answer within its bound"),
            );
        }
        if let Some(transition) = transition {
            self.note(transition, None);
        }
        match gate {
            breaker::Admission::Refuse { retry_after } => {
                self.metrics.refused.inc();
                Err(Refused {
                    endpoint: self.endpoint.clone(),
                    retry_after,
                })
            }
            pass => Ok(Permit {
                gate: Arc::clone(self),
                pass,
                done: false,
            }),
        }
    }

    /// How long the breaker still refuses every call; `None` while calls
    /// go through.
    pub fn open_for(&self) -> Option<Duration> {
        let now = Instant::now();
        match self.lock().breaker.as_ref()?.state() {
            breaker::State::Open { until } if now < until => Some(until - now),
            _ => None,
        }
    }

    /// Whether the breaker is open (or half-open, waiting on its trial).
    pub fn phase(&self) -> BreakerState {
        self.lock()
            .breaker
            .as_ref()
            .map_or(BreakerState::Closed, |b| b.state().phase())
    }

    /// The endpoint showed a sign of life.
    pub fn alive(&self) {
        self.lock().alive = Instant::now();
    }

    /// When it last did.
    pub fn last_alive(&self) -> Instant {
        self.lock().alive
    }

    fn record(&self, pass: breaker::Admission, outcome: Outcome, why: Option<&str>) {
        let now = Instant::now();
        let transition = {
            let mut state = self.lock();
            if outcome == Outcome::Success {
                state.alive = now;
            }
            if pass == breaker::Admission::Trial {
                state.trial_since = None;
            }
            match state.breaker.as_mut() {
                Some(breaker) => breaker.record(pass, outcome, now),
                None => None,
            }
        };
        if let Some(transition) = transition {
            self.note(transition, why);
        }
    }

    /// One log line and the metrics of a change of state.
    fn note(&self, transition: Transition, why: Option<&str>) {
        for (i, phase) in [
            BreakerState::Closed,
            BreakerState::Open,
            BreakerState::HalfOpen,
        ]
        .into_iter()
        .enumerate()
        {
            self.metrics.state[i].set(i64::from(transition.to == phase));
        }
        let endpoint = self.endpoint.as_str();
        match (transition.from, transition.to) {
            (BreakerState::Closed, BreakerState::Open) => {
                self.metrics.trips.inc();
                let cooldown = self
                    .lock()
                    .breaker
                    .as_ref()
                    .map_or(Duration::ZERO, |b| b.settings().cooldown);
                tracing::info!(
                    endpoint,
                    failure = why.unwrap_or("no answer"),
                    reason = %transition.reason,
                    "runtime API breaker open: no calls to this endpoint for {}",
                    humantime::format_duration(cooldown)
                );
            }
            (_, BreakerState::Open) => {
                self.metrics.trips.inc();
                tracing::debug!(
                    endpoint,
                    failure = why.unwrap_or("no answer"),
                    "runtime API still not answering: breaker open again"
                );
            }
            (_, BreakerState::Closed) => {
                tracing::info!(endpoint, "runtime API answers again: breaker closed");
            }
            _ => {
                tracing::debug!(endpoint, reason = %transition.reason, "runtime API breaker half-open: one trial call")
            }
        }
    }
}

/// One call let through; it must say whether it got an HTTP answer. One
/// dropped unsaid is a call given up before any answer came: a failure.
#[derive(Debug)]
pub struct Permit {
    gate: Arc<Gate>,
    pass: breaker::Admission,
    done: bool,
}

impl Permit {
    /// The endpoint answered (any HTTP status).
    pub fn answered(mut self) {
        self.done = true;
        self.gate.record(self.pass, Outcome::Success, None);
    }

    /// No HTTP answer: connect, DNS, timeout, a dropped connection.
    pub fn failed(mut self, why: &dyn fmt::Display) {
        self.done = true;
        let why = why.to_string();
        self.gate.record(self.pass, Outcome::Failure, Some(&why));
    }

    /// Neither: the call ended for reasons of its own (a shutdown).
    pub fn abandon(mut self) {
        self.done = true;
        self.gate.record(self.pass, Outcome::Abandoned, None);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.done {
            self.gate.record(
                self.pass,
                Outcome::Failure,
                Some("no answer before the caller gave up"),
            );
        }
    }
}

/// Told of every successful (2xx) answer: proof that the endpoint serves,
/// not only that it is up.
pub type OnSuccess = Arc<dyn Fn() + Send + Sync>;

/// The gate as a tower layer: a kube client built with it calls the API
/// server only through the gate.
#[derive(Clone)]
pub struct GateLayer {
    gate: Arc<Gate>,
    on_success: Option<OnSuccess>,
}

impl std::fmt::Debug for GateLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateLayer")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl GateLayer {
    pub fn new(gate: Arc<Gate>) -> GateLayer {
        GateLayer {
            gate,
            on_success: None,
        }
    }

    /// Calls `hook` at every 2xx answer (a watch that starts again after
    /// an outage proves the data current, though no event follows).
    pub fn on_success(mut self, hook: OnSuccess) -> GateLayer {
        self.on_success = Some(hook);
        self
    }
}

impl<S> tower_layer::Layer<S> for GateLayer {
    type Service = Gated<S>;

    fn layer(&self, inner: S) -> Gated<S> {
        Gated {
            inner,
            gate: Arc::clone(&self.gate),
            on_success: self.on_success.clone(),
        }
    }
}

/// A service whose every call passes the gate.
#[derive(Clone)]
pub struct Gated<S> {
    inner: S,
    gate: Arc<Gate>,
    on_success: Option<OnSuccess>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Gated<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gated")
            .field("inner", &self.inner)
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, Req, B> tower_service::Service<Req> for Gated<S>
where
    S: tower_service::Service<Req, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<Alive<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let permit = match self.gate.admit() {
            Ok(permit) => permit,
            Err(refused) => return Box::pin(std::future::ready(Err(refused.into()))),
        };
        let call = self.inner.call(request);
        let gate = Arc::clone(&self.gate);
        let on_success = self.on_success.clone();
        Box::pin(async move {
            match call.await {
                Ok(response) => {
                    permit.answered();
                    if let Some(hook) = on_success.filter(|_| response.status().is_success()) {
                        hook();
                    }
                    Ok(response.map(|body| Alive { body, gate }))
                }
                Err(error) => {
                    let error: BoxError = error.into();
                    permit.failed(&error);
                    Err(error)
                }
            }
        })
    }
}

/// A response body whose every frame is a sign of the endpoint's life:
/// a watch event proves the API server there as well as a probe would.
#[derive(Debug)]
pub struct Alive<B> {
    body: B,
    gate: Arc<Gate>,
}

impl<B> http_body::Body for Alive<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            self.gate.alive();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates(threshold: u32) -> Gates {
        Gates::new(
            Some(breaker::Settings {
                failures: threshold,
                cooldown: Duration::from_secs(30),
            }),
            Arc::new(Metrics::new()),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_threshold_failures_refuses_then_lets_one_trial_through() {
        let gates = gates(2);
        let gate = gates.get("http://engine-a:2375");
        gate.admit().unwrap().failed(&"connection refused");
        assert_eq!(
            gate.phase(),
            BreakerState::Closed,
            "one failure is not enough"
        );
        gate.admit().unwrap().answered();
        gate.admit().unwrap().failed(&"connection refused");
        assert_eq!(
            gate.phase(),
            BreakerState::Closed,
            "an answer reset the count"
        );
        gate.admit().unwrap().failed(&"timed out");
        assert_eq!(gate.phase(), BreakerState::Open);
        let refused = gate.admit().unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(30));
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(gate.admit().is_err(), "still cooling down");
        assert_eq!(gate.open_for(), Some(Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(1)).await;
        let trial = gate.admit().expect("the trial");
        assert!(gate.admit().is_err(), "one trial at a time");
        trial.answered();
        assert_eq!(gate.phase(), BreakerState::Closed);
        assert!(gate.admit().is_ok());
        assert_eq!(gate.metrics.trips.get(), 1);
        assert_eq!(gate.metrics.refused.get(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trial_that_hangs_does_not_hold_the_breaker_half_open() {
        let gates = gates(1);
        let gate = gates.get("api");
        gate.admit().unwrap().failed(&"refused");
        tokio::time::advance(Duration::from_secs(30)).await;
        let hung = gate.admit().expect("the trial");
        assert!(
            gate.admit().is_err(),
            "refused while the trial is under way"
        );
        tokio::time::advance(TRIAL_BOUND).await;
        assert!(gate.admit().is_err(), "the hung trial failed: open again");
        assert_eq!(gate.phase(), BreakerState::Open);
        tokio::time::advance(Duration::from_secs(30)).await;
        gate.admit().expect("a new trial").answered();
        assert_eq!(gate.phase(), BreakerState::Closed);
        drop(hung);
        assert_eq!(
            gate.phase(),
            BreakerState::Closed,
            "the old trial's late end has no say"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_permit_given_up_is_a_failure_and_endpoints_are_apart() {
        let gates = gates(2);
        let a = gates.get("a");
        drop(a.admit().unwrap());
        drop(a.admit().unwrap());
        assert_eq!(a.phase(), BreakerState::Open, "two calls given up waiting");
        assert_eq!(
            gates.get("b").phase(),
            BreakerState::Closed,
            "one breaker per endpoint"
        );
        assert!(Arc::ptr_eq(&a, &gates.get("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_lets_everything_through() {
        let gates = Gates::new(None, Arc::new(Metrics::new()));
        let gate = gates.get("a");
        for _ in 0..10 {
            gate.admit().unwrap().failed(&"refused");
        }
        assert_eq!(gate.phase(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_refuses_without_calling_the_inner_service() {
        use tower_service::Service as _;
        let gates = gates(1);
        let gate = gates.get("api");
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let inner_calls = Arc::clone(&calls);
        let inner = tower_service_fn(move |fail: bool| {
            inner_calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if fail {
                    Err::<http::Response<http_body_util::Empty<bytes::Bytes>>, BoxError>(
                        "connection refused".into(),
                    )
                } else {
                    Ok(http::Response::builder()
                        .status(503)
                        .body(http_body_util::Empty::new())
                        .expect("static"))
                }
            }
        });
        let mut service = tower_layer::Layer::layer(&GateLayer::new(Arc::clone(&gate)), inner);
        assert!(service.call(true).await.is_err());
        assert_eq!(gate.phase(), BreakerState::Open);
        let refused = service.call(false).await.unwrap_err();
        assert!(refused.is::<Refused>(), "{refused}");
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "no I/O while open"
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        let answer = service.call(false).await.expect("the trial is let through");
        assert_eq!(answer.status(), 503);
        assert_eq!(gate.phase(), BreakerState::Closed, "a 503 is an answer");
    }

    /// A tower service from a closure.
    fn tower_service_fn<F, Fut, R>(f: F) -> FnService<F>
    where
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = R>,
    {
        FnService(f)
    }

    struct FnService<F>(F);

    impl<F, Fut, B> tower_service::Service<bool> for FnService<F>
    where
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = Result<http::Response<B>, BoxError>> + Send + 'static,
    {
        type Response = http::Response<B>;
        type Error = BoxError;
        type Future = Fut;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: bool) -> Fut {
            (self.0)(request)
        }
    }
}
