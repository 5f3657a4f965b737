//! `--rss-every N`: the process's resident memory sampled every N stored messages, and the
//! slope of it per stored message (issue 31's measuring stick: memory that grows with the
//! log's history rather than with what is live).

/// One sample: messages stored so far (the core's `messages_stored`), the process's resident
/// set and, of it, what the bench's own per-message ledger holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub messages: u64,
    pub rss_bytes: u64,
    pub ledger_bytes: u64,
}

/// The process's resident set size in bytes (`VmRSS` of `/proc/self/status`).
pub fn rss_bytes() -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("--rss-every reads /proc/self/status: {e}"))?;
    vm_rss(&s).ok_or_else(|| "--rss-every: no VmRSS line in /proc/self/status".to_string())
}

/// `VmRSS:   123456 kB` of a `/proc/<pid>/status` text, in bytes.
fn vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => Some(n * 1024),
        _ => None,
    }
}

/// The least-squares slope of `y` over `x` (`None` with fewer than two distinct `x`).
#[must_use]
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Samples taken every `every` stored messages.
#[derive(Debug)]
pub struct RssProbe {
    every: u64,
    next: u64,
    pub samples: Vec<Sample>,
}

impl RssProbe {
    /// A probe sampling every `every` (> 0) stored messages.
    #[must_use]
    pub fn new(every: u64) -> Self {
        RssProbe {
            every,
            next: every,
            samples: Vec::new(),
        }
    }

    /// Samples (and prints the sample's line to stdout) when `messages` reached the next
    /// multiple of `every`.
    pub fn observe(&mut self, messages: u64, ledger_bytes: u64) -> Result<(), String> {
        if messages < self.next {
            return Ok(());
        }
        let rss = rss_bytes()?;
        let s = Sample {
            messages,
            rss_bytes: rss,
            ledger_bytes,
        };
        println!(
            "rss: messages_stored={} rss_bytes={} rss_mib={:.1} bench_ledger_bytes={}",
            s.messages,
            s.rss_bytes,
            s.rss_bytes as f64 / f64::from(1 << 20),
            s.ledger_bytes
        );
        self.samples.push(s);
        self.next = (messages / self.every + 1) * self.every;
        Ok(())
    }

    /// Bytes of RSS per stored message (least squares over the samples after the first,
    /// which holds start-up costs), and the same without the bench's ledger.
    #[must_use]
    pub fn per_message(&self) -> Option<(f64, f64)> {
        let rest = self.samples.get(1..)?;
        let all: Vec<(f64, f64)> = rest
            .iter()
            .map(|s| (s.messages as f64, s.rss_bytes as f64))
            .collect();
        let broker: Vec<(f64, f64)> = rest
            .iter()
            .map(|s| {
                (
                    s.messages as f64,
                    s.rss_bytes.saturating_sub(s.ledger_bytes) as f64,
                )
            })
            .collect();
        Some((slope(&all)?, slope(&broker)?))
    }

    /// The summary line of a run (`None`: fewer than three samples).
    #[must_use]
    pub fn summary(&self) -> Option<String> {
        let (all, broker) = self.per_message()?;
        let (first, last) = (self.samples.get(1)?, self.samples.last()?);
        Some(format!(
            "rss per stored message: {all:.1} bytes (least squares over {} samples, {} to {} messages stored; {broker:.1} bytes without the bench's own ledger)",
            self.samples.len() - 1,
            first.messages,
            last.messages
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let s = "Name:\trocklet\nVmPeak:\t  99 kB\nVmRSS:\t   26624 kB\nRssAnon:\t 1 kB\n";
        assert_eq!(vm_rss(s), Some(26624 * 1024));
        assert_eq!(vm_rss("VmRSS: 12 MB\n"), None, "only kB is known");
        assert_eq!(vm_rss("Name: x\n"), None);
    }

    #[test]
    fn this_process_has_a_resident_set() {
        assert!(rss_bytes().unwrap() > 1 << 20);
    }

    #[test]
    fn slope_is_the_least_squares_fit() {
        assert_eq!(slope(&[(1.0, 10.0)]), None);
        assert_eq!(slope(&[(1.0, 10.0), (1.0, 12.0)]), None, "one distinct x");
        let exact = slope(&[(0.0, 5.0), (1.0, 36.0), (2.0, 67.0)]).unwrap();
        assert!((exact - 31.0).abs() < 1e-9, "{exact}");
        // Noise around 31 bytes per message: (1e6, 31e6+1e5), (2e6, 62e6-1e5), (3e6, 93e6).
        let noisy = slope(&[(1e6, 31.1e6), (2e6, 61.9e6), (3e6, 93e6)]).unwrap();
        assert!((noisy - 30.95).abs() < 1e-6, "{noisy}");
    }

    #[test]
    fn the_first_sample_is_left_out_of_the_slope() {
        let mut p = RssProbe::new(10);
        let at = |messages, rss, ledger| Sample {
            messages,
            rss_bytes: rss,
            ledger_bytes: ledger,
        };
        // Start-up makes the first sample high; after it, 31 bytes per message, 16 of them
        // the ledger's.
        p.samples = vec![
            at(10, 50_000, 160),
            at(20, 1_000 + 20 * 31, 320),
            at(30, 1_000 + 30 * 31, 480),
            at(40, 1_000 + 40 * 31, 640),
        ];
        let (all, broker) = p.per_message().unwrap();
        assert!((all - 31.0).abs() < 1e-9, "{all}");
        assert!((broker - 15.0).abs() < 1e-9, "{broker}");
        let line = p.summary().unwrap();
        assert!(line.contains("31.0 bytes"), "{line}");
        assert!(line.contains("3 samples, 20 to 40"), "{line}");
        p.samples.truncate(2);
        assert_eq!(p.summary(), None, "one sample after the first is no slope");
    }

    #[test]
    fn samples_fall_at_each_multiple() {
        let mut p = RssProbe::new(100);
        for m in [0, 50, 99, 100, 101, 150, 250, 299, 300] {
            p.observe(m, 0).unwrap();
        }
        let at: Vec<u64> = p.samples.iter().map(|s| s.messages).collect();
        assert_eq!(at, [100, 250, 300]);
    }
}
