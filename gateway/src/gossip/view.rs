//! The cluster view: what this node knows of every node, decided from
//! gossip state and the clock alone. Nothing here touches a socket.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use picket_proto::gossip::{self, NODE_KEY, ROUTE_PREFIX, TABLE_KEY};
use picket_proto::{
    CertificateState, ClusterView, Liveness, Member, NodeInfo, TableGeneration, Verdict,
};

use super::intern::Interner;

/// A node's heartbeat has not advanced for this many gossip intervals:
/// it is suspect, though the failure detector still counts it live.
pub const SUSPECT_AFTER_INTERVALS: u32 = 5;

/// How alive a node looks. `live` and `dead` are the failure detector's
/// verdicts; a node just heard of is neither yet, and counts as suspect.
pub fn liveness(
    is_self: bool,
    (live, dead): (bool, bool),
    heard_ms: u64,
    now_ms: u64,
    interval: Duration,
) -> Liveness {
    if is_self {
        return Liveness::Alive;
    }
    if dead {
        return Liveness::Dead;
    }
    if !live {
        return Liveness::Suspect;
    }
    let quiet = Duration::from_millis(now_ms.saturating_sub(heard_ms));
    if quiet > interval * SUSPECT_AFTER_INTERVALS {
        Liveness::Suspect
    } else {
        Liveness::Alive
    }
}

/// One node's state as gossip holds it, read under chitchat's lock.
#[derive(Debug, Clone)]
pub struct Gossiped {
    pub name: String,
    pub generation: u64,
    pub gossip: String,
    pub heartbeat: u64,
    pub live: bool,
    pub dead: bool,
    pub max_version: u64,
    /// Its keys and values, with versions; `None` when `max_version` is
    /// what was last seen, so nothing needs decoding again.
    pub values: Option<Vec<(String, u64, String)>>,
}

/// What this node remembers of one node between two views.
#[derive(Debug, Clone, Default)]
struct Known {
    heartbeat: u64,
    heard_ms: u64,
    max_version: u64,
    info: Option<NodeInfo>,
    /// The generation of its route table, once it has said.
    table: Option<TableGeneration>,
    /// Its state of each ACME certificate, by name.
    certificates: Vec<CertificateState>,
    /// Its verdicts, by route name, shared with every view that shows
    /// them: replaced when its values change, never copied per view.
    verdicts: Arc<Vec<Verdict>>,
    /// The version of each verdict's value, in the same order.
    versions: Vec<u64>,
}

/// Keeps decoded state across views, so that only changed values are
/// decoded again.
#[derive(Debug, Default)]
pub struct Assembler {
    known: HashMap<(String, u64), Known>,
    /// One copy of each route name, reason and image list the members'
    /// verdicts carry.
    interner: Interner,
}

/// Values that could not be decoded in one update.
pub type Refused = usize;

impl Assembler {
    /// The `max_version` last seen of each node, for the caller to skip
    /// reading unchanged values.
    pub fn versions(&self) -> HashMap<(String, u64), u64> {
        self.known
            .iter()
            .map(|(id, k)| (id.clone(), k.max_version))
            .collect()
    }

    /// Folds in what gossip holds now (every node but this one) and
    /// returns the view, with this node's own verdicts given directly.
    pub fn assemble(
        &mut self,
        me: &Member,
        cluster: &str,
        gossiped: Vec<Gossiped>,
        now_ms: u64,
        interval: Duration,
    ) -> (ClusterView, Refused) {
        let mut refused = 0;
        let present: Vec<(String, u64)> = gossiped
            .iter()
            .map(|g| (g.name.clone(), g.generation))
            .collect();
        self.known.retain(|id, _| present.contains(id));
        let mut members = vec![me.clone()];
        for node in gossiped {
            let known = self
                .known
                .entry((node.name.clone(), node.generation))
                .or_insert_with(|| Known {
                    heard_ms: now_ms,
                    ..Known::default()
                });
            if node.heartbeat != known.heartbeat {
                known.heartbeat = node.heartbeat;
                known.heard_ms = now_ms;
            }
            if let Some(values) = node.values {
                refused += update(known, values, &mut self.interner);
                known.max_version = node.max_version;
            }
            members.push(Member {
                name: node.name,
                gossip: node.gossip,
                generation: node.generation,
                liveness: liveness(
                    false,
                    (node.live, node.dead),
                    known.heard_ms,
                    now_ms,
                    interval,
                ),
                heard_unix_ms: known.heard_ms,
                info: known.info.clone(),
                table: known.table.clone(),
                certificates: known.certificates.clone(),
                verdicts: Arc::clone(&known.verdicts),
            });
        }
        (
            ClusterView {
                node: me.name.clone(),
                cluster: cluster.to_string(),
                taken_unix_ms: now_ms,
                members: current(members),
            },
            refused,
        )
    }
}

/// Applies a node's values; returns how many could not be decoded. A
/// verdict whose value kept its version is kept, not decoded again.
fn update(known: &mut Known, values: Vec<(String, u64, String)>, interner: &mut Interner) -> usize {
    let mut refused = 0;
    let mut routes: Vec<(u64, Verdict)> = Vec::with_capacity(known.verdicts.len());
    let mut certificates = Vec::new();
    for (key, version, value) in values {
        if key == NODE_KEY {
            match gossip::decode_value::<NodeInfo>(&value) {
                Ok(info) => known.info = Some(info),
                Err(_) => refused += 1,
            }
        } else if key == TABLE_KEY {
            match gossip::decode_value::<TableGeneration>(&value) {
                Ok(table) => known.table = Some(table),
                Err(_) => refused += 1,
            }
        } else if let Some(name) = key.strip_prefix(picket_proto::acme::STATE_PREFIX) {
            match gossip::decode_value::<CertificateState>(&value) {
                // The key names the certificate, as it names a route.
                Ok(state) if state.name == name => certificates.push(state),
                _ => refused += 1,
            }
        } else if let Some(route) = key.strip_prefix(ROUTE_PREFIX) {
            let kept = known
                .verdicts
                .binary_search_by(|v| (*v.route).cmp(route))
                .ok()
                .filter(|&at| known.versions.get(at) == Some(&version));
            match kept {
                Some(at) => routes.push((version, known.verdicts[at].clone())),
                None => match gossip::decode_value::<Verdict>(&value) {
                    // The key names the route: a value cannot speak for another.
                    Ok(verdict) => routes.push((version, interner.verdict(verdict, route))),
                    Err(_) => refused += 1,
                },
            }
        }
    }
    certificates.sort_by(|a, b| a.name.cmp(&b.name));
    known.certificates = certificates;
    // Each key once (chitchat's keys are unique), so each route once.
    routes.sort_by(|a, b| a.1.route.cmp(&b.1.route));
    let (versions, verdicts): (Vec<u64>, Vec<Verdict>) = routes.into_iter().unzip();
    // The same versions are the same verdicts (chitchat gives each write
    // of a node's key the node's next version): only its node info
    // changed, and the views before and after share one list.
    if versions != known.versions {
        known.versions = versions;
        known.verdicts = Arc::new(verdicts);
    }
    refused
}

/// Members by name, each name once: a restarted node's older generation
/// is hidden once a newer one is known.
fn current(mut members: Vec<Member>) -> Vec<Member> {
    members.sort_by(|a, b| a.name.cmp(&b.name).then(b.generation.cmp(&a.generation)));
    members.dedup_by(|later, first| later.name == first.name);
    members
}

/// The route tables the cluster serves, and which nodes serve each.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Tables {
    /// Nodes that are alive or suspect serve different tables.
    pub disagreement: bool,
    /// Each table served, the one most nodes serve first.
    pub tables: Vec<TableServed>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableServed {
    pub digest: String,
    pub routes: u32,
    /// The nodes serving it, by name.
    pub nodes: Vec<String>,
    /// Not the table most nodes serve: these nodes are behind (or ahead).
    pub differs: bool,
}

/// Which nodes serve which route table. The table most live nodes serve
/// is the cluster's; of two served by as many, the one installed last
/// (a change on its way through the cluster). Dead nodes and nodes that
/// have not said are left out.
pub fn tables(view: &ClusterView) -> Tables {
    let mut served: Vec<(TableServed, u64)> = Vec::new();
    for member in &view.members {
        let Some(table) = member
            .table
            .as_ref()
            .filter(|_| member.liveness != Liveness::Dead)
        else {
            continue;
        };
        match served.iter_mut().find(|(s, _)| s.digest == table.digest) {
            Some((s, since)) => {
                s.nodes.push(member.name.clone());
                *since = (*since).max(table.since_unix_ms);
            }
            None => served.push((
                TableServed {
                    digest: table.digest.clone(),
                    routes: table.routes,
                    nodes: vec![member.name.clone()],
                    differs: false,
                },
                table.since_unix_ms,
            )),
        }
    }
    served.sort_by(|(a, a_since), (b, b_since)| {
        (b.nodes.len(), b_since, &a.digest).cmp(&(a.nodes.len(), a_since, &b.digest))
    });
    let mut tables: Vec<TableServed> = served.into_iter().map(|(s, _)| s).collect();
    for table in tables.iter_mut().skip(1) {
        table.differs = true;
    }
    Tables {
        disagreement: tables.len() > 1,
        tables,
    }
}

/// One route on every node that has it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RouteAcross {
    pub route: String,
    /// Hearts differ among the nodes that are alive or suspect.
    pub disagreement: bool,
    pub nodes: Vec<RouteOnNode>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RouteOnNode {
    pub node: String,
    pub liveness: Liveness,
    pub age_ms: u64,
    /// As a reader is shown it: a stale verdict with a heart of its own.
    #[serde(serialize_with = "picket_proto::verdict::serialize_shown")]
    pub verdict: Verdict,
}

/// `route` across the view; `None` when no node has it.
pub fn route_across(view: &ClusterView, route: &str) -> Option<RouteAcross> {
    let nodes: Vec<RouteOnNode> = view
        .members
        .iter()
        .filter_map(|m| {
            let verdict = m.verdicts.iter().find(|v| *v.route == *route)?;
            Some(RouteOnNode {
                node: m.name.clone(),
                liveness: m.liveness,
                age_ms: view.taken_unix_ms.saturating_sub(m.heard_unix_ms),
                verdict: verdict.clone(),
            })
        })
        .collect();
    if nodes.is_empty() {
        return None;
    }
    // As readers are shown them: a node on stale data disagrees with one
    // whose runtime answers, whatever heart it last had.
    let hearts: Vec<picket_proto::ShownHeart> = nodes
        .iter()
        .filter(|n| n.liveness != Liveness::Dead)
        .map(|n| n.verdict.shown_heart())
        .collect();
    let disagreement = hearts.windows(2).any(|w| w[0] != w[1]);
    Some(RouteAcross {
        route: route.to_string(),
        disagreement,
        nodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_proto::{BreakerState, Heart};

    const NOW: u64 = 1_796_000_000_000;
    const SECOND: Duration = Duration::from_secs(1);

    fn verdict(route: &str, heart: Heart) -> Verdict {
        Verdict {
            route: route.into(),
            heart,
            reason: format!("{heart:?}").into(),
            ready: 1,
            total: 1,
            images: [].into(),
            circuit: BreakerState::Disabled,
            since_unix_ms: NOW,
            runtime_stale_since_unix_ms: None,
        }
    }

    fn me() -> Member {
        Member {
            name: "n1".into(),
            gossip: "10.0.0.1:7946".into(),
            generation: 1,
            liveness: Liveness::Alive,
            heard_unix_ms: NOW,
            info: None,
            table: None,
            certificates: Vec::new(),
            verdicts: Arc::new(vec![verdict("api", Heart::Green)]),
        }
    }

    fn info() -> NodeInfo {
        NodeInfo {
            name: "n2".into(),
            version: "test".into(),
            admin: "10.0.0.2:9900".into(),
            feed: None,
            feed_fingerprint: None,
            runtime: "none".into(),
            started_unix_ms: NOW,
        }
    }

    fn peer(
        name: &str,
        generation: u64,
        heartbeat: u64,
        values: Option<Vec<(String, u64, String)>>,
    ) -> Gossiped {
        Gossiped {
            name: name.into(),
            generation,
            gossip: "10.0.0.2:7946".into(),
            heartbeat,
            live: true,
            dead: false,
            max_version: values.as_ref().map_or(0, |v| v.len() as u64),
            values,
        }
    }

    fn route_value(route: &str, version: u64, heart: Heart) -> (String, u64, String) {
        (
            format!("{ROUTE_PREFIX}{route}"),
            version,
            gossip::encode_value(&verdict(route, heart)).unwrap(),
        )
    }

    #[test]
    fn liveness_follows_the_detector_and_the_heartbeat() {
        assert_eq!(
            liveness(true, (false, true), 0, NOW, SECOND),
            Liveness::Alive
        );
        assert_eq!(
            liveness(false, (false, true), NOW, NOW, SECOND),
            Liveness::Dead
        );
        assert_eq!(
            liveness(false, (false, false), NOW, NOW, SECOND),
            Liveness::Suspect,
            "just heard of"
        );
        assert_eq!(
            liveness(false, (true, false), NOW - 5000, NOW, SECOND),
            Liveness::Alive
        );
        assert_eq!(
            liveness(false, (true, false), NOW - 5001, NOW, SECOND),
            Liveness::Suspect
        );
    }

    #[test]
    fn views_decode_values_and_age_quiet_nodes() {
        let mut assembler = Assembler::default();
        let values = vec![
            route_value("api", 1, Heart::Red),
            ("junk".into(), 2, "x".into()),
        ];
        let (view, refused) = assembler.assemble(
            &me(),
            "prod",
            vec![peer("n2", 7, 10, Some(values))],
            NOW,
            SECOND,
        );
        assert_eq!(refused, 0, "unknown keys are ignored, not refused");
        assert_eq!(view.members.len(), 2);
        let n2 = &view.members[1];
        assert_eq!((n2.name.as_str(), n2.liveness), ("n2", Liveness::Alive));
        assert_eq!(*n2.verdicts, [verdict("api", Heart::Red)]);

        // Nothing new (values unread), heartbeat stuck for 6 s: suspect, same verdicts.
        let (view, _) = assembler.assemble(
            &me(),
            "prod",
            vec![peer("n2", 7, 10, None)],
            NOW + 6000,
            SECOND,
        );
        assert_eq!(view.members[1].liveness, Liveness::Suspect);
        assert_eq!(view.members[1].verdicts.len(), 1);
        assert_eq!(view.members[1].heard_unix_ms, NOW);
        // Its heartbeat moves again.
        let (view, _) = assembler.assemble(
            &me(),
            "prod",
            vec![peer("n2", 7, 11, None)],
            NOW + 7000,
            SECOND,
        );
        assert_eq!(view.members[1].liveness, Liveness::Alive);
    }

    /// Guards the view's memory: a view is assembled every half gossip
    /// interval, and at 100 nodes × 1,000 routes a copy of every verdict
    /// per view is what once made a node's view cost more than the
    /// verdicts themselves.
    #[test]
    fn views_share_verdicts_instead_of_copying_them() {
        let mut assembler = Assembler::default();
        let me = me();
        let values = |api: (u64, Heart), node: u64| {
            vec![
                (
                    NODE_KEY.into(),
                    node,
                    gossip::encode_value(&info()).unwrap(),
                ),
                route_value("api", api.0, api.1),
                route_value("web", 2, Heart::Green),
            ]
        };
        let mut n2 = peer("n2", 1, 1, Some(values((1, Heart::Green), 3)));
        let (first, _) = assembler.assemble(&me, "prod", vec![n2.clone()], NOW, SECOND);
        assert!(
            Arc::ptr_eq(&first.members[0].verdicts, &me.verdicts),
            "this node's own verdicts are the list its checks published"
        );
        // n2's list in two views is one list.
        let shared = |a: &ClusterView, b: &ClusterView| {
            Arc::ptr_eq(&a.members[1].verdicts, &b.members[1].verdicts)
        };
        n2.values = None;
        let (unchanged, _) = assembler.assemble(&me, "prod", vec![n2.clone()], NOW + 500, SECOND);
        assert!(shared(&first, &unchanged));
        // Its info changed (values read again), its verdicts did not.
        n2.values = Some(values((1, Heart::Green), 4));
        n2.max_version = 4;
        let (info, _) = assembler.assemble(&me, "prod", vec![n2.clone()], NOW + 1000, SECOND);
        assert!(shared(&first, &info));
        // One verdict changed: a new list, the change in it.
        n2.values = Some(values((5, Heart::Red), 4));
        n2.max_version = 5;
        let (changed, _) = assembler.assemble(&me, "prod", vec![n2], NOW + 1500, SECOND);
        assert!(!shared(&first, &changed));
        assert_eq!(changed.members[1].verdicts[0].heart, Heart::Red);
        assert_eq!(changed.members[1].verdicts[1], first.members[1].verdicts[1]);
        assert_eq!(
            Arc::strong_count(&first.members[1].verdicts),
            3,
            "the three views that show it hold it, nothing else"
        );
    }

    /// 100 nodes name the same 1,000 routes with the same few reasons: a
    /// node holds each such text once, however many members carry it.
    #[test]
    fn members_verdicts_share_one_copy_of_each_text() {
        let mut assembler = Assembler::default();
        let peers: Vec<Gossiped> = ["n2", "n3", "n4"]
            .into_iter()
            .map(|name| {
                let values = vec![
                    route_value("api", 1, Heart::Green),
                    route_value("web", 2, Heart::Red),
                ];
                peer(name, 1, 1, Some(values))
            })
            .collect();
        let (view, refused) = assembler.assemble(&me(), "prod", peers, NOW, SECOND);
        assert_eq!(refused, 0);
        let peers = &view.members[1..];
        assert_eq!(peers.len(), 3);
        for member in &peers[1..] {
            for (theirs, first) in member.verdicts.iter().zip(peers[0].verdicts.iter()) {
                assert_eq!(theirs.route, first.route);
                assert!(Arc::ptr_eq(&theirs.route, &first.route), "{}", theirs.route);
                assert!(Arc::ptr_eq(&theirs.reason, &first.reason));
                assert!(Arc::ptr_eq(&theirs.images, &first.images));
            }
        }
        let (api, web) = (&peers[0].verdicts[0], &peers[0].verdicts[1]);
        assert!(
            !Arc::ptr_eq(&api.reason, &web.reason),
            "Green and Red differ"
        );
    }

    #[test]
    fn undecodable_values_are_refused_and_a_key_speaks_for_its_route_only() {
        let mut assembler = Assembler::default();
        let mut forged = route_value("billing", 1, Heart::Red);
        forged.0 = format!("{ROUTE_PREFIX}api");
        let values = vec![
            forged,
            ("route/web".into(), 2, "garbage".into()),
            (NODE_KEY.into(), 3, "???".into()),
        ];
        let (view, refused) = assembler.assemble(
            &me(),
            "prod",
            vec![peer("n2", 1, 1, Some(values))],
            NOW,
            SECOND,
        );
        assert_eq!(refused, 2);
        assert_eq!(view.members[1].verdicts.len(), 1);
        assert_eq!(view.members[1].verdicts[0].route, "api".into());
    }

    #[test]
    fn removed_routes_and_old_generations_disappear() {
        let mut assembler = Assembler::default();
        let both = vec![
            route_value("api", 1, Heart::Green),
            route_value("web", 2, Heart::Green),
        ];
        assembler.assemble(
            &me(),
            "prod",
            vec![peer("n2", 1, 1, Some(both))],
            NOW,
            SECOND,
        );
        let one = vec![route_value("api", 1, Heart::Green)];
        let mut old = peer("n2", 1, 1, Some(one));
        old.live = false;
        old.dead = true;
        let restarted = peer("n2", 2, 1, Some(vec![route_value("api", 1, Heart::Orange)]));
        let (view, _) = assembler.assemble(&me(), "prod", vec![old, restarted], NOW + 10, SECOND);
        assert_eq!(view.members.len(), 2, "{:?}", view.members);
        assert_eq!(view.members[1].generation, 2);
        assert_eq!(*view.members[1].verdicts, [verdict("api", Heart::Orange)]);
    }

    #[test]
    fn disagreement_counts_live_nodes_only() {
        let mut assembler = Assembler::default();
        let red = peer("n2", 1, 1, Some(vec![route_value("api", 1, Heart::Red)]));
        let (view, _) = assembler.assemble(&me(), "prod", vec![red.clone()], NOW, SECOND);
        let across = route_across(&view, "api").unwrap();
        assert!(across.disagreement);
        assert_eq!(across.nodes.len(), 2);
        let mut dead = red;
        dead.live = false;
        dead.dead = true;
        let (view, _) = assembler.assemble(&me(), "prod", vec![dead], NOW, SECOND);
        assert!(!route_across(&view, "api").unwrap().disagreement);
        assert!(route_across(&view, "nothing").is_none());
    }

    /// A peer judging from a silent runtime is no second green: the two
    /// nodes disagree, and the answer shows its heart as stale.
    #[test]
    fn a_stale_peer_disagrees_with_a_current_green() {
        let mut assembler = Assembler::default();
        let stale = Verdict {
            runtime_stale_since_unix_ms: Some(NOW - 9_000),
            ..verdict("api", Heart::Green)
        };
        let value = (
            format!("{ROUTE_PREFIX}api"),
            1,
            gossip::encode_value(&stale).unwrap(),
        );
        let (view, _) = assembler.assemble(
            &me(),
            "prod",
            vec![peer("n2", 1, 1, Some(vec![value]))],
            NOW,
            SECOND,
        );
        let across = route_across(&view, "api").unwrap();
        assert!(across.disagreement);
        let shown = serde_json::to_value(&across).unwrap();
        assert_eq!(shown["nodes"][0]["verdict"]["heart"], "green");
        assert_eq!(shown["nodes"][1]["verdict"]["heart"], "stale");
        assert_eq!(shown["nodes"][1]["verdict"]["last_heart"], "green");
    }
}
