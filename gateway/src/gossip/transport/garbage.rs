//! Garbage on the codec socket: counted, and logged once per episode.
//!
//! chitchat's own socket, kept on loopback as the transport's codec
//! ([`super`]), drops a datagram it cannot decode with a warning of its
//! own, before the transport sees anything. Anything on the host can send
//! to a loopback port, so that was one warning per datagram for whoever
//! sends garbage there, and no count. So the codec is polled with a
//! [`Listener`] as the current tracing subscriber: chitchat's warnings go
//! to it instead of the node's log, and each datagram they name is counted
//! in the drop counters (`injected` from a stranger, `undecodable` from
//! the feeder: an authentic message that is not chitchat's) and logged
//! only when it opens an episode.
//!
//! ## Episodes
//! Garbage with less than [`QUIET`] between datagrams is one episode. Its
//! first datagram is logged, with where it came from; the rest are only
//! counted. A steady trickle is one line, however long it lasts.
//!
//! chitchat's other warning on that socket, a transient receive error on
//! loopback, is not logged either.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{Interest, Subscriber};
use tracing::{Dispatch, Event, Level, Metadata};

use crate::metrics::Dropped;
use crate::metrics::GossipMetrics;

/// How long without garbage ends an episode.
pub const QUIET: Duration = Duration::from_secs(60);

/// Which of a stream of events open an episode: the first, and each one
/// after [`QUIET`] without any.
#[derive(Debug, Default)]
pub struct Episodes {
    last: Option<Instant>,
}

impl Episodes {
    /// Notes events at `now`; whether they open an episode.
    pub fn opens(&mut self, now: Instant) -> bool {
        let opens = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= QUIET);
        self.last = Some(now);
        opens
    }
}

/// What chitchat said about the codec's datagrams since last asked.
#[derive(Debug, Default)]
struct Heard {
    from_feeder: u64,
    from_strangers: u64,
    /// The first datagram: where from, how many bytes, why dropped.
    first: Option<(SocketAddr, u64, Dropped)>,
}

/// A tracing subscriber for the codec's polls only: it hears chitchat's
/// warnings, and keeps the datagrams they name.
struct Listener {
    feeder: SocketAddr,
    heard: Arc<Mutex<Heard>>,
}

impl Listener {
    fn hears(metadata: &Metadata<'_>) -> bool {
        metadata.is_event()
            && metadata.target().starts_with("chitchat")
            && *metadata.level() <= Level::WARN
    }
}

/// The fields of chitchat's warning about an undecodable datagram.
#[derive(Default)]
struct Fields {
    from: Option<SocketAddr>,
    bytes: u64,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "payload_len" {
            self.bytes = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "from" {
            self.from = format!("{value:?}").parse().ok();
        }
    }
}

impl Subscriber for Listener {
    /// `always`, whatever the callsite: tracing combines every live
    /// subscriber's interest, and `always` leaves the node's own
    /// subscriber's `always` as it is, where `never` would turn it into
    /// `sometimes` (a filter check per event) all over the process. While
    /// this subscriber is the current one, [`Subscriber::event`] ignores
    /// what it does not hear.
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        Listener::hears(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::WARN)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        if !Listener::hears(event.metadata()) {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Some(from) = fields.from else {
            return;
        };
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        let why = if from == self.feeder {
            heard.from_feeder += 1;
            Dropped::Undecodable
        } else {
            heard.from_strangers += 1;
            Dropped::Injected
        };
        heard.first.get_or_insert((from, fields.bytes, why));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// Garbage on one codec socket, heard, counted and logged.
pub struct Garbage {
    listener: Dispatch,
    heard: Arc<Mutex<Heard>>,
    episodes: Episodes,
    metrics: GossipMetrics,
}

impl fmt::Debug for Garbage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Garbage")
            .field("episodes", &self.episodes)
            .finish_non_exhaustive()
    }
}

impl Garbage {
    /// For a codec fed by `feeder`.
    pub fn new(feeder: SocketAddr, metrics: GossipMetrics) -> Garbage {
        let heard = Arc::new(Mutex::new(Heard::default()));
        let listener = Dispatch::new(Listener {
            feeder,
            heard: Arc::clone(&heard),
        });
        Garbage {
            listener,
            heard,
            episodes: Episodes::default(),
            metrics,
        }
    }

    /// Runs `poll` (one poll of the codec) with chitchat's warnings going
    /// to the listener.
    pub fn listening<T>(&self, poll: impl FnOnce() -> T) -> T {
        tracing::dispatcher::with_default(&self.listener, poll)
    }

    /// Counts what the listener heard, and logs it if it opens an episode;
    /// whether the feeder's message was garbage.
    pub fn tally(&mut self, now: Instant) -> bool {
        let heard = std::mem::take(&mut *self.heard.lock().unwrap_or_else(|e| e.into_inner()));
        let Some((from, bytes, why)) = heard.first else {
            return false;
        };
        for _ in 0..heard.from_strangers {
            self.metrics.dropped(Dropped::Injected);
        }
        for _ in 0..heard.from_feeder {
            self.metrics.dropped(Dropped::Undecodable);
        }
        if self.episodes.opens(now) {
            tracing::warn!(
                %from,
                bytes,
                reason = why.label(),
                "garbage on the gossip codec socket (loopback), dropped; more is counted in picket_gossip_dropped_packets_total and logged again only after a minute without any"
            );
        }
        heard.from_feeder > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_episode_is_logged_once() {
        let start = Instant::now();
        let s = Duration::from_secs;
        #[rustfmt::skip]
        let events = [
            (s(0), true, "the first garbage opens an episode"),
            (s(1), false, "a second later: the same episode"),
            (s(59), false, "within a minute of the last"),
            (s(118), false, "a trickle just under a minute apart: still the same"),
            (s(178), true, "a minute without garbage ended it"),
            (s(178), false, "more at the same instant"),
        ];
        let mut episodes = Episodes::default();
        for (at, opens, what) in events {
            assert_eq!(episodes.opens(start + at), opens, "{what}");
        }
    }
}
