//! How an exchange ended, as the access log tells it and the metrics
//! count it: the termination state HAProxy writes in its logs, in words.
//!
//! An exchange is complete only when its answer, whoever wrote it, went
//! out to the client whole. Anything else names who or what ended it
//! ([`Cause`]) and where the exchange then stood ([`Phase`]): a replica
//! that closed mid-body is `replica_closed` in `body`, and the client got
//! a cut answer; one that closed before its head is `replica_closed` in
//! `head`, and the client got the node's 502, whole.
//!
//! ## Invariants
//! - A cut answer is never [`Cause::Complete`]: what the access log and
//!   `bytes_out` report is what was written to the client.
//! - [`Ending::incomplete`] is true exactly when the client did not get a
//!   whole answer; those are what `picket_responses_incomplete_total`
//!   counts.

/// Who or what ended an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The answer went out whole.
    Complete,
    /// The client closed or reset its connection, or stopped taking the
    /// answer, before the end.
    ClientGone,
    /// The replica closed or reset the connection (or refused it) before
    /// the end of what it owed.
    ReplicaClosed,
    /// The replica sent bytes that do not parse as HTTP.
    ReplicaUnparsable,
    /// The node refused: the request (its own answer, `decided_by` says
    /// why), or to frame an answer that did not fit its own head.
    NodeRefused,
    /// A bound fired: which one is the [`Bound`].
    Bound(Bound),
}

/// The bounds that end an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Connecting to a replica (TCP and TLS).
    Connect,
    /// From the end of the request to the answer's head.
    FirstAnswer,
    /// The client paused its request body past the body bound.
    ClientBody,
    /// The replica stopped reading the request body past the body bound.
    ReplicaBody,
    /// The client stopped taking the answer past the send bound.
    Send,
}

/// Where an exchange stood when it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading the client's request, or sending it on.
    Request,
    /// Connecting to a replica.
    Connect,
    /// Waiting for the answer's head.
    Head,
    /// Writing the answer to the client.
    Body,
    /// Carrying an upgraded connection (a WebSocket).
    Tunnel,
}

/// How an exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    pub cause: Cause,
    pub phase: Phase,
}

impl Cause {
    /// Every [`Cause::slug`] but `complete`: the `cause` labels of
    /// `picket_responses_incomplete_total`.
    pub const INCOMPLETE: [&'static str; 9] = [
        "client_gone",
        "replica_closed",
        "replica_unparsable",
        "node_refused",
        "bound_connect",
        "bound_first_answer",
        "bound_client_body",
        "bound_replica_body",
        "bound_send",
    ];

    /// The cause as a log field and a metric label.
    pub fn slug(self) -> &'static str {
        match self {
            Cause::Complete => "complete",
            Cause::ClientGone => "client_gone",
            Cause::ReplicaClosed => "replica_closed",
            Cause::ReplicaUnparsable => "replica_unparsable",
            Cause::NodeRefused => "node_refused",
            Cause::Bound(Bound::Connect) => "bound_connect",
            Cause::Bound(Bound::FirstAnswer) => "bound_first_answer",
            Cause::Bound(Bound::ClientBody) => "bound_client_body",
            Cause::Bound(Bound::ReplicaBody) => "bound_replica_body",
            Cause::Bound(Bound::Send) => "bound_send",
        }
    }
}

impl Phase {
    pub fn slug(self) -> &'static str {
        match self {
            Phase::Request => "request",
            Phase::Connect => "connect",
            Phase::Head => "head",
            Phase::Body => "body",
            Phase::Tunnel => "tunnel",
        }
    }
}

impl Ending {
    /// The answer went out whole.
    pub const COMPLETE: Ending = Ending {
        cause: Cause::Complete,
        phase: Phase::Body,
    };

    pub fn new(cause: Cause, phase: Phase) -> Ending {
        Ending { cause, phase }
    }

    /// The client did not get a whole answer: it left, or the answer was
    /// cut while it was going out.
    pub fn incomplete(self) -> bool {
        match self.cause {
            Cause::Complete => false,
            Cause::ClientGone => true,
            _ => self.phase == Phase::Body,
        }
    }

    /// The ending of an answer whose body stopped on an error of the
    /// replica's side: bytes that do not parse, or a connection that
    /// closed or failed before the end.
    pub fn of_replica_error(error: &std::io::Error) -> Ending {
        let cause = match error.kind() {
            std::io::ErrorKind::InvalidData => Cause::ReplicaUnparsable,
            _ => Cause::ReplicaClosed,
        };
        Ending::new(cause, Phase::Body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_answer_that_did_not_go_out_whole_is_incomplete() {
        use Cause::*;
        let table = [
            (Ending::COMPLETE, false),
            (Ending::new(ClientGone, Phase::Request), true),
            (Ending::new(ClientGone, Phase::Body), true),
            (Ending::new(ReplicaClosed, Phase::Body), true),
            (Ending::new(ReplicaUnparsable, Phase::Body), true),
            (Ending::new(NodeRefused, Phase::Body), true),
            // The node wrote its own answer (502, 504, 404) whole.
            (Ending::new(ReplicaClosed, Phase::Head), false),
            (Ending::new(ReplicaUnparsable, Phase::Head), false),
            (
                Ending::new(Bound(super::Bound::FirstAnswer), Phase::Head),
                false,
            ),
            (
                Ending::new(Bound(super::Bound::Connect), Phase::Connect),
                false,
            ),
            (Ending::new(NodeRefused, Phase::Request), false),
        ];
        for (ending, incomplete) in table {
            assert_eq!(ending.incomplete(), incomplete, "{ending:?}");
            if incomplete {
                assert!(Cause::INCOMPLETE.contains(&ending.cause.slug()));
            }
        }
    }

    #[test]
    fn replica_errors_name_their_cause() {
        let garbled = std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk");
        let short = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed mid-body");
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            Ending::of_replica_error(&garbled).cause,
            Cause::ReplicaUnparsable
        );
        assert_eq!(Ending::of_replica_error(&short).cause, Cause::ReplicaClosed);
        assert_eq!(Ending::of_replica_error(&reset).cause, Cause::ReplicaClosed);
    }
}
