//! One copy of each text the cluster's verdicts repeat.
//!
//! A node holds every member's verdict on every route: at 100 nodes ×
//! 1,000 routes, 100,000 verdicts that name the same 1,000 routes, give a
//! handful of reasons ("2 of 3 ready", "accepts connections") and list
//! the same images. Decoded one by one, each verdict would own its copies;
//! through the interner, each distinct text is held once and every verdict
//! that carries it points to that copy.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

use picket_proto::{ImageCount, Verdict};

/// The texts in use, each once. Texts no verdict holds any more are
/// dropped once the set has doubled since it was last swept, so the set
/// stays within twice what the view holds, at a cost spread over the
/// insertions that grew it.
#[derive(Debug, Default)]
pub struct Interner {
    texts: Shared<str>,
    images: Shared<[ImageCount]>,
}

impl Interner {
    /// `verdict` on `route` (the route its key names: a value leaves the
    /// name to its key), with its route name, reason and image list the
    /// copies already held, where one is.
    pub fn verdict(&mut self, mut verdict: Verdict, route: &str) -> Verdict {
        verdict.route = self.route(route);
        verdict.reason = self.texts.intern(verdict.reason);
        verdict.images = self.images.intern(verdict.images);
        verdict
    }

    /// A route name, as the verdicts that name it hold it; allocated only
    /// when no verdict names it yet.
    fn route(&mut self, route: &str) -> Arc<str> {
        match self.texts.set.get(route) {
            Some(held) => Arc::clone(held),
            None => self.texts.intern(route.into()),
        }
    }

    /// How many distinct texts and image lists are held.
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.texts.set.len(), self.images.set.len())
    }
}

#[derive(Debug)]
struct Shared<T: ?Sized> {
    set: HashSet<Arc<T>>,
    /// Sweep when the set grows past this.
    sweep_at: usize,
}

impl<T: ?Sized> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            set: HashSet::new(),
            sweep_at: 64,
        }
    }
}

impl<T: ?Sized + Hash + Eq> Shared<T> {
    fn intern(&mut self, value: Arc<T>) -> Arc<T> {
        if let Some(held) = self.set.get(&value) {
            return Arc::clone(held);
        }
        if self.set.len() >= self.sweep_at {
            // Held only here: no verdict carries it any more.
            self.set.retain(|held| Arc::strong_count(held) > 1);
            self.sweep_at = (self.set.len() * 2).max(64);
        }
        self.set.insert(Arc::clone(&value));
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_proto::{BreakerState, Heart};

    fn verdict(route: &str, reason: &str, image: &str) -> Verdict {
        Verdict {
            route: route.into(),
            heart: Heart::Green,
            reason: reason.into(),
            ready: 1,
            total: 1,
            images: [ImageCount {
                image: image.into(),
                replicas: 1,
            }]
            .into(),
            circuit: BreakerState::Closed,
            since_unix_ms: 0,
            runtime_stale_since_unix_ms: None,
        }
    }

    #[test]
    fn equal_texts_share_one_copy() {
        let mut interner = Interner::default();
        let a = interner.verdict(verdict("", "1 of 1 ready", "api:1.4"), "api");
        let b = interner.verdict(verdict("", "1 of 1 ready", "api:1.4"), "api");
        assert!(Arc::ptr_eq(&a.route, &b.route));
        assert!(Arc::ptr_eq(&a.reason, &b.reason));
        assert!(Arc::ptr_eq(&a.images, &b.images));
        assert!(Arc::ptr_eq(&interner.route("api"), &a.route));
        let c = interner.verdict(verdict("", "1 of 1 ready", "web:2"), "web");
        assert!(!Arc::ptr_eq(&a.route, &c.route));
        assert!(Arc::ptr_eq(&a.reason, &c.reason));
        assert_eq!(interner.len(), (3, 2));
    }

    #[test]
    fn texts_no_verdict_holds_are_swept() {
        let mut interner = Interner::default();
        let kept = interner.verdict(verdict("", "kept", "kept:1"), "kept");
        for i in 0..10_000 {
            // Each verdict dropped at once: its texts are held only by the set.
            interner.verdict(verdict("", &format!("why {i}"), "img"), &format!("r{i}"));
        }
        let (texts, images) = interner.len();
        assert!(texts <= 2 * 64 + 2, "{texts} texts held for 2 in use");
        assert!(images <= 64, "{images} image lists held for 2 in use");
        let again = interner.verdict(verdict("", "kept", "kept:1"), "kept");
        assert!(
            Arc::ptr_eq(&kept.route, &again.route),
            "a text in use stays"
        );
        assert!(Arc::ptr_eq(&kept.images, &again.images));
    }
}
