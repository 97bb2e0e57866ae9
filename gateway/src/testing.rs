//! What tests share: the unit tests here and the integration tests'
//! harness. Nothing in the node uses it.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// A writer that keeps every byte written, shared by its clones: the sink
/// of a test's log subscriber or access log.
#[derive(Debug, Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// What has been written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
