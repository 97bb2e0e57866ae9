//! The QUIC feed: what a node streams to an operator's client.
//!
//! ## Protocol
//! The client opens one bidirectional stream and writes an [`Ask`]
//! frame; the node answers with [`Frame`]s for as long as the stream lives.
//! Every frame is a [`codec`](crate::codec) frame: a 4-byte length, a
//! version byte, the bincode body.
//!
//! The node first sends a snapshot: [`Frame::Reset`], one [`Frame::Head`]
//! per member, one [`Frame::Verdict`] per member and route, then
//! [`Frame::Synced`]. After that it sends only what changed, each batch
//! closed by [`Frame::Synced`]. A node may send a fresh snapshot at any
//! time (it does when a client fell far behind): `Reset` drops what the
//! client held.
//!
//! [`diff`] and [`snapshot`] build the frames; a [`Follower`] applies them
//! and hands out the whole [`ClusterView`] at every `Synced`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{CertificateState, ClusterView, Liveness, Member, NodeInfo, TableGeneration, Verdict};

/// The ALPN both ends of the feed speak.
pub const ALPN: &[u8] = b"picket-feed/1";

/// The SHA-256 fingerprint of a DER certificate, lowercase hex: what a node
/// publishes of its feed certificate and what a client pins.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What a client asks for, as its first frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ask {
    /// The cluster view as a snapshot, then its changes.
    Subscribe,
}

/// A member without its verdicts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub name: String,
    pub gossip: String,
    pub generation: u64,
    pub liveness: Liveness,
    pub heard_unix_ms: u64,
    pub info: Option<NodeInfo>,
}

impl Head {
    fn of(member: &Member) -> Head {
        Head {
            name: member.name.clone(),
            gossip: member.gossip.clone(),
            generation: member.generation,
            liveness: member.liveness,
            heard_unix_ms: member.heard_unix_ms,
            info: member.info.clone(),
        }
    }

    fn same_as(&self, member: &Member) -> bool {
        self.name == member.name
            && self.gossip == member.gossip
            && self.generation == member.generation
            && self.liveness == member.liveness
            && self.heard_unix_ms == member.heard_unix_ms
            && self.info == member.info
    }
}

/// One frame from the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// A snapshot starts: forget everything held.
    Reset {
        node: String,
        cluster: String,
        taken_unix_ms: u64,
    },
    /// A member is new, or its liveness, info or heartbeat changed; its
    /// verdicts are kept. A new generation drops the old one's verdicts.
    Head(Head),
    /// A member's verdict on a route, new or changed.
    Verdict { node: String, verdict: Verdict },
    /// A member no longer has a verdict on the route.
    RouteGone { node: String, route: String },
    /// A member left the view.
    Gone { node: String },
    /// The view is whole again, as taken at `taken_unix_ms`.
    Synced { taken_unix_ms: u64 },
    /// A member serves another route table. After the older variants, so
    /// that they keep their bytes: a follower too old to know it refuses
    /// this frame alone.
    Table {
        node: String,
        table: Option<TableGeneration>,
    },
    /// A member's state of each certificate it obtains from ACME, whole.
    /// Last of the variants, as `Table` was.
    Certificates {
        node: String,
        certificates: Vec<CertificateState>,
    },
}

/// The frames of a whole view.
pub fn snapshot(view: &ClusterView) -> Vec<Frame> {
    let mut frames = vec![Frame::Reset {
        node: view.node.clone(),
        cluster: view.cluster.clone(),
        taken_unix_ms: view.taken_unix_ms,
    }];
    for member in &view.members {
        frames.push(Frame::Head(Head::of(member)));
        if member.table.is_some() {
            frames.push(Frame::Table {
                node: member.name.clone(),
                table: member.table.clone(),
            });
        }
        if !member.certificates.is_empty() {
            frames.push(Frame::Certificates {
                node: member.name.clone(),
                certificates: member.certificates.clone(),
            });
        }
        frames.extend(member.verdicts.iter().map(|verdict| Frame::Verdict {
            node: member.name.clone(),
            verdict: verdict.clone(),
        }));
    }
    frames.push(Frame::Synced {
        taken_unix_ms: view.taken_unix_ms,
    });
    frames
}

/// The frames that turn `from` into `to`.
///
/// Falls back to a [`snapshot`] when the views are of different nodes or
/// clusters, or when the changes would take more frames than a snapshot.
pub fn diff(from: &ClusterView, to: &ClusterView) -> Vec<Frame> {
    if from.node != to.node || from.cluster != to.cluster {
        return snapshot(to);
    }
    let before: BTreeMap<&str, &Member> =
        from.members.iter().map(|m| (m.name.as_str(), m)).collect();
    let mut frames = Vec::new();
    for member in &to.members {
        let old = before.get(member.name.as_str()).copied();
        let fresh = old.is_none_or(|old| old.generation != member.generation);
        if fresh || old.is_some_and(|old| !Head::of(member).same_as(old)) {
            frames.push(Frame::Head(Head::of(member)));
        }
        let told = match old {
            Some(old) if !fresh => old.table.as_ref(),
            _ => None,
        };
        if told != member.table.as_ref() {
            frames.push(Frame::Table {
                node: member.name.clone(),
                table: member.table.clone(),
            });
        }
        let told: &[CertificateState] = match old {
            Some(old) if !fresh => &old.certificates,
            _ => &[],
        };
        if told != member.certificates.as_slice() {
            frames.push(Frame::Certificates {
                node: member.name.clone(),
                certificates: member.certificates.clone(),
            });
        }
        let old_verdicts: BTreeMap<&str, &Verdict> = match old {
            Some(old) if !fresh => old.verdicts.iter().map(|v| (&*v.route, v)).collect(),
            _ => BTreeMap::new(),
        };
        for verdict in member.verdicts.iter() {
            if old_verdicts.get(&*verdict.route) != Some(&verdict) {
                frames.push(Frame::Verdict {
                    node: member.name.clone(),
                    verdict: verdict.clone(),
                });
            }
        }
        let now: BTreeMap<&str, ()> = member.verdicts.iter().map(|v| (&*v.route, ())).collect();
        for route in old_verdicts.keys().filter(|r| !now.contains_key(*r)) {
            frames.push(Frame::RouteGone {
                node: member.name.clone(),
                route: (*route).to_string(),
            });
        }
    }
    let names: BTreeMap<&str, ()> = to.members.iter().map(|m| (m.name.as_str(), ())).collect();
    for name in before.keys().filter(|n| !names.contains_key(*n)) {
        frames.push(Frame::Gone {
            node: (*name).to_string(),
        });
    }
    frames.push(Frame::Synced {
        taken_unix_ms: to.taken_unix_ms,
    });
    let whole = 2 + to
        .members
        .iter()
        .map(|m| {
            1 + usize::from(m.table.is_some())
                + usize::from(!m.certificates.is_empty())
                + m.verdicts.len()
        })
        .sum::<usize>();
    if frames.len() > whole {
        return snapshot(to);
    }
    frames
}

/// Why a frame could not be applied: the node broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FollowError {
    #[error("a change before any snapshot")]
    NoSnapshot,
    #[error("a verdict or route of member {0}, which has no head")]
    UnknownMember(String),
}

/// Applies frames, snapshot then changes, and yields the view at each
/// [`Frame::Synced`].
#[derive(Debug, Default)]
pub struct Follower {
    held: Option<Held>,
}

#[derive(Debug)]
struct Held {
    node: String,
    cluster: String,
    /// By name.
    members: BTreeMap<String, HeldMember>,
}

/// A member as frames told it.
#[derive(Debug)]
struct HeldMember {
    head: Head,
    table: Option<TableGeneration>,
    certificates: Vec<CertificateState>,
    /// By route name.
    verdicts: Arc<Vec<Verdict>>,
}

impl HeldMember {
    fn new(head: Head) -> HeldMember {
        HeldMember {
            head,
            table: None,
            certificates: Vec::new(),
            verdicts: Arc::default(),
        }
    }
}

impl Follower {
    pub fn new() -> Follower {
        Follower::default()
    }

    /// Applies one frame; returns the whole view when the frame closes a
    /// snapshot or a batch of changes.
    pub fn apply(&mut self, frame: Frame) -> Result<Option<ClusterView>, FollowError> {
        if let Frame::Reset {
            node,
            cluster,
            taken_unix_ms: _,
        } = frame
        {
            self.held = Some(Held {
                node,
                cluster,
                members: BTreeMap::new(),
            });
            return Ok(None);
        }
        let held = self.held.as_mut().ok_or(FollowError::NoSnapshot)?;
        match frame {
            Frame::Reset { .. } => {}
            Frame::Head(head) => match held.members.get_mut(&head.name) {
                Some(member) if member.head.generation != head.generation => {
                    *member = HeldMember::new(head);
                }
                Some(member) => member.head = head,
                None => {
                    held.members
                        .insert(head.name.clone(), HeldMember::new(head));
                }
            },
            Frame::Table { node, table } => {
                held.members
                    .get_mut(&node)
                    .ok_or(FollowError::UnknownMember(node))?
                    .table = table;
            }
            Frame::Certificates { node, certificates } => {
                held.members
                    .get_mut(&node)
                    .ok_or(FollowError::UnknownMember(node))?
                    .certificates = certificates;
            }
            Frame::Verdict { node, verdict } => {
                let verdicts = &mut held
                    .members
                    .get_mut(&node)
                    .ok_or(FollowError::UnknownMember(node))?
                    .verdicts;
                // Copied only if the last view given out still holds it:
                // once per changed member per batch.
                let verdicts = Arc::make_mut(verdicts);
                match verdicts.binary_search_by(|v| v.route.cmp(&verdict.route)) {
                    Ok(at) => verdicts[at] = verdict,
                    Err(at) => verdicts.insert(at, verdict),
                }
            }
            Frame::RouteGone { node, route } => {
                let verdicts = &mut held
                    .members
                    .get_mut(&node)
                    .ok_or(FollowError::UnknownMember(node))?
                    .verdicts;
                if let Ok(at) = verdicts.binary_search_by(|v| (*v.route).cmp(&route)) {
                    Arc::make_mut(verdicts).remove(at);
                }
            }
            Frame::Gone { node } => {
                held.members.remove(&node);
            }
            Frame::Synced { taken_unix_ms } => return Ok(Some(held.view(taken_unix_ms))),
        }
        Ok(None)
    }
}

impl Held {
    fn view(&self, taken_unix_ms: u64) -> ClusterView {
        ClusterView {
            node: self.node.clone(),
            cluster: self.cluster.clone(),
            taken_unix_ms,
            members: self
                .members
                .values()
                .map(|member| Member {
                    name: member.head.name.clone(),
                    gossip: member.head.gossip.clone(),
                    generation: member.head.generation,
                    liveness: member.head.liveness,
                    heard_unix_ms: member.head.heard_unix_ms,
                    info: member.head.info.clone(),
                    table: member.table.clone(),
                    certificates: member.certificates.clone(),
                    verdicts: Arc::clone(&member.verdicts),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_frame, encode_frame};
    use crate::{BreakerState, Heart, ImageCount};
    use proptest::prelude::*;

    fn verdict() -> impl Strategy<Value = Verdict> {
        (
            "[a-d]{1,2}",
            0..3u8,
            ".{0,12}",
            0..4u32,
            0..4u32,
            proptest::collection::vec(("[a-z:0-9.]{1,8}", 0..9u32), 0..3),
            0..4u8,
            any::<u64>(),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(
                |(route, heart, reason, ready, total, images, circuit, since, stale)| Verdict {
                    route: route.into(),
                    heart: [Heart::Green, Heart::Orange, Heart::Red][usize::from(heart)],
                    reason: reason.into(),
                    ready,
                    total,
                    images: images
                        .into_iter()
                        .map(|(image, replicas)| ImageCount { image, replicas })
                        .collect(),
                    circuit: [
                        BreakerState::Disabled,
                        BreakerState::Closed,
                        BreakerState::Open,
                        BreakerState::HalfOpen,
                    ][usize::from(circuit)],
                    since_unix_ms: since,
                    runtime_stale_since_unix_ms: stale,
                },
            )
    }

    fn member() -> impl Strategy<Value = Member> {
        (
            "n[0-4]",
            0..3u64,
            0..3u8,
            0..5u64,
            proptest::option::of(".{0,6}"),
            proptest::option::of(("[a-c]", 0..3u32)),
            proptest::collection::vec(verdict(), 0..5),
            proptest::collection::vec(("[a-b]", 0..5u8), 0..3),
        )
            .prop_map(
                |(name, generation, liveness, heard, admin, table, verdicts, certificates)| {
                    let mut verdicts: BTreeMap<String, Verdict> = verdicts
                        .into_iter()
                        .map(|v| (v.route.to_string(), v))
                        .collect();
                    Member {
                        gossip: format!("{name}:7946"),
                        name,
                        generation,
                        liveness: [Liveness::Alive, Liveness::Suspect, Liveness::Dead]
                            [usize::from(liveness)],
                        heard_unix_ms: heard,
                        info: admin.map(|admin| NodeInfo {
                            name: "x".into(),
                            version: "0.1.0".into(),
                            admin,
                            feed: None,
                            feed_fingerprint: None,
                            runtime: "none".into(),
                            started_unix_ms: 0,
                        }),
                        table: table.map(|(digest, routes)| TableGeneration {
                            digest,
                            routes,
                            since_unix_ms: 0,
                        }),
                        certificates: certificates
                            .into_iter()
                            .map(|(name, phase)| CertificateState {
                                serial: (phase > 1).then(|| format!("{phase:02x}")),
                                name,
                                phase: crate::acme::Phase::ALL[usize::from(phase)],
                                not_after_unix: None,
                                renew_at_unix: None,
                                orderer: Some("n0".into()),
                                issued_by: None,
                                error: (phase == 4).then(|| "refused".into()),
                                retry_at_unix: None,
                            })
                            .collect(),
                        verdicts: Arc::new(std::mem::take(&mut verdicts).into_values().collect()),
                    }
                },
            )
    }

    /// A view as a node builds it: members unique by name, sorted.
    pub(crate) fn view() -> impl Strategy<Value = ClusterView> {
        (
            "n[0-1]",
            any::<u64>(),
            proptest::collection::vec(member(), 0..5),
        )
            .prop_map(|(node, taken, members)| {
                let members: BTreeMap<String, Member> =
                    members.into_iter().map(|m| (m.name.clone(), m)).collect();
                ClusterView {
                    node,
                    cluster: "c".into(),
                    taken_unix_ms: taken,
                    members: members.into_values().collect(),
                }
            })
    }

    fn follow(follower: &mut Follower, frames: Vec<Frame>) -> Option<ClusterView> {
        let mut last = None;
        for frame in frames {
            // Every frame crosses the wire as a codec frame.
            let bytes = encode_frame(&frame).unwrap();
            let (decoded, used) = decode_frame::<Frame>(&bytes).unwrap();
            assert_eq!(used, bytes.len());
            assert_eq!(decoded, frame);
            if let Some(view) = follower.apply(decoded).unwrap() {
                last = Some(view);
            }
        }
        last
    }

    proptest! {
        #[test]
        fn a_snapshot_then_diffs_rebuild_every_view(views in proptest::collection::vec(view(), 1..6)) {
            let mut follower = Follower::new();
            prop_assert_eq!(follow(&mut follower, snapshot(&views[0])), Some(views[0].clone()));
            for pair in views.windows(2) {
                prop_assert_eq!(follow(&mut follower, diff(&pair[0], &pair[1])), Some(pair[1].clone()));
            }
        }

        #[test]
        fn a_diff_is_never_larger_than_a_snapshot(a in view(), b in view()) {
            prop_assert!(diff(&a, &b).len() <= snapshot(&b).len());
        }
    }

    #[test]
    fn no_change_is_one_synced_frame() {
        let view = ClusterView {
            node: "n1".into(),
            cluster: "c".into(),
            taken_unix_ms: 5,
            members: vec![],
        };
        assert_eq!(diff(&view, &view), vec![Frame::Synced { taken_unix_ms: 5 }]);
    }

    /// A client at 100 nodes × 1,000 routes gets a view per batch of
    /// changes: a member whose verdicts did not change keeps the very list
    /// the view before held, and the changed member's list is copied once.
    #[test]
    fn views_share_the_verdicts_of_unchanged_members() {
        let verdict = |route: &str, reason: &str| Verdict {
            route: route.into(),
            heart: crate::Heart::Green,
            reason: reason.into(),
            ready: 1,
            total: 1,
            images: [].into(),
            circuit: crate::BreakerState::Closed,
            since_unix_ms: 0,
            runtime_stale_since_unix_ms: None,
        };
        let member = |name: &str, verdicts: Vec<Verdict>| Member {
            name: name.into(),
            gossip: format!("{name}:7946"),
            generation: 1,
            liveness: Liveness::Alive,
            heard_unix_ms: 1,
            info: None,
            table: None,
            certificates: Vec::new(),
            verdicts: Arc::new(verdicts),
        };
        let before = ClusterView {
            node: "n1".into(),
            cluster: "c".into(),
            taken_unix_ms: 1,
            members: vec![
                member("n1", vec![verdict("api", "up"), verdict("web", "up")]),
                member("n2", vec![verdict("api", "up"), verdict("web", "up")]),
            ],
        };
        let mut after = before.clone();
        after.members[1].verdicts = Arc::new(vec![verdict("api", "down"), verdict("web", "up")]);
        after.taken_unix_ms = 2;

        let mut follower = Follower::new();
        let first = follow(&mut follower, snapshot(&before)).unwrap();
        let second = follow(&mut follower, diff(&before, &after)).unwrap();
        assert_eq!(second, after);
        assert!(Arc::ptr_eq(
            &first.members[0].verdicts,
            &second.members[0].verdicts
        ));
        assert!(!Arc::ptr_eq(
            &first.members[1].verdicts,
            &second.members[1].verdicts
        ));
        assert_eq!(
            &*first.members[1].verdicts[0].reason, "up",
            "the view given out is not changed"
        );
    }

    #[test]
    fn a_certificate_state_change_is_one_frame_and_a_new_generation_forgets_the_old() {
        let state = |phase| CertificateState {
            name: "shop.example.com".into(),
            phase,
            serial: None,
            not_after_unix: None,
            renew_at_unix: None,
            orderer: Some("n2".into()),
            issued_by: None,
            error: None,
            retry_at_unix: None,
        };
        let member = |generation, certificates: Vec<CertificateState>| Member {
            name: "n2".into(),
            gossip: "n2:7946".into(),
            generation,
            liveness: Liveness::Alive,
            heard_unix_ms: 1,
            info: None,
            table: None,
            certificates,
            verdicts: Arc::default(),
        };
        let view = |member| ClusterView {
            node: "n1".into(),
            cluster: "c".into(),
            taken_unix_ms: 1,
            members: vec![member],
        };
        let waiting = view(member(1, vec![state(crate::acme::Phase::Waiting)]));
        let serving = view(member(1, vec![state(crate::acme::Phase::Serving)]));
        let mut follower = Follower::new();
        assert_eq!(
            follow(&mut follower, snapshot(&waiting)),
            Some(waiting.clone())
        );
        let frames = diff(&waiting, &serving);
        assert_eq!(
            frames,
            [
                Frame::Certificates {
                    node: "n2".into(),
                    certificates: serving.members[0].certificates.clone(),
                },
                Frame::Synced { taken_unix_ms: 1 },
            ]
        );
        assert_eq!(follow(&mut follower, frames), Some(serving.clone()));
        assert_eq!(diff(&serving, &serving).len(), 1, "unchanged: Synced alone");
        // A restarted node has said nothing of its certificates yet.
        let restarted = view(member(2, Vec::new()));
        assert_eq!(
            follow(&mut follower, diff(&serving, &restarted)),
            Some(restarted)
        );
    }

    #[test]
    fn changes_before_a_snapshot_are_refused() {
        let mut follower = Follower::new();
        assert_eq!(
            follower.apply(Frame::Synced { taken_unix_ms: 1 }),
            Err(FollowError::NoSnapshot)
        );
        follower
            .apply(Frame::Reset {
                node: "n1".into(),
                cluster: "c".into(),
                taken_unix_ms: 1,
            })
            .unwrap();
        assert_eq!(follower.apply(Frame::Gone { node: "n9".into() }), Ok(None));
        assert_eq!(
            follower.apply(Frame::RouteGone {
                node: "n9".into(),
                route: "api".into()
            }),
            Err(FollowError::UnknownMember("n9".into()))
        );
    }
}
