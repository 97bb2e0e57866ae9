//! A node's verdict on a route, as a pure function of what it knows: the
//! replicas' states (from the runtime or the connect checks, and this
//! node's own ejections) and its circuit.
//!
//! ## Hearts
//! - green: every replica is ready (an external host accepts connections,
//!   TLS handshake included for an `https://` one);
//! - orange: some replicas are ready, not all;
//! - red: none is ready, the service is scaled to zero, the host refuses,
//!   or the circuit is open — whatever the runtime says: real traffic wins.
//!
//! A replica this node ejected counts as not ready here: that is how "red
//! on n3 only" shows.
//!
//! ## Images
//! A replica runs one image or more (a pod's app and its sidecars). A
//! verdict lists each distinct image label with how many replicas run it,
//! most replicas first, then by label; a replica counts once for each of
//! its images. A label keeps the start of the digest whenever one is known
//! ([`crate::targets::image::label`]), so two builds pushed under one tag are two entries:
//! a rollout under way, or one stuck.

pub mod board;

use std::collections::BTreeMap;

use picket_proto::{BreakerState, Heart, ImageCount, Verdict};

use crate::upstream::Source;
use crate::upstream::health::EjectReason;

/// What a node knows of one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFacts<'a> {
    /// Ready, as the runtime or the connect check says.
    pub ready: bool,
    /// Ejected by this node, and why.
    pub ejected: Option<EjectReason>,
    /// Failing real traffic while kept in rotation, the only replica
    /// left, and why: in rotation is not serving.
    pub failing: Option<EjectReason>,
    /// New connections to it fail (its name no longer resolves, its
    /// certificate is refused), though pooled connections still reach
    /// it: why.
    pub new_refused: Option<&'a str>,
    /// The labels of the images it runs (none when the runtime does not
    /// tell, as for static replicas and external hosts).
    pub images: Vec<&'a str>,
}

/// A route's circuit, as the verdict needs it: its state (`Disabled` for a
/// route without a breaker) and why it last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerFacts {
    pub state: BreakerState,
    pub reason: Option<String>,
}

impl BreakerFacts {
    /// A route without a breaker.
    pub const DISABLED: BreakerFacts = BreakerFacts {
        state: BreakerState::Disabled,
        reason: None,
    };
}

/// Everything of a verdict but its time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub heart: Heart,
    pub reason: String,
    pub ready: u32,
    pub total: u32,
    pub images: Vec<ImageCount>,
    pub circuit: BreakerState,
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Judges a route.
/// `reached`: whether the runtime has answered this node yet (for routes
/// to runtime services).
pub fn judge(
    source: Source,
    reached: bool,
    replicas: &[ReplicaFacts<'_>],
    circuit: &BreakerFacts,
) -> Judgement {
    let total = replicas.len();
    let usable = replicas
        .iter()
        .filter(|r| r.ready && r.ejected.is_none() && r.failing.is_none())
        .count();
    let failing: Vec<EjectReason> = replicas
        .iter()
        .filter(|r| r.ready && r.ejected.is_none())
        .filter_map(|r| r.failing)
        .collect();
    // Usable, but only over connections made before: neither green nor
    // red.
    let pooled_only: Vec<&str> = replicas
        .iter()
        .filter(|r| r.ready && r.ejected.is_none() && r.failing.is_none())
        .filter_map(|r| r.new_refused)
        .collect();
    let not_ready = replicas.iter().filter(|r| !r.ready).count();
    let ejected: Vec<EjectReason> = replicas
        .iter()
        .filter(|r| r.ready)
        .filter_map(|r| r.ejected)
        .collect();
    let mut images: BTreeMap<&str, u32> = BTreeMap::new();
    for replica in replicas {
        for (i, image) in replica.images.iter().enumerate() {
            // Two containers of one image are still one replica running it.
            if !replica.images[..i].contains(image) {
                *images.entry(image).or_default() += 1;
            }
        }
    }
    let mut images: Vec<ImageCount> = images
        .into_iter()
        .map(|(image, replicas)| ImageCount {
            image: image.to_string(),
            replicas,
        })
        .collect();
    images.sort_by(|a, b| {
        b.replicas
            .cmp(&a.replicas)
            .then_with(|| a.image.cmp(&b.image))
    });

    let circuit_state = circuit.state;
    let details = || {
        let mut parts = Vec::new();
        if not_ready > 0 {
            parts.push(format!("{not_ready} not ready"));
        }
        if let Some(first) = ejected.first() {
            parts.push(format!("{} ejected by this node: {first}", ejected.len()));
        }
        if let Some(first) = failing.first() {
            parts.push(format!(
                "{} failing traffic: {first}; kept in rotation: no other replica",
                failing.len()
            ));
        }
        if let Some(first) = pooled_only.first() {
            parts.push(format!(
                "{} refusing new connections: {first}; pooled connections still serve",
                pooled_only.len()
            ));
        }
        parts.join("; ")
    };
    let (heart, reason) = match (circuit, source) {
        (
            BreakerFacts {
                state: BreakerState::Open,
                reason,
            },
            _,
        ) => (
            Heart::Red,
            format!(
                "circuit open: {}",
                reason.as_deref().unwrap_or("too many failures")
            ),
        ),
        (
            BreakerFacts {
                state: BreakerState::HalfOpen,
                ..
            },
            _,
        ) => (
            Heart::Red,
            "circuit half-open: one trial request under way".to_string(),
        ),
        // Zero replicas is only "scaled to zero" once the runtime has said
        // so: before it answers, nothing is known.
        _ if total == 0 && source == Source::Runtime && !reached => {
            (Heart::Red, "runtime not reached yet".to_string())
        }
        _ if total == 0 && source == Source::Runtime => (Heart::Red, "scaled to zero".to_string()),
        _ if total == 0 => (Heart::Red, "no replicas".to_string()),
        // Accepts connections, fails what is sent: traffic wins.
        (_, Source::External) if !failing.is_empty() => {
            (Heart::Red, format!("host fails requests: {}", failing[0]))
        }
        (_, Source::External) if usable == 0 => match ejected.first() {
            // Connected, but not usable as requests use it.
            Some(why @ (EjectReason::Tls(_) | EjectReason::ProxyRefused { .. })) => {
                (Heart::Red, format!("host unusable: {why}"))
            }
            why => (
                Heart::Red,
                format!(
                    "host does not accept connections: {}",
                    why.map_or("connect check fails".to_string(), ToString::to_string)
                ),
            ),
        },
        (_, Source::External) => match replicas.iter().find_map(|r| r.new_refused) {
            // Served over connections made before, refused to any new one:
            // neither green nor red.
            Some(why) => (
                Heart::Orange,
                format!("{why}; pooled connections still serve"),
            ),
            None => (Heart::Green, "host accepts connections".to_string()),
        },
        _ if usable == 0 => (Heart::Red, format!("none ready ({})", details())),
        _ if usable < total => (
            Heart::Orange,
            format!("{usable} of {total} ready ({})", details()),
        ),
        _ if !pooled_only.is_empty() => {
            (Heart::Orange, format!("all {total} ready ({})", details()))
        }
        _ => (Heart::Green, format!("all {total} ready")),
    };
    Judgement {
        heart,
        reason,
        ready: count(usable),
        total: count(total),
        images,
        circuit: circuit_state,
    }
}

/// Every route's verdict on this node, with when each last changed.
#[derive(Debug, Default, Clone)]
pub struct Verdicts {
    by_route: BTreeMap<String, Verdict>,
}

impl Verdicts {
    /// Records a route's judgement at `now_unix_ms`; its time moves only
    /// when its heart or reason changes. Returns whether anything changed.
    pub fn update(
        &mut self,
        route: &str,
        judgement: Judgement,
        stale_since: Option<u64>,
        now_unix_ms: u64,
    ) -> bool {
        let Judgement {
            heart,
            reason,
            ready,
            total,
            images,
            circuit,
        } = judgement;
        match self.by_route.get_mut(route) {
            Some(v) => {
                let moved = v.heart != heart || *v.reason != *reason;
                let changed = moved
                    || v.ready != ready
                    || v.total != total
                    || *v.images != *images
                    || v.circuit != circuit
                    || v.runtime_stale_since_unix_ms != stale_since;
                if moved {
                    v.since_unix_ms = now_unix_ms;
                }
                // Texts are replaced only when they changed: a verdict that
                // holds still keeps the copies it shares.
                if *v.reason != *reason {
                    v.reason = reason.into();
                }
                if *v.images != *images {
                    v.images = images.into();
                }
                (v.heart, v.ready, v.total, v.circuit) = (heart, ready, total, circuit);
                v.runtime_stale_since_unix_ms = stale_since;
                changed
            }
            None => {
                let verdict = Verdict {
                    route: route.into(),
                    heart,
                    reason: reason.into(),
                    ready,
                    total,
                    images: images.into(),
                    circuit,
                    since_unix_ms: now_unix_ms,
                    runtime_stale_since_unix_ms: stale_since,
                };
                self.by_route.insert(route.to_string(), verdict);
                true
            }
        }
    }

    /// Forgets routes no longer configured; returns whether any was.
    pub fn retain(&mut self, routes: &[&str]) -> bool {
        let before = self.by_route.len();
        self.by_route
            .retain(|name, _| routes.contains(&name.as_str()));
        self.by_route.len() != before
    }

    /// Every verdict, by route name.
    pub fn all(&self) -> Vec<Verdict> {
        self.by_route.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::handshake::TlsFailure;

    fn facts(
        ready: bool,
        ejected: Option<EjectReason>,
        images: &[&'static str],
    ) -> ReplicaFacts<'static> {
        ReplicaFacts {
            ready,
            ejected,
            failing: None,
            new_refused: None,
            images: images.to_vec(),
        }
    }

    fn failing(reason: EjectReason) -> ReplicaFacts<'static> {
        ReplicaFacts {
            ready: true,
            ejected: None,
            failing: Some(reason),
            new_refused: None,
            images: Vec::new(),
        }
    }

    const CLOSED: BreakerFacts = BreakerFacts {
        state: BreakerState::Closed,
        reason: None,
    };

    #[test]
    fn hearts() {
        let up = facts(true, None, &[]);
        let down = facts(false, None, &[]);
        let ejected = facts(true, Some(EjectReason::Refused), &[]);
        let cases: &[(Source, Vec<ReplicaFacts>, BreakerFacts, Heart, &str)] = &[
            (
                Source::Runtime,
                vec![up.clone(), up.clone(), up.clone()],
                CLOSED,
                Heart::Green,
                "all 3 ready",
            ),
            (
                Source::Runtime,
                vec![up.clone(), up.clone(), down.clone()],
                CLOSED,
                Heart::Orange,
                "2 of 3 ready (1 not ready)",
            ),
            (
                Source::Runtime,
                vec![down.clone(), down.clone()],
                CLOSED,
                Heart::Red,
                "none ready (2 not ready)",
            ),
            (
                Source::Runtime,
                vec![],
                BreakerFacts::DISABLED,
                Heart::Red,
                "scaled to zero",
            ),
            (
                Source::Static,
                vec![up.clone(), ejected.clone()],
                BreakerFacts::DISABLED,
                Heart::Orange,
                "1 of 2 ready (1 ejected by this node: connect refused)",
            ),
            (
                Source::External,
                vec![up.clone()],
                BreakerFacts::DISABLED,
                Heart::Green,
                "host accepts connections",
            ),
            (
                Source::External,
                vec![down.clone()],
                BreakerFacts::DISABLED,
                Heart::Red,
                "host does not accept connections: connect check fails",
            ),
            (
                Source::External,
                vec![facts(true, Some(EjectReason::Refused), &[])],
                BreakerFacts::DISABLED,
                Heart::Red,
                "host does not accept connections: connect refused",
            ),
            (
                Source::External,
                vec![facts(
                    true,
                    Some(EjectReason::Tls(TlsFailure::UnknownIssuer)),
                    &[],
                )],
                BreakerFacts::DISABLED,
                Heart::Red,
                "host unusable: TLS handshake: invalid peer certificate: UnknownIssuer",
            ),
            (
                Source::External,
                vec![facts(
                    true,
                    Some(EjectReason::ProxyRefused { status: 403 }),
                    &[],
                )],
                BreakerFacts::DISABLED,
                Heart::Red,
                "host unusable: the forward proxy answered 403 to CONNECT",
            ),
            (
                Source::Static,
                vec![
                    up.clone(),
                    facts(true, Some(EjectReason::Tls(TlsFailure::Expired)), &[]),
                ],
                BreakerFacts::DISABLED,
                Heart::Orange,
                "1 of 2 ready (1 ejected by this node: TLS handshake: invalid peer certificate: certificate expired)",
            ),
            (
                Source::Runtime,
                vec![up.clone(), up.clone()],
                BreakerFacts {
                    state: BreakerState::Open,
                    reason: Some("5 consecutive failures".into()),
                },
                Heart::Red,
                "circuit open: 5 consecutive failures",
            ),
            (
                Source::External,
                vec![up.clone()],
                BreakerFacts {
                    state: BreakerState::HalfOpen,
                    reason: None,
                },
                Heart::Red,
                "circuit half-open: one trial request under way",
            ),
            // In rotation is not serving: a lone replica failing traffic is
            // kept, and the route is red while it fails.
            (
                Source::Static,
                vec![failing(EjectReason::Answers {
                    status: 504,
                    count: 5,
                })],
                CLOSED,
                Heart::Red,
                "none ready (1 failing traffic: 5 consecutive 504; kept in rotation: no other replica)",
            ),
            // Every replica failing alike: one ejected, the last kept.
            (
                Source::Runtime,
                vec![
                    facts(
                        true,
                        Some(EjectReason::Answers {
                            status: 503,
                            count: 5,
                        }),
                        &[],
                    ),
                    failing(EjectReason::Answers {
                        status: 503,
                        count: 5,
                    }),
                ],
                CLOSED,
                Heart::Red,
                "none ready (1 ejected by this node: 5 consecutive 503; 1 failing traffic: 5 consecutive 503; kept in rotation: no other replica)",
            ),
            // A replica whose certificate a new handshake refuses, while
            // connections made before serve: both, orange.
            (
                Source::Static,
                vec![
                    ReplicaFacts {
                        new_refused: Some(
                            "TLS handshake: invalid peer certificate: certificate expired",
                        ),
                        ..facts(true, None, &[])
                    },
                    facts(true, None, &[]),
                ],
                CLOSED,
                Heart::Orange,
                "all 2 ready (1 refusing new connections: TLS handshake: invalid peer certificate: certificate expired; pooled connections still serve)",
            ),
            (
                Source::External,
                vec![ReplicaFacts {
                    new_refused: Some(
                        "name does not resolve (resolving billing.example.net: no such host)",
                    ),
                    ..facts(true, None, &[])
                }],
                CLOSED,
                Heart::Orange,
                "name does not resolve (resolving billing.example.net: no such host); pooled connections still serve",
            ),
            (
                Source::External,
                vec![failing(EjectReason::Broken {
                    count: 5,
                    garbled: false,
                })],
                CLOSED,
                Heart::Red,
                "host fails requests: 5 consecutive answers cut short",
            ),
        ];
        for (source, replicas, circuit, heart, reason) in cases {
            let j = judge(*source, true, replicas, circuit);
            assert_eq!(
                (j.heart, j.reason.as_str()),
                (*heart, *reason),
                "{replicas:?} {circuit:?}"
            );
        }
    }

    #[test]
    fn counts_and_images() {
        let replicas = [
            facts(true, None, &["api:1.4"]),
            facts(true, None, &["api:1.5"]),
            facts(true, None, &["api:1.4"]),
            facts(false, None, &["api:1.5"]),
        ];
        let j = judge(Source::Runtime, true, &replicas, &BreakerFacts::DISABLED);
        assert_eq!((j.ready, j.total), (3, 4));
        assert_eq!(
            j.images,
            [
                ImageCount {
                    image: "api:1.4".into(),
                    replicas: 2
                },
                ImageCount {
                    image: "api:1.5".into(),
                    replicas: 2
                },
            ]
        );
        assert_eq!(j.circuit, BreakerState::Disabled);
    }

    fn counted(images: &[ImageCount]) -> Vec<(&str, u32)> {
        images
            .iter()
            .map(|i| (i.image.as_str(), i.replicas))
            .collect()
    }

    #[test]
    fn every_image_of_a_replica_counts_and_two_builds_of_a_tag_are_two() {
        let old = "api:1.4@sha256:4c0f12ab9d2e";
        let new = "api:1.4@sha256:9b1d7e0c3a55";
        let envoy = "envoy:1.31@sha256:77aa00bb11cc";
        let replicas = [
            facts(true, None, &[old, envoy]),
            facts(true, None, &[new, envoy]),
            facts(false, None, &[new, envoy]),
            // Two containers of one image: one replica running it.
            facts(true, None, &[new, new]),
            facts(true, None, &[]),
        ];
        let j = judge(Source::Runtime, true, &replicas, &BreakerFacts::DISABLED);
        assert_eq!((j.ready, j.total), (4, 5), "images do not count replicas");
        assert_eq!(
            counted(&j.images),
            [(new, 3), (envoy, 3), (old, 1)],
            "most replicas first, then by label"
        );
    }

    #[test]
    fn no_replicas_before_the_runtime_answers_is_not_zero() {
        let never = judge(Source::Runtime, false, &[], &BreakerFacts::DISABLED);
        assert_eq!(
            (never.heart, never.reason.as_str()),
            (Heart::Red, "runtime not reached yet")
        );
        let zero = judge(Source::Runtime, true, &[], &BreakerFacts::DISABLED);
        assert_eq!(zero.reason, "scaled to zero");
        // Replicas reported, then the runtime lost: what is known stands.
        let known = judge(
            Source::Runtime,
            false,
            &[facts(true, None, &[])],
            &BreakerFacts::DISABLED,
        );
        assert_eq!(known.reason, "all 1 ready");
    }

    #[test]
    fn the_time_moves_only_when_heart_or_reason_does() {
        let mut verdicts = Verdicts::default();
        let green = judge(
            Source::External,
            true,
            &[facts(true, None, &[])],
            &BreakerFacts::DISABLED,
        );
        assert!(verdicts.update("api", green.clone(), None, 100));
        assert!(!verdicts.update("api", green.clone(), None, 200));
        assert_eq!(verdicts.all()[0].since_unix_ms, 100);
        let red = judge(
            Source::External,
            true,
            &[facts(false, None, &[])],
            &BreakerFacts::DISABLED,
        );
        assert!(verdicts.update("api", red, None, 300));
        assert_eq!(verdicts.all()[0].since_unix_ms, 300);
        assert!(
            verdicts.update("api", green, Some(250), 400),
            "staleness is a change"
        );
        assert!(verdicts.retain(&[]));
        assert!(verdicts.all().is_empty());
    }
}
