//! The retry policy of one request, as a pure decider: what became of an
//! attempt in, the request's next step out. [`super::forward`] carries the
//! steps out (connections, writes, metrics); every rule lives here.
//!
//! ## Rules
//! - Nothing reached the upstream (a fresh connection to the replica
//!   failed): the next replica, for any method, while tries are left. (The
//!   first connect of an attempt races the next replicas by itself; when
//!   it finds none, the request is answered.)
//! - A pooled connection the upstream closed meanwhile, before answering:
//!   the same replica again on a fresh connection, without spending a try,
//!   when nothing of the body has been read or the request can be replayed.
//!   Once only: a second close is a failure like any other.
//! - No response head within the first-answer bound, a connection broken
//!   after the request was written, or an answer of 502, 503 or 504: the
//!   next replica only when the request can be replayed (an idempotent
//!   method, no body, no upgrade) and tries are left.
//! - A 503 to a gRPC call (or its `grpc-status` 14 UNAVAILABLE with no
//!   message): the replica says it did not process the call, so the next
//!   replica gets it, whatever its method, when its body was kept whole
//!   for a replay and tries are left.
//! - A replica that stopped reading the body, or a client body that broke:
//!   the answer, at once (part of the body has gone).
//! - Anything else: the answer.
//!
//! What a request is, for these rules ([`Standing::of`]): replayable when
//! its method is idempotent (RFC 9110 §9.2.2), it has no body and it is
//! no upgrade; a gRPC call's refusal resendable when its body is none or
//! was kept whole. A connect that raced past replicas that did not answer
//! counts each of them as a connect retry ([`raced`]).
//!
//! What an attempt tells of its replica's health ([`told`]): silence
//! (no head in time, or the body not read) ejects it sooner, an answer
//! counts as one, a broken exchange as a failure, except a pooled
//! connection closed before the request was answered: a keep-alive race,
//! no fault of the replica's.

use http::{Method, StatusCode};

/// What became of one attempt of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempted {
    /// No connection could be had: every untried replica was tried (the
    /// connect races them itself) or none is left.
    NoReplica,
    /// A fresh connection to the same replica, for a request whose pooled
    /// one was closed, failed: nothing reached it.
    NotConnected,
    /// A pooled connection turned out closed by the replica before any
    /// answer.
    ClosedUnanswered,
    /// No response head within the first-answer bound.
    TimedOut,
    /// The replica stopped reading the request for the body bound.
    Stalled,
    /// The client's body broke.
    ClientBody,
    /// The connection broke after the request was written.
    Failed,
    Answered(StatusCode),
}

/// Why a request moves on to another replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Nothing reached the replica.
    Connect,
    /// No answer within the first-answer bound.
    Timeout,
    /// A broken connection or a 502/503/504 answer.
    Answer,
}

/// What the request does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The same replica once more, on a fresh connection, without spending
    /// a try.
    Again,
    /// The next replica.
    Next(Retry),
    /// Done: the client gets this attempt's outcome (or, when it has none
    /// of its own, the last one kept).
    Answer,
}

/// Where the request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Idempotent, without a body, not an upgrade: safe to send again.
    pub replayable: bool,
    /// A gRPC call whose body is kept for a replay: sent again when a
    /// replica refuses it unprocessed (503).
    pub refusal_resendable: bool,
    /// Part of the body has been read from the client.
    pub body_started: bool,
    /// This attempt ran on a pooled connection, not yet retried fresh.
    pub reused: bool,
    /// Replicas tried so far, this one included.
    pub tried: usize,
    /// Attempts the request may make.
    pub tries: usize,
}

/// What a request is, before its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// Idempotent, without a body, not an upgrade.
    pub replayable: bool,
    pub grpc: bool,
    /// No body, or an empty one.
    pub bodiless: bool,
}

impl Kind {
    pub fn of(method: &Method, bodiless: bool, upgrade: bool, grpc: bool) -> Kind {
        Kind {
            replayable: bodiless && !upgrade && idempotent(method),
            grpc,
            bodiless,
        }
    }
}

/// Idempotent methods (RFC 9110 §9.2.2): sending one twice does what
/// sending it once does.
pub fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

impl Standing {
    /// Where a request of `kind` stands: `tried` replicas so far, `tries`
    /// allowed, part of its body read or not, this attempt on a pooled
    /// connection or not, its body `kept` whole for a replay or not.
    pub fn of(
        kind: Kind,
        tried: usize,
        tries: usize,
        body_started: bool,
        reused: bool,
        kept: bool,
    ) -> Standing {
        Standing {
            replayable: kind.replayable,
            refusal_resendable: kind.grpc && (kind.bodiless || kept),
            body_started,
            reused,
            tried,
            tries,
        }
    }
}

/// Replicas a connect raced past before one took it: it tried
/// `after - before` replicas, and the last is the one it got.
pub fn raced(before: usize, after: usize) -> usize {
    after.saturating_sub(before).saturating_sub(1)
}

/// What an attempt tells of its replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// No head in time, or the request's body not read: silence.
    Silent,
    /// An answer, of this status.
    Answered(StatusCode),
    /// The exchange broke.
    Unanswered,
    /// Nothing of the replica's health.
    Nothing,
}

/// What `attempted`, on a pooled connection or not (`reused`), tells of
/// the replica.
pub fn told(attempted: Attempted, reused: bool) -> Told {
    match attempted {
        Attempted::TimedOut | Attempted::Stalled => Told::Silent,
        Attempted::Answered(status) => Told::Answered(status),
        // A pooled connection the replica closed while idle: sent again
        // on a fresh one, no failure of the replica's.
        Attempted::ClosedUnanswered if reused => Told::Nothing,
        Attempted::ClosedUnanswered | Attempted::Failed => Told::Unanswered,
        Attempted::ClientBody | Attempted::NotConnected | Attempted::NoReplica => Told::Nothing,
    }
}

/// 502, 503 or 504: the upstream's way of saying it could not answer.
pub fn retryable_status(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

/// The next step of `request` after `attempted`.
pub fn next(attempted: Attempted, request: Standing) -> Step {
    let tries_left = request.tried < request.tries;
    let resend = request.replayable && tries_left;
    match attempted {
        Attempted::ClosedUnanswered
            if request.reused && (request.replayable || !request.body_started) =>
        {
            Step::Again
        }
        Attempted::NotConnected if tries_left => Step::Next(Retry::Connect),
        Attempted::TimedOut if resend => Step::Next(Retry::Timeout),
        Attempted::ClosedUnanswered | Attempted::Failed if resend => Step::Next(Retry::Answer),
        Attempted::Answered(status) if resend && retryable_status(status) => {
            Step::Next(Retry::Answer)
        }
        Attempted::Answered(StatusCode::SERVICE_UNAVAILABLE)
            if request.refusal_resendable && tries_left =>
        {
            Step::Next(Retry::Answer)
        }
        _ => Step::Answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome() {
        use Attempted::*;
        use Step::*;
        let get = Standing {
            replayable: true,
            refusal_resendable: false,
            body_started: false,
            reused: false,
            tried: 1,
            tries: 3,
        };
        let last_try = Standing { tried: 3, ..get };
        let post = Standing {
            replayable: false,
            body_started: true,
            ..get
        };
        let pooled = |r: Standing| Standing { reused: true, ..r };
        let unread_post = Standing {
            body_started: false,
            ..post
        };
        let grpc = Standing {
            refusal_resendable: true,
            ..post
        };
        let ok = Answered(StatusCode::OK);
        let unavailable = Answered(StatusCode::SERVICE_UNAVAILABLE);
        let bug = Answered(StatusCode::INTERNAL_SERVER_ERROR);
        let cases = [
            // No replica could be had: answered.
            (NoReplica, get, Answer),
            // Nothing reached the replica: any method moves on.
            (NotConnected, get, Next(Retry::Connect)),
            (NotConnected, post, Next(Retry::Connect)),
            (NotConnected, last_try, Answer),
            // A pooled connection closed under us: again, fresh, if safe.
            (ClosedUnanswered, pooled(get), Again),
            (ClosedUnanswered, pooled(last_try), Again),
            (ClosedUnanswered, pooled(unread_post), Again),
            (ClosedUnanswered, pooled(post), Answer),
            // Closed again on the fresh connection: a failure.
            (ClosedUnanswered, get, Next(Retry::Answer)),
            (ClosedUnanswered, post, Answer),
            // Silence, breaks and gateway errors: replayable requests only.
            (TimedOut, get, Next(Retry::Timeout)),
            (TimedOut, post, Answer),
            (TimedOut, last_try, Answer),
            (Failed, get, Next(Retry::Answer)),
            (Failed, post, Answer),
            (unavailable, get, Next(Retry::Answer)),
            (Answered(StatusCode::BAD_GATEWAY), get, Next(Retry::Answer)),
            (
                Answered(StatusCode::GATEWAY_TIMEOUT),
                get,
                Next(Retry::Answer),
            ),
            (unavailable, post, Answer),
            (unavailable, last_try, Answer),
            // A gRPC call refused unprocessed, its body kept: moves on;
            // anything else of it is answered like any POST.
            (unavailable, grpc, Next(Retry::Answer)),
            (unavailable, Standing { tried: 3, ..grpc }, Answer),
            (Answered(StatusCode::BAD_GATEWAY), grpc, Answer),
            (TimedOut, grpc, Answer),
            (Failed, grpc, Answer),
            // A 500 is the service's answer, not its absence.
            (bug, get, Answer),
            (ok, get, Answer),
            // Part of the body has gone: never again.
            (Stalled, get, Answer),
            (Stalled, post, Answer),
            (ClientBody, post, Answer),
        ];
        for (attempted, request, step) in cases {
            assert_eq!(next(attempted, request), step, "{attempted:?} {request:?}");
        }
    }

    #[test]
    fn what_a_request_is() {
        let get = Kind::of(&Method::GET, true, false, false);
        assert!(get.replayable);
        assert!(
            !Kind::of(&Method::GET, false, false, false).replayable,
            "a body"
        );
        assert!(
            !Kind::of(&Method::GET, true, true, false).replayable,
            "an upgrade"
        );
        assert!(!Kind::of(&Method::POST, true, false, false).replayable);
        assert!(!Kind::of(&Method::PATCH, true, false, false).replayable);
        for method in [
            Method::HEAD,
            Method::OPTIONS,
            Method::TRACE,
            Method::PUT,
            Method::DELETE,
        ] {
            assert!(Kind::of(&method, true, false, false).replayable, "{method}");
        }
        // A gRPC call's refusal is resent when its body is none or kept.
        let call = Kind::of(&Method::POST, false, false, true);
        assert!(Standing::of(call, 1, 3, true, false, true).refusal_resendable);
        assert!(!Standing::of(call, 1, 3, true, false, false).refusal_resendable);
        let empty_call = Kind::of(&Method::POST, true, false, true);
        assert!(Standing::of(empty_call, 1, 3, false, false, false).refusal_resendable);
        let plain_post = Kind::of(&Method::POST, false, false, false);
        assert!(!Standing::of(plain_post, 1, 3, true, false, true).refusal_resendable);
    }

    #[test]
    fn a_connect_that_raced_counts_the_replicas_it_passed() {
        assert_eq!(raced(0, 1), 0, "the first replica took it");
        assert_eq!(raced(0, 3), 2);
        assert_eq!(raced(2, 3), 0);
        assert_eq!(raced(3, 3), 0, "nothing tried: nothing raced");
    }

    #[test]
    fn what_an_attempt_tells_of_its_replica() {
        use Attempted::*;
        let cases = [
            (TimedOut, false, Told::Silent),
            (Stalled, true, Told::Silent),
            (
                Answered(StatusCode::OK),
                false,
                Told::Answered(StatusCode::OK),
            ),
            (
                Answered(StatusCode::BAD_GATEWAY),
                true,
                Told::Answered(StatusCode::BAD_GATEWAY),
            ),
            (ClosedUnanswered, true, Told::Nothing),
            (ClosedUnanswered, false, Told::Unanswered),
            (Failed, true, Told::Unanswered),
            (Failed, false, Told::Unanswered),
            (ClientBody, false, Told::Nothing),
            (NotConnected, false, Told::Nothing),
            (NoReplica, false, Told::Nothing),
        ];
        for (attempted, reused, expected) in cases {
            assert_eq!(
                told(attempted, reused),
                expected,
                "{attempted:?}, reused {reused}"
            );
        }
    }
}
