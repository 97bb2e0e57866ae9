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
    paths(text, "crate::")
        .into_iter()
        .filter_map(|(path, line)| Some((path.into_iter().next()?, line)))
        .collect()
}

/// Every path a file names after `prefix` (`crate::`, `super::`), code
/// only, as its segments up to the item: `crate::a::b::{c, d::e}` gives
/// `[a, b, c]` and `[a, b, d]`; each with the line that names it.
fn paths(text: &str, prefix: &str) -> Vec<(Vec<String>, String)> {
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
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        // `super::` inside `super::super::` is the second one's business.
        if code[..at].ends_with("::") || code[..at].ends_with(|c: char| ident(c)) {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let mut rest = &code[at + prefix.len()..];
        let mut segments = Vec::new();
        loop {
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
                    let mut path = segments.clone();
                    path.push(head);
                    found.push((path, format!("line {line}")));
                }
                break;
            }
            let segment: String = rest.chars().take_while(|c| ident(*c)).collect();
            if segment.is_empty() {
                if !segments.is_empty() {
                    found.push((segments, format!("line {line}")));
                }
                break;
            }
            rest = &rest[segment.len()..];
            segments.push(segment);
            match rest.strip_prefix("::") {
                Some(more) => rest = more,
                None => {
                    found.push((segments, format!("line {line}")));
                    break;
                }
            }
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

/// A cycle as its path, then each of its imports with where it is.
fn described(found: &[String], seen_at: &BTreeMap<(String, String), String>) -> String {
    let edges: Vec<String> = found
        .windows(2)
        .map(|pair| {
            let at = &seen_at[&(pair[0].clone(), pair[1].clone())];
            format!("  {} -> {} ({at})", pair[0], pair[1])
        })
        .collect();
    format!("{}\n{}", found.join(" -> "), edges.join("\n"))
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
        panic!("an import cycle: {}", described(&found, &seen_at));
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

/// The files of one module (`upstream/conn.rs`, `upstream/http2.rs`, ...)
/// import each other in one direction too: a sibling names another through
/// `super::` or its full `crate::` path. (What a child takes from its
/// parent, and the parent's `mod` and `pub use` of its children, are the
/// module's own shape, not a cycle.)
#[test]
fn the_files_of_each_module_import_each_other_in_one_direction() {
    let root = gateway_src();
    let mut dirs = vec![root.clone()];
    let mut cycles = Vec::new();
    let mut edges_seen = 0;
    while let Some(dir) = dirs.pop() {
        let mut siblings = BTreeSet::new();
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Some(stem) = path.file_stem().and_then(|s| s.to_str())
                && path.extension().is_some_and(|e| e == "rs")
            {
                siblings.insert(stem.to_string());
            }
        }
        if dir == root {
            continue; // the top-level modules: the test above
        }
        // The module these files are children of, as a `crate::` path.
        let module: Vec<String> = dir
            .strip_prefix(&root)
            .unwrap()
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut seen_at: BTreeMap<(String, String), String> = BTreeMap::new();
        for file in &siblings {
            let path = dir.join(format!("{file}.rs"));
            let text = std::fs::read_to_string(&path).unwrap();
            let mut targets = Vec::new();
            for (segments, line) in paths(&text, "super::") {
                targets.push((segments.into_iter().next(), line));
            }
            for (segments, line) in paths(&text, "crate::") {
                if segments.len() > module.len() && segments[..module.len()] == module[..] {
                    targets.push((segments.get(module.len()).cloned(), line));
                }
            }
            for (target, line) in targets {
                let Some(target) = target.filter(|t| t != file && siblings.contains(t)) else {
                    continue;
                };
                edges_seen += 1;
                graph
                    .entry(file.clone())
                    .or_default()
                    .insert(target.clone());
                seen_at
                    .entry((file.clone(), target))
                    .or_insert_with(|| format!("{}, {line}", path.display()));
            }
        }
        if let Some(found) = cycle(&graph) {
            cycles.push(format!(
                "in {}: {}",
                module.join("/"),
                described(&found, &seen_at)
            ));
        }
    }
    assert!(
        edges_seen > 20,
        "the scan sees sibling imports: {edges_seen}"
    );
    assert!(
        cycles.is_empty(),
        "import cycles between files:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn paths_are_read_to_their_item() {
    let text = "use super::{conn::Io, http2};\nlet x = crate::upstream::pool::Pool::new();\nuse super::super::x;\n";
    let supers: Vec<Vec<String>> = paths(text, "super::").into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        supers,
        [
            vec!["conn".to_string()],
            vec!["http2".to_string()],
            vec!["super".to_string(), "x".to_string()]
        ]
    );
    let crates: Vec<Vec<String>> = paths(text, "crate::").into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        crates,
        [["upstream", "pool", "Pool", "new"]
            .map(String::from)
            .to_vec()]
    );
}
