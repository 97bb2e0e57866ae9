//! Render tests on a `TestBackend`: symbols and colours are compared
//! separately (a styled buffer never equals plain lines).

use crossterm::event::KeyCode;
use picket_proto::{BreakerState, ClusterView, Heart, ImageCount};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;

use super::*;
use crate::app::Msg;
use crate::app::fixture::{T0, app_with, big, key, keys, three_nodes, verdict, with_tables};
use std::sync::Arc;

fn draw(app: &App, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| render(frame, app)).unwrap();
    terminal.backend().buffer().clone()
}

fn lines(buffer: &Buffer) -> Vec<String> {
    (0..buffer.area.height)
        .map(|y| {
            (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
                .trim_end()
                .to_owned()
        })
        .collect()
}

/// The symbol and foreground colour at (x, y).
fn at(buffer: &Buffer, x: u16, y: u16) -> (&str, Color) {
    let cell = &buffer[(x, y)];
    (cell.symbol(), cell.fg)
}

fn row_of(lines: &[String], needle: &str) -> usize {
    lines
        .iter()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line has {needle:?}: {lines:#?}"))
}

/// The three-node cluster, at any size of at least 80 × 24: the layout is
/// anchored top left, so the cells are the same.
fn assert_three_nodes(width: u16, height: u16) {
    let app = app_with(three_nodes());
    let buffer = draw(&app, width, height);
    let text = lines(&buffer);

    assert_eq!(
        text[0],
        "picket prod  n1 @ 10.0.0.1:7000  live  3 routes × 3 nodes  ≠ 1 route disagrees"
    );
    // Headers: names, then liveness and data age.
    assert_eq!(text[1], "  route  n1   n2   n3");
    assert_eq!(text[2], "  all 3  ●0s  ◌4s  ●1s");
    assert_eq!(at(&buffer, 9, 2), ("●", Color::Green));
    assert_eq!(at(&buffer, 14, 2), ("◌", Color::Yellow));
    assert_eq!(at(&buffer, 19, 2), ("●", Color::Green));
    // By severity, the disagreeing route comes first, marked.
    assert_eq!(text[3], "≠ orders ♥    ♥    ♡○");
    assert_eq!(text[4], "  api    ♥    ♥    ♥");
    assert_eq!(text[5], "  web    ♥    ♥    ♥");
    assert_eq!(at(&buffer, 0, 3), ("≠", Color::Magenta));
    assert_eq!(at(&buffer, 0, 4), (" ", Color::Reset));
    assert_eq!(at(&buffer, 9, 3), ("♥", Color::Green));
    assert_eq!(at(&buffer, 14, 3), ("♥", Color::Green));
    assert_eq!(at(&buffer, 19, 3), ("♡", Color::Red));
    assert_eq!(at(&buffer, 20, 3), ("○", Color::Red));
    assert_eq!(at(&buffer, 19, 4), ("♥", Color::Green));
    // The selected row is highlighted, and only it.
    assert_eq!(buffer[(2, 3)].bg, Color::DarkGray);
    assert_eq!(buffer[(19, 3)].bg, Color::DarkGray);
    assert_eq!(buffer[(2, 4)].bg, Color::Reset);

    // The detail pane, worst first.
    assert!(
        text[6].contains(" orders ≠ live nodes disagree "),
        "{text:#?}"
    );
    assert_eq!(text[7], "node      ready circuit   since      reason");
    assert_eq!(
        text[8],
        "n3   ● ♡○   0/2 open      12s ago    no replica ready"
    );
    assert_eq!(text[9], "n1   ● ♥    2/2 closed    3m12s ago  2 of 2 ready");
    assert_eq!(
        text[10],
        "n2   ◌ ♥    2/2 closed    3m12s ago  2 of 2 ready"
    );
    // Every node runs the same images: listed once.
    assert_eq!(&text[11..13], ["images", "  2× orders:1.4"]);
    assert_eq!(at(&buffer, 7, 8), ("♡", Color::Red));
    assert_eq!(at(&buffer, 8, 8), ("○", Color::Red));
    assert_eq!(at(&buffer, 7, 9), ("♥", Color::Green));
    assert_eq!(at(&buffer, 5, 10), ("◌", Color::Yellow));

    let footer = &text[usize::from(height) - 1];
    assert!(
        footer.starts_with("? help  / filter  s sort: severity"),
        "{footer}"
    );
}

#[test]
fn three_nodes_at_80_by_24() {
    assert_three_nodes(80, 24);
}

#[test]
fn three_nodes_at_160_by_48() {
    assert_three_nodes(160, 48);
}

#[test]
fn sorting_by_name_and_back_to_severity() {
    let mut app = app_with(three_nodes());
    app.update(key(KeyCode::Char('s')));
    let text = lines(&draw(&app, 80, 24));
    assert_eq!(
        &text[3..6],
        [
            "  api    ♥    ♥    ♥",
            "≠ orders ♥    ♥    ♡○",
            "  web    ♥    ♥    ♥"
        ]
    );
    assert!(text[23].contains("sort: name"), "{}", text[23]);
    // The selection stayed on orders, now second.
    let buffer = draw(&app, 80, 24);
    assert_eq!(buffer[(2, 4)].bg, Color::DarkGray);

    app.update(key(KeyCode::Char('s')));
    let text = lines(&draw(&app, 80, 24));
    assert!(text[3].starts_with("≠ orders"), "{text:#?}");
}

#[test]
fn a_hundred_nodes_collapse_to_counts() {
    let app = app_with(big(100, 20));
    for (width, names) in [(80, 11), (160, 27)] {
        let buffer = draw(&app, width, 24);
        let text = lines(&buffer);
        assert_eq!(text[1], "  route     100 nodes collapsed", "at {width}");
        assert_eq!(text[2], "  all 20    100●", "at {width}");
        assert_eq!(at(&buffer, 15, 2), ("●", Color::Green));
        assert_eq!(text[3], "≠ route-007 99♥ 1♡: n042", "at {width}");
        let orange: Vec<String> = (0..names).map(|n| format!("n{n:03}")).collect();
        assert_eq!(
            text[4],
            format!("≠ route-011 70♥ 30❣: {} …", orange.join(" ")),
            "at {width}"
        );
        assert!(text[4].chars().count() <= usize::from(width), "at {width}");
        assert_eq!(text[5], "  route-000 100♥", "at {width}");
        // Counts and names in their hearts' colours.
        assert_eq!(at(&buffer, 12, 3), ("9", Color::Green));
        assert_eq!(at(&buffer, 14, 3), ("♥", Color::Green));
        assert_eq!(at(&buffer, 17, 3), ("♡", Color::Red));
        assert_eq!(at(&buffer, 20, 3), ("n", Color::Red));
        assert_eq!(at(&buffer, 16, 4), ("3", Color::Yellow));
        assert_eq!(at(&buffer, 21, 4), ("n", Color::Yellow));
    }
}

#[test]
fn twenty_nodes_get_columns_at_160_and_counts_at_80() {
    let app = app_with(big(20, 12));
    let wide = lines(&draw(&app, 160, 24));
    assert!(
        wide[1].starts_with("  route     n000 n001 n002"),
        "{wide:#?}"
    );
    assert!(wide[1].ends_with("n019"), "{wide:#?}");
    assert!(wide[3].starts_with("  route-011 ❣    ❣    ❣"), "{wide:#?}");
    // The detail pane has room for 3 of the 20 nodes and says so, and
    // for the route's images below them.
    assert_eq!(wide[20], "… 17 more (0 green)");
    assert_eq!(&wide[21..23], ["images", "  2× route-011:1.4"]);
    let narrow = lines(&draw(&app, 80, 24));
    assert_eq!(narrow[1], "  route     20 nodes collapsed");
    assert_eq!(
        narrow[3],
        "  route-011 20❣: n000 n001 n002 n003 n004 n005 n006 n007 n008 n009 n010 n011 …"
    );
}

#[test]
fn the_filter_hides_rows() {
    let mut app = app_with(three_nodes());
    app.update(key(KeyCode::Char('/')));
    keys(&mut app, "we");
    let text = lines(&draw(&app, 80, 24));
    assert_eq!(text[2], "  1 of 3 ●0s  ◌4s  ●1s");
    assert_eq!(text[3], "  web    ♥    ♥    ♥");
    assert!(
        !text
            .iter()
            .any(|l| l.contains("orders") || l.contains("api"))
    );
    assert!(
        text[23].starts_with("/we█  Enter keep  Esc clear"),
        "{}",
        text[23]
    );

    keys(&mut app, "x");
    let text = lines(&draw(&app, 80, 24));
    assert_eq!(text[3], "  no route matches “wex”");
}

#[test]
fn only_the_rows_on_screen_are_drawn_and_the_selection_stays_on_it() {
    let mut app = app_with(big(3, 500));
    app.update(key(KeyCode::Char('s')));
    app.update(key(KeyCode::End));
    let buffer = draw(&app, 80, 24);
    let text = lines(&buffer);
    // 24 rows: status, 2 header lines, 13 routes, a detail pane of 7
    // (title, header, 3 nodes, the images), the footer.
    assert!(text[3].starts_with("  route-487 "), "{text:#?}");
    assert!(text[15].starts_with("  route-499 "), "{text:#?}");
    assert_eq!(buffer[(2, 15)].bg, Color::DarkGray);
    assert!(text[16].contains(" route-499 "), "{text:#?}");

    app.update(key(KeyCode::Home));
    for _ in 0..3 {
        app.update(key(KeyCode::PageDown));
    }
    let buffer = draw(&app, 80, 24);
    let text = lines(&buffer);
    assert!(text[9].starts_with("  route-030 "), "{text:#?}");
    assert_eq!(buffer[(2, 9)].bg, Color::DarkGray);
}

#[test]
fn history_shows_transitions_in_the_detail_pane() {
    let mut app = app_with(three_nodes());
    let mut next = three_nodes();
    next.taken_unix_ms = T0 + 5_000;
    Arc::make_mut(&mut next.members[2].verdicts)[1] =
        verdict("orders", Heart::Orange, BreakerState::HalfOpen);
    app.update(Msg::View(next));
    app.update(Msg::Tick {
        now_unix_ms: T0 + 5_000,
    });
    let buffer = draw(&app, 80, 24);
    let text = lines(&buffer);
    let at_history = row_of(&text, "history");
    assert_eq!(
        text[at_history + 1],
        "    5s ago  n3  ♡○→ ❣◐ red → orange, circuit open → half-open"
    );
    assert_eq!(at(&buffer, 16, at_history as u16 + 1), ("♡", Color::Red));
    assert_eq!(at(&buffer, 20, at_history as u16 + 1), ("❣", Color::Yellow));
    assert_eq!(at(&buffer, 21, at_history as u16 + 1), ("◐", Color::Yellow));
    // Orders still disagrees (green and orange): the matrix shows the new heart.
    assert_eq!(at(&buffer, 19, 3), ("❣", Color::Yellow));
    assert_eq!(at(&buffer, 20, 3), ("◐", Color::Yellow));
}

#[test]
fn a_stale_link_says_so() {
    let mut app = app_with(three_nodes());
    app.update(Msg::Link(Link::Stale {
        addr: "10.0.0.1:7000".into(),
        since_unix_ms: T0,
        error: "timed out".into(),
    }));
    app.update(Msg::Tick {
        now_unix_ms: T0 + 3_400,
    });
    let buffer = draw(&app, 80, 24);
    let text = lines(&buffer);
    assert!(
        text[0].starts_with(
            "picket prod  n1 @ 10.0.0.1:7000  stale 3s — reconnecting (n: another node)"
        ),
        "{}",
        text[0]
    );
    let x = u16::try_from(text[0].chars().position(|c| c == 's').unwrap_or(0)).unwrap_or(0);
    assert_eq!(at(&buffer, x, 0).1, Color::Red);

    app.update(Msg::Link(Link::Connecting {
        addr: "10.0.0.2:7000".into(),
    }));
    let text = lines(&draw(&app, 80, 24));
    assert!(
        text[0].contains("connecting to 10.0.0.2:7000…"),
        "{}",
        text[0]
    );
}

#[test]
fn the_picker_lists_members_with_a_feed() {
    let mut app = app_with(three_nodes());
    let mut cluster = three_nodes();
    let mut dead = crate::app::fixture::member("n4", picket_proto::Liveness::Dead, 0, vec![]);
    dead.info.as_mut().unwrap().feed = None;
    cluster.members.push(dead);
    app.update(Msg::View(cluster));
    app.update(key(KeyCode::Char('n')));
    app.update(key(KeyCode::Down));
    let buffer = draw(&app, 80, 24);
    let text = lines(&buffer);
    let n1 = row_of(&text, "n1           ● alive   10.0.0.1:7000  (attached)");
    assert!(
        text[n1 + 1].contains("▶ n2           ◌ suspect 10.0.0.2:7000"),
        "{text:#?}"
    );
    assert!(
        text[n1 + 2].contains("  n3           ● alive   10.0.0.3:7000"),
        "{text:#?}"
    );
    let title = row_of(&text, "┌ attach to a node ─");
    assert_eq!(title + 1, n1);
    // Inside the box (the detail pane's n4 shows left of it).
    let inside = |l: &String| l.chars().skip(5).collect::<String>();
    assert!(
        !text[title..n1 + 5]
            .iter()
            .map(inside)
            .any(|l| l.contains("n4")),
        "{text:#?}"
    );
}

#[test]
fn help_lists_keys_and_symbols() {
    let mut app = app_with(three_nodes());
    app.update(key(KeyCode::Char('?')));
    let text = lines(&draw(&app, 80, 24));
    for needle in [
        "│ PgUp PgDn     move by 10 rows",
        "│ n             attach to another node's feed",
        "│ q  Ctrl-C     quit",
        "│ ◐ ○           after a heart: circuit half-open, open",
        "│ ≠             live nodes disagree on the route",
    ] {
        row_of(&text, needle);
    }
}

#[test]
fn before_the_first_view() {
    let app = App::new();
    let text = lines(&draw(&app, 80, 24));
    assert_eq!(text[0], "picket  no feed yet");
    assert_eq!(text[1], "waiting for the first cluster view…");
}

#[test]
fn ages() {
    assert_eq!(compact_age(4_999), "4s");
    assert_eq!(compact_age(720_000), "12m");
    assert_eq!(age(192_000), "3m12s");
    assert_eq!(age(3_900_000), "1h05m");
    assert_eq!(age(2 * 86_400_000 + 3 * 3_600_000), "2d03h");
    assert_eq!(fit("orders-api", 6), "order…");
    assert_eq!(fit_tail("picket-node-7", 6), "…ode-7");
}

/// `view` with every node's verdict on `orders` reporting `images`
/// (label, replicas).
fn with_images(mut view: ClusterView, nodes: &[&str], images: &[(&str, u32)]) -> ClusterView {
    for member in view
        .members
        .iter_mut()
        .filter(|m| nodes.contains(&m.name.as_str()))
    {
        for verdict in Arc::make_mut(&mut member.verdicts)
            .iter_mut()
            .filter(|v| *v.route == *"orders")
        {
            verdict.images = images
                .iter()
                .map(|(image, replicas)| ImageCount {
                    image: (*image).into(),
                    replicas: *replicas,
                })
                .collect();
        }
    }
    view
}

const OLD: &str = "orders:1.4@sha256:4c0f12ab9d2e";
const NEW: &str = "orders:1.4@sha256:9b1d7e0c3a55";
const ENVOY: &str = "envoy:v1.31@sha256:77aa00bb11cc";

#[test]
fn two_builds_under_one_tag_are_two_lines_in_the_detail_pane() {
    let images = [(ENVOY, 3), (NEW, 2), (OLD, 1)];
    let app = app_with(with_images(three_nodes(), &["n1", "n2", "n3"], &images));
    for (width, height) in [(80, 24), (160, 48)] {
        let buffer = draw(&app, width, height);
        let text = lines(&buffer);
        // The node lines are as without images: nothing pushed or wrapped.
        assert_eq!(
            text[8],
            "n3   ● ♡○   0/2 open      12s ago    no replica ready"
        );
        assert_eq!(
            text[10],
            "n2   ◌ ♥    2/2 closed    3m12s ago  2 of 2 ready"
        );
        assert_eq!(
            &text[11..15],
            [
                "images",
                "  3× envoy:v1.31@sha256:77aa00bb11cc",
                "  2× orders:1.4@sha256:9b1d7e0c3a55",
                "  1× orders:1.4@sha256:4c0f12ab9d2e",
            ],
            "at {width}"
        );
        assert_eq!(at(&buffer, 2, 12), ("3", Color::DarkGray));
        assert_eq!(at(&buffer, 5, 12).0, "e");
        let footer = &text[usize::from(height) - 1];
        assert!(footer.starts_with("? help"), "{footer}");
    }
}

#[test]
fn a_long_label_keeps_its_tag_and_digest_and_the_layout() {
    let long = "registry-mirror-of-the-payments-team-orders-service-with-a-long-name:1.4.0-rc.1@sha256:9b1d7e0c3a55";
    let app = app_with(with_images(
        three_nodes(),
        &["n1", "n2", "n3"],
        &[(long, 2), (OLD, 1)],
    ));
    let text = lines(&draw(&app, 80, 24));
    assert!(text.iter().all(|l| l.chars().count() <= 80), "{text:#?}");
    assert_eq!(
        text[8],
        "n3   ● ♡○   0/2 open      12s ago    no replica ready"
    );
    assert_eq!(text[11], "images");
    assert_eq!(text[12].chars().count(), 80, "{}", text[12]);
    assert!(
        text[12].starts_with("  2× …") && text[12].ends_with(":1.4.0-rc.1@sha256:9b1d7e0c3a55"),
        "cut at its start: {}",
        text[12]
    );
    assert_eq!(text[13], "  1× orders:1.4@sha256:4c0f12ab9d2e");
    assert!(text[23].starts_with("? help"), "{}", text[23]);
}

#[test]
fn nodes_that_see_other_images_are_named() {
    let view = with_images(three_nodes(), &["n1", "n2"], &[(NEW, 2), (OLD, 1)]);
    let view = with_images(view, &["n3"], &[(NEW, 3)]);
    let text = lines(&draw(&app_with(view), 80, 24));
    let at_images = row_of(&text, "images on");
    assert_eq!(
        &text[at_images..at_images + 5],
        [
            "images on n1 n2",
            "  2× orders:1.4@sha256:9b1d7e0c3a55",
            "  1× orders:1.4@sha256:4c0f12ab9d2e",
            "images on n3",
            "  3× orders:1.4@sha256:9b1d7e0c3a55",
        ]
    );
}

#[test]
fn images_that_do_not_fit_say_how_many_more() {
    let many: Vec<String> = (0..30)
        .map(|i| format!("orders:1.{i}@sha256:4c0f12ab9d{i:02}"))
        .collect();
    let images: Vec<(&str, u32)> = many.iter().map(|i| (i.as_str(), 1)).collect();
    let app = app_with(with_images(three_nodes(), &["n1", "n2", "n3"], &images));
    let text = lines(&draw(&app, 80, 24));
    // Every node still has its line.
    row_of(&text, "n3   ● ♡○");
    row_of(&text, "n2   ◌ ♥");
    let title = row_of(&text, "images");
    let more = row_of(&text, "more images");
    let shown = more - title - 1;
    assert!(shown >= 3, "{text:#?}");
    assert_eq!(text[more], format!("… {} more images", 30 - shown));
    assert!(text[23].starts_with("? help"), "{}", text[23]);
}

#[test]
fn an_ejection_for_gateway_errors_reads_in_the_detail_pane() {
    let reason = "1 of 2 ready (1 ejected by this node: 5 consecutive 503)";
    let mut view = three_nodes();
    for member in view.members.iter_mut().filter(|m| m.name == "n3") {
        for verdict in Arc::make_mut(&mut member.verdicts)
            .iter_mut()
            .filter(|v| *v.route == *"orders")
        {
            verdict.reason = reason.into();
        }
    }
    let text = lines(&draw(&app_with(view), 160, 48));
    assert!(
        text.iter()
            .any(|l| l.starts_with("n3") && l.contains(reason)),
        "{text:#?}"
    );
}

/// At 80 columns a reason that would be cut beside its node's columns goes
/// on a line of its own, whole; where it fits, it stays beside them.
#[test]
fn a_long_reason_gets_a_line_of_its_own_at_80_columns() {
    let reason = "1 of 2 ready (1 ejected by this node: connect refused)";
    let mut view = three_nodes();
    for member in &mut view.members {
        for verdict in Arc::make_mut(&mut member.verdicts) {
            if *verdict.route == *"orders" {
                verdict.reason = reason.into();
            }
        }
    }
    let app = app_with(view);
    let narrow = lines(&draw(&app, 80, 24));
    let at = row_of(&narrow, "n3   ● ♡○");
    assert_eq!(
        narrow[at - 1],
        "node      ready circuit   since",
        "{narrow:#?}"
    );
    assert_eq!(
        narrow[at], "n3   ● ♡○   0/2 open      12s ago",
        "{narrow:#?}"
    );
    assert_eq!(narrow[at + 1], format!("    {reason}"), "{narrow:#?}");
    assert!(narrow.iter().all(|l| l.chars().count() <= 80));

    let wide = lines(&draw(&app, 160, 48));
    let at = row_of(&wide, "n3   ● ♡○");
    assert_eq!(
        wide[at],
        format!("n3   ● ♡○   0/2 open      12s ago    {reason}"),
        "{wide:#?}"
    );
}

/// The status line fits 80 columns: the disagreement's words go first,
/// then the node's address.
#[test]
fn the_status_line_is_laid_out_for_80_columns() {
    let mut view = three_nodes();
    view.cluster = "production-eu".into();
    let app = app_with(view);
    let text = lines(&draw(&app, 80, 24));
    assert_eq!(
        text[0],
        "picket production-eu  n1  live  3 routes × 3 nodes  ≠ 1 disagrees"
    );
    let wide = lines(&draw(&app, 120, 24));
    assert_eq!(
        wide[0],
        "picket production-eu  n1 @ 10.0.0.1:7000  live  3 routes × 3 nodes  ≠ 1 route disagrees"
    );
}

/// Without colour each heart still reads: green, orange and red have
/// symbols of their own.
#[test]
fn each_heart_has_a_symbol_of_its_own() {
    let symbols = [Heart::Green, Heart::Orange, Heart::Red].map(crate::theme::heart_symbol);
    assert_eq!(symbols, ["♥", "❣", "♡"]);
}

#[test]
fn a_verdict_from_a_silent_runtime_is_drawn_stale_never_as_current() {
    use crate::app::fixture::{member, view};
    use picket_proto::Liveness;
    let green = |route: &str| verdict(route, Heart::Green, BreakerState::Closed);
    // n2's runtime went silent: its green for `web` is a last pass.
    let mut stale = green("web");
    stale.runtime_stale_since_unix_ms = Some(T0 - 12_000);
    let app = app_with(view(vec![
        member("n1", Liveness::Alive, 0, vec![green("web")]),
        member("n2", Liveness::Alive, 0, vec![stale]),
        member("n3", Liveness::Alive, 0, vec![green("web")]),
    ]));
    let buffer = draw(&app, 80, 24);
    let text = lines(&buffer);
    let row = row_of(&text, "  web ");
    let cells: Vec<(String, Color)> = (0..buffer.area.width)
        .map(|x| at(&buffer, x, row as u16))
        .filter(|(symbol, _)| ["♥", "❣", "♡", "◇"].contains(symbol))
        .map(|(symbol, color)| (symbol.to_string(), color))
        .collect();
    assert_eq!(
        cells,
        [
            ("♥".to_string(), Color::Green),
            ("◇".to_string(), Color::Blue),
            ("♥".to_string(), Color::Green),
        ],
        "{text:#?}"
    );
}

/// Which route table the nodes serve: the cluster's in the status line
/// while they agree; the node on another one named in the disagreement
/// colour, and counted, while they do not.
#[test]
fn a_node_on_another_route_table_is_marked_as_a_disagreement_is() {
    let same = with_tables(
        three_nodes(),
        &[
            Some(("2676afdb5add1e9b", 12, 5)),
            Some(("2676afdb5add1e9b", 12, 5)),
            Some(("2676afdb5add1e9b", 12, 6)),
        ],
    );
    let buffer = draw(&app_with(same), 120, 24);
    let text = lines(&buffer);
    assert!(
        text[0].ends_with("≠ 1 route disagrees  table 2676·12"),
        "{}",
        text[0]
    );
    assert_eq!(
        at(&buffer, 19, 1),
        ("n", Color::Reset),
        "{:?}",
        buffer[(19, 1)]
    );

    let apart = with_tables(
        three_nodes(),
        &[
            Some(("2676afdb5add1e9b", 12, 5)),
            Some(("2676afdb5add1e9b", 12, 5)),
            Some(("4c0f12ab9d2e7731", 11, 6)),
        ],
    );
    let app = app_with(apart);
    let buffer = draw(&app, 130, 24);
    let text = lines(&buffer);
    assert!(
        text[0].ends_with("≠ 1 route disagrees  ≠ 1 node on another table than 2676·12"),
        "{}",
        text[0]
    );
    let narrow = lines(&draw(&app, 80, 24));
    assert!(narrow[0].ends_with("≠ 1 table"), "{}", narrow[0]);
    assert_eq!(text[1], "  route  n1   n2   n3");
    assert_eq!(
        at(&buffer, 19, 1).1,
        Color::Magenta,
        "n3 in the disagreement colour"
    );
    assert_ne!(
        at(&buffer, 9, 1).1,
        Color::Magenta,
        "n1 is on the cluster's table"
    );
}

/// Three nodes' ACME states: n1 and n2 serve one certificate, n3 fails.
fn with_certificates() -> ClusterView {
    use crate::app::fixture::certificate as state;
    use picket_proto::AcmePhase;

    let mut view = three_nodes();
    view.members[0].certificates = vec![state(AcmePhase::Serving, Some("fa4e6f5a3c6d1b02"), None)];
    view.members[1].certificates = vec![state(AcmePhase::Renewing, Some("fa4e6f5a3c6d1b02"), None)];
    view.members[2].certificates = vec![state(
        AcmePhase::Failing,
        None,
        Some("the CA found shop.example.com invalid: connection refused"),
    )];
    view
}

#[test]
fn acme_certificates_show_node_by_node_and_a_failure_in_the_status_line() {
    let mut app = app_with(with_certificates());
    let text = lines(&draw(&app, 120, 24));
    assert!(
        text[0].ends_with("≠ 1 route disagrees  ✗ shop.example.com failing on n3"),
        "{}",
        text[0]
    );
    app.update(key(KeyCode::Char('c')));
    let buffer = draw(&app, 120, 24);
    let text = lines(&buffer);
    let row = row_of(&text, "≠ shop.example.com");
    let line = &text[row];
    for needle in [
        "≠ shop.example.com",
        "serving fa4e6f5a",
        "renewing fa4e6f5a",
        "failing",
    ] {
        assert!(line.contains(needle), "{needle:?} in {line:?}");
    }
    let failing = u16::try_from(line.find("failing").unwrap()).unwrap();
    let x = u16::try_from(line[..usize::from(failing)].chars().count()).unwrap();
    assert_eq!(at(&buffer, x, u16::try_from(row).unwrap()).1, Color::Red);
    row_of(
        &text,
        "shop.example.com on n3: the CA found shop.example.com invalid: connection refused",
    );
    app.update(key(KeyCode::Char('c')));
    let text = lines(&draw(&app, 120, 24));
    assert!(
        !text.iter().any(|l| l.contains("ACME certificates")),
        "closed"
    );
    // Without any, the status line says nothing of certificates.
    let quiet = app_with(three_nodes());
    let text = lines(&draw(&quiet, 120, 24));
    assert!(!text[0].contains("certificate"), "{}", text[0]);
}
