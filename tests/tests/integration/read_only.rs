//! Gossip is read-only by construction: the modules that route, retry,
//! eject, break circuits, follow runtimes and judge verdicts never name the
//! cluster, chitchat or anything gossip brings. (The behaviour is tested in
//! `cluster.rs`: peers that all publish red change nothing a node does.)

use std::path::Path;

use picket_tests::sources::module_files;

const DATA_PATH: [&str; 16] = [
    "body",
    "breaker",
    "changes",
    "checks",
    "clock",
    "resources",
    "proxy",
    "reload",
    "router",
    "server",
    "targets",
    "tls",
    "upstream",
    "verdict",
    "socket_proxy",
    "shutdown",
];

const GOSSIP_NAMES: [&str; 7] = [
    "cluster::",
    "chitchat",
    "Membership",
    "ClusterView",
    "Liveness",
    "NodeInfo",
    "gossip",
];

#[test]
fn the_data_path_never_names_gossip_state() {
    let gateway = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gateway");
    let root = gateway.join("src");
    let mut checked = 0;
    let mut found = Vec::new();
    // The HTTP/1 codec is a crate of its own: every file of `gateway/h1/src`.
    let modules = DATA_PATH
        .iter()
        .map(|module| (root.clone(), *module))
        .chain([(gateway.join("h1"), "src")]);
    for (root, module) in modules {
        let files = module_files(&root, module);
        assert!(!files.is_empty(), "module {module} exists");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            checked += 1;
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for name in GOSSIP_NAMES {
                    let named = code.match_indices(name).any(|(i, _)| {
                        let before = code[..i].chars().next_back();
                        let after = code[i + name.len()..].chars().next();
                        let ident =
                            |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                        !ident(before) && (name.ends_with("::") || !ident(after))
                    });
                    if named {
                        found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(checked > 30, "only {checked} files checked");
    assert!(
        found.is_empty(),
        "the data path names gossip state:\n{}",
        found.join("\n")
    );
}
