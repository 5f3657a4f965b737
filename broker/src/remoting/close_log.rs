//! Why the broker closed (or refused) a remoting connection, logged at a bounded rate.

use std::net::SocketAddr;

use tracing::info;

/// Most lines [`CloseLog`] writes per [`CLOSE_LOG_WINDOW`].
pub const CLOSE_LOG_BURST: u32 = 20;
/// The window [`CLOSE_LOG_BURST`] counts in.
pub const CLOSE_LOG_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// Says why the broker closed (or refused) a remoting connection: one line each, at most
/// [`CLOSE_LOG_BURST`] per [`CLOSE_LOG_WINDOW`] (a peer opening and breaking connections in
/// a loop cannot fill the log); the lines held back are counted and the count given with the
/// next line written.
#[derive(Debug)]
pub struct CloseLog {
    window: std::sync::Mutex<CloseWindow>,
}

impl Default for CloseLog {
    fn default() -> Self {
        CloseLog {
            window: std::sync::Mutex::new(CloseWindow::new(std::time::Instant::now())),
        }
    }
}

/// The rate limit of [`CloseLog`], on a clock given to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseWindow {
    start: std::time::Instant,
    lines: u32,
    held_back: u64,
}

impl CloseWindow {
    #[must_use]
    pub fn new(now: std::time::Instant) -> Self {
        CloseWindow {
            start: now,
            lines: 0,
            held_back: 0,
        }
    }

    /// Whether a line may be written at `now`: `Some(lines held back since the last one
    /// written)`, or `None` (held back, counted).
    pub fn admit(&mut self, now: std::time::Instant) -> Option<u64> {
        if now.duration_since(self.start) >= CLOSE_LOG_WINDOW {
            self.start = now;
            self.lines = 0;
        }
        if self.lines >= CLOSE_LOG_BURST {
            self.held_back += 1;
            return None;
        }
        self.lines += 1;
        Some(std::mem::take(&mut self.held_back))
    }
}

impl CloseLog {
    /// Logs (rate-limited) that connection `conn` from `peer` is closed, and why.
    pub fn closing(&self, conn: u64, peer: SocketAddr, why: &str) {
        let admitted = self
            .window
            .lock()
            .ok()
            .and_then(|mut w| w.admit(std::time::Instant::now()));
        if let Some(held_back) = admitted {
            if held_back > 0 {
                info!(conn, %peer, held_back, "closing remoting connection: {why} ({held_back} more closes not logged)");
            } else {
                info!(conn, %peer, "closing remoting connection: {why}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_lines_are_rate_limited_and_count_what_they_hold_back() {
        let t0 = std::time::Instant::now();
        let mut w = CloseWindow::new(t0);
        for _ in 0..CLOSE_LOG_BURST {
            assert_eq!(w.admit(t0), Some(0));
        }
        assert_eq!(w.admit(t0), None);
        assert_eq!(w.admit(t0 + CLOSE_LOG_WINDOW / 2), None);
        // A new window: the next line says how many were held back.
        assert_eq!(w.admit(t0 + CLOSE_LOG_WINDOW), Some(2));
        assert_eq!(w.admit(t0 + CLOSE_LOG_WINDOW), Some(0));
    }
}
