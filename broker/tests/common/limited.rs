//! The `rocklet` binary as a child process with a config file, metrics and remoting on free
//! ports, optionally under `prlimit --nofile=N:N` (soft and hard: it cannot raise its
//! limit), its log captured (the first MiB); killed when dropped. Used by
//! `tests/connections.rs` and `tests/hostile.rs`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Limited {
    child: std::process::Child,
    pub grpc: SocketAddr,
    pub remoting: SocketAddr,
    pub metrics: SocketAddr,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `prlimit` (util-linux) can be run.
pub fn have_prlimit() -> bool {
    Command::new("prlimit").arg("--version").output().is_ok()
}

impl Limited {
    /// Under `prlimit --nofile=nofile:nofile`; `None` (with a message) where `prlimit` is
    /// not installed.
    pub fn start(nofile: u32, toml: &str, flags: &[&str]) -> Option<Self> {
        if !have_prlimit() {
            eprintln!("skipped: `prlimit` (util-linux) is not installed");
            return None;
        }
        Some(Self::spawn(Some(nofile), toml, flags))
    }

    /// `rocklet broker --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir …
    /// --config <toml> <flags>`, under `prlimit` when `nofile` is given; waits until it
    /// serves.
    pub fn spawn(nofile: Option<u32>, toml: &str, flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("rocklet.toml");
        std::fs::write(&config, toml).unwrap();
        let mut cmd = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}"))
                    .arg(env!("CARGO_BIN_EXE_rocklet"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_rocklet")),
        };
        let mut child = cmd
            .args(["broker", "--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config)
            .args(flags)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let after = |line: &str, key: &str| -> Option<SocketAddr> {
            let i = line.find(key)?;
            line[i + key.len()..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != ')')
                .collect::<String>()
                .parse()
                .ok()
        };
        let log = Arc::new(Mutex::new(String::new()));
        let keep = |line: &str| {
            let mut g = log.lock().unwrap();
            if g.len() < 1 << 20 {
                g.push_str(line);
                g.push('\n');
            }
        };
        let mut remoting = None;
        let (grpc, metrics) = loop {
            let line = match lines.next() {
                Some(Ok(l)) => l,
                _ => panic!("broker did not start:\n{}", log.lock().unwrap()),
            };
            keep(&line);
            if let Some(r) = after(&line, "remoting=Some(") {
                remoting = Some(r);
            }
            if let Some(a) = after(&line, "addr=") {
                break (a, after(&line, "metrics=Some(").expect("metrics address"));
            }
        };
        let l = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut g = l.lock().unwrap();
                if g.len() < 1 << 20 {
                    g.push_str(&line);
                    g.push('\n');
                }
            }
        });
        Limited {
            child,
            grpc,
            remoting: remoting.expect("remoting address"),
            metrics,
            log,
            _dir: dir,
        }
    }

    /// The broker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the broker still runs (it has not exited or crashed).
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// What the broker logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// CPU time (user + system) the broker used so far.
    pub fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command name (which is in parentheses): utime and stime are the
        // 14th and 15th fields, in clock ticks (100 per second on Linux).
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|v| v.parse().unwrap())
            .collect();
        Duration::from_millis((f[0] + f[1]) * 10)
    }

    /// Resident memory now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    /// One metric's value from `/metrics`.
    pub fn metric(&self, name: &str) -> u64 {
        use std::io::{Read as _, Write as _};
        let mut s = std::net::TcpStream::connect(self.metrics).unwrap();
        s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {}\r\n\r\n", self.metrics).as_bytes())
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no metric {name} in {text}"))
            .trim()
            .parse()
            .unwrap()
    }
}
