//! Every decision of the ACME task, with the time given: what is served
//! from the cache, what a change of names or directory keeps serving, who
//! orders and when (nodes reloaded together: one), which copy of a peer's
//! serves and which is refused, how an order ends, and who passes a
//! certificate on.

use std::collections::HashMap;

use picket_proto::acme::{CertificateState, Issued, Phase};

use super::*;
use crate::acme::testing::{Ca, DIRECTORY, NOW, self_signed, settings};

const NOW_MS: i64 = NOW * 1000;
const SETTLE_MS: i64 = 2_000;

fn names() -> Vec<String> {
    vec!["shop.test".into(), "www.shop.test".into()]
}

/// A book that manages the settings' certificate, from `cached` or not.
fn managing(settings: &AcmeSettings, trust: &Trust, cached: Option<Cached>) -> (Book, Vec<Note>) {
    let mut book = Book::default();
    let notes = book.reconcile(
        Some(settings),
        Some(trust),
        |_| cached.clone(),
        NOW_MS,
        SETTLE_MS,
    );
    (book, notes)
}

fn cached(pem: String) -> Option<Cached> {
    Some(Cached {
        pem,
        directory: Some(DIRECTORY.into()),
        issued_by: "n1".into(),
    })
}

/// A live node's state of `shop.test`: serving `serial` until
/// `not_after`, or waiting.
fn state(phase: Phase, serving: Option<(&str, i64)>) -> CertificateState {
    CertificateState {
        name: "shop.test".into(),
        phase,
        serial: serving.map(|(s, _)| s.to_string()),
        not_after_unix: serving.map(|(_, at)| at),
        renew_at_unix: serving.map(|(_, at)| at - 30 * 86_400),
        orderer: None,
        issued_by: None,
        error: None,
        retry_at_unix: None,
    }
}

/// Gossip where `nodes` manage `shop.test` from `DIRECTORY`, each in its
/// state.
fn shared_of(nodes: &[(&str, CertificateState)]) -> shared::Shared {
    let mut shared = shared::Shared::default();
    for (node, state) in nodes {
        shared.states.insert(
            node.to_string(),
            HashMap::from([("shop.test".to_string(), state.clone())]),
        );
        shared
            .directories
            .insert(node.to_string(), DIRECTORY.to_string());
    }
    shared
}

#[test]
fn the_cache_serves_only_the_cas_certificate() {
    let ca = Ca::new("the CA");
    let settings = settings(&ca);
    let trust = Trust::new(&settings).unwrap();
    let (book, notes) = managing(
        &settings,
        &trust,
        cached(ca.issue(&["shop.test", "www.shop.test"], 90)),
    );
    let managed = &book.managed["shop.test"];
    assert!(
        managed.serving.as_ref().is_some_and(|s| s.whole),
        "{notes:?}"
    );
    assert_eq!(managed.settled_ms, NOW_MS + SETTLE_MS);
    // A planted certificate kept by an earlier release, or another CA's.
    for pem in [
        self_signed(&["shop.test", "www.shop.test"]),
        Ca::new("another").issue(&["shop.test", "www.shop.test"], 90),
    ] {
        let (book, notes) = managing(&settings, &trust, cached(pem));
        assert!(book.managed["shop.test"].serving.is_none());
        assert!(
            matches!(&notes[..], [Note::CacheRefused { name, .. }] if name == "shop.test"),
            "{notes:?}"
        );
    }
}

#[test]
fn new_names_or_a_new_directory_keep_what_serves_until_the_successor() {
    let ca = Ca::new("the CA");
    let settings = settings(&ca);
    let trust = Trust::new(&settings).unwrap();
    let (mut book, _) = managing(
        &settings,
        &trust,
        cached(ca.issue(&["shop.test", "www.shop.test"], 90)),
    );
    // A name added: the certificate keeps serving the two it has.
    let more = AcmeSettings {
        certificates: vec![vec![
            "shop.test".into(),
            "www.shop.test".into(),
            "api.shop.test".into(),
        ]],
        ..settings.clone()
    };
    let later = NOW_MS + 60_000;
    book.reconcile(Some(&more), Some(&trust), |_| None, later, SETTLE_MS);
    let managed = &book.managed["shop.test"];
    let serving = managed.serving.as_ref().expect("still serving");
    assert!(!serving.whole, "a stand-in");
    assert_eq!(serving.config.current.names, names());
    assert_eq!(managed.settled_ms, later + SETTLE_MS, "settles anew");
    let state = book
        .state("n1", "shop.test", &shared::Shared::default())
        .unwrap();
    assert!(
        state.renew_at_unix.is_some_and(|at| at <= NOW),
        "a stand-in is due at once: {state:?}"
    );
    // Ordered once settled, by the only node that manages it.
    assert!(
        book.to_order("n1", &shared::Shared::default(), later + SETTLE_MS - 1)
            .is_empty()
    );
    assert_eq!(
        book.to_order("n1", &shared::Shared::default(), later + SETTLE_MS),
        ["shop.test"]
    );

    // A new directory: what serves stays, ordered anew.
    let (mut book, _) = managing(
        &settings,
        &trust,
        cached(ca.issue(&["shop.test", "www.shop.test"], 90)),
    );
    let production = AcmeSettings {
        directory: "https://production.ca.test/dir".into(),
        ..settings.clone()
    };
    let moved = Trust::new(&production).unwrap();
    book.reconcile(Some(&production), Some(&moved), |_| None, later, SETTLE_MS);
    let serving = book.managed["shop.test"]
        .serving
        .as_ref()
        .expect("still serving");
    assert!(!serving.whole);
    assert_eq!(
        book.to_order("n1", &shared::Shared::default(), later + SETTLE_MS),
        ["shop.test"]
    );

    // A new first name: the old certificate serves the names it covers.
    let (mut book, _) = managing(
        &settings,
        &trust,
        cached(ca.issue(&["shop.test", "www.shop.test"], 90)),
    );
    let renamed = AcmeSettings {
        certificates: vec![vec!["api.shop.test".into(), "www.shop.test".into()]],
        ..settings.clone()
    };
    let notes = book.reconcile(Some(&renamed), Some(&trust), |_| None, later, SETTLE_MS);
    assert!(notes.contains(&Note::Dropped {
        name: "shop.test".into()
    }));
    let serving = book.managed["api.shop.test"]
        .serving
        .as_ref()
        .expect("a stand-in");
    assert_eq!(serving.config.current.names, ["www.shop.test"]);
}

/// Three nodes reloaded in the same moment add a certificate: none orders
/// before it has settled, and then exactly one does, whatever each heard
/// first; a node of another directory is never a candidate.
#[test]
fn nodes_reloaded_together_order_once() {
    let ca = Ca::new("the CA");
    let settings = settings(&ca);
    let trust = Trust::new(&settings).unwrap();
    let nodes = ["n1", "n2", "n3"];
    let mut books: Vec<Book> = nodes
        .iter()
        .map(|_| managing(&settings, &trust, None).0)
        .collect();
    let waiting = state(Phase::Waiting, None);
    // In the first rounds each hears only itself: nobody orders.
    for (book, node) in books.iter_mut().zip(nodes) {
        assert!(
            book.to_order(node, &shared::Shared::default(), NOW_MS + 500)
                .is_empty()
        );
    }
    // Settled: every node hears every other.
    let everyone = shared_of(&[
        ("n1", waiting.clone()),
        ("n2", waiting.clone()),
        ("n3", waiting.clone()),
    ]);
    let ordering: Vec<&str> = books
        .iter_mut()
        .zip(nodes)
        .filter_map(|(book, node)| {
            (!book
                .to_order(node, &everyone, NOW_MS + SETTLE_MS)
                .is_empty())
            .then_some(node)
        })
        .collect();
    assert_eq!(ordering.len(), 1, "{ordering:?}");
    assert_eq!(
        Some(ordering[0]),
        plan::orderer("shop.test", nodes),
        "the rendezvous orderer"
    );
    // A node of another directory is no candidate: the one it would be
    // leaves the order to the next.
    let mut other = everyone;
    let elsewhere = ordering[0].to_string();
    other
        .directories
        .insert(elsewhere.clone(), "https://staging.ca.test/dir".into());
    let mut fresh: Vec<Book> = nodes
        .iter()
        .map(|_| managing(&settings, &trust, None).0)
        .collect();
    let next: Vec<&str> = fresh
        .iter_mut()
        .zip(nodes)
        .filter(|(_, node)| **node != elsewhere)
        .filter_map(|(book, node)| {
            (!book.to_order(node, &other, NOW_MS + SETTLE_MS).is_empty()).then_some(node)
        })
        .collect();
    assert_eq!(next.len(), 1);
    assert_ne!(next[0], elsewhere);
}

#[test]
fn a_peers_copy_serves_when_it_is_the_cas_and_newer() {
    let ca = Ca::new("the CA");
    let settings = settings(&ca);
    let trust = Trust::new(&settings).unwrap();
    let (mut book, _) = managing(
        &settings,
        &trust,
        cached(ca.issue(&["shop.test", "www.shop.test"], 30)),
    );
    let copy = |node: &str, pem: String, directory: &str| {
        let checked = crate::certificate::check(pem.as_bytes(), pem.as_bytes(), None, NOW).unwrap();
        Passed {
            node: node.into(),
            name: "shop.test".into(),
            issued: Issued {
                serial: checked.serial.clone(),
                not_before_unix: checked.not_before,
                not_after_unix: checked.not_after,
                by: node.into(),
                directory: directory.into(),
                parts: 1,
                digest: shared::digest(&pem),
            },
            pem,
        }
    };
    let forged = copy(
        "evil",
        self_signed(&["shop.test", "www.shop.test"]),
        DIRECTORY,
    );
    let staging = copy(
        "n4",
        Ca::new("staging").issue_from(&["shop.test", "www.shop.test"], NOW, 80),
        "https://staging.ca.test/dir",
    );
    let newer = copy(
        "n2",
        ca.issue_from(&["shop.test", "www.shop.test"], NOW, 60),
        DIRECTORY,
    );
    let older = copy(
        "n3",
        ca.issue_from(&["shop.test", "www.shop.test"], NOW - 10 * 86_400, 20),
        DIRECTORY,
    );
    let passed = [forged.clone(), staging.clone(), older, newer.clone()];
    let notes = book.adopt(&passed, |copy, names| {
        trust.check(&copy.pem, names, &copy.issued.directory, NOW)
    });
    let distrusted: Vec<(&str, &'static str)> = notes
        .iter()
        .filter_map(|n| match n {
            Note::Distrusted { from, why, .. } => Some((from.as_str(), why.slug())),
            _ => None,
        })
        .collect();
    assert_eq!(distrusted, [("evil", "lifetime"), ("n4", "directory")]);
    assert!(
        notes
            .iter()
            .any(|n| matches!(n, Note::Adopted { from, .. } if from == "n2"))
    );
    let serving = book.managed["shop.test"].serving.as_ref().unwrap();
    assert_eq!(serving.held.serial, newer.issued.serial);
    assert_eq!(serving.issued_by, "n2");
    // Adopted once: the same copies again change nothing.
    let again = book.adopt(&[newer], |copy, names| {
        trust.check(&copy.pem, names, &copy.issued.directory, NOW)
    });
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn an_order_ends_serving_or_waiting_its_back_off() {
    let ca = Ca::new("the CA");
    let settings = settings(&ca);
    let trust = Trust::new(&settings).unwrap();
    let (mut book, _) = managing(&settings, &trust, None);
    assert_eq!(
        book.to_order("n1", &shared::Shared::default(), NOW_MS + SETTLE_MS),
        ["shop.test"]
    );
    // The CA's error: the first wait is a minute, less its jitter.
    let note = book.finish("shop.test", Err("the CA said no".into()), &trust, "n1", NOW);
    match note {
        Some(Note::Failed { retry_at, .. }) => {
            assert!((NOW + 45..=NOW + 60).contains(&retry_at), "{retry_at}")
        }
        other => panic!("{other:?}"),
    }
    let managed = &book.managed["shop.test"];
    assert!(!managed.ordering && managed.failure.is_some());
    // Not before the back-off ends.
    assert!(
        book.to_order("n1", &shared::Shared::default(), (NOW + 44) * 1000)
            .is_empty()
    );
    assert_eq!(
        book.to_order("n1", &shared::Shared::default(), (NOW + 61) * 1000),
        ["shop.test"]
    );
    // What an order returns that is not the CA's is a failure too.
    let note = book.finish(
        "shop.test",
        Ok(self_signed(&["shop.test", "www.shop.test"])),
        &trust,
        "n1",
        NOW + 61,
    );
    assert!(
        matches!(note, Some(Note::Failed { ref error, .. }) if error.contains("may not serve")),
        "{note:?}"
    );
    // The CA's certificate serves, the failure gone.
    book.to_order("n1", &shared::Shared::default(), (NOW + 1_000) * 1000);
    let note = book.finish(
        "shop.test",
        Ok(ca.issue(&["shop.test", "www.shop.test"], 90)),
        &trust,
        "n1",
        NOW + 1_000,
    );
    assert!(matches!(note, Some(Note::Issued { .. })), "{note:?}");
    let managed = &book.managed["shop.test"];
    assert!(managed.failure.is_none() && managed.serving.as_ref().is_some_and(|s| s.whole));
}

/// A certificate travels from one node that serves it, only while a node
/// lacks it; every node that serves it passes it on if the lack lasts.
#[test]
fn one_copy_passes_while_a_node_lacks_it() {
    let ca = Ca::new("the CA");
    let settings = settings(&ca);
    let trust = Trust::new(&settings).unwrap();
    let pem = ca.issue(&["shop.test", "www.shop.test"], 90);
    let mut books: Vec<Book> = (0..3)
        .map(|_| managing(&settings, &trust, cached(pem.clone())).0)
        .collect();
    let held = books[0].managed["shop.test"]
        .serving
        .as_ref()
        .unwrap()
        .held
        .clone();
    let serving = state(Phase::Serving, Some((&held.serial, held.not_after)));
    let nodes = ["n1", "n2", "n3"];
    // Steady: everyone serves it; nobody passes it on.
    let steady = shared_of(&[
        ("n1", serving.clone()),
        ("n2", serving.clone()),
        ("n3", serving.clone()),
    ]);
    for (book, node) in books.iter_mut().zip(nodes) {
        assert!(!book.passes(node, "shop.test", &steady, NOW_MS));
    }
    // n4 joins with nothing: one of the three passes it on.
    let joined = shared_of(&[
        ("n1", serving.clone()),
        ("n2", serving.clone()),
        ("n3", serving.clone()),
        ("n4", state(Phase::Waiting, None)),
    ]);
    let passing: Vec<&str> = books
        .iter_mut()
        .zip(nodes)
        .filter_map(|(book, node)| {
            book.passes(node, "shop.test", &joined, NOW_MS)
                .then_some(node)
        })
        .collect();
    assert_eq!(passing.len(), 1, "{passing:?}");
    assert_eq!(
        Some(passing[0]),
        plan::passer("shop.test", &held.serial, nodes)
    );
    // Still lacking it after 30 s: every one passes it on.
    let all = books
        .iter_mut()
        .zip(nodes)
        .filter_map(|(book, node)| {
            book.passes(node, "shop.test", &joined, NOW_MS + PASS_ALL_AFTER_MS)
                .then_some(node)
        })
        .count();
    assert_eq!(all, 3);
    // A node that serves a newer one lacks nothing of theirs.
    let newer = shared_of(&[
        ("n1", serving.clone()),
        (
            "n4",
            state(Phase::Serving, Some(("ff", held.not_after + 86_400))),
        ),
    ]);
    assert!(!books[0].passes("n1", "shop.test", &newer, NOW_MS));
}
