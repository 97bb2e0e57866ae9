//! The TUI at scale: a 100-node × 500-route cluster view, changing at 50
//! verdicts per second for 10 seconds of simulated time, fed to the App as
//! whole views (one `Msg::View` per change, the worst case: the feed hands
//! out a view at every batch) and drawn at 20 frames per simulated second on
//! a 200 × 60 `TestBackend`. It runs as fast as it can and counts. Run by
//! hand:
//!
//!   cargo bench -p picket-tests --bench tui_render [-- NODES ROUTES]
//!
//! Prints one line: per-frame `view::render` time and the whole
//! `Terminal::draw` (render, buffer diff, backend) as p50/p99/max;
//! per-update (`App::update` with a view) time and, sampled on every fifth
//! change, what it is made of (`Matrix::new`, dropping the replaced view);
//! the share of one core updates and frames would take in real time; and
//! the process CPU time (from /proc/self/stat; it includes building and
//! cloning the views, which the timings exclude).

// Wall time is what this measures.
#![allow(clippy::disallowed_types)]

use std::time::{Duration, Instant};

use picket_proto::{
    BreakerState, ClusterView, Heart, ImageCount, Liveness, Member, NodeInfo, Verdict,
};
use picket_tui::app::{App, Link, Matrix, Msg};
use picket_tui::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

const SECONDS: u64 = 10;
const CHANGES_PER_SECOND: u64 = 50;
const FRAMES_PER_SECOND: u64 = 20;
const WIDTH: u16 = 200;
const HEIGHT: u16 = 60;
const T0: u64 = 1_800_000_000_000;

/// xorshift64*: deterministic, so every run changes the same cells.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn cluster(nodes: usize, routes: usize) -> ClusterView {
    let members = (0..nodes)
        .map(|n| Member {
            name: format!("node-{n:03}"),
            gossip: format!("10.0.{}.{}:7946", n / 250, n % 250 + 1),
            generation: T0,
            liveness: if n % 37 == 5 {
                Liveness::Suspect
            } else {
                Liveness::Alive
            },
            heard_unix_ms: T0 - (n as u64 % 7) * 1000,
            info: Some(NodeInfo {
                name: format!("node-{n:03}"),
                version: "bench".into(),
                admin: format!("10.0.{}.{}:9900", n / 250, n % 250 + 1),
                feed: Some(format!("10.0.{}.{}:7000", n / 250, n % 250 + 1)),
                feed_fingerprint: Some(format!("{n:064x}")),
                runtime: "kubernetes".into(),
                started_unix_ms: T0 - 3_600_000,
            }),
            // Every tenth node on another route table, as during a change.
            table: Some(picket_proto::TableGeneration {
                digest: if n % 10 == 3 {
                    "4c0f12ab9d2e7731"
                } else {
                    "2676afdb5add1e9b"
                }
                .into(),
                routes: 500,
                since_unix_ms: T0,
            }),
            certificates: Vec::new(),
            verdicts: std::sync::Arc::new(
                (0..routes)
                    .map(|r| Verdict {
                        route: format!("team-{}/service-{r:04}", r % 17).into(),
                        heart: Heart::Green,
                        reason: "all 3 replicas ready".into(),
                        ready: 3,
                        total: 3,
                        images: vec![ImageCount {
                            image: format!("registry.example.com/team/service-{r}:1.4"),
                            replicas: 3,
                        }]
                        .into(),
                        circuit: BreakerState::Closed,
                        since_unix_ms: T0 - 600_000,
                        runtime_stale_since_unix_ms: None,
                    })
                    .collect::<Vec<_>>(),
            ),
        })
        .map(|mut member| {
            // As the feed hands them out: by route.
            std::sync::Arc::make_mut(&mut member.verdicts).sort_by(|a, b| a.route.cmp(&b.route));
            member
        })
        .collect();
    ClusterView {
        node: "node-000".into(),
        cluster: "bench".into(),
        taken_unix_ms: T0,
        members,
    }
}

/// A random cell gets another heart (and the circuit that goes with it).
fn change(view: &mut ClusterView, rng: &mut Rng, now: u64) {
    let member = rng.below(view.members.len());
    let verdicts = std::sync::Arc::make_mut(&mut view.members[member].verdicts);
    let route = rng.below(verdicts.len());
    let verdict = &mut verdicts[route];
    let (heart, circuit, ready, reason) = match (verdict.heart, rng.below(2)) {
        (Heart::Green, 0) | (Heart::Red, 1) => (
            Heart::Orange,
            BreakerState::Closed,
            1,
            "1 of 3 replicas ready",
        ),
        (Heart::Green, _) | (Heart::Orange, 1) => (
            Heart::Red,
            BreakerState::Open,
            0,
            "circuit open after 5 failures",
        ),
        (Heart::Orange, _) | (Heart::Red, _) => (
            Heart::Green,
            BreakerState::Closed,
            3,
            "all 3 replicas ready",
        ),
    };
    verdict.heart = heart;
    verdict.circuit = circuit;
    verdict.ready = ready;
    verdict.reason = reason.into();
    verdict.since_unix_ms = now;
    view.taken_unix_ms = now;
}

struct Figures(Vec<Duration>);

impl Figures {
    fn summary(&mut self) -> String {
        self.0.sort_unstable();
        let n = self.0.len();
        if n == 0 {
            return "none".into();
        }
        let at = |q: usize| self.0[(n * q / 100).min(n - 1)];
        format!(
            "p50 {:.3} p99 {:.3} max {:.3} ms",
            ms(at(50)),
            ms(at(99)),
            ms(self.0[n - 1])
        )
    }

    fn total(&self) -> Duration {
        self.0.iter().sum()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// This process's user + system CPU time, from /proc/self/stat (in
/// USER_HZ ticks, which Linux fixes at 100 per second for /proc).
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces; the fields after it start with the
    // state, field 3, so utime (14) and stime (15) are the 12th and 13th.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

fn main() -> anyhow::Result<()> {
    let (nodes, routes) = picket_tests::bench_size(100, 500);
    let mut view = cluster(nodes, routes);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut app = App::new();
    let mut terminal = Terminal::new(TestBackend::new(WIDTH, HEIGHT))?;
    app.update(Msg::Tick { now_unix_ms: T0 });
    app.update(Msg::Link(Link::Live {
        addr: "10.0.0.1:7000".into(),
    }));
    app.update(Msg::View(view.clone()));

    let cpu_start = cpu_time();
    let wall_start = Instant::now();
    let (mut renders, mut draws, mut updates) = (
        Figures(Vec::new()),
        Figures(Vec::new()),
        Figures(Vec::new()),
    );
    let (mut matrices, mut drops) = (Figures(Vec::new()), Figures(Vec::new()));
    let change_every = 1000 / CHANGES_PER_SECOND;
    let frame_every = 1000 / FRAMES_PER_SECOND;
    for t in (0..SECONDS * 1000).step_by(10) {
        let now = T0 + t;
        if t % change_every == 0 {
            change(&mut view, &mut rng, now);
            let msg = Msg::View(view.clone());
            let start = Instant::now();
            app.update(msg);
            updates.0.push(start.elapsed());
            // What an update is made of, on every fifth change: building the
            // matrix, and dropping the view it replaces.
            if t % (5 * change_every) == 0 {
                let start = Instant::now();
                let matrix = Matrix::new(&view);
                matrices.0.push(start.elapsed());
                drop(matrix);
                let copy = view.clone();
                let start = Instant::now();
                drop(copy);
                drops.0.push(start.elapsed());
            }
        }
        if t % frame_every == 0 {
            app.update(Msg::Tick { now_unix_ms: now });
            // The operator moves about now and then.
            if t % 1000 == 0 {
                let key = crossterm_key(if t % 3000 == 0 { 'G' } else { 'j' });
                app.update(key);
            }
            let start = Instant::now();
            let mut render = Duration::ZERO;
            terminal.draw(|frame| {
                let start = Instant::now();
                view::render(frame, &app);
                render = start.elapsed();
            })?;
            draws.0.push(start.elapsed());
            renders.0.push(render);
        }
    }
    let wall = wall_start.elapsed();
    let busy = updates.total() + draws.total();
    let cpu = match (cpu_start, cpu_time()) {
        (Some(a), Some(b)) => format!("CPU {:.2} s user+sys", (b - a).as_secs_f64()),
        _ => "CPU n/a (no /proc/self/stat)".to_owned(),
    };
    println!(
        "tui_render {nodes} nodes × {routes} routes, {WIDTH}×{HEIGHT}, {SECONDS} s simulated: \
         {} frames render {} (draw {}); {} updates {} (matrix {}, dropping a view {}); \
         busy {:.1}% of a core; {cpu}, wall {:.2} s with view cloning",
        renders.0.len(),
        renders.summary(),
        draws.summary(),
        updates.0.len(),
        updates.summary(),
        matrices.summary(),
        drops.summary(),
        100.0 * busy.as_secs_f64() / SECONDS as f64,
        wall.as_secs_f64(),
    );
    Ok(())
}

fn crossterm_key(c: char) -> Msg {
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}
