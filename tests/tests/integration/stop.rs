//! A stopping node waits for every task it started (gossip, the feed,
//! the configuration watch, certificate rotation, checks, the verdict
//! board, the access log), and each of them ends at the signal: none is
//! left for the drain deadline to abort. The node runs on a runtime that
//! logs to this test alone.

use std::time::Duration;

use picket_tests::cluster::{self, node_text_with};
use picket_tests::logs::Captured;
use picket_tests::node::{TestNode, route};
use picket_tests::upstream::{Behaviour, Upstream};

#[test]
fn a_stopping_node_ends_every_task_it_started() {
    let captured = Captured::default();
    let (runtime, _logging) = picket_tests::logs::runtime(&captured, "info");
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let key = cluster::key_file(dir.path(), "key");
        let upstream = Upstream::start("api", Behaviour::Echo).await;
        let access = dir.path().join("access.log");
        let text = node_text_with(
            "n1",
            &format!(
                "feed = \"127.0.0.1:0\"\naccess_log = \"{}\"",
                access.display()
            ),
            &cluster::section(&key, &[], Duration::from_millis(200)),
            &route("api", "/", &[upstream.addr], ""),
        );
        let path = dir.path().join("picket.toml");
        std::fs::write(&path, text).unwrap();
        let node = TestNode::start_file(&path);
        node.membership().await;
        let answer = picket_tests::client::get(node.proxy, "a", "/")
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
        node.stop().await;
        let log = captured.text();
        assert!(log.contains("node stopped"), "{log}");
        assert!(
            !log.contains("did not end"),
            "a task outlived the stop:\n{log}"
        );
        assert!(
            std::fs::read_to_string(&access)
                .unwrap()
                .contains("\"status\":200"),
            "the access log was flushed at the stop"
        );
    });
}
