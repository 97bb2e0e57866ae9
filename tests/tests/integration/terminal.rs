//! `picket-tui` in a real terminal: tmux runs it against `picket demo`,
//! keys go in with send-keys, the screen comes out with capture-pane.

// Processes and wall time only: no runtime whose clock could be paused.
#![allow(clippy::disallowed_types, clippy::expect_used)]

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use picket_tests::{binaries, has_program, require};

/// Kills the process (and so its nodes) when the test ends, even failed.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tmux server of the test's own, killed when the test ends.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs");
        assert!(
            output.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "tui"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "tui"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Waits until the screen satisfies `check`; panics with the screen.
    fn until(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "never on screen: {what}\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// The first of three consecutive loopback ports free for TCP and UDP.
fn three_free_ports() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], picket_tests::ports::consecutive(3)))
}

/// `picket demo` with its feed at `feed`, other ports of its own.
fn demo(feed: SocketAddr) -> (Process, SocketAddr) {
    let (listen, admin, gossip) = (three_free_ports(), three_free_ports(), three_free_ports());
    let child = Command::new(binaries::picket())
        .args(["demo", "--listen", &listen.to_string()])
        .args(["--admin", &admin.to_string()])
        .args(["--gossip", &gossip.to_string()])
        .args(["--feed", &feed.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("picket demo starts");
    (Process(child), admin)
}

#[test]
fn the_tui_in_tmux_shows_the_demo_matrix_and_detail_and_q_restores_the_terminal() {
    if !require("tmux", has_program("tmux")) {
        return;
    }
    let feed = three_free_ports();
    let (_demo, _admin) = demo(feed);
    let tui = binaries::picket_tui();
    let dir = tempfile::tempdir().unwrap();
    let stty = dir.path().join("stty");
    // The TUI in a shell that records the terminal's modes after it exits.
    let command = format!(
        "{} --insecure {feed}; echo \"exit=$?\"; stty -a > {}; sleep 30",
        tui.display(),
        stty.display()
    );
    let tmux = Tmux {
        socket: format!("picket-test-{}", std::process::id()),
    };
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "tui",
        "-x",
        "80",
        "-y",
        "24",
        "sh",
        "-c",
        &command,
    ]);

    // The matrix: three node columns, the demo's routes, web marked.
    let screen = tmux.until(
        "three alive nodes, the demo's routes, web disagreeing",
        |s| {
            let lines: Vec<&str> = s.lines().collect();
            let header = lines
                .iter()
                .position(|l| l.contains("demo-1") && l.contains("demo-3"));
            let alive = header
                .and_then(|i| lines.get(i + 1))
                .is_some_and(|l| l.matches('●').count() == 3);
            let web = lines
                .iter()
                .any(|l| l.trim_start().starts_with("≠ web") || l.contains("≠ web "));
            alive && web && s.contains("slow") && s.contains("refused")
        },
    );
    eprintln!("{screen}");
    // Without colour (capture-pane without -e), the hearts still read:
    // node 3 orange, the others green, refused red; and at 80 columns the
    // status line is whole.
    let row = |route: &str| {
        screen
            .lines()
            .find(|l| {
                l.chars()
                    .skip(2)
                    .collect::<String>()
                    .starts_with(&format!("{route} "))
            })
            .unwrap_or_else(|| panic!("no {route} row:\n{screen}"))
            .split_whitespace()
            .skip(if route == "web" { 2 } else { 1 })
            .collect::<Vec<_>>()
    };
    assert_eq!(row("web"), ["♥", "♥", "❣"], "{screen}");
    assert_eq!(row("refused"), ["♡", "♡", "♡"], "{screen}");
    let status = screen.lines().next().unwrap_or_default();
    // Node 3's extra replica is also another route table.
    assert!(
        (status.contains("≠ 1 disagrees") || status.contains("≠ 1 route disagrees"))
            && (status.ends_with("≠ 1 table") || status.ends_with("≠ 1 node on another table")),
        "the status line at 80 columns: {status:?}"
    );

    // Filter to web and read its detail pane: node 3 alone lists a
    // replica that refuses.
    tmux.keys(&["/"]);
    tmux.keys(&["-l", "web"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.until("web's detail pane, the filter applied", |s| {
        s.contains("1 of 4")
            && s.lines()
                .any(|l| l.starts_with("demo-3") && l.contains("❣") && l.contains("3/4"))
            && s.lines()
                .any(|l| l.starts_with("demo-1") && l.contains("3/3"))
    });
    // The reason that does not fit beside the columns has its own line,
    // whole.
    assert!(
        screen.contains("3 of 4 ready (1 ejected by this node: connect refused)"),
        "{screen}"
    );
    eprintln!("{screen}");
    assert!(
        !screen.contains("slow"),
        "the filter hides other routes:\n{screen}"
    );
    assert!(
        screen.contains("web ≠ live nodes disagree"),
        "the detail pane's title:\n{screen}"
    );

    // q exits cleanly and the terminal is itself again.
    tmux.keys(&["q"]);
    let screen = tmux.until("the TUI exited", |s| s.contains("exit="));
    assert!(screen.contains("exit=0"), "{screen}");
    assert!(
        !screen.contains("demo-1"),
        "the alternate screen is gone:\n{screen}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !Path::new(&stty).exists() || std::fs::read_to_string(&stty).unwrap().is_empty() {
        assert!(Instant::now() < deadline, "stty never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    let modes = std::fs::read_to_string(&stty).unwrap();
    for mode in ["icanon", "echo"] {
        assert!(
            modes.split_whitespace().any(|m| m == mode),
            "raw mode was left on ({mode} is off): {modes}"
        );
    }
}

#[test]
fn once_json_prints_the_cluster_view_and_exits() {
    let feed = three_free_ports();
    let (_demo, _admin) = demo(feed);
    let tui = binaries::picket_tui();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let output = Command::new(&tui)
            .args(["--insecure", "--once", "--json", &feed.to_string()])
            .output()
            .expect("picket-tui runs");
        let view: Option<picket_proto::ClusterView> = output
            .status
            .success()
            .then(|| serde_json::from_slice(&output.stdout).ok())
            .flatten();
        if let Some(view) = view.filter(|v| v.members.len() == 3) {
            assert_eq!(view.node, "demo-1");
            assert_eq!(view.cluster, "demo");
            let routes: Vec<&str> = view.members[0].verdicts.iter().map(|v| &*v.route).collect();
            assert_eq!(routes, ["flaky", "refused", "slow", "web"]);
            // `picket tui` is the same program, built into `picket` (the
            // image's one binary).
            let built_in = Command::new(binaries::picket())
                .args(["tui", "--insecure", "--once", "--json", &feed.to_string()])
                .output()
                .expect("picket tui runs");
            assert!(
                built_in.status.success(),
                "{}",
                String::from_utf8_lossy(&built_in.stderr)
            );
            let same: picket_proto::ClusterView =
                serde_json::from_slice(&built_in.stdout).expect("the view as JSON");
            assert_eq!((same.node.as_str(), same.members.len()), ("demo-1", 3));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no three-node view: {} {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_busy_demo_port_is_named_with_the_flag_that_moves_it() {
    let (listen, admin, feed) = (three_free_ports(), three_free_ports(), three_free_ports());
    // The gossip port is held, as a swarm's engine holds 7946.
    let held = UdpSocket::bind("127.0.0.1:0").unwrap();
    let gossip = held.local_addr().unwrap();
    let output = Command::new(binaries::picket())
        .args(["demo", "--listen", &listen.to_string()])
        .args(["--admin", &admin.to_string()])
        .args(["--gossip", &gossip.to_string()])
        .args(["--feed", &feed.to_string()])
        .stdin(Stdio::null())
        .output()
        .expect("picket demo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("binding its gossip (UDP) on {gossip}"))
            && stderr.contains("`--gossip` moves"),
        "{stderr}"
    );
}
