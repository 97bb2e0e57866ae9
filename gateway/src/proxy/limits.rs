//! A route's limits on this node: its rate (a token bucket, for the route
//! as a whole or per client address) and the size of a request body.
//!
//! Like the breaker, a rate limit is per node: each node refills its own
//! buckets, and a cluster of N nodes takes up to N times the rate. The
//! decider ([`Bucket::take`]) is pure, with the time passed in.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{RateKey, RateSettings};

/// A token bucket: `burst` tokens, refilled at `per_second`; a request
/// takes one.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn full(settings: &RateSettings, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(settings.burst),
            at: now,
        }
    }

    /// Takes a token at `now`; when there is none, how long until one.
    pub fn take(&mut self, settings: &RateSettings, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * settings.per_second).min(f64::from(settings.burst));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64(
            (1.0 - self.tokens) / settings.per_second,
        ))
    }

    /// Whether the bucket is full again at `now`: it can be forgotten.
    fn refilled(&self, settings: &RateSettings, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens + elapsed * settings.per_second >= f64::from(settings.burst)
    }
}

pub mod clients;

/// A route's rate limit on this node.
#[derive(Debug)]
pub struct RateLimit {
    pub settings: RateSettings,
    route: Mutex<Option<Bucket>>,
    /// Per client: bounded, constant work per request ([`clients`]).
    clients: clients::Clients,
}

impl RateLimit {
    pub fn new(settings: RateSettings) -> RateLimit {
        RateLimit {
            settings,
            route: Mutex::new(None),
            clients: clients::Clients::default(),
        }
    }

    /// Admits a request from `client` at `now`, or says how long until
    /// one would be.
    pub fn admit(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let settings = &self.settings;
        match settings.by {
            RateKey::Route => {
                let mut bucket = self.route.lock().unwrap_or_else(|e| e.into_inner());
                bucket
                    .get_or_insert_with(|| Bucket::full(settings, now))
                    .take(settings, now)
            }
            RateKey::Client => self.clients.take(client, settings, now),
        }
    }

    /// Clients with a bucket now.
    pub fn clients(&self) -> usize {
        self.clients.count()
    }
}

/// Whole seconds for `Retry-After`, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(per_second: f64, burst: u32, by: RateKey) -> RateSettings {
        RateSettings {
            per_second,
            burst,
            by,
        }
    }

    #[test]
    fn a_bucket_gives_its_burst_then_refills_on_time() {
        let s = settings(2.0, 3, RateKey::Route);
        let t0 = Instant::now();
        let mut bucket = Bucket::full(&s, t0);
        for _ in 0..3 {
            assert_eq!(bucket.take(&s, t0), Ok(()));
        }
        assert_eq!(bucket.take(&s, t0), Err(Duration::from_millis(500)));
        // Half a token after 250 ms: still none, 250 ms to go.
        let wait = bucket
            .take(&s, t0 + Duration::from_millis(250))
            .unwrap_err();
        assert!((wait.as_secs_f64() - 0.25).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.take(&s, t0 + Duration::from_millis(500)), Ok(()));
        assert!(bucket.take(&s, t0 + Duration::from_millis(500)).is_err());
        // Never more than the burst, however long it rested.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(bucket.take(&s, later), Ok(()));
        }
        assert!(bucket.take(&s, later).is_err());
    }

    #[test]
    fn per_client_buckets_are_separate_and_the_route_bucket_is_shared() {
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let by_client = RateLimit::new(settings(1.0, 1, RateKey::Client));
        assert!(by_client.admit(a, t0).is_ok());
        assert!(by_client.admit(a, t0).is_err());
        assert!(by_client.admit(b, t0).is_ok(), "b has its own bucket");
        let by_route = RateLimit::new(settings(1.0, 1, RateKey::Route));
        assert!(by_route.admit(a, t0).is_ok());
        assert!(by_route.admit(b, t0).is_err(), "one bucket for the route");
        assert!(by_route.admit(b, t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }
}
