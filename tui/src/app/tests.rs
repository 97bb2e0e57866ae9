use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use picket_proto::{BreakerState, Heart, Liveness};

use super::fixture::{
    T0, app_with, big, key, keys, member, three_nodes, verdict, view, with_tables,
};
use super::*;
use std::sync::Arc;

fn routes(app: &App) -> Vec<&str> {
    app.order()
        .iter()
        .map(|&i| app.matrix().rows()[i].name.as_str())
        .collect()
}

fn selected(app: &App) -> &str {
    app.selected_row()
        .map_or("", |row| app.matrix().rows()[row].name.as_str())
}

#[test]
fn rows_are_routes_and_columns_members() {
    let app = app_with(three_nodes());
    let matrix = app.matrix();
    let names: Vec<&str> = matrix.columns().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    let ages: Vec<u64> = matrix.columns().iter().map(|c| c.age_ms).collect();
    assert_eq!(ages, [0, 4_000, 1_000]);
    let rows: Vec<&str> = matrix.rows().iter().map(|r| r.name.as_str()).collect();
    assert_eq!(rows, ["api", "orders", "web"]);
    let orders = &matrix.rows()[1];
    assert!(orders.disagree);
    assert_eq!(orders.worst, Some(Heart::Red));
    assert_eq!(
        orders.counts,
        Counts {
            green: 2,
            orange: 0,
            red: 1,
            missing: 0
        }
    );
    assert!(!matrix.rows()[0].disagree);
    let n3 = matrix.cells(1)[2].map(|c| c.seen);
    assert_eq!(
        n3,
        Some(Seen {
            heart: Heart::Red,
            circuit: BreakerState::Open,
            stale: false,
        })
    );
    let verdict = matrix.verdict(app.view().unwrap(), 1, 2).unwrap();
    assert_eq!(&*verdict.reason, "no replica ready");
    assert_eq!(matrix.disagreements(), 1);
}

#[test]
fn members_may_judge_different_routes_in_any_order() {
    let v = |r: &str, h| verdict(r, h, BreakerState::Closed);
    let app = app_with(view(vec![
        member(
            "n1",
            Liveness::Alive,
            0,
            vec![v("b", Heart::Green), v("d", Heart::Red)],
        ),
        member(
            "n2",
            Liveness::Alive,
            0,
            vec![
                v("d", Heart::Orange),
                v("a", Heart::Green),
                v("c", Heart::Red),
            ],
        ),
        member("n3", Liveness::Alive, 0, vec![]),
        member(
            "n4",
            Liveness::Alive,
            0,
            vec![v("b", Heart::Red), v("d", Heart::Red)],
        ),
    ]));
    let matrix = app.matrix();
    let rows: Vec<&str> = matrix.rows().iter().map(|r| r.name.as_str()).collect();
    assert_eq!(rows, ["a", "b", "c", "d"]);
    let hearts = |row: usize| -> Vec<Option<Heart>> {
        matrix
            .cells(row)
            .iter()
            .map(|c| c.map(|c| c.seen.heart))
            .collect()
    };
    assert_eq!(hearts(0), [None, Some(Heart::Green), None, None]);
    assert_eq!(
        hearts(1),
        [Some(Heart::Green), None, None, Some(Heart::Red)]
    );
    assert_eq!(hearts(2), [None, Some(Heart::Red), None, None]);
    assert_eq!(
        hearts(3),
        [
            Some(Heart::Red),
            Some(Heart::Orange),
            None,
            Some(Heart::Red)
        ]
    );
    let d = matrix.verdict(app.view().unwrap(), 3, 1).unwrap();
    assert_eq!((&*d.route, d.heart), ("d", Heart::Orange));
}

#[test]
fn dead_members_and_missing_verdicts_do_not_disagree() {
    let green = |r: &str| verdict(r, Heart::Green, BreakerState::Closed);
    let app = app_with(view(vec![
        member("n1", Liveness::Alive, 0, vec![green("api")]),
        member(
            "n2",
            Liveness::Dead,
            90_000,
            vec![verdict("api", Heart::Red, BreakerState::Open)],
        ),
        member("n3", Liveness::Suspect, 0, vec![]),
    ]));
    let api = &app.matrix().rows()[0];
    assert!(!api.disagree, "a dead member's red does not count");
    assert_eq!(api.worst, Some(Heart::Green));
    assert_eq!(
        api.counts,
        Counts {
            green: 1,
            orange: 0,
            red: 0,
            missing: 1
        }
    );
    assert_eq!(app.matrix().cells(0)[2], None);
}

#[test]
fn severity_puts_disagreement_first_then_the_worst_heart() {
    let v = |r: &str, h| verdict(r, h, BreakerState::Closed);
    let mut app = app_with(view(vec![
        member(
            "n1",
            Liveness::Alive,
            0,
            vec![
                v("a-green", Heart::Green),
                v("b-red", Heart::Red),
                v("c-split", Heart::Green),
                v("d-orange", Heart::Orange),
            ],
        ),
        member(
            "n2",
            Liveness::Alive,
            0,
            vec![
                v("a-green", Heart::Green),
                v("b-red", Heart::Red),
                v("c-split", Heart::Orange),
                v("d-orange", Heart::Orange),
            ],
        ),
    ]));
    assert_eq!(app.sort(), Sort::Severity);
    assert_eq!(routes(&app), ["c-split", "b-red", "d-orange", "a-green"]);
    app.update(key(KeyCode::Char('s')));
    assert_eq!(app.sort(), Sort::Name);
    assert_eq!(routes(&app), ["a-green", "b-red", "c-split", "d-orange"]);
}

#[test]
fn the_selection_follows_its_route() {
    let mut app = app_with(three_nodes());
    assert_eq!(routes(&app), ["orders", "api", "web"]);
    app.update(key(KeyCode::Down));
    assert_eq!(selected(&app), "api");
    // By name, api moves to the top and stays selected.
    app.update(key(KeyCode::Char('s')));
    assert_eq!(app.selected(), 0);
    assert_eq!(selected(&app), "api");
    app.update(key(KeyCode::Char('s')));
    app.update(key(KeyCode::Char('j')));
    assert_eq!(selected(&app), "web");
    // orders heals: by severity all are equal, so name order; web stays.
    let mut healed = three_nodes();
    Arc::make_mut(&mut healed.members[2].verdicts)[1] =
        verdict("orders", Heart::Green, BreakerState::Closed);
    app.update(Msg::View(healed));
    assert_eq!(routes(&app), ["api", "orders", "web"]);
    assert_eq!(selected(&app), "web");
}

#[test]
fn keys_move_the_selection_within_bounds() {
    let mut app = app_with(big(3, 25));
    app.update(key(KeyCode::Char('s'))); // by name
    app.update(key(KeyCode::Home));
    assert_eq!(app.selected(), 0);
    app.update(key(KeyCode::Up));
    assert_eq!(app.selected(), 0);
    app.update(key(KeyCode::Char('j')));
    app.update(key(KeyCode::Down));
    assert_eq!(app.selected(), 2);
    app.update(key(KeyCode::Char('k')));
    assert_eq!(app.selected(), 1);
    app.update(key(KeyCode::PageDown));
    assert_eq!(app.selected(), 1 + PAGE);
    app.update(key(KeyCode::PageDown));
    app.update(key(KeyCode::PageDown));
    assert_eq!(app.selected(), 24);
    app.update(key(KeyCode::PageUp));
    assert_eq!(app.selected(), 24 - PAGE);
    app.update(key(KeyCode::Home));
    assert_eq!(app.selected(), 0);
    app.update(key(KeyCode::End));
    assert_eq!(selected(&app), "route-024");
    // A release is not a press.
    let mut release = KeyEvent::new(KeyCode::Home, KeyModifiers::NONE);
    release.kind = KeyEventKind::Release;
    app.update(Msg::Key(release));
    assert_eq!(app.selected(), 24);
}

#[test]
fn the_filter_follows_typing_enter_keeps_it_and_esc_clears_it() {
    let mut app = app_with(three_nodes());
    app.update(key(KeyCode::Char('/')));
    assert_eq!(app.mode(), Mode::Filter);
    keys(&mut app, "E");
    assert_eq!(routes(&app), ["orders", "web"], "case is ignored");
    keys(&mut app, "q"); // typed, not quit
    assert!(!app.quit());
    assert_eq!(app.filter(), "Eq");
    assert!(routes(&app).is_empty());
    app.update(key(KeyCode::Backspace));
    app.update(key(KeyCode::Backspace));
    keys(&mut app, "web");
    app.update(key(KeyCode::Enter));
    assert_eq!(app.mode(), Mode::Normal);
    assert_eq!(routes(&app), ["web"]);
    assert_eq!(selected(&app), "web");
    // In normal mode the keys mean commands again.
    app.update(key(KeyCode::Char('s')));
    assert_eq!(app.sort(), Sort::Name);
    assert_eq!(app.filter(), "web");
    app.update(key(KeyCode::Esc));
    assert_eq!(app.filter(), "");
    assert_eq!(routes(&app), ["api", "orders", "web"]);
    assert_eq!(selected(&app), "web");

    app.update(key(KeyCode::Char('/')));
    keys(&mut app, "api");
    app.update(key(KeyCode::Esc));
    assert_eq!(app.mode(), Mode::Normal);
    assert_eq!(routes(&app).len(), 3);
}

#[test]
fn history_records_heart_and_circuit_changes() {
    let mut app = app_with(three_nodes());
    assert_eq!(app.history().len("orders"), 0);

    let mut next = three_nodes();
    next.taken_unix_ms = T0 + 5_000;
    Arc::make_mut(&mut next.members[2].verdicts)[1] =
        verdict("orders", Heart::Orange, BreakerState::HalfOpen);
    Arc::make_mut(&mut next.members[0].verdicts)[0] =
        verdict("api", Heart::Green, BreakerState::Disabled);
    app.update(Msg::View(next));

    let orders: Vec<&Transition> = app.history().of("orders").collect();
    assert_eq!(
        orders,
        [&Transition {
            at_unix_ms: T0 + 5_000,
            node: "n3".into(),
            from: Seen {
                heart: Heart::Red,
                circuit: BreakerState::Open,
                stale: false,
            },
            to: Seen {
                heart: Heart::Orange,
                circuit: BreakerState::HalfOpen,
                stale: false,
            },
        }]
    );
    let api: Vec<&Transition> = app.history().of("api").collect();
    assert_eq!(api.len(), 1);
    assert_eq!(api[0].node, "n1");
    assert_eq!(api[0].to.circuit, BreakerState::Disabled);
    assert_eq!(app.history().len("web"), 0);
}

#[test]
fn history_is_bounded_and_forgets_routes_gone() {
    let mut app = app_with(three_nodes());
    for i in 0..20u64 {
        let mut next = three_nodes();
        next.taken_unix_ms = T0 + i;
        let heart = if i % 2 == 0 { Heart::Green } else { Heart::Red };
        Arc::make_mut(&mut next.members[2].verdicts)[1] =
            verdict("orders", heart, BreakerState::Closed);
        app.update(Msg::View(next));
    }
    assert_eq!(app.history().len("orders"), history::PER_ROUTE);
    let newest = app.history().of("orders").next().unwrap();
    assert_eq!(newest.at_unix_ms, T0 + 19);

    let mut gone = three_nodes();
    for member in &mut gone.members {
        Arc::make_mut(&mut member.verdicts).retain(|v| *v.route != *"orders");
    }
    app.update(Msg::View(gone));
    assert_eq!(app.history().len("orders"), 0);
}

#[test]
fn another_nodes_view_is_a_new_baseline() {
    let mut app = app_with(three_nodes());
    let mut from_n2 = three_nodes();
    from_n2.node = "n2".into();
    Arc::make_mut(&mut from_n2.members[2].verdicts)[1] =
        verdict("orders", Heart::Green, BreakerState::Closed);
    app.update(Msg::View(from_n2));
    assert_eq!(app.history().len("orders"), 0);
}

#[test]
fn the_picker_offers_members_with_a_feed_and_yields_the_choice_once() {
    let green = |r: &str| verdict(r, Heart::Green, BreakerState::Closed);
    let mut dead = member("n4", Liveness::Dead, 60_000, vec![green("api")]);
    dead.info.as_mut().unwrap().feed = None;
    let mut unknown = member("n5", Liveness::Alive, 0, vec![]);
    unknown.info = None;
    let mut cluster = three_nodes();
    cluster.members.extend([dead, unknown]);
    let mut app = app_with(cluster);

    app.update(key(KeyCode::Char('n')));
    assert_eq!(app.mode(), Mode::Picker { selected: 0 });
    let offered: Vec<&str> = app
        .picker_entries()
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(offered, ["n1", "n2", "n3"]);
    for _ in 0..5 {
        app.update(key(KeyCode::Down));
    }
    assert_eq!(app.mode(), Mode::Picker { selected: 2 });
    app.update(key(KeyCode::Up));
    assert_eq!(app.take_switch(), None);
    app.update(key(KeyCode::Enter));
    assert_eq!(app.mode(), Mode::Normal);
    assert_eq!(
        app.take_switch(),
        Some(FeedTarget {
            name: "n2".into(),
            addr: "10.0.0.2:7000".into(),
            fingerprint: Some("f1a92".into()),
        })
    );
    assert_eq!(app.take_switch(), None, "taken once");

    app.update(key(KeyCode::Char('n')));
    app.update(key(KeyCode::Esc));
    assert_eq!(app.mode(), Mode::Normal);
    assert_eq!(app.take_switch(), None);
}

#[test]
fn quit_on_q_and_on_ctrl_c_in_every_mode() {
    let mut app = app_with(three_nodes());
    app.update(key(KeyCode::Char('q')));
    assert!(app.quit());

    let mut app = app_with(three_nodes());
    app.update(key(KeyCode::Char('/')));
    app.update(Msg::Key(KeyEvent::new(
        KeyCode::Char('c'),
        KeyModifiers::CONTROL,
    )));
    assert!(app.quit());
}

#[test]
fn help_keeps_the_keys_to_itself() {
    let mut app = app_with(three_nodes());
    app.update(key(KeyCode::Char('?')));
    assert_eq!(app.mode(), Mode::Help);
    app.update(key(KeyCode::Down));
    app.update(key(KeyCode::Char('s')));
    assert_eq!(app.selected(), 0);
    assert_eq!(app.sort(), Sort::Severity);
    app.update(key(KeyCode::Char('?')));
    assert_eq!(app.mode(), Mode::Normal);
}

#[test]
fn time_comes_from_ticks_and_ages_run_on_the_nodes_clock() {
    let mut app = App::new();
    assert_eq!(app.now_unix_ms(), 0);
    // This machine's clock is 1 h ahead of the node's.
    app.update(Msg::Tick {
        now_unix_ms: T0 + 3_600_000,
    });
    app.update(Msg::View(three_nodes()));
    app.update(Msg::Tick {
        now_unix_ms: T0 + 3_605_000,
    });
    assert_eq!(app.node_now_unix_ms(), T0 + 5_000);
}

/// The cluster's route table is the one most live nodes serve; of two
/// served by as many, the one installed last; dead nodes and nodes that
/// have not said are left out.
#[test]
fn the_clusters_table_is_the_one_most_live_nodes_serve() {
    let summary = |view: &picket_proto::ClusterView| -> Vec<(String, u32, Vec<String>)> {
        matrix::tables(&view.members)
            .into_iter()
            .map(|t| (t.tag, t.routes, t.nodes))
            .collect()
    };
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let three = with_tables(
        three_nodes(),
        &[
            Some(("2676afdb5add1e9b", 12, 5)),
            Some(("4c0f12ab9d2e7731", 11, 1)),
            Some(("2676afdb5add1e9b", 12, 6)),
        ],
    );
    assert_eq!(
        summary(&three),
        [
            ("2676".into(), 12, names(&["n1", "n3"])),
            ("4c0f".into(), 11, names(&["n2"])),
        ]
    );
    let app = app_with(three.clone());
    let flagged: Vec<(&str, bool)> = app
        .matrix()
        .columns()
        .iter()
        .map(|c| (c.name.as_str(), c.other_table))
        .collect();
    assert_eq!(flagged, [("n1", false), ("n2", true), ("n3", false)]);

    // One each: the newer table is the cluster's (a change on its way).
    let mut two = three.clone();
    two.members[2].table = None;
    assert_eq!(summary(&two)[0].0, "2676", "installed at 5, after 1");
    two.members[1].table.as_mut().unwrap().since_unix_ms = 9;
    assert_eq!(summary(&two)[0].0, "4c0f");

    // A dead node is not counted.
    let mut dead = three;
    dead.members[0].liveness = Liveness::Dead;
    dead.members[2].liveness = Liveness::Dead;
    assert_eq!(summary(&dead), [("4c0f".into(), 11, names(&["n2"]))]);
}
