//! Recorded bytes of every format a node reads from another process: the
//! gossip values (a node's description and its verdicts) and the feed's
//! frames, as the current version writes them.
//!
//! The policy (docs/cluster.md, "Rolling upgrades"): a release reads the
//! formats of the release before it, so that a cluster upgrades one node
//! at a time. These files hold the bytes each version wrote. A change to
//! the encoding fails here: either it keeps the recorded bytes, or it
//! bumps [`codec::VERSION`], records the new version's bytes beside the
//! old ones (`PICKET_RECORD=1 cargo test -p picket-proto --test
//! recorded` writes the current version's file), and keeps reading the
//! previous version's file for one release.

// A test file: an expectation that fails is the test failing.
#![allow(clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use picket_proto::codec::{self, VERSION};
use picket_proto::feed::{Ask, Frame, Head};
use picket_proto::gossip::{decode_value, encode_value};
use picket_proto::{
    AcmePhase, BreakerState, CertificateState, Heart, ImageCount, Liveness, NodeInfo,
    TableGeneration, Verdict,
};

fn info() -> NodeInfo {
    NodeInfo {
        name: "edge-1".into(),
        version: "0.1.0".into(),
        admin: "10.0.0.1:9901".into(),
        feed: Some("10.0.0.1:9902".into()),
        feed_fingerprint: Some("4c0f12ab".into()),
        runtime: "kubernetes".into(),
        started_unix_ms: 1_796_000_000_000,
    }
}

fn verdict() -> Verdict {
    Verdict {
        route: "api".into(),
        heart: Heart::Orange,
        reason: "2 of 3 replicas ready".into(),
        ready: 2,
        total: 3,
        images: Arc::from(vec![ImageCount {
            image: "api:1.4@sha256:4c0f12ab9d2e".into(),
            replicas: 2,
        }]),
        circuit: BreakerState::HalfOpen,
        since_unix_ms: 1_796_000_001_000,
        runtime_stale_since_unix_ms: Some(1_796_000_002_000),
    }
}

/// Every frame of the feed, each kind once, in the order a node sends.
fn frames() -> Vec<Frame> {
    vec![
        Frame::Reset {
            node: "edge-1".into(),
            cluster: "prod".into(),
            taken_unix_ms: 1_796_000_003_000,
        },
        Frame::Head(Head {
            name: "edge-2".into(),
            gossip: "10.0.0.2:7946".into(),
            generation: 1_796_000_000_500,
            liveness: Liveness::Alive,
            heard_unix_ms: 1_796_000_002_900,
            info: Some(info()),
        }),
        Frame::Verdict {
            node: "edge-2".into(),
            verdict: verdict(),
        },
        Frame::RouteGone {
            node: "edge-2".into(),
            route: "old".into(),
        },
        Frame::Gone {
            node: "edge-3".into(),
        },
        Frame::Synced {
            taken_unix_ms: 1_796_000_003_000,
        },
        // Added after codec 1 was first recorded, as the last variant: the
        // frames above kept their bytes.
        Frame::Table {
            node: "edge-2".into(),
            table: Some(TableGeneration {
                digest: "4c0f12ab9d2e7731".into(),
                routes: 12,
                since_unix_ms: 1_796_000_002_500,
            }),
        },
        // Added later still, after `Table`.
        Frame::Certificates {
            node: "edge-2".into(),
            certificates: vec![CertificateState {
                name: "shop.example.com".into(),
                phase: AcmePhase::Renewing,
                serial: Some("fa4e6f5a3c6d1b02".into()),
                not_after_unix: Some(1_803_427_199),
                renew_at_unix: Some(1_801_699_199),
                orderer: Some("edge-2".into()),
                issued_by: Some("edge-1".into()),
                error: None,
                retry_at_unix: None,
            }],
        },
    ]
}

/// The current version's recording: one `name value` line each.
fn record() -> String {
    let mut lines = vec![
        format!("node {}", encode_value(&info()).expect("encodes")),
        format!("route/api {}", encode_value(&verdict()).expect("encodes")),
        format!(
            "request {}",
            hex(&codec::encode_frame(&Ask::Subscribe).expect("encodes"))
        ),
    ];
    for (i, frame) in frames().iter().enumerate() {
        let bytes = codec::encode_frame(frame).expect("encodes");
        lines.push(format!("frame{i} {}", hex(&bytes)));
    }
    lines.join("\n") + "\n"
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn file(version: u8) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/recorded")
        .join(format!("codec-{version}.txt"))
}

/// The recorded line `name` of `version`'s file.
fn recorded(version: u8, name: &str) -> String {
    let text = std::fs::read_to_string(file(version)).expect("the recording");
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} in codec-{version}.txt"))
        .to_string()
}

#[test]
fn the_current_version_writes_what_was_recorded() {
    if std::env::var_os("PICKET_RECORD").is_some() {
        std::fs::write(file(VERSION), record()).expect("write the recording");
    }
    let text = std::fs::read_to_string(file(VERSION)).expect("the recording");
    assert_eq!(
        record(),
        text,
        "the encoding changed without a new codec version"
    );
}

/// Every version this release reads: the current one and, for one
/// release after a change, the one before.
const READ: &[u8] = &[VERSION];

#[test]
fn every_version_read_decodes_to_the_same_values() {
    for &version in READ {
        let node: NodeInfo = decode_value(&recorded(version, "node")).expect("node");
        assert_eq!(node, info(), "codec {version}");
        let route: Verdict = decode_value(&recorded(version, "route/api")).expect("route");
        assert_eq!(route, verdict(), "codec {version}");
        let request = unhex(&recorded(version, "request"));
        let (request, _) = codec::decode_frame::<Ask>(&request).expect("request");
        assert_eq!(request, Ask::Subscribe, "codec {version}");
        for (i, expected) in frames().into_iter().enumerate() {
            let bytes = unhex(&recorded(version, &format!("frame{i}")));
            let (frame, used) = codec::decode_frame::<Frame>(&bytes).expect("frame");
            assert_eq!(used, bytes.len());
            assert_eq!(frame, expected, "codec {version}, frame {i}");
        }
    }
}
