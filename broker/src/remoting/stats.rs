//! Remoting requests counted by request code name, and those answered with a non-SUCCESS
//! status, as the gRPC service counts its RPCs. [`RemotingStats::render`] writes them in
//! the Prometheus text format (`rocklet_remoting_requests_total{code="SEND_MESSAGE_V2"}`,
//! `rocklet_remoting_request_errors_total{code=…}`); codes rocklet does not serve count as
//! `OTHER`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::codes::COUNTED as CODES;

/// Request counters of the remoting listeners.
#[derive(Debug, Default)]
pub struct RemotingStats {
    requests: [AtomicU64; CODES.len()],
    errors: [AtomicU64; CODES.len()],
}

fn slot(request_code: i32) -> usize {
    CODES[..CODES.len() - 1]
        .iter()
        .position(|(c, _)| *c == request_code)
        .unwrap_or(CODES.len() - 1)
}

/// The RocketMQ name of a request code (`OTHER` for one rocklet does not serve).
#[must_use]
pub fn code_name(request_code: i32) -> &'static str {
    CODES[slot(request_code)].1
}

impl RemotingStats {
    /// Counts one request; `ok`: answered SUCCESS (oneway requests count as answered).
    pub fn count(&self, request_code: i32, ok: bool) {
        let i = slot(request_code);
        self.requests[i].fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests and errors of a request code name.
    #[must_use]
    pub fn get(&self, name: &str) -> (u64, u64) {
        CODES
            .iter()
            .position(|(_, n)| *n == name)
            .map_or((0, 0), |i| {
                (
                    self.requests[i].load(Ordering::Relaxed),
                    self.errors[i].load(Ordering::Relaxed),
                )
            })
    }

    /// Appends both counters, one line per served code, in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        for (metric, help, values) in [
            (
                "rocklet_remoting_requests_total",
                "RocketMQ 4 remoting requests by request code",
                &self.requests,
            ),
            (
                "rocklet_remoting_request_errors_total",
                "RocketMQ 4 remoting requests answered with a non-SUCCESS status",
                &self.errors,
            ),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
            for (i, (_, name)) in CODES.iter().enumerate() {
                let v = values[i].load(Ordering::Relaxed);
                let _ = writeln!(out, "{metric}{{code=\"{name}\"}} {v}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::codes::code;

    #[test]
    fn requests_and_errors_are_counted_by_code_name() {
        let s = RemotingStats::default();
        s.count(code::SEND_MESSAGE_V2, true);
        s.count(code::SEND_MESSAGE_V2, false);
        s.count(code::POP_MESSAGE, true);
        s.count(9999, false);
        s.count(i32::MIN, false);
        assert_eq!(s.get("SEND_MESSAGE_V2"), (2, 1));
        assert_eq!(s.get("POP_MESSAGE"), (1, 0));
        assert_eq!(s.get("OTHER"), (2, 2));
        assert_eq!(s.get("PULL_MESSAGE"), (0, 0));
        assert_eq!(s.get("nonsense"), (0, 0));
        assert_eq!(code_name(code::LOCK_BATCH_MQ), "LOCK_BATCH_MQ");
        assert_eq!(code_name(12345), "OTHER");
        let mut out = String::new();
        s.render(&mut out);
        assert!(out.contains("rocklet_remoting_requests_total{code=\"SEND_MESSAGE_V2\"} 2\n"));
        assert!(out.contains("rocklet_remoting_request_errors_total{code=\"SEND_MESSAGE_V2\"} 1\n"));
        assert!(out.contains("rocklet_remoting_requests_total{code=\"OTHER\"} 2\n"));
        assert!(out.contains("# TYPE rocklet_remoting_request_errors_total counter"));
        assert_eq!(
            out.lines().filter(|l| !l.starts_with('#')).count(),
            2 * CODES.len()
        );
    }
}
