//! One root shutdown signal that fans out to every task of a node, and
//! the set of the node's tasks that a stop waits for.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

/// Fires the shutdown of everything holding a [`Shutdown`] made with it.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// Resolves [`Shutdown::wait`] once the trigger fired (or was dropped).
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A new trigger and its signal.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Waits until shutdown is asked for.
    ///
    /// Every idle client connection holds one of these futures: a loop
    /// over `changed()` keeps it smaller than `wait_for`'s.
    pub async fn wait(&mut self) {
        while !*self.0.borrow_and_update() {
            if self.0.changed().await.is_err() {
                // The trigger was dropped: as good as fired.
                return;
            }
        }
    }

    pub fn is_fired(&self) -> bool {
        *self.0.borrow()
    }
}

/// A node's long-lived tasks (the feed, reload, checks, the runtime, the
/// board, …): spawned here rather than detached, so that a stopping
/// node waits for each of them to end, for at most a deadline.
#[derive(Debug, Default)]
pub struct Tasks {
    set: JoinSet<()>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Tasks {
    /// Runs `task`, named for the log line of a stop that had to abort it.
    pub fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = self.set.spawn(task);
        self.names.insert(handle.id(), name);
    }

    /// How many are still running.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Waits (once shutdown has fired) for every task to end; those still
    /// running after `deadline` are named in one line and aborted. Returns
    /// the names of the aborted ones.
    pub async fn join(mut self, deadline: Duration) -> Vec<&'static str> {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            match tokio::time::timeout_at(until, self.set.join_next_with_id()).await {
                Ok(None) => return Vec::new(),
                Ok(Some(ended)) => {
                    let id = match &ended {
                        Ok((id, ())) => *id,
                        Err(error) => error.id(),
                    };
                    let name = self.names.remove(&id).unwrap_or("?");
                    if let Err(error) = ended
                        && error.is_panic()
                    {
                        tracing::error!(task = name, "a node task panicked");
                    }
                }
                Err(_) => break,
            }
        }
        let mut late: Vec<&'static str> = self.names.into_values().collect();
        late.sort_unstable();
        tracing::warn!(tasks = ?late, ?deadline, "node tasks did not end by the drain deadline; aborted");
        self.set.shutdown().await;
        late
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tasks_that_end_are_joined_and_a_late_one_is_named_and_aborted() {
        let (trigger, shutdown) = channel();
        let mut tasks = Tasks::default();
        let mut polite = shutdown.clone();
        tasks.spawn("polite", async move { polite.wait().await });
        tasks.spawn("done", async {});
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn("deaf", async move {
            let _tx = dropped_tx;
            std::future::pending::<()>().await;
        });
        assert_eq!(tasks.len(), 3);
        trigger.fire();
        let late = tasks.join(Duration::from_secs(5)).await;
        assert_eq!(late, vec!["deaf"]);
        assert!(dropped_rx.await.is_err(), "the late task was aborted");
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_whose_tasks_all_end_names_none() {
        let (trigger, shutdown) = channel();
        let mut tasks = Tasks::default();
        for _ in 0..3 {
            let mut shutdown = shutdown.clone();
            tasks.spawn("polite", async move { shutdown.wait().await });
        }
        trigger.fire();
        assert!(tasks.join(Duration::from_secs(1)).await.is_empty());
    }
}
