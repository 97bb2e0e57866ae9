//! The wait between attempts to reach something that failed (a runtime
//! engine, the Kubernetes API server, a node's feed), shared by the node
//! and `picket-tui`: doubling from a first wait up to a cap, each wait
//! jittered down by up to a quarter, so that the nodes (or terminals) that
//! lost one peer together do not all call it again in the same instant.
//! Jittering down keeps every wait within the documented cap.

use std::time::Duration;

/// Waits between attempts. `next_wait` gives one; `reset` after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
    rng: fastrand::Rng,
}

impl Backoff {
    /// Doubling from `first` up to `cap`, jittered by a generator of its
    /// own.
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff::seeded(first, cap, fastrand::u64(..))
    }

    /// The same, with the jitter drawn from `seed` (tests).
    pub fn seeded(first: Duration, cap: Duration, seed: u64) -> Backoff {
        Backoff {
            first,
            cap,
            next: first.min(cap),
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// The wait before the next attempt.
    pub fn next_wait(&mut self) -> Duration {
        let base = self.next;
        self.next = self.next.saturating_mul(2).min(self.cap);
        jittered(base, self.rng.f64())
    }

    /// Back to the first wait: the last attempt succeeded.
    pub fn reset(&mut self) {
        self.next = self.first.min(self.cap);
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_wait())
    }
}

/// `base` less up to a quarter of it: `unit` in `[0, 1)` picks how much.
pub fn jittered(base: Duration, unit: f64) -> Duration {
    base.saturating_sub(base.mul_f64(0.25 * unit.clamp(0.0, 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn jitter_takes_at_most_a_quarter_off() {
        let base = Duration::from_millis(1000);
        assert_eq!(jittered(base, 0.0), base);
        assert_eq!(jittered(base, 0.5), 875 * MS);
        assert!(jittered(base, 0.999_999) > 750 * MS);
        assert_eq!(jittered(base, 7.0), 750 * MS, "out of range is clamped");
    }

    #[test]
    fn waits_double_to_the_cap_within_their_jitter_and_reset() {
        let mut backoff = Backoff::seeded(250 * MS, 2000 * MS, 7);
        let bases = [250, 500, 1000, 2000, 2000, 2000];
        for base in bases {
            let wait = backoff.next_wait();
            let base = base * MS;
            assert!(
                wait <= base && wait >= base * 3 / 4,
                "{wait:?} for {base:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next_wait() <= 250 * MS);
    }

    #[test]
    fn two_clients_that_fail_together_wait_differently() {
        let waits = |seed| -> Vec<Duration> {
            Backoff::seeded(250 * MS, 2000 * MS, seed).take(6).collect()
        };
        assert_ne!(waits(1), waits(2));
        assert_eq!(waits(3), waits(3), "a seed gives the same waits");
    }
}
