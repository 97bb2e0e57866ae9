//! `--once` without `--json`: the cluster view as a plain table for people,
//! a route per row and a node per column, in symbols that read without
//! colour (`♥` green, `❣` orange, `♡` red, then `◐` or `○` when the circuit
//! is half-open or open) with each node's ready/total replicas.

use std::collections::BTreeSet;
use std::fmt::Write;

use picket_proto::{ClusterView, Heart, Verdict};

use crate::theme;

/// The table, ending in a newline.
pub fn table(view: &ClusterView) -> String {
    let routes: BTreeSet<&str> = view
        .members
        .iter()
        .flat_map(|m| m.verdicts.iter().map(|v| &*v.route))
        .collect();
    let cell = |verdict: Option<&Verdict>| match verdict {
        Some(v) => format!(
            "{}{} {}/{}",
            theme::cell_heart(v.heart, v.runtime_stale_since_unix_ms.is_some()).0,
            theme::circuit_marker(v.circuit).trim(),
            v.ready,
            v.total
        ),
        None => theme::NO_VERDICT.to_string(),
    };
    let mut rows: Vec<(bool, &str, Vec<String>)> = routes
        .iter()
        .map(|route| {
            let verdicts: Vec<Option<&Verdict>> = view
                .members
                .iter()
                .map(|m| m.verdicts.iter().find(|v| *v.route == **route))
                .collect();
            let live: BTreeSet<Heart> = view
                .members
                .iter()
                .zip(&verdicts)
                .filter(|(m, _)| m.liveness != picket_proto::Liveness::Dead)
                .filter_map(|(_, v)| v.map(|v| v.heart))
                .collect();
            let cells = verdicts.into_iter().map(cell).collect();
            (live.len() > 1, *route, cells)
        })
        .collect();
    rows.sort_by_key(|(disagree, route, _)| (!disagree, *route));

    let disagreeing = rows.iter().filter(|(d, _, _)| *d).count();
    let mut out = format!(
        "cluster {} as {} sees it: {} routes × {} nodes",
        view.cluster,
        view.node,
        rows.len(),
        view.members.len()
    );
    match disagreeing {
        0 => out.push('\n'),
        1 => out.push_str(", 1 route disagrees\n"),
        n => {
            let _ = writeln!(out, ", {n} routes disagree");
        }
    }
    // Which route table each live node serves, the cluster's first.
    let tables = crate::app::matrix::tables(&view.members);
    match tables.as_slice() {
        [] => {}
        [table] => {
            let _ = writeln!(
                out,
                "route table {}·{} on every live node",
                table.tag, table.routes
            );
        }
        [cluster, others @ ..] => {
            let _ = write!(
                out,
                "route tables: {}·{} on {}",
                cluster.tag,
                cluster.routes,
                cluster.nodes.join(", ")
            );
            for other in others {
                let _ = write!(
                    out,
                    "; {} {}·{} on {}",
                    theme::DISAGREEMENT,
                    other.tag,
                    other.routes,
                    other.nodes.join(", ")
                );
            }
            out.push('\n');
        }
    }
    let headers: Vec<String> = view
        .members
        .iter()
        .map(|m| format!("{} {}", m.name, theme::liveness_symbol(m.liveness)))
        .collect();
    let names: Vec<&str> = rows.iter().map(|(_, route, _)| *route).collect();
    let cells: Vec<&[String]> = rows.iter().map(|(_, _, cells)| cells.as_slice()).collect();
    let marks: Vec<bool> = rows.iter().map(|(disagree, _, _)| *disagree).collect();
    grid(&mut out, "route", &headers, &names, &cells, &marks);
    out.push_str(
        "♥ green  ❣ orange  ♡ red  ◇ stale  ◐ half-open  ○ open  · no verdict  ≠ live nodes disagree\n",
    );
    certificates(&mut out, view, &headers);
    out
}

/// Each node's state of each ACME certificate, a column per node as above,
/// then the errors of failing nodes; nothing without any. `≠`: live nodes
/// serve different serials, or one fails.
fn certificates(out: &mut String, view: &ClusterView, headers: &[String]) {
    let rows = crate::certificates::rows(view);
    if rows.is_empty() {
        return;
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.cells
                .iter()
                .map(|c| crate::certificates::cell(*c))
                .collect()
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|row| row.name).collect();
    let cell_refs: Vec<&[String]> = cells.iter().map(Vec::as_slice).collect();
    let marks: Vec<bool> = rows
        .iter()
        .map(|row| row.disagree || !row.failing.is_empty())
        .collect();
    grid(out, "certificate", headers, &names, &cell_refs, &marks);
    for row in &rows {
        for (member, state) in view.members.iter().zip(&row.cells) {
            if let Some(error) = state.and_then(|s| s.error.as_deref()) {
                let _ = writeln!(out, "    {} on {}: {error}", row.name, member.name);
            }
        }
    }
}

/// A header line (`first` over the row names, then `headers`) and a line
/// per row (`≠` when marked, its name, its cells), each column as wide as
/// its widest text.
fn grid(
    out: &mut String,
    first: &str,
    headers: &[String],
    names: &[&str],
    cells: &[&[String]],
    marks: &[bool],
) {
    let name_width = names
        .iter()
        .map(|n| n.chars().count())
        .chain([first.chars().count()])
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut line = format!("  {first:<name_width$}");
    for (header, width) in headers.iter().zip(&widths) {
        let _ = write!(line, "  {header:<width$}");
    }
    out.push_str(line.trim_end());
    out.push('\n');
    for ((name, row), marked) in names.iter().zip(cells).zip(marks) {
        let mark = if *marked { theme::DISAGREEMENT } else { " " };
        let mut line = format!("{mark} {name:<name_width$}");
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "  {cell:<width$}");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::fixture::{three_nodes, with_tables};

    #[test]
    fn the_view_reads_as_a_table_without_colour() {
        let text = table(&three_nodes());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "cluster prod as n1 sees it: 3 routes × 3 nodes, 1 route disagrees",
                "  route   n1 ●   n2 ◌   n3 ●",
                "≠ orders  ♥ 2/2  ♥ 2/2  ♡○ 0/2",
                "  api     ♥ 2/2  ♥ 2/2  ♥ 2/2",
                "  web     ♥ 2/2  ♥ 2/2  ♥ 2/2",
                "♥ green  ❣ orange  ♡ red  ◇ stale  ◐ half-open  ○ open  · no verdict  ≠ live nodes disagree",
            ]
        );
    }

    #[test]
    fn acme_certificates_follow_the_routes_node_by_node() {
        use crate::app::fixture::certificate;
        use picket_proto::AcmePhase;
        let mut view = three_nodes();
        view.members[0].certificates =
            vec![certificate(AcmePhase::Serving, Some("fa4e6f5a3c"), None)];
        view.members[2].certificates = vec![certificate(AcmePhase::Failing, None, Some("refused"))];
        let text = table(&view);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[lines.len() - 3..],
            [
                "  certificate       n1 ●              n2 ◌  n3 ●",
                "≠ shop.example.com  serving fa4e6f5a  ·     failing",
                "    shop.example.com on n3: refused",
            ]
        );
        assert!(
            !table(&three_nodes()).contains("certificate"),
            "none without ACME"
        );
    }

    #[test]
    fn the_route_tables_follow_the_title() {
        let same = with_tables(
            three_nodes(),
            &[
                Some(("2676afdb5add1e9b", 3, 5)),
                Some(("2676afdb5add1e9b", 3, 5)),
                Some(("2676afdb5add1e9b", 3, 5)),
            ],
        );
        let text = table(&same);
        assert_eq!(
            text.lines().nth(1),
            Some("route table 2676·3 on every live node")
        );
        let apart = with_tables(
            three_nodes(),
            &[
                Some(("2676afdb5add1e9b", 3, 5)),
                None,
                Some(("4c0f12ab9d2e7731", 4, 6)),
            ],
        );
        let text = table(&apart);
        assert_eq!(
            text.lines().nth(1),
            Some("route tables: 4c0f·4 on n3; ≠ 2676·3 on n1"),
            "one each: the newer is the cluster's; n2 has not said"
        );
    }
}
