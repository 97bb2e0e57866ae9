//! Cluster views for the App's and the view's tests.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use picket_proto::{
    BreakerState, ClusterView, Heart, ImageCount, Liveness, Member, NodeInfo, Verdict,
};

use super::{App, Link, Msg};

/// When the views are taken.
pub const T0: u64 = 1_800_000_000_000;

pub fn verdict(route: &str, heart: Heart, circuit: BreakerState) -> Verdict {
    let ready = match heart {
        Heart::Green => 2,
        Heart::Orange => 1,
        Heart::Red => 0,
    };
    Verdict {
        route: route.into(),
        heart,
        reason: format!("{ready} of 2 ready").into(),
        ready,
        total: 2,
        images: vec![ImageCount {
            image: format!("{route}:1.4"),
            replicas: 2,
        }]
        .into(),
        circuit,
        since_unix_ms: T0 - 192_000,
        runtime_stale_since_unix_ms: None,
    }
}

pub fn member(name: &str, liveness: Liveness, age_ms: u64, verdicts: Vec<Verdict>) -> Member {
    let host = name.trim_start_matches('n');
    Member {
        name: name.into(),
        gossip: format!("10.0.0.{host}:7946"),
        generation: 1,
        liveness,
        heard_unix_ms: T0 - age_ms,
        info: Some(NodeInfo {
            name: name.into(),
            version: "test".into(),
            admin: format!("10.0.0.{host}:9900"),
            feed: Some(format!("10.0.0.{host}:7000")),
            feed_fingerprint: Some(format!("f1a9{host}")),
            runtime: "docker".into(),
            started_unix_ms: T0 - 3_600_000,
        }),
        table: None,
        certificates: Vec::new(),
        verdicts: std::sync::Arc::new(verdicts),
    }
}

pub fn view(members: Vec<Member>) -> ClusterView {
    ClusterView {
        node: members.first().map(|m| m.name.clone()).unwrap_or_default(),
        cluster: "prod".into(),
        taken_unix_ms: T0,
        members,
    }
}

/// n1, n2 (suspect) and n3; n3 sees `orders` red with its circuit open
/// while n1 and n2 see it green; `api` and `web` are green everywhere.
pub fn three_nodes() -> ClusterView {
    let green = |route: &str| verdict(route, Heart::Green, BreakerState::Closed);
    let mut orders = verdict("orders", Heart::Red, BreakerState::Open);
    orders.reason = "no replica ready".into();
    orders.since_unix_ms = T0 - 12_000;
    view(vec![
        member(
            "n1",
            Liveness::Alive,
            0,
            vec![
                green("api"),
                green("orders"),
                verdict("web", Heart::Green, BreakerState::Disabled),
            ],
        ),
        member(
            "n2",
            Liveness::Suspect,
            4_000,
            vec![green("api"), green("orders"), green("web")],
        ),
        member(
            "n3",
            Liveness::Alive,
            1_000,
            vec![green("api"), orders, green("web")],
        ),
    ])
}

/// `nodes` nodes `n000`… × `routes` routes `route-000`…, all green, but
/// `n042` sees `route-007` red and the first 30 nodes see `route-011`
/// orange.
pub fn big(nodes: usize, routes: usize) -> ClusterView {
    let members = (0..nodes)
        .map(|n| {
            let name = format!("n{n:03}");
            let verdicts = (0..routes)
                .map(|r| {
                    let heart = match (n, r) {
                        (42, 7) => Heart::Red,
                        (0..30, 11) => Heart::Orange,
                        _ => Heart::Green,
                    };
                    verdict(&format!("route-{r:03}"), heart, BreakerState::Closed)
                })
                .collect();
            member(&name, Liveness::Alive, 0, verdicts)
        })
        .collect();
    view(members)
}

/// An App attached to n1 over a live link, showing `view` at `T0`.
/// `view` with each member, in order, serving the table `(digest,
/// routes, since)` given for it (`None`: it has not said).
pub fn with_tables(mut view: ClusterView, tables: &[Option<(&str, u32, u64)>]) -> ClusterView {
    for (member, table) in view.members.iter_mut().zip(tables) {
        member.table = table.map(
            |(digest, routes, since_unix_ms)| picket_proto::TableGeneration {
                digest: digest.into(),
                routes,
                since_unix_ms,
            },
        );
    }
    view
}

pub fn app_with(view: ClusterView) -> App {
    let mut app = App::new();
    app.update(Msg::Tick { now_unix_ms: T0 });
    app.update(Msg::Link(Link::Live {
        addr: "10.0.0.1:7000".into(),
    }));
    app.update(Msg::View(view));
    app
}

pub fn key(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

pub fn keys(app: &mut App, text: &str) {
    for c in text.chars() {
        app.update(key(KeyCode::Char(c)));
    }
}

/// A node's state of the ACME certificate `shop.example.com`, ordered by
/// n1.
pub fn certificate(
    phase: picket_proto::AcmePhase,
    serial: Option<&str>,
    error: Option<&str>,
) -> picket_proto::CertificateState {
    picket_proto::CertificateState {
        name: "shop.example.com".into(),
        phase,
        serial: serial.map(str::to_string),
        not_after_unix: None,
        renew_at_unix: None,
        orderer: Some("n1".into()),
        issued_by: None,
        error: error.map(str::to_string),
        retry_at_unix: None,
    }
}
