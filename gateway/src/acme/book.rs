//! The certificates a node manages, and what becomes of each: pure, with
//! the time given (Unix milliseconds), so that every decision of the ACME
//! task is tested here ([`Book`]); the task ([`super::Keeper`]) reads the
//! cache and gossip, and carries out what the book decides.
//!
//! ## Invariants
//! - **A certificate serves only as the CA's**: whatever comes in (an
//!   order's result, the cache, a peer's copy) passes [`Trust`] first.
//! - **No gap**: a certificate whose names or directory change keeps
//!   serving the names it covers until its successor serves; so does the
//!   one of a certificate whose first name changed, for its names.
//! - **Settle before ordering**: a certificate the node starts to manage
//!   (at start, at a reload, with new names or a new directory) is not
//!   ordered for `settle` (ten gossip rounds): long enough to hear of the
//!   other nodes that manage it, so that nodes reloaded together choose
//!   one orderer among them.
//! - **One copy passes**: a node passes on the certificate it serves only
//!   while a live node that manages it serves an older one (or none), and
//!   only if it is the one node of those serving it that rendezvous picks
//!   ([`super::plan::passer`]), or the lack has lasted [`PASS_ALL_AFTER`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use picket_proto::Backoff;
use picket_proto::acme::{CertificateState, Phase};

use super::plan::{self, Held};
use super::shared::{self, Passed};
use super::trust::{Distrust, Trust};
use crate::certificate::Certificate;
use crate::config::{AcmeSettings, CertificateConfig};

/// The first wait after a failed order; it doubles up to [`RETRY_CAP`]. A
/// CA limits failed validations (Let's Encrypt: 5 an hour for one account
/// and name): a minute, then two, then four…
pub const RETRY_FIRST: Duration = Duration::from_secs(60);
/// The longest wait between two orders of a failing certificate.
pub const RETRY_CAP: Duration = Duration::from_secs(3600);
/// A lack that lasts this long (the one node chosen to pass a certificate
/// on does not, or another is lying about what it serves): every node
/// that serves it passes it on.
pub const PASS_ALL_AFTER_MS: i64 = 30_000;

/// A certificate this node serves, checked.
#[derive(Clone)]
pub struct Serving {
    pub held: Held,
    /// The node that ordered it; empty when unknown (read from a cache of
    /// an earlier release).
    pub issued_by: String,
    /// The directory that issued it.
    pub directory: String,
    /// The chain, then the key.
    pub pem: String,
    /// What the listener serves: the names of it still wanted.
    pub config: CertificateConfig,
    /// It serves every name wanted, from the directory in force: not a
    /// stand-in until its successor comes.
    pub whole: bool,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Serving")
            .field("held", &self.held)
            .field("directory", &self.directory)
            .field("whole", &self.whole)
            .finish_non_exhaustive()
    }
}

/// What the node keeps of one certificate.
#[derive(Debug)]
pub struct Managed {
    pub names: Vec<String>,
    pub serving: Option<Serving>,
    /// An order of it is under way here.
    pub ordering: bool,
    /// The last order's failure, and when to order again (Unix seconds).
    pub failure: Option<(String, i64)>,
    pub backoff: Backoff,
    /// No order before this (Unix ms): the settle.
    pub settled_ms: i64,
    /// Since when a live node that manages it serves an older one (ms).
    pub lacking_since_ms: Option<i64>,
    /// The state last published.
    pub state: Option<CertificateState>,
}

/// A certificate in the cache: the chain and key, and what it says of
/// itself.
#[derive(Debug, Clone)]
pub struct Cached {
    pub pem: String,
    /// `None`: written by an earlier release, which kept no directory; it
    /// is taken as the directory in force if it passes the trust check.
    pub directory: Option<String>,
    pub issued_by: String,
}

/// What the book asks the task to do or say, beside what it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// No longer managed: stop its order, forget its metrics.
    Dropped { name: String },
    /// The cache's copy may not serve.
    CacheRefused { name: String, why: String },
    /// A certificate serves some of another's names until its own comes.
    StandIn { name: String, from: String },
    /// A copy from a peer serves now: keep it in the cache.
    Adopted {
        name: String,
        from: String,
        serial: String,
        not_after: i64,
    },
    /// A copy from a peer may not serve (logged and counted once per copy
    /// by the task).
    Distrusted {
        name: String,
        from: String,
        digest: String,
        why: Distrust,
    },
    /// An order's certificate serves: keep it in the cache.
    Issued {
        name: String,
        serial: String,
        not_after: i64,
    },
    /// An order failed: keep the failure, order again at `retry_at`.
    Failed {
        name: String,
        error: String,
        retry_at: i64,
    },
}

/// Every certificate the node manages, by first name.
#[derive(Debug, Default)]
pub struct Book {
    pub managed: BTreeMap<String, Managed>,
    /// The directory in force.
    directory: String,
}

impl Book {
    /// Follows the settings at `now_ms`: a certificate new to them is read
    /// from the cache (`cached`); one that left them is dropped, its
    /// names served by a successor that covers them until that one's own
    /// comes; new names or a new directory keep the certificate serving
    /// what it covers and order anew. Each change waits `settle_ms`
    /// before it orders.
    pub fn reconcile(
        &mut self,
        settings: Option<&AcmeSettings>,
        trust: Option<&Trust>,
        cached: impl Fn(&str) -> Option<Cached>,
        now_ms: i64,
        settle_ms: i64,
    ) -> Vec<Note> {
        let mut notes = Vec::new();
        let now = now_ms.div_euclid(1000);
        let wanted: &[Vec<String>] = settings.map_or(&[], |s| &s.certificates);
        let directory = settings.map_or("", |s| s.directory.as_str());
        let moved = directory != self.directory;
        self.directory = directory.to_string();
        let gone: Vec<String> = self
            .managed
            .keys()
            .filter(|name| !wanted.iter().any(|names| names[0] == **name))
            .cloned()
            .collect();
        let mut dropped: Vec<Serving> = Vec::new();
        for name in gone {
            if let Some(managed) = self.managed.remove(&name) {
                dropped.extend(managed.serving);
            }
            notes.push(Note::Dropped { name });
        }
        let (Some(_), Some(trust)) = (settings, trust) else {
            return notes;
        };
        for names in wanted {
            let name = &names[0];
            if let Some(managed) = self.managed.get_mut(name) {
                if managed.names == *names && !moved {
                    continue;
                }
                // New names, or a new directory: what serves stays, for
                // the names it covers, until its successor comes.
                managed.names = names.clone();
                managed.serving = managed
                    .serving
                    .take()
                    .and_then(|s| stand_in(s, names, directory, now));
                managed.failure = None;
                managed.backoff.reset();
                managed.settled_ms = now_ms + settle_ms;
                continue;
            }
            let mut serving = None;
            if let Some(copy) = cached(name) {
                let from = copy.directory.as_deref().unwrap_or(directory);
                match trust.check(&copy.pem, names, from, now) {
                    Ok(checked) => {
                        serving = Some(serving_of(checked, copy.pem, names, copy.issued_by, from));
                    }
                    Err(why) => notes.push(Note::CacheRefused {
                        name: name.clone(),
                        why: why.to_string(),
                    }),
                }
            }
            if serving.is_none() {
                // A certificate that left covers some of these names.
                serving = dropped.iter().find_map(|old| {
                    let standing = stand_in(old.clone(), names, directory, now)?;
                    notes.push(Note::StandIn {
                        name: name.clone(),
                        from: old
                            .config
                            .current
                            .names
                            .first()
                            .cloned()
                            .unwrap_or_default(),
                    });
                    Some(standing)
                });
            }
            self.managed.insert(
                name.clone(),
                Managed {
                    names: names.clone(),
                    serving,
                    ordering: false,
                    failure: None,
                    backoff: Backoff::new(RETRY_FIRST, RETRY_CAP),
                    settled_ms: now_ms + settle_ms,
                    lacking_since_ms: None,
                    state: None,
                },
            );
        }
        notes
    }

    /// A failure kept from before a restart holds until its time.
    pub fn keep_failure(&mut self, name: &str, error: String, retry_at: i64, now: i64) {
        if retry_at > now
            && let Some(managed) = self.managed.get_mut(name)
        {
            managed.failure = Some((error, retry_at));
        }
    }

    /// Serves the newest trusted copy peers pass on, when it is newer than
    /// what this node serves (or this one is a stand-in). `check` is the
    /// trust check of one copy (the task skips copies it refused before).
    pub fn adopt(
        &mut self,
        passed: &[Passed],
        mut check: impl FnMut(&Passed, &[String]) -> Result<Certificate, Distrust>,
    ) -> Vec<Note> {
        let mut notes = Vec::new();
        let directory = self.directory.clone();
        for (name, managed) in &mut self.managed {
            let mine = managed
                .serving
                .as_ref()
                .filter(|s| s.whole)
                .map(|s| s.held.clone());
            let mut best: Option<(&Passed, Certificate)> = None;
            for copy in passed.iter().filter(|p| p.name == *name) {
                let theirs = held_of(copy);
                if mine.as_ref().is_some_and(|mine| {
                    *mine == theirs || plan::newest([mine, &theirs]) != Some(&theirs)
                }) {
                    continue;
                }
                if best
                    .as_ref()
                    .is_some_and(|(b, _)| plan::newest([&held_of(b), &theirs]) != Some(&theirs))
                {
                    continue;
                }
                match check(copy, &managed.names) {
                    Ok(checked) => best = Some((copy, checked)),
                    // Names it does not cover: another generation of the
                    // certificate (a peer not reloaded yet), not a forgery.
                    Err(Distrust::Unusable(_)) if copy.issued.directory == directory => {}
                    Err(why) => notes.push(Note::Distrusted {
                        name: name.clone(),
                        from: copy.node.clone(),
                        digest: copy.issued.digest.clone(),
                        why,
                    }),
                }
            }
            let Some((copy, checked)) = best else {
                continue;
            };
            let serving = serving_of(
                checked,
                copy.pem.clone(),
                &managed.names,
                copy.issued.by.clone(),
                &copy.issued.directory,
            );
            notes.push(Note::Adopted {
                name: name.clone(),
                from: copy.node.clone(),
                serial: serving.held.serial.clone(),
                not_after: serving.held.not_after,
            });
            managed.serving = Some(serving);
            // Another node got it: this node's failure is moot.
            managed.failure = None;
            managed.backoff.reset();
        }
        notes
    }

    /// An order of `name` ended at `now`: its certificate (if it passes
    /// `trust`) serves, else the failure waits its back-off.
    pub fn finish(
        &mut self,
        name: &str,
        result: Result<String, String>,
        trust: &Trust,
        me: &str,
        now: i64,
    ) -> Option<Note> {
        let directory = self.directory.clone();
        let managed = self.managed.get_mut(name)?;
        managed.ordering = false;
        let checked = result.and_then(|pem| {
            trust
                .check(&pem, &managed.names, &directory, now)
                .map(|checked| (pem, checked))
                .map_err(|why| format!("the CA's certificate may not serve: {why}"))
        });
        match checked {
            Ok((pem, checked)) => {
                let serving = serving_of(checked, pem, &managed.names, me.to_string(), &directory);
                let note = Note::Issued {
                    name: name.to_string(),
                    serial: serving.held.serial.clone(),
                    not_after: serving.held.not_after,
                };
                managed.serving = Some(serving);
                managed.failure = None;
                managed.backoff.reset();
                Some(note)
            }
            Err(error) => {
                let wait = managed.backoff.next_wait();
                let retry_at = now + i64::try_from(wait.as_secs()).unwrap_or(i64::MAX / 2).max(1);
                managed.failure = Some((error.clone(), retry_at));
                Some(Note::Failed {
                    name: name.to_string(),
                    error,
                    retry_at,
                })
            }
        }
    }

    /// The certificates this node orders now (`me`, at `now_ms`), as
    /// gossip (`shared`) stands: each is marked ordering.
    pub fn to_order(&mut self, me: &str, shared: &shared::Shared, now_ms: i64) -> Vec<String> {
        let now = now_ms.div_euclid(1000);
        let mut starting = Vec::new();
        for (name, managed) in &mut self.managed {
            if now_ms < managed.settled_ms {
                continue;
            }
            let orderer = orderer_of(me, &self.directory, managed.failure.is_some(), name, shared);
            let situation = plan::Situation {
                now,
                me,
                orderer: orderer.as_deref(),
                held: managed
                    .serving
                    .as_ref()
                    .filter(|s| s.whole)
                    .map(|s| &s.held),
                ordering: managed.ordering,
                ordered_elsewhere: ordered_elsewhere(me, &self.directory, name, shared),
                fresh_elsewhere: fresh_elsewhere(me, &self.directory, name, shared, now),
                retry_at: managed.failure.as_ref().map(|(_, at)| *at),
            };
            if plan::start(&situation) {
                managed.ordering = true;
                starting.push(name.clone());
            }
        }
        starting
    }

    /// Whether this node passes on the certificate `name` now (`me`, at
    /// `now_ms`); remembers since when a node lacks it.
    pub fn passes(&mut self, me: &str, name: &str, shared: &shared::Shared, now_ms: i64) -> bool {
        let Some(managed) = self.managed.get_mut(name) else {
            return false;
        };
        let Some(mine) = managed.serving.as_ref().filter(|s| s.whole) else {
            managed.lacking_since_ms = None;
            return false;
        };
        let serial = mine.held.serial.as_str();
        let mut lacking = false;
        let mut holders = vec![me];
        for (node, states) in &shared.states {
            if node == me {
                continue;
            }
            let Some(state) = states.get(name) else {
                continue;
            };
            match (&state.serial, state.not_after_unix) {
                (Some(theirs), _) if theirs == serial => holders.push(node),
                (Some(_), Some(theirs)) if theirs >= mine.held.not_after => {}
                _ => lacking = true,
            }
        }
        if !lacking {
            managed.lacking_since_ms = None;
            return false;
        }
        let since = *managed.lacking_since_ms.get_or_insert(now_ms);
        plan::passer(name, serial, holders) == Some(me) || now_ms - since >= PASS_ALL_AFTER_MS
    }

    /// This node's state of `name`, as gossip (`shared`) stands.
    pub fn state(&self, me: &str, name: &str, shared: &shared::Shared) -> Option<CertificateState> {
        let managed = self.managed.get(name)?;
        let orderer = orderer_of(me, &self.directory, managed.failure.is_some(), name, shared);
        let held = managed.serving.as_ref().map(|s| &s.held);
        // A stand-in is due at once: no node waits for it to be renewed.
        let renew_at = managed.serving.as_ref().map(|s| match s.whole {
            true => plan::renew_at(s.held.not_before, s.held.not_after),
            false => s.held.not_before,
        });
        Some(CertificateState {
            name: name.to_string(),
            phase: plan::phase(held.is_some(), managed.ordering, managed.failure.is_some()),
            serial: held.map(|h| h.serial.clone()),
            not_after_unix: held.map(|h| h.not_after),
            renew_at_unix: renew_at,
            orderer,
            issued_by: managed
                .serving
                .as_ref()
                .map(|s| s.issued_by.clone())
                .filter(|by| !by.is_empty()),
            error: managed.failure.as_ref().map(|(error, _)| error.clone()),
            retry_at_unix: managed.failure.as_ref().map(|(_, at)| *at),
        })
    }
}

/// `old`, serving those of `names` it covers while its successor is
/// ordered; `None` when it covers none (or no longer serves at `now`).
fn stand_in(old: Serving, names: &[String], directory: &str, now: i64) -> Option<Serving> {
    let covered: Vec<String> = names
        .iter()
        .filter(|name| {
            old.config
                .current
                .sans
                .iter()
                .any(|san| crate::certificate::covers(san, name))
        })
        .cloned()
        .collect();
    if covered.is_empty() {
        return None;
    }
    let whole = covered.len() == names.len() && old.directory == directory;
    let current =
        crate::certificate::check(old.pem.as_bytes(), old.pem.as_bytes(), Some(&covered), now)
            .ok()?;
    Some(Serving {
        config: CertificateConfig {
            hosts: Some(covered),
            current: Arc::new(current),
            ..old.config
        },
        whole,
        ..old
    })
}

/// A certificate that passed [`Trust`] for `names`, as it serves.
fn serving_of(
    checked: Certificate,
    pem: String,
    names: &[String],
    issued_by: String,
    directory: &str,
) -> Serving {
    let held = Held {
        serial: checked.serial.clone(),
        not_before: checked.not_before,
        not_after: checked.not_after,
        digest: shared::digest(&pem),
    };
    let at = std::path::PathBuf::from(format!("acme {}", names[0]));
    Serving {
        held,
        issued_by,
        directory: directory.to_string(),
        pem,
        config: CertificateConfig {
            cert: at.clone(),
            key: at,
            hosts: Some(names.to_vec()),
            current: Arc::new(checked),
        },
        whole: true,
    }
}

/// The planner's view of a copy passed on.
fn held_of(copy: &Passed) -> Held {
    Held {
        serial: copy.issued.serial.clone(),
        not_before: copy.issued.not_before_unix,
        not_after: copy.issued.not_after_unix,
        digest: copy.issued.digest.clone(),
    }
}

/// Whether `node` orders from `directory`, as gossip says: a node that
/// says nothing of it (an earlier release) is taken to.
fn of_directory(shared: &shared::Shared, node: &str, directory: &str) -> bool {
    shared
        .directories
        .get(node)
        .is_none_or(|theirs| theirs == directory)
}

/// The live nodes other than `me` of `directory`, with their state of
/// `name`.
fn peers<'a>(
    me: &'a str,
    directory: &'a str,
    name: &'a str,
    shared: &'a shared::Shared,
) -> impl Iterator<Item = (&'a str, &'a CertificateState)> + 'a {
    shared
        .states
        .iter()
        .filter(move |(node, _)| node.as_str() != me && of_directory(shared, node, directory))
        .filter_map(move |(node, states)| Some((node.as_str(), states.get(name)?)))
}

/// The node that orders `name`: of the live nodes that manage it (they
/// publish a state of it) from `directory` (this node among them, failing
/// when `me_failing`), those whose last order did not fail, else all.
pub fn orderer_of(
    me: &str,
    directory: &str,
    me_failing: bool,
    name: &str,
    shared: &shared::Shared,
) -> Option<String> {
    let mut candidates: Vec<(&str, bool)> = peers(me, directory, name, shared)
        .map(|(node, state)| (node, state.phase == Phase::Failing))
        .collect();
    candidates.push((me, me_failing));
    plan::orderer_among(name, &candidates).map(str::to_string)
}

/// Whether another live node of `directory` says it orders `name` now.
fn ordered_elsewhere(me: &str, directory: &str, name: &str, shared: &shared::Shared) -> bool {
    peers(me, directory, name, shared)
        .any(|(_, s)| matches!(s.phase, Phase::Ordering | Phase::Renewing))
}

/// Whether another live node of `directory` serves `name` and it is not
/// due yet: it is on its way through gossip.
fn fresh_elsewhere(
    me: &str,
    directory: &str,
    name: &str,
    shared: &shared::Shared,
    now: i64,
) -> bool {
    peers(me, directory, name, shared).any(|(_, s)| s.renew_at_unix.is_some_and(|at| at > now))
}

#[cfg(test)]
mod tests;
