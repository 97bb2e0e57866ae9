//! One root shutdown signal that fans out to every task of a node.

use tokio::sync::watch;

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
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|fired| *fired).await;
    }

    pub fn is_fired(&self) -> bool {
        *self.0.borrow()
    }
}
