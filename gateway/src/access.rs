//! The access log: one line per request, a stream of its own beside the
//! state-change log (which goes to stderr).
//!
//! ## Never in the way
//! A request's line is formatted on the request's own thread and appended
//! to a batch; a full batch ([`BATCH`] bytes) is handed to a bounded queue
//! with `try_send`. When the queue is full (a disk that stalls, a stdout
//! nobody reads), the batch is dropped and its lines counted
//! (`picket_access_log_dropped_lines`), never waited for. One thread of
//! its own writes the queue out, and what has gathered every [`FLUSH`]: a
//! blocking write never holds a worker of the proxy, and a busy node makes
//! one write per batch, not one per request (nor a thread wake-up).
//!
//! ## Rotation
//! A file is appended to, and opened again on SIGUSR1 (as nginx does on
//! USR1), so `logrotate` can move it away and signal: the next lines go
//! to a new file of the same name. A file that cannot be opened again
//! keeps the old one, with one warning.
//!
//! ## Formats
//! JSON lines by default ([`Record::write_json`]); the combined log format
//! ([`Record::write_combined`]) with Picket's fields after it, as nginx's
//! custom formats append theirs.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::{AccessLogFormat, AccessLogTarget};
use crate::ending::{Cause, Ending};
use crate::metrics::AccessLogMetrics;

/// Bytes of lines gathered before they are handed to the writer.
pub const BATCH: usize = 64 * 1024;
/// Batches the queue holds before it drops: 4 MiB of lines.
pub const QUEUE: usize = 64;
/// The longest a line waits in a batch that is not full.
pub const FLUSH: Duration = Duration::from_millis(200);

/// One request as the access log tells it.
#[derive(Debug)]
pub struct Record<'a> {
    /// When the request head was read.
    pub time: SystemTime,
    pub client: IpAddr,
    pub method: &'a str,
    pub host: Option<&'a [u8]>,
    /// The path and query as the client sent them.
    pub path: &'a [u8],
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub protocol: &'static str,
    pub status: u16,
    /// Body bytes read from the client.
    pub bytes_in: u64,
    /// Body bytes written to the client.
    pub bytes_out: u64,
    /// From the request head to the answer's last byte.
    pub duration: Duration,
    pub route: Option<&'a str>,
    /// The replica of the last attempt.
    pub replica: Option<&'a str>,
    pub tries: u32,
    /// What decided the answer when the node wrote it itself.
    pub decided_by: Option<&'static str>,
    /// How the exchange ended: complete, or who cut it and where.
    pub ending: Ending,
    pub request_id: &'a str,
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
}

/// Writes `bytes` as the inside of a JSON string.
fn json_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x20..=0x7e => out.push(b),
            // Control characters and bytes past ASCII: escaped, so a line
            // is always one line of valid JSON whatever a client sent.
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
    }
}

fn json_string(out: &mut Vec<u8>, key: &str, value: Option<&[u8]>) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
    match value {
        Some(value) => {
            out.push(b'"');
            json_escaped(out, value);
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

fn json_number(out: &mut Vec<u8>, key: &str, value: impl std::fmt::Display) {
    let _ = write!(out, ",\"{key}\":{value}");
}

/// Writes `bytes` for the combined format's quoted fields: `"` and `\`
/// and what is not printable ASCII escaped as `\xHH`, as nginx does.
fn clf_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'"' | b'\\' | 0..=0x1f | 0x7f..=0xff => {
                let _ = write!(out, "\\x{b:02X}");
            }
            _ => out.push(b),
        }
    }
}

/// Civil date and time of Unix seconds, UTC: (year, month, day, hour,
/// minute, second). Howard Hinnant's `civil_from_days`.
fn civil(unix: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, secs / 3600, secs / 60 % 60, secs % 60)
}

fn unix_parts(time: SystemTime) -> (i64, u32) {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_millis()),
        Err(_) => (0, 0),
    }
}

/// A duration in milliseconds with three decimals, in integers.
struct Millis(Duration);

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let micros = self.0.as_micros();
        write!(f, "{}.{:03}", micros / 1000, micros % 1000)
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

impl Record<'_> {
    /// One JSON object and a newline.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let (secs, millis) = unix_parts(self.time);
        let (y, mo, d, h, mi, s) = civil(secs);
        let _ = write!(
            out,
            "{{\"time\":\"{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{millis:03}Z\""
        );
        json_string(out, "request_id", Some(self.request_id.as_bytes()));
        let _ = write!(out, ",\"client\":\"{}\"", self.client);
        json_string(out, "method", Some(self.method.as_bytes()));
        json_string(out, "host", self.host);
        json_string(out, "path", Some(self.path));
        json_string(out, "protocol", Some(self.protocol.as_bytes()));
        json_number(out, "status", self.status);
        json_number(out, "bytes_in", self.bytes_in);
        json_number(out, "bytes_out", self.bytes_out);
        json_number(out, "duration_ms", Millis(self.duration));
        json_string(out, "route", self.route.map(str::as_bytes));
        json_string(out, "replica", self.replica.map(str::as_bytes));
        json_number(out, "tries", self.tries);
        json_string(out, "decided_by", self.decided_by.map(str::as_bytes));
        json_string(out, "ending", Some(self.ending.cause.slug().as_bytes()));
        let phase = (self.ending.cause != Cause::Complete).then(|| self.ending.phase.slug());
        json_string(out, "phase", phase.map(str::as_bytes));
        json_string(out, "user_agent", self.user_agent);
        json_string(out, "referer", self.referer);
        out.extend_from_slice(b"}\n");
    }

    /// The combined log format, then `route=`, `replica=`, `tries=`,
    /// `decided_by=`, `ending=` (`complete`, or the cause and the phase:
    /// `replica_closed/body`), `request_id=` and `duration_ms=` (`-` for
    /// none).
    pub fn write_combined(&self, out: &mut Vec<u8>) {
        let (secs, _) = unix_parts(self.time);
        let (y, mo, d, h, mi, s) = civil(secs);
        let month = MONTHS[(mo as usize).saturating_sub(1) % 12];
        let _ = write!(
            out,
            "{} - - [{d:02}/{month}/{y:04}:{h:02}:{mi:02}:{s:02} +0000] \"",
            self.client
        );
        clf_escaped(out, self.method.as_bytes());
        out.push(b' ');
        clf_escaped(out, self.path);
        let _ = write!(
            out,
            " {}\" {} {} \"",
            self.protocol, self.status, self.bytes_out
        );
        clf_escaped(out, self.referer.unwrap_or(b"-"));
        out.extend_from_slice(b"\" \"");
        clf_escaped(out, self.user_agent.unwrap_or(b"-"));
        out.extend_from_slice(b"\" route=");
        out.extend_from_slice(self.route.unwrap_or("-").as_bytes());
        out.extend_from_slice(b" replica=");
        out.extend_from_slice(self.replica.unwrap_or("-").as_bytes());
        let _ = write!(
            out,
            " tries={} decided_by={} ending={}",
            self.tries,
            self.decided_by.unwrap_or("-"),
            self.ending.cause.slug(),
        );
        if self.ending.cause != Cause::Complete {
            let _ = write!(out, "/{}", self.ending.phase.slug());
        }
        let _ = writeln!(
            out,
            " request_id={} duration_ms={}",
            self.request_id,
            Millis(self.duration)
        );
    }
}

/// Where the writer thread writes.
enum Sink {
    Stdout,
    File {
        path: PathBuf,
        file: std::fs::File,
    },
    /// Tests: any writer.
    Writer(Box<dyn Write + Send>),
}

impl Sink {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()
            }
            Sink::File { file, .. } => file.write_all(bytes),
            Sink::Writer(w) => {
                w.write_all(bytes)?;
                w.flush()
            }
        }
    }

    fn reopen(&mut self) -> std::io::Result<()> {
        if let Sink::File { path, file } = self {
            *file = open(path)?;
        }
        Ok(())
    }
}

/// Opens (or creates) an access log file for appending.
pub fn open(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// Lines gathered, not yet handed to the writer.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    lines: u64,
}

enum Message {
    Batch(Batch),
    /// Write everything, then say so.
    Flush(std::sync::mpsc::Sender<()>),
}

/// The batch being gathered, and the queue to the writer: a batch is
/// handed over under the lock, so that the writer, taking the queue and
/// then the batch under it, writes lines in order.
struct Gathering {
    batch: Batch,
    queue: SyncSender<Message>,
}

thread_local! {
    /// Where a line is formatted, outside the lock.
    static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The access log of a node.
pub struct AccessLog {
    gathering: Arc<std::sync::Mutex<Gathering>>,
    format: AccessLogFormat,
    reopen: Arc<AtomicBool>,
    metrics: AccessLogMetrics,
    /// Bytes that make a batch full.
    batch: usize,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl AccessLog {
    /// Starts the log's writer; `None` when it is off. A file that cannot
    /// be opened is an error.
    pub fn start(
        target: &AccessLogTarget,
        format: AccessLogFormat,
        metrics: AccessLogMetrics,
    ) -> std::io::Result<Option<Arc<AccessLog>>> {
        let sink = match target {
            AccessLogTarget::Off => return Ok(None),
            AccessLogTarget::Stdout => Sink::Stdout,
            AccessLogTarget::File(path) => Sink::File {
                file: open(path).map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("opening the access log {}: {e}", path.display()),
                    )
                })?,
                path: path.clone(),
            },
        };
        Self::with_sink(sink, format, metrics, QUEUE, BATCH).map(Some)
    }

    /// A log into any writer, with a queue of `queue` batches of `batch`
    /// bytes (tests).
    pub fn to_writer(
        writer: Box<dyn Write + Send>,
        format: AccessLogFormat,
        metrics: AccessLogMetrics,
        queue: usize,
        batch: usize,
    ) -> std::io::Result<Arc<AccessLog>> {
        Self::with_sink(Sink::Writer(writer), format, metrics, queue, batch)
    }

    fn with_sink(
        sink: Sink,
        format: AccessLogFormat,
        metrics: AccessLogMetrics,
        queue: usize,
        batch: usize,
    ) -> std::io::Result<Arc<AccessLog>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(queue);
        let reopen = Arc::new(AtomicBool::new(false));
        let gathering = Arc::new(std::sync::Mutex::new(Gathering {
            batch: Batch::default(),
            queue: tx,
        }));
        let writer = Writer {
            sink,
            queue: rx,
            gathering: Arc::clone(&gathering),
            reopen: Arc::clone(&reopen),
            metrics: metrics.clone(),
            failing: false,
        };
        std::thread::Builder::new()
            .name("picket-access-log".into())
            .spawn(move || writer.run())?;
        Ok(Arc::new(AccessLog {
            gathering,
            format,
            reopen,
            metrics,
            batch,
        }))
    }

    /// Logs a request; never waits for the writer.
    pub fn log(&self, record: &Record<'_>) {
        LINE.with_borrow_mut(|line| {
            line.clear();
            match self.format {
                AccessLogFormat::Json => record.write_json(line),
                AccessLogFormat::Combined => record.write_combined(line),
            }
            let mut gathering = self.lock();
            gathering.batch.bytes.extend_from_slice(line);
            gathering.batch.lines += 1;
            if gathering.batch.bytes.len() >= self.batch {
                let full = std::mem::take(&mut gathering.batch);
                self.hand(&gathering.queue, full);
            }
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gathering> {
        self.gathering.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands a full batch to the writer, or drops it when the queue is
    /// full.
    fn hand(&self, queue: &SyncSender<Message>, batch: Batch) {
        let lines = batch.lines;
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            queue.try_send(Message::Batch(batch))
        {
            self.metrics.dropped.inc_by(lines);
        }
    }

    /// Writes out every line logged so far, waiting at most `within`
    /// (at shutdown): a full queue is waited for, a stuck writer is not.
    pub fn flush(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let batch = std::mem::take(&mut self.lock().batch);
        let lines = batch.lines;
        let (done, wait) = std::sync::mpsc::channel();
        for mut message in [Message::Batch(batch), Message::Flush(done)] {
            loop {
                let sent = self.lock().queue.try_send(message);
                match sent {
                    Ok(()) => break,
                    Err(TrySendError::Full(back)) if tokio::time::Instant::now() < deadline => {
                        message = back;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(TrySendError::Full(back) | TrySendError::Disconnected(back)) => {
                        if let Message::Batch(_) = back {
                            self.metrics.dropped.inc_by(lines);
                        }
                        return;
                    }
                }
            }
        }
        let _ = wait.recv_timeout(deadline.saturating_duration_since(tokio::time::Instant::now()));
    }

    /// Asks for the file to be opened again (SIGUSR1); within a second.
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
    }
}

/// The writer thread.
struct Writer {
    sink: Sink,
    queue: Receiver<Message>,
    gathering: Arc<std::sync::Mutex<Gathering>>,
    reopen: Arc<AtomicBool>,
    metrics: AccessLogMetrics,
    /// The last write failed: logged once until one succeeds.
    failing: bool,
}

impl Writer {
    fn run(mut self) {
        loop {
            if self.reopen.swap(false, Ordering::AcqRel) {
                match self.sink.reopen() {
                    Ok(()) => tracing::info!("access log reopened"),
                    Err(error) => {
                        self.metrics.failed.inc();
                        tracing::warn!(%error, "cannot reopen the access log; writing on to the old file");
                    }
                }
            }
            match self.queue.recv_timeout(FLUSH) {
                Ok(Message::Batch(batch)) => self.write(&batch),
                Ok(Message::Flush(done)) => {
                    let _ = done.send(());
                }
                Err(RecvTimeoutError::Timeout) => {
                    // What gathered meanwhile: the batches queued first,
                    // then the one not yet full, taken together under the
                    // lock so that lines stay in order.
                    let (queued, batch) = {
                        let mut gathering =
                            self.gathering.lock().unwrap_or_else(|e| e.into_inner());
                        let queued: Vec<Message> = self.queue.try_iter().collect();
                        (queued, std::mem::take(&mut gathering.batch))
                    };
                    for message in queued {
                        match message {
                            Message::Batch(batch) => self.write(&batch),
                            Message::Flush(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                    if batch.lines > 0 {
                        self.write(&batch);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn write(&mut self, batch: &Batch) {
        if batch.lines == 0 {
            return;
        }
        match self.sink.write_all(&batch.bytes) {
            Ok(()) => {
                self.metrics.written.inc_by(batch.lines);
                if self.failing {
                    self.failing = false;
                    tracing::info!("access log writes again");
                }
            }
            Err(error) => {
                self.metrics.failed.inc();
                self.metrics.dropped.inc_by(batch.lines);
                if !self.failing {
                    self.failing = true;
                    tracing::warn!(%error, "cannot write the access log; its lines are dropped until it can");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(path: &'a [u8], user_agent: Option<&'a [u8]>) -> Record<'a> {
        Record {
            time: UNIX_EPOCH + Duration::from_millis(1_796_163_557_123),
            client: "10.0.0.7".parse().unwrap(),
            method: "GET",
            host: Some(b"shop.example.com"),
            path,
            protocol: "HTTP/1.1",
            status: 504,
            bytes_in: 3,
            bytes_out: 120,
            duration: Duration::from_micros(2_000_250),
            route: Some("shop"),
            replica: Some("127.0.0.1:8081"),
            tries: 2,
            decided_by: Some("first_answer_timeout"),
            ending: Ending::new(
                crate::ending::Cause::Bound(crate::ending::Bound::FirstAnswer),
                crate::ending::Phase::Head,
            ),
            request_id: "abc-1",
            user_agent,
            referer: None,
        }
    }

    #[test]
    fn civil_time_is_right_across_eras() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(civil(1_796_163_557), (2026, 12, 1, 22, 19, 17));
        assert_eq!(civil(-1), (1969, 12, 31, 23, 59, 59));
    }

    #[test]
    fn a_json_line_is_one_line_of_json_whatever_the_client_sent() {
        let mut out = Vec::new();
        record(b"/x?q=\"a\"\n\\", Some(b"curl\xff\x01")).write_json(&mut out);
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["time"], "2026-12-01T22:19:17.123Z");
        assert_eq!(value["path"], "/x?q=\"a\"\n\\");
        assert_eq!(value["user_agent"], "curl\u{ff}\u{1}");
        assert_eq!(value["status"], 504);
        assert_eq!(value["duration_ms"], 2000.25);
        assert_eq!(value["tries"], 2);
        assert_eq!(value["replica"], "127.0.0.1:8081");
        assert_eq!(value["decided_by"], "first_answer_timeout");
        assert_eq!(value["referer"], serde_json::Value::Null);
        assert_eq!(value["ending"], "bound_first_answer");
        assert_eq!(value["phase"], "head");
        // A complete exchange has no phase to name.
        let mut out = Vec::new();
        let mut complete = record(b"/", None);
        complete.ending = Ending::COMPLETE;
        complete.write_json(&mut out);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["ending"], "complete");
        assert_eq!(value["phase"], serde_json::Value::Null);
    }

    #[test]
    fn a_combined_line_reads_as_nginx_writes_it() {
        let mut out = Vec::new();
        record(b"/a b\"", Some(b"curl/8")).write_combined(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "10.0.0.7 - - [01/Dec/2026:22:19:17 +0000] \"GET /a b\\x22 HTTP/1.1\" 504 120 \"-\" \"curl/8\" \
             route=shop replica=127.0.0.1:8081 tries=2 decided_by=first_answer_timeout \
             ending=bound_first_answer/head request_id=abc-1 duration_ms=2000.250\n"
        );
    }

    /// A writer that says when a write starts, then holds it until told
    /// to go on (or the teller is gone).
    struct Stuck {
        written: crate::testing::Captured,
        entered: std::sync::mpsc::Sender<()>,
        go: std::sync::mpsc::Receiver<()>,
    }

    impl Write for Stuck {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.entered.send(());
            let _ = self.go.recv();
            self.written.write(buf)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_writer_drops_and_counts_lines_and_never_waits() {
        let written = crate::testing::Captured::default();
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        let metrics = AccessLogMetrics::default();
        let stuck = Stuck {
            written: written.clone(),
            entered: entered_tx,
            go: go_rx,
        };
        let log = AccessLog::to_writer(
            Box::new(stuck),
            AccessLogFormat::Json,
            metrics.clone(),
            4,
            1,
        )
        .unwrap();
        log.log(&record(b"/first", None));
        entered
            .recv_timeout(Duration::from_secs(5))
            .expect("the writer takes the first line");
        // The writer is stuck in its write: four lines fit in the queue,
        // the rest are dropped, and logging never waits.
        let started = tokio::time::Instant::now();
        for _ in 0..100 {
            log.log(&record(b"/", None));
        }
        assert!(started.elapsed() < Duration::from_secs(1), "logging waited");
        assert_eq!(metrics.dropped.get(), 96);
        drop(go);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while metrics.written.get() < 5 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the queued lines are written"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let text = written.text();
        assert_eq!(text.lines().count(), 5);
        assert!(text.lines().next().unwrap().contains("\"path\":\"/first\""));
    }

    #[test]
    fn lines_gather_into_batches_and_flush_writes_them_in_order() {
        let written = crate::testing::Captured::default();
        let metrics = AccessLogMetrics::default();
        let log = AccessLog::to_writer(
            Box::new(written.clone()),
            AccessLogFormat::Json,
            metrics.clone(),
            64,
            1024,
        )
        .unwrap();
        let paths: Vec<String> = (0..50).map(|i| format!("/{i}")).collect();
        for path in &paths {
            log.log(&record(path.as_bytes(), None));
        }
        log.flush(Duration::from_secs(5));
        assert_eq!(metrics.written.get(), 50);
        assert_eq!(metrics.dropped.get(), 0);
        let text = written.text();
        let seen: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["path"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(seen, paths, "every line, in order");
    }
}
