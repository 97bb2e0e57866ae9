//! The gateway's top-level modules import each other in one direction:
//! no module reaches, through any chain of imports, back to itself. A
//! cycle is what makes a module impossible to read, test or move alone.
//! (Test modules are left out: a test may use anything.)

use picket_tests::sources::{gateway_src, module_files};
use std::collections::{BTreeMap, BTreeSet};

/// The leading identifiers of a `use crate::{…}` group's items at depth
/// one: `{a, b::{c, d}, e::f}` gives `a`, `b`, `e`.
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut item) = (0usize, String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                heads.push(std::mem::take(&mut item));
                continue;
            }
            _ if depth == 0 => item.push(c),
            _ => {}
        }
    }
    heads.push(item);
    heads
        .iter()
        .filter_map(|item| {
            let head: String = item
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!head.is_empty()).then_some(head)
        })
        .collect()
}

/// The modules a file names through `crate::` (code only: comments and
/// the test module are left out), each with the line that names it.
fn named(text: &str) -> Vec<(String, String)> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let code: String = code
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let line = code[..at].matches('\n').count() + 1;
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1usize;
            let end = group
                .char_indices()
                .find(|(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            for head in group_heads(&group[..end]) {
                found.push((head, format!("line {line}")));
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push((head, format!("line {line}")));
        }
    }
    found
}

/// A cycle through `graph`, if there is one, as the modules along it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, done, path) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

#[test]
fn the_gateway_modules_import_each_other_in_one_direction() {
    let root = gateway_src();
    let modules: BTreeSet<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let module = name.strip_suffix(".rs")?.to_string();
            (module != "lib" && module != "main").then_some(module)
        })
        .collect();
    assert!(modules.len() > 20, "only {} modules found", modules.len());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut seen_at: BTreeMap<(String, String), String> = BTreeMap::new();
    for module in &modules {
        for file in module_files(&root, module) {
            let text = std::fs::read_to_string(&file).unwrap();
            for (target, line) in named(&text) {
                if &target == module || !modules.contains(&target) {
                    continue;
                }
                graph
                    .entry(module.clone())
                    .or_default()
                    .insert(target.clone());
                seen_at
                    .entry((module.clone(), target))
                    .or_insert_with(|| format!("{}, {line}", file.display()));
            }
        }
    }
    assert!(
        graph.get("node").is_some_and(|g| g.contains("proxy")),
        "the scan sees imports (node imports proxy)"
    );
    if let Some(found) = cycle(&graph) {
        let edges: Vec<String> = found
            .windows(2)
            .map(|pair| {
                let at = &seen_at[&(pair[0].clone(), pair[1].clone())];
                format!("  {} -> {} ({at})", pair[0], pair[1])
            })
            .collect();
        panic!(
            "an import cycle: {}\n{}",
            found.join(" -> "),
            edges.join("\n")
        );
    }
}

#[test]
fn a_cycle_is_found_and_groups_are_read_by_their_heads() {
    assert_eq!(group_heads("a, b::{c, d}, e::f as g"), ["a", "b", "e"]);
    let found = named("use crate::{x, y::{z}};\nlet v = crate::w::f(); // crate::not\n");
    let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["x", "y", "w"]);
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    let mut acyclic = graph;
    acyclic.remove("c");
    assert_eq!(cycle(&acyclic), None);
}
