//! Certificates rotate without a restart: their files are read again, and
//! a new version that passes every check serves from the next handshake.
//!
//! ## When the files are read again
//! - On any change in a directory that holds a certificate or key file
//!   (after [`DEBOUNCE`](crate::reload::DEBOUNCE) of quiet). The directory
//!   is watched, not the file: Swarm and Kubernetes replace secrets by
//!   swapping a symlinked directory, and a watch on the file would follow
//!   the old inode.
//! - On every configuration reload, even one that leaves the file as it
//!   was (SIGHUP), and when a reload changes which files are served.
//! - Every [`RECHECK`], for file systems that send no events.
//!
//! ## What is served
//! A version (what the certificate and key files hold together) that
//! passes the checks of [`check`](crate::certificate::check) serves from
//! the next handshake on; connections in flight keep the certificate
//! their handshake got. A version that does not pass is refused and the
//! certificate in force keeps serving; each refused version is logged
//! once, however often the files are looked at, until a version is
//! served again.
//!
//! ## Expiry
//! A certificate that expires within [`WARN_WITHIN`] is warned about in
//! the log once a day (and at once when it starts to serve).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::served::{Certificates, Refused, label};
use crate::certificate::{self, rfc3339};
use crate::shutdown::{Shutdown, Tasks};

/// How often the files are read again without any event.
pub const RECHECK: Duration = Duration::from_secs(60);
const DAY: i64 = 86_400;
/// A certificate that expires within this (seconds) is warned about.
pub const WARN_WITHIN: i64 = crate::certificate::WARN_WITHIN;

/// Whether a certificate that expires at `not_after` is to be warned
/// about at `now`, having last been at `last` (Unix seconds): within
/// [`WARN_WITHIN`], and not within the last day.
pub fn expiry_warning_due(not_after: i64, now: i64, last: Option<i64>) -> bool {
    not_after - now < WARN_WITHIN && last.is_none_or(|last| now - last >= DAY)
}

/// What one reading of the files did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reread {
    /// Certificates whose new version now serves.
    pub replaced: usize,
    /// Refusals logged (refusals of a version already logged are not
    /// counted).
    pub refused: usize,
}

impl Certificates {
    /// Reads every certificate's files again; serves each new version that
    /// passes, refuses the others. Blocking I/O; `now` in Unix seconds.
    pub fn reread(&self, now: i64) -> Reread {
        let mut writer = self.lock();
        let mut entries = self.load().entries.clone();
        let mut done = Reread::default();
        for entry in &mut entries {
            let name = label(entry);
            let files = std::fs::read(&entry.cert)
                .map_err(|e| format!("cannot read {}: {e}", entry.cert.display()))
                .and_then(|cert| {
                    std::fs::read(&entry.key)
                        .map(|key| (cert, key))
                        .map_err(|e| format!("cannot read {}: {e}", entry.key.display()))
                });
            let (refused, error) = match files {
                Err(error) => (Refused::Unreadable(error.clone()), error),
                Ok((cert, key)) => {
                    let version = certificate::version(&cert, &key);
                    if version == entry.current.version {
                        writer.refusals.clear(&entry.cert);
                        continue;
                    }
                    match certificate::check(&cert, &key, entry.hosts.as_deref(), now) {
                        Ok(new) => {
                            tracing::info!(
                                certificate = name,
                                serial = new.serial,
                                previous_serial = entry.current.serial,
                                expires = rfc3339(new.not_after),
                                "certificate files changed: new handshakes get the new certificate"
                            );
                            entry.current = Arc::new(new);
                            writer.refusals.clear(&entry.cert);
                            done.replaced += 1;
                            continue;
                        }
                        Err(error) => (Refused::Version(version), error.to_string()),
                    }
                }
            };
            if writer.refusals.first(&entry.cert, refused) {
                done.refused += 1;
                tracing::warn!(
                    certificate = name,
                    cert = %entry.cert.display(),
                    key = %entry.key.display(),
                    %error,
                    serial = entry.current.serial,
                    "certificate files refused: the certificate in force keeps serving"
                );
            }
        }
        if done.replaced > 0 {
            self.store(&mut writer, entries);
        }
        done
    }

    /// Warns about each certificate that expires within [`WARN_WITHIN`],
    /// once a day each. Returns how many were warned about.
    pub fn warn_expiring(&self, now: i64) -> usize {
        let mut writer = self.lock();
        let served = self.load();
        let mut warned = 0;
        for entry in &served.entries {
            let current = &entry.current;
            let last = writer.warned.get(&current.version).copied();
            if !expiry_warning_due(current.not_after, now, last) {
                continue;
            }
            writer.warned.insert(current.version, now);
            warned += 1;
            let expires = rfc3339(current.not_after);
            if current.not_after <= now {
                tracing::warn!(
                    certificate = label(entry),
                    cert = %entry.cert.display(),
                    expires,
                    "certificate expired: clients refuse it; replace its files"
                );
            } else {
                tracing::warn!(
                    certificate = label(entry),
                    cert = %entry.cert.display(),
                    days_left = (current.not_after - now) / DAY,
                    expires,
                    "certificate expires soon: replace its files"
                );
            }
        }
        writer
            .warned
            .retain(|version, _| served.entries.iter().any(|e| e.current.version == *version));
        warned
    }
}

/// Follows the certificates' files until `shutdown`.
pub fn spawn(certificates: Arc<Certificates>, mut shutdown: Shutdown, tasks: &mut Tasks) {
    let (tx, mut events) = mpsc::channel::<()>(1);
    tasks.spawn("certificate rotation", async move {
        let mut followed = Followed::new(tx);
        let mut every = tokio::time::interval(RECHECK);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            followed.follow(certificates.load().directories());
            tokio::select! {
                Some(()) = events.recv() => {
                    tokio::time::sleep(crate::reload::DEBOUNCE).await;
                    while events.try_recv().is_ok() {}
                }
                () = certificates.replaced.notified() => {}
                _ = every.tick() => {}
                () = shutdown.wait() => return,
            }
            let certificates = Arc::clone(&certificates);
            let _ = tokio::task::spawn_blocking(move || {
                let now = crate::clock::now_unix();
                certificates.reread(now);
                certificates.warn_expiring(now);
            })
            .await;
        }
    });
}

/// The directories watched.
struct Followed {
    /// Where events go.
    events: mpsc::Sender<()>,
    /// Made with the first directory to watch: a node without
    /// certificates holds no inotify instance.
    watcher: Option<RecommendedWatcher>,
    /// The directories last asked for.
    wanted: Vec<PathBuf>,
    /// Those of them watched.
    watched: Vec<PathBuf>,
}

impl Followed {
    fn new(events: mpsc::Sender<()>) -> Followed {
        Followed {
            events,
            watcher: None,
            wanted: Vec::new(),
            watched: Vec::new(),
        }
    }

    /// Watches `wanted` and nothing else; a directory that cannot be
    /// watched is said once, and tried again when the list changes.
    fn follow(&mut self, wanted: Vec<PathBuf>) {
        if wanted == self.wanted {
            return;
        }
        if self.watcher.is_none() && !wanted.is_empty() {
            let events = self.events.clone();
            let made = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if event.is_ok_and(|e| crate::reload::may_change(&e)) {
                    let _ = events.try_send(());
                }
            });
            match made {
                Ok(watcher) => self.watcher = Some(watcher),
                Err(error) => tracing::warn!(
                    %error,
                    "cannot watch certificate files; they are read again every minute and at each reload"
                ),
            }
        }
        let Some(watcher) = self.watcher.as_mut() else {
            self.wanted = wanted;
            return;
        };
        for dir in self.watched.iter().filter(|d| !wanted.contains(d)) {
            let _ = watcher.unwatch(dir);
        }
        let mut watched = Vec::new();
        for dir in &wanted {
            if self.watched.contains(dir) {
                watched.push(dir.clone());
                continue;
            }
            match watcher.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => watched.push(dir.clone()),
                Err(error) => tracing::warn!(
                    dir = %dir.display(),
                    %error,
                    "cannot watch a certificate directory; its files are read again every minute and at each reload"
                ),
            }
        }
        self.watched = watched;
        self.wanted = wanted;
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::served::Refusals;
    use super::*;
    use crate::config::CertificateConfig;
    use crate::metrics::Metrics;

    #[test]
    fn each_refusal_is_news_once() {
        let mut refusals = Refusals::default();
        let (a, b) = (Path::new("/a.crt"), Path::new("/b.crt"));
        let bad = Refused::Version([1; 32]);
        let worse = Refused::Version([2; 32]);
        let gone = Refused::Unreadable("cannot read /a.crt: gone".into());
        let steps: [(&Path, Option<&Refused>, bool); 9] = [
            (a, Some(&bad), true),
            (a, Some(&bad), false),
            (b, Some(&bad), true),
            (a, Some(&worse), true),
            (a, Some(&gone), true),
            (a, Some(&gone), false),
            (a, None, false),
            (a, Some(&gone), true),
            (b, Some(&bad), false),
        ];
        for (i, (cert, refused, news)) in steps.into_iter().enumerate() {
            match refused {
                Some(refused) => {
                    assert_eq!(refusals.first(cert, refused.clone()), news, "step {i}");
                }
                None => refusals.clear(cert),
            }
        }
    }

    #[test]
    fn expiry_is_warned_daily_within_two_weeks() {
        let now = 1_796_083_200;
        let cases = [
            (now + 15 * DAY, None, false),
            (now + 14 * DAY, None, false),
            (now + 14 * DAY - 1, None, true),
            (now + DAY, Some(now - DAY + 1), false),
            (now + DAY, Some(now - DAY), true),
            (now - DAY, Some(now - 2 * DAY), true),
            (now - DAY, Some(now - 60), false),
        ];
        for (not_after, last, due) in cases {
            assert_eq!(
                expiry_warning_due(not_after, now, last),
                due,
                "expires in {} s, last warned {last:?}",
                not_after - now
            );
        }
    }

    /// A certificate for `names` valid until `not_after` (year), its key.
    fn pair(names: &[&str], not_after: i32) -> (String, String) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.not_after = rcgen::date_time_ymd(not_after, 1, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn a_good_version_serves_and_a_bad_one_is_refused_once() {
        let now = 1_796_083_200;
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let write = |(c, k): &(String, String)| {
            std::fs::write(&cert, c).unwrap();
            std::fs::write(&key, k).unwrap();
        };
        let first = pair(&["a.example.com"], 2040);
        write(&first);
        let current =
            certificate::check(first.0.as_bytes(), first.1.as_bytes(), None, now).unwrap();
        let certificates = Certificates::new(
            vec![CertificateConfig {
                cert: cert.clone(),
                key: key.clone(),
                hosts: None,
                current: Arc::new(current),
            }],
            Arc::new(Metrics::new()),
        );
        let serial = || certificates.load().entries[0].current.serial.clone();
        let first_serial = serial();
        assert_eq!(certificates.reread(now), Reread::default(), "unchanged");

        let second = pair(&["a.example.com"], 2041);
        write(&second);
        let done = certificates.reread(now);
        assert_eq!(done.replaced, 1);
        let second_serial = serial();
        assert_ne!(second_serial, first_serial);

        // The key of another certificate: refused, once, however often read.
        let other = pair(&["a.example.com"], 2041);
        std::fs::write(&key, &other.1).unwrap();
        for i in 0..3 {
            let done = certificates.reread(now);
            assert_eq!(
                done,
                Reread {
                    replaced: 0,
                    refused: usize::from(i == 0),
                },
                "read {i}"
            );
            assert_eq!(serial(), second_serial, "the one in force serves on");
        }
        // Gone, then back as it was: each a refusal of its own, then none.
        std::fs::remove_file(&cert).unwrap();
        assert_eq!(certificates.reread(now).refused, 1);
        assert_eq!(certificates.reread(now).refused, 0);
        write(&second);
        assert_eq!(certificates.reread(now), Reread::default());
        // Expired: refused as well.
        let expired = pair(&["a.example.com"], 2020);
        write(&expired);
        assert_eq!(certificates.reread(now).refused, 1);
        assert_eq!(serial(), second_serial);

        let not_after = certificates.load().entries[0].current.not_after;
        assert_eq!(certificates.warn_expiring(now), 0, "years left");
        assert_eq!(certificates.warn_expiring(not_after - DAY), 1);
        assert_eq!(
            certificates.warn_expiring(not_after - DAY + 60),
            0,
            "once a day"
        );
        assert_eq!(certificates.warn_expiring(not_after + 60), 1, "expired");
    }
}
