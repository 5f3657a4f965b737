//! CPU time of a process, from `/proc/<pid>/stat` (Linux): what a broker process spends per
//! message does not depend on how busy the rest of the machine is, unlike its throughput.

use std::time::Duration;

/// `/proc` reports times in clock ticks of `USER_HZ`, which Linux fixes at 100 for every
/// user-space interface on the architectures the broker runs on.
const USER_HZ: u64 = 100;

/// User and system CPU time a process has used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    /// User plus system time.
    #[must_use]
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// The time used between `earlier` and `self` (zero if the counters went back, which a
    /// reused pid would do).
    #[must_use]
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

/// Parses the contents of `/proc/<pid>/stat`: fields 14 (utime) and 15 (stime), counted
/// after the command name, which is in parentheses and may itself hold spaces and `)`.
///
/// # Errors
/// Text that is not a stat line.
pub fn parse_stat(text: &str) -> Result<CpuTime, String> {
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .ok_or_else(|| "no `(comm)` in the stat line".to_string())?;
    // After the name: state (field 3) ... utime is field 14, stime field 15.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize, name: &str| -> Result<Duration, String> {
        let v: u64 = fields
            .get(i)
            .ok_or_else(|| format!("the stat line has no {name} field"))?
            .parse()
            .map_err(|e| format!("{name} in the stat line: {e}"))?;
        Ok(Duration::from_micros(v * (1_000_000 / USER_HZ)))
    };
    Ok(CpuTime {
        user: tick(14 - 3, "utime")?,
        system: tick(15 - 3, "stime")?,
    })
}

/// The CPU time process `pid` has used so far.
///
/// # Errors
/// No such process (or not Linux), or a stat line that does not parse.
pub fn of_pid(pid: u32) -> Result<CpuTime, String> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    parse_stat(&text).map_err(|e| format!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_after_a_name_with_spaces_and_parentheses() {
        // A real line of a process named `a) b` with utime 1234 and stime 56 ticks.
        let line = "4242 (a) b) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 56 0 0 20 0 9 0 \
                    123456 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let t = parse_stat(line).expect("parses");
        assert_eq!(t.user, Duration::from_millis(12_340));
        assert_eq!(t.system, Duration::from_millis(560));
        assert_eq!(t.total(), Duration::from_millis(12_900));
    }

    #[test]
    fn a_line_without_a_name_or_with_too_few_fields_is_an_error() {
        assert!(parse_stat("4242 S 1 2 3").is_err());
        assert!(parse_stat("4242 (x) S 1 2").is_err());
        assert!(parse_stat("4242 (x) S 1 2 3 4 5 6 7 8 9 10 notanumber 5").is_err());
    }

    #[test]
    fn this_process_reads_and_its_time_does_not_go_back() {
        let a = of_pid(std::process::id()).expect("own stat");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = of_pid(std::process::id()).expect("own stat");
        assert!(b.total() >= a.total());
        // Earlier minus later saturates at zero instead of wrapping.
        assert_eq!(a.since(&b).total(), Duration::ZERO);
        assert_eq!(b.since(&a).total(), b.total() - a.total());
    }

    #[test]
    fn an_absent_pid_is_an_error_naming_the_path() {
        // Pids above the kernel's pid_max (at most 2^22) never exist.
        let e = of_pid(u32::MAX).expect_err("no such process");
        assert!(e.contains("/proc/4294967295/stat"), "{e}");
    }
}
