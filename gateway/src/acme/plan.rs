//! What the node does about each certificate, decided from what it knows:
//! pure, with the time given.
//!
//! - **Who orders**: rendezvous hashing of the certificate's name over
//!   the live nodes that manage it ([`orderer`]). Every node reckons the
//!   same one from the same members; when that node dies, the next one
//!   takes its orders, and no other certificate moves. A node whose last
//!   order failed (it cannot reach the CA, say) is passed over while
//!   another is not failing ([`orderer_among`]), so its orders go to the
//!   next node too.
//! - **When**: with no certificate, at once; else at two thirds of its
//!   lifetime ([`renew_at`]); after a failure, not before the back-off
//!   ends. Never while another live node says it is ordering it, nor
//!   while another live node serves one that is not due: that one is on
//!   its way through gossip (a node that joins later orders nothing).
//! - **Which certificate serves**: the newest known, wherever it came
//!   from (this node's cache, any node's gossip): the one that expires
//!   last ([`newest`]).

use picket_proto::acme::Phase;

/// A certificate as the planner weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub serial: String,
    pub not_before: i64,
    pub not_after: i64,
    /// Tells two certificates with the same dates apart.
    pub digest: String,
}

/// When a certificate valid from `not_before` to `not_after` is renewed:
/// at two thirds of its lifetime (Let's Encrypt's 90 days: at day 60).
pub fn renew_at(not_before: i64, not_after: i64) -> i64 {
    not_before + (not_after - not_before).max(0) * 2 / 3
}

/// The node that orders the certificate named `name`: of `candidates`,
/// the one with the highest SHA-256 of its name and the certificate's.
pub fn orderer<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|node| (score(node, name), node))
        .max()
        .map(|(_, node)| node)
}

/// The node that passes on the certificate `serial` of `name`, of those
/// that serve it (`holders`): rendezvous hashing, as for the orderer, so
/// that every node reckons the same one and one copy travels.
pub fn passer<'a>(
    name: &str,
    serial: &str,
    holders: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    orderer(&format!("{name}/{serial}"), holders)
}

/// The orderer of `name` among `candidates` (node, its last order
/// failed): of those not failing, else of all.
pub fn orderer_among<'a>(name: &str, candidates: &[(&'a str, bool)]) -> Option<&'a str> {
    let standing = candidates
        .iter()
        .filter(|(_, failing)| !failing)
        .map(|(node, _)| *node);
    orderer(name, standing).or_else(|| orderer(name, candidates.iter().map(|(node, _)| *node)))
}

fn score(node: &str, name: &str) -> [u8; 32] {
    let mut context = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    context.update(node.as_bytes());
    context.update(&[0]);
    context.update(name.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// The newest of `held`: the one that expires last; of two, the one
/// issued last, then the larger digest, so that every node picks the same.
pub fn newest<'a>(held: impl IntoIterator<Item = &'a Held>) -> Option<&'a Held> {
    held.into_iter().max_by(|a, b| {
        (a.not_after, a.not_before, &a.digest).cmp(&(b.not_after, b.not_before, &b.digest))
    })
}

/// Whether the certificate `held` (none yet: `None`) is to be ordered at
/// `now`.
pub fn due(held: Option<&Held>, now: i64) -> bool {
    held.is_none_or(|held| now >= renew_at(held.not_before, held.not_after))
}

/// What the node knows of one certificate at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    pub now: i64,
    pub me: &'a str,
    /// The orderer by [`orderer`]; `None` when nobody manages it (this
    /// node has not said it does yet).
    pub orderer: Option<&'a str>,
    /// The certificate this node serves.
    pub held: Option<&'a Held>,
    /// This node has an order of it under way.
    pub ordering: bool,
    /// Another live node says it is ordering it.
    pub ordered_elsewhere: bool,
    /// Another live node serves one that is not due yet.
    pub fresh_elsewhere: bool,
    /// After a failure: when this node may order again.
    pub retry_at: Option<i64>,
}

/// Whether this node starts an order now.
pub fn start(s: &Situation<'_>) -> bool {
    s.orderer == Some(s.me)
        && due(s.held, s.now)
        && !s.ordering
        && !s.ordered_elsewhere
        && !s.fresh_elsewhere
        && s.retry_at.is_none_or(|at| s.now >= at)
}

/// The phase a node reports: it `held` a certificate, is `ordering`, its
/// last order `failed`.
pub fn phase(held: bool, ordering: bool, failed: bool) -> Phase {
    match (held, ordering) {
        (false, true) => Phase::Ordering,
        (true, true) => Phase::Renewing,
        _ if failed => Phase::Failing,
        (true, false) => Phase::Serving,
        (false, false) => Phase::Waiting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(not_before: i64, not_after: i64) -> Held {
        Held {
            serial: format!("{not_before:x}"),
            not_before,
            not_after,
            digest: format!("{not_after:064x}"),
        }
    }

    #[test]
    fn renewal_is_at_two_thirds() {
        assert_eq!(renew_at(0, 90 * 86_400), 60 * 86_400);
        assert_eq!(renew_at(1_000, 1_090), 1_060);
        assert_eq!(
            renew_at(10, 5),
            10,
            "a backwards certificate is due at once"
        );
        assert!(due(None, 0));
        assert!(!due(Some(&held(1_000, 1_090)), 1_059));
        assert!(due(Some(&held(1_000, 1_090)), 1_060));
    }

    #[test]
    fn every_node_reckons_the_same_orderer_and_a_dead_one_moves_only_its_own() {
        let nodes = ["a", "b", "c", "d", "e"];
        let names: Vec<String> = (0..200).map(|i| format!("site{i}.example.com")).collect();
        let mut order = nodes;
        order.reverse();
        for name in &names {
            assert_eq!(
                orderer(name, nodes),
                orderer(name, order),
                "order of members"
            );
        }
        // Spread: every node orders some.
        for node in nodes {
            let count = names
                .iter()
                .filter(|n| orderer(n, nodes) == Some(node))
                .count();
            assert!(count > 10, "{node} orders {count} of 200");
        }
        // Without "c", only c's certificates move.
        let without: Vec<&str> = nodes.iter().copied().filter(|n| *n != "c").collect();
        for name in &names {
            let before = orderer(name, nodes).unwrap();
            let after = orderer(name, without.iter().copied()).unwrap();
            if before != "c" {
                assert_eq!(before, after, "{name} moved from {before}");
            } else {
                assert_ne!(after, "c");
            }
        }
        assert_eq!(orderer("x", []), None);
    }

    #[test]
    fn a_failing_node_is_passed_over_while_another_is_not_failing() {
        let nodes = ["a", "b", "c"];
        let first = orderer("shop.example.com", nodes).unwrap();
        let all_well: Vec<(&str, bool)> = nodes.iter().map(|n| (*n, false)).collect();
        assert_eq!(orderer_among("shop.example.com", &all_well), Some(first));
        let first_failing: Vec<(&str, bool)> = nodes.iter().map(|n| (*n, *n == first)).collect();
        let next = orderer_among("shop.example.com", &first_failing).unwrap();
        assert_ne!(next, first);
        let rest: Vec<&str> = nodes.iter().copied().filter(|n| *n != first).collect();
        assert_eq!(
            Some(next),
            orderer("shop.example.com", rest),
            "the next by rendezvous"
        );
        let all_failing: Vec<(&str, bool)> = nodes.iter().map(|n| (*n, true)).collect();
        assert_eq!(orderer_among("shop.example.com", &all_failing), Some(first));
        assert_eq!(orderer_among("shop.example.com", &[]), None);
    }

    #[test]
    fn the_newest_certificate_wins_wherever_it_is_held() {
        let (old, new, same_dates) = (held(0, 100), held(50, 150), held(60, 150));
        assert_eq!(newest([&old, &new]), Some(&new));
        assert_eq!(newest([&new, &old]), Some(&new));
        assert_eq!(newest([&new, &same_dates]), Some(&same_dates));
        assert_eq!(newest([]), None);
    }

    #[test]
    fn only_the_orderer_starts_and_only_when_due_and_free() {
        let cert = held(1_000, 1_090);
        let base = Situation {
            now: 1_060,
            me: "a",
            orderer: Some("a"),
            held: Some(&cert),
            ordering: false,
            ordered_elsewhere: false,
            fresh_elsewhere: false,
            retry_at: None,
        };
        assert!(start(&base));
        let cases = [
            Situation {
                orderer: Some("b"),
                ..base
            },
            Situation {
                orderer: None,
                ..base
            },
            Situation { now: 1_059, ..base },
            Situation {
                ordering: true,
                ..base
            },
            Situation {
                ordered_elsewhere: true,
                ..base
            },
            Situation {
                fresh_elsewhere: true,
                held: None,
                ..base
            },
            Situation {
                retry_at: Some(1_061),
                ..base
            },
        ];
        for case in cases {
            assert!(!start(&case), "{case:?}");
        }
        assert!(start(&Situation {
            retry_at: Some(1_060),
            ..base
        }));
        assert!(start(&Situation {
            held: None,
            now: 0,
            ..base
        }));
        // held, ordering, failed
        let cases = [
            ((true, false, false), Phase::Serving),
            ((true, true, false), Phase::Renewing),
            ((false, true, true), Phase::Ordering),
            ((true, false, true), Phase::Failing),
            ((false, false, true), Phase::Failing),
            ((false, false, false), Phase::Waiting),
        ];
        for ((held, ordering, failed), expected) in cases {
            assert_eq!(
                phase(held, ordering, failed),
                expected,
                "{held} {ordering} {failed}"
            );
        }
    }
}
