//! The fault suite's harness: a steady load over several nodes, every
//! answer recorded, and one report line per fault.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{self, percentile};

/// One request of the load.
#[derive(Debug, Clone)]
pub struct Sample {
    pub sent: Instant,
    pub latency: Duration,
    /// 0 when no answer came (the connection failed).
    pub status: u16,
    /// The body: test upstreams answer with their name first.
    pub body: String,
}

impl Sample {
    /// The upstream that answered, from a test upstream's body.
    pub fn upstream(&self) -> &str {
        self.body.split(':').next().unwrap_or_default()
    }
}

/// A steady load: `rate` requests per second, round robin over `targets`,
/// each on a connection of its own, until stopped.
#[derive(Debug)]
pub struct Load {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: JoinHandle<()>,
}

impl Load {
    pub fn start(targets: Vec<SocketAddr>, host: &str, path: &str, rate: u32) -> Load {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (host, path) = (host.to_string(), path.to_string());
        let every = Duration::from_secs(1) / rate.max(1);
        let task = {
            let samples = Arc::clone(&samples);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                for i in 0usize.. {
                    tick.tick().await;
                    let target = targets[i % targets.len()];
                    let (samples, host, path) = (Arc::clone(&samples), host.clone(), path.clone());
                    tokio::spawn(async move {
                        let sent = Instant::now();
                        let answer = tokio::time::timeout(
                            Duration::from_secs(30),
                            client::get(target, &host, &path),
                        )
                        .await;
                        let sample = match answer {
                            Ok(Ok(answer)) => Sample {
                                sent,
                                latency: sent.elapsed(),
                                status: answer.status.as_u16(),
                                body: answer.text(),
                            },
                            _ => Sample {
                                sent,
                                latency: sent.elapsed(),
                                status: 0,
                                body: String::new(),
                            },
                        };
                        samples.lock().expect("samples").push(sample);
                    });
                }
            })
        };
        Load { samples, task }
    }

    /// Stops sending, waits for the answers in flight, and hands them over.
    pub async fn stop(self) -> Vec<Sample> {
        self.task.abort();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut samples = std::mem::take(&mut *self.samples.lock().expect("samples"));
        samples.sort_by_key(|s| s.sent);
        samples
    }
}

/// What one fault did to the load.
#[derive(Debug, Clone)]
pub struct Report {
    pub fault: String,
    pub sent: usize,
    /// Failed requests by status (0: no answer).
    pub failed: BTreeMap<u16, usize>,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Answers from a replica after it was gone, when the fault removes one.
    pub after_gone: Option<usize>,
    /// From the fault to the first moment the nodes saw reality again.
    pub recovered: Option<Duration>,
}

impl Report {
    pub fn new(fault: &str, samples: &[Sample]) -> Report {
        let mut failed = BTreeMap::new();
        for s in samples.iter().filter(|s| !(200..400).contains(&s.status)) {
            *failed.entry(s.status).or_insert(0) += 1;
        }
        let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
        Report {
            fault: fault.to_string(),
            sent: samples.len(),
            failed,
            p50: percentile(&mut latencies, 50.0),
            p99: percentile(&mut latencies, 99.0),
            max: latencies.last().copied().unwrap_or_default(),
            after_gone: None,
            recovered: None,
        }
    }

    pub fn failed_total(&self) -> usize {
        self.failed.values().sum()
    }

    /// One line for the suite's table, printed on stderr.
    pub fn print(&self) {
        let failed = if self.failed.is_empty() {
            "0".to_string()
        } else {
            self.failed
                .iter()
                .map(|(status, n)| format!("{n}×{status}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let opt = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{d:.1?}"));
        eprintln!(
            "FAULT | {} | {} sent | failed {} | p50 {:.1?} p99 {:.1?} max {:.1?} | to a gone replica {} | recovered {}",
            self.fault,
            self.sent,
            failed,
            self.p50,
            self.p99,
            self.max,
            self.after_gone.map_or("-".to_string(), |n| n.to_string()),
            opt(self.recovered),
        );
    }
}

/// This process's resident memory, in kB (from `/proc/self/status`).
pub fn rss_kb() -> Option<u64> {
    rss_kb_of("/proc/self/status")
}

/// A process's resident memory, in kB, from its `/proc/<pid>/status`.
pub fn rss_kb_of(status: &str) -> Option<u64> {
    let status = std::fs::read_to_string(status).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Malformed HTTP that a proxy or status API must shrug off: garbage, an
/// unknown version, no path, a 200 kB header, a negative `Content-Length`,
/// a bad chunk.
pub fn malformed_requests() -> Vec<Vec<u8>> {
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    vec![
        b"\x00\x01\x02 garbage\r\n\r\n".to_vec(),
        b"GET / HTTP/9.9\r\n\r\n".to_vec(),
        b"GET\r\n\r\n".to_vec(),
        huge.into_bytes(),
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
    ]
}

/// `len` seeded random bytes: the same on every run of the same seed.
pub fn noise(rng: &mut fastrand::Rng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    rng.fill(&mut bytes);
    bytes
}

/// Random datagrams of 0 to 2,000 bytes (every 7th length), the same on
/// every run: what garbage at a gossip or feed port looks like.
pub fn garbage_datagrams() -> impl Iterator<Item = Vec<u8>> {
    let mut rng = fastrand::Rng::with_seed(0x1234_5678);
    (0..2000).step_by(7).map(move |len| noise(&mut rng, len))
}
