//! `/v1/node`, `/v1/nodes`, `/v1/cluster` and `/v1/routes/{name}`: the
//! cluster as this node knows it, from the view gossip keeps current.
//! Ages are counted at the moment of the answer.

use picket_proto::{
    CertificateState, ClusterView, Liveness, Member, NodeInfo, Shown, TableGeneration, Verdict,
};
use serde::Serialize;

use super::filter::Filter;
use crate::edge::Served;
use crate::gossip::Membership;
use crate::gossip::view::{RouteAcross, Tables, route_across, tables};

#[derive(Debug, Serialize)]
pub struct NodeAnswer {
    pub name: String,
    pub version: String,
    /// The cluster id; `null` for a node that runs alone.
    pub cluster: Option<String>,
    /// Where peers reach this node's gossip.
    pub gossip: Option<String>,
    pub admin: String,
    /// Where its QUIC feed answers, and the SHA-256 fingerprint of the
    /// feed's certificate, for `picket-tui --pin`.
    pub feed: Option<String>,
    pub feed_fingerprint: Option<String>,
    pub runtime: String,
    pub started_unix_ms: u64,
    pub members: Counts,
    /// The HTTPS listener; `null` without one.
    pub listen_tls: Option<String>,
    /// The certificates served to HTTPS clients, the default first: the
    /// file's, then those from ACME, then the runtime's.
    pub certificates: Vec<CertificateAnswer>,
    /// The names certificates from the runtime (an Ingress's TLS Secrets)
    /// ask to serve and may not, each with the rule that refuses it.
    pub certificates_refused: Vec<RefusedNameAnswer>,
    /// This node's state of each certificate it obtains from ACME; empty
    /// without `[acme]`.
    pub acme: Vec<CertificateState>,
}

/// A name a certificate from the runtime may not serve.
#[derive(Debug, Serialize)]
pub struct RefusedNameAnswer {
    /// The certificate: `secret shop/shop-tls`.
    pub certificate: String,
    pub name: String,
    /// The ownership rule: `file-certificate`, `file-host`,
    /// `not-allowed`, `no-route` or `not-named`.
    pub rule: &'static str,
    pub reason: String,
}

/// A certificate served to HTTPS clients.
#[derive(Debug, Serialize)]
pub struct CertificateAnswer {
    /// The names it serves.
    pub names: Vec<String>,
    /// Its certificate file.
    pub cert: String,
    /// Lowercase hex.
    pub serial: String,
    pub not_after_unix_ms: i64,
    /// Whole days left, counted at the answer; negative once expired.
    pub days_to_expiry: i64,
}

#[derive(Debug, Serialize, Default)]
pub struct Counts {
    pub alive: usize,
    pub suspect: usize,
    pub dead: usize,
}

/// A member as `/v1/cluster` and `/v1/nodes` show it, borrowed from the
/// view: at 100 nodes × 1,000 routes an answer holds 100,000 verdicts,
/// which are encoded where they are, never copied.
#[derive(Debug, Serialize)]
pub struct MemberAnswer<'a> {
    pub name: &'a str,
    pub gossip: &'a str,
    pub generation: u64,
    pub liveness: Liveness,
    /// Since this node last heard from it, in milliseconds.
    pub age_ms: u64,
    pub info: Option<&'a NodeInfo>,
    /// The route table it serves; `null` until it has said.
    pub table: Option<&'a TableGeneration>,
    /// It serves another table than most nodes do.
    pub table_differs: bool,
    /// Its state of each certificate it obtains from ACME.
    pub acme: &'a [CertificateState],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdicts: Option<Verdicts<'a>>,
}

/// A member's verdicts in an answer: all of them, or those a filter kept;
/// each as a reader is shown it ([`picket_proto::Shown`]: a stale one
/// with a heart of its own).
#[derive(Debug)]
pub enum Verdicts<'a> {
    All(&'a [Verdict]),
    Kept(Vec<&'a Verdict>),
}

impl Serialize for Verdicts<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Verdicts::All(all) => serializer.collect_seq(all.iter().map(Shown)),
            Verdicts::Kept(kept) => serializer.collect_seq(kept.iter().map(|v| Shown(v))),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ClusterAnswer<'a> {
    /// The node answering.
    pub node: &'a str,
    pub cluster: Option<&'a str>,
    pub taken_unix_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<MemberAnswer<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<MemberAnswer<'a>>>,
    /// Which nodes serve which route table; `disagreement` when they
    /// differ.
    pub route_tables: Tables,
}

#[derive(Debug, Serialize)]
pub struct RouteAnswer {
    /// The node answering.
    pub node: String,
    #[serde(flatten)]
    pub across: RouteAcross,
}

fn counts(view: &ClusterView) -> Counts {
    let mut counts = Counts::default();
    for member in &view.members {
        match member.liveness {
            Liveness::Alive => counts.alive += 1,
            Liveness::Suspect => counts.suspect += 1,
            Liveness::Dead => counts.dead += 1,
        }
    }
    counts
}

/// Since `m` was last heard from; the answering node hears itself now.
fn age(view: &ClusterView, m: &Member, now_ms: u64) -> u64 {
    if m.name == view.node {
        0
    } else {
        now_ms.saturating_sub(m.heard_unix_ms)
    }
}

fn member<'a>(
    view: &ClusterView,
    m: &'a Member,
    now_ms: u64,
    with_verdicts: bool,
    filter: &Filter,
    tables: &Tables,
) -> MemberAnswer<'a> {
    let table_differs = tables
        .tables
        .iter()
        .any(|t| t.differs && t.nodes.contains(&m.name));
    MemberAnswer {
        table: m.table.as_ref(),
        table_differs,
        acme: &m.certificates,
        name: &m.name,
        gossip: &m.gossip,
        generation: m.generation,
        liveness: m.liveness,
        age_ms: age(view, m, now_ms),
        info: m.info.as_ref(),
        routes: (!with_verdicts).then_some(m.verdicts.len()),
        verdicts: with_verdicts.then(|| {
            if filter.is_empty() {
                Verdicts::All(&m.verdicts)
            } else {
                Verdicts::Kept(
                    m.verdicts
                        .iter()
                        .filter(|v| filter.keeps_verdict(v))
                        .collect(),
                )
            }
        }),
    }
}

/// `/v1/node`, at `now` (Unix seconds).
pub fn node(
    membership: &Membership,
    listen_tls: Option<std::net::SocketAddr>,
    served: &Served,
    now: i64,
) -> NodeAnswer {
    let info = &membership.info;
    let view = membership.view();
    let acme = view
        .members
        .iter()
        .find(|m| m.name == info.name)
        .map(|m| m.certificates.clone())
        .unwrap_or_default();
    let certificates = served
        .all()
        .map(|entry| {
            let current = &entry.current;
            CertificateAnswer {
                names: current.names.clone(),
                cert: entry.cert.display().to_string(),
                serial: current.serial.clone(),
                not_after_unix_ms: current.not_after.saturating_mul(1000),
                days_to_expiry: (current.not_after - now).div_euclid(86_400),
            }
        })
        .collect();
    NodeAnswer {
        name: info.name.clone(),
        version: info.version.clone(),
        cluster: membership.cluster.clone(),
        gossip: membership.advertise.map(|a| a.to_string()),
        admin: info.admin.clone(),
        feed: info.feed.clone(),
        feed_fingerprint: info.feed_fingerprint.clone(),
        runtime: info.runtime.clone(),
        started_unix_ms: info.started_unix_ms,
        members: counts(&view),
        listen_tls: listen_tls.map(|a| a.to_string()),
        certificates,
        certificates_refused: served
            .refused
            .iter()
            .map(|r| RefusedNameAnswer {
                certificate: r.source.clone(),
                name: r.name.clone(),
                rule: r.rule.slug(),
                reason: r.rule.to_string(),
            })
            .collect(),
        acme,
    }
}

/// Every member with its verdicts (`/v1/cluster`), or without them
/// (`/v1/nodes`), from `view`, the view of the node answering (a member
/// of `cluster`).
pub fn cluster<'a>(
    view: &'a ClusterView,
    cluster: Option<&'a str>,
    with_verdicts: bool,
    now_ms: u64,
    filter: &Filter,
) -> ClusterAnswer<'a> {
    let route_tables = tables(view);
    let members: Vec<MemberAnswer<'a>> = view
        .members
        .iter()
        .filter(|m| filter.keeps_member(m))
        .map(|m| member(view, m, now_ms, with_verdicts, filter, &route_tables))
        .collect();
    let (members, nodes) = if with_verdicts {
        (Some(members), None)
    } else {
        (None, Some(members))
    };
    ClusterAnswer {
        node: &view.node,
        cluster,
        taken_unix_ms: view.taken_unix_ms,
        members,
        nodes,
        route_tables,
    }
}

/// One route on every node; `None` when no node has it.
pub fn route(membership: &Membership, name: &str, now_ms: u64) -> Option<RouteAnswer> {
    let view = membership.view();
    let mut across = route_across(&view, name)?;
    for (node, m) in across.nodes.iter_mut().filter_map(|n| {
        let m = view.members.iter().find(|m| m.name == n.node)?;
        Some((n, m))
    }) {
        node.age_ms = age(&view, m, now_ms);
    }
    Some(RouteAnswer {
        node: view.node.clone(),
        across,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::filter::tests::{member, verdict};
    use picket_proto::Heart;

    fn view() -> ClusterView {
        ClusterView {
            node: "n1".to_string(),
            cluster: "c".to_string(),
            taken_unix_ms: 1_000,
            members: vec![
                member(
                    "n1",
                    vec![verdict("api", Heart::Green), verdict("web", Heart::Red)],
                ),
                member(
                    "n2",
                    vec![verdict("api", Heart::Red), verdict("web", Heart::Red)],
                ),
            ],
        }
    }

    fn shown<'a>(verdicts: impl Iterator<Item = &'a Verdict>) -> serde_json::Value {
        serde_json::to_value(verdicts.map(Shown).collect::<Vec<_>>()).unwrap()
    }

    /// The answer borrows the view's verdicts and shows them as a reader
    /// is shown them, all of them or those the filter keeps.
    #[test]
    fn an_answer_shows_the_views_verdicts_without_copying_them() {
        let view = view();
        let all = cluster(&view, Some("c"), true, 1_500, &Filter::default());
        let json = serde_json::to_value(&all).unwrap();
        for (i, m) in view.members.iter().enumerate() {
            assert_eq!(json["members"][i]["verdicts"], shown(m.verdicts.iter()));
        }
        assert_eq!(json["members"][1]["age_ms"], 1_500, "last heard at 0");
        assert!(json["members"][0].get("routes").is_none());

        let red = Filter::parse(Some("heart=red")).unwrap();
        let kept = cluster(&view, Some("c"), true, 1_500, &red);
        let json = serde_json::to_value(&kept).unwrap();
        assert_eq!(
            json["members"][0]["verdicts"],
            shown([&view.members[0].verdicts[1]].into_iter())
        );
        assert_eq!(
            json["members"][1]["verdicts"],
            shown(view.members[1].verdicts.iter())
        );

        let nodes = cluster(&view, Some("c"), false, 1_500, &Filter::default());
        let json = serde_json::to_value(&nodes).unwrap();
        assert_eq!(json["nodes"][0]["routes"], 2);
        assert!(json["nodes"][0].get("verdicts").is_none());
    }
}
