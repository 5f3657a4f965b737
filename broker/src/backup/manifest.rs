//! The manifest: one line per file of a backup, its point, its checks; written last.

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::copy::sync_dir;
use super::{FILE_MODE, HEADER, MANIFEST, MANIFEST_TMP};

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path in the backup directory (`00000000000000000000`, `auth.json`,
    /// `quarantine/<name>`).
    pub name: String,
    /// The file's length.
    pub size: u64,
    /// Bytes at its start that matter; the rest reads as zeros.
    pub data: u64,
    /// CRC-32 of those bytes.
    pub crc: u32,
    /// CRC-32 of the first `min(data, HEAD)` of them.
    pub head: u32,
}

/// What a backup directory holds ([`MANIFEST`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The broker version that wrote it.
    pub version: String,
    /// Every record below this log offset is in the backup.
    pub log_offset: u64,
    /// The broker's clock when the point was taken.
    pub time_ms: u64,
    /// Every file, segments first (ascending), then the others.
    pub files: Vec<Entry>,
}

/// A segment file's name: its base offset in 20 digits.
pub(super) fn segment_name(base: u64) -> String {
    format!("{base:020}")
}

fn segment_base(name: &str) -> Option<u64> {
    (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// A file name a manifest may hold: a plain name, or `quarantine/<plain name>`, plain
/// meaning no separator, no whitespace, not starting with a dot.
pub(super) fn valid_name(name: &str) -> bool {
    let plain = |n: &str| {
        !n.is_empty()
            && !n.starts_with('.')
            && !n.contains(['/', '\\'])
            && !n.chars().any(char::is_whitespace)
    };
    match name.split_once('/') {
        Some((dir, rest)) => dir == rocklet_core::QUARANTINE_DIR && plain(rest),
        None => plain(name),
    }
}

impl Manifest {
    /// The manifest's text, its last line the CRC of the lines before it.
    #[must_use]
    pub fn encode(&self) -> String {
        use std::fmt::Write as _;
        let mut s = format!(
            "{HEADER}\nversion {}\nlog_offset {}\ntime_ms {}\n",
            self.version, self.log_offset, self.time_ms
        );
        for f in &self.files {
            let _ = writeln!(
                s,
                "file {} {} {} {:08x} {:08x}",
                f.name, f.size, f.data, f.crc, f.head
            );
        }
        let crc = crc32fast::hash(s.as_bytes());
        let _ = writeln!(s, "crc {crc:08x}");
        s
    }

    /// Reads a manifest, refusing anything that is not exactly what [`Manifest::encode`]
    /// writes: a damaged one is never taken for a shorter backup.
    pub fn parse(text: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(text).map_err(|_| "it is not text".to_string())?;
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or("it has no `crc` line")?;
        let (body, last) = text.split_at(body_end);
        let want = last
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("crc "))
            .and_then(|v| u32::from_str_radix(v, 16).ok())
            .ok_or("its last line is not `crc <8 hex digits>` (cut short?)")?;
        let got = crc32fast::hash(body.as_bytes());
        if got != want {
            return Err(format!(
                "its CRC is {got:08x}, its last line says {want:08x} (it was changed or damaged)"
            ));
        }
        let mut lines = body.lines();
        if lines.next() != Some(HEADER) {
            return Err(format!("its first line is not `{HEADER}`"));
        }
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|v| v.strip_prefix(' '))
                .map(str::to_string)
                .ok_or_else(|| format!("it has no `{name}` line"))
        };
        let version = field("version")?;
        let num = |name: &str, v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("its `{name}` is not a number"))
        };
        let log_offset = num("log_offset", field("log_offset")?)?;
        let time_ms = num("time_ms", field("time_ms")?)?;
        let mut files = Vec::new();
        for line in lines {
            let bad = || format!("its line `{line}` is not `file NAME SIZE DATA CRC HEAD`");
            let parts: Vec<&str> = line.split(' ').collect();
            let ["file", name, size, data, crc, head] = parts[..] else {
                return Err(bad());
            };
            let entry = Entry {
                name: name.to_string(),
                size: size.parse().map_err(|_| bad())?,
                data: data.parse().map_err(|_| bad())?,
                crc: u32::from_str_radix(crc, 16).map_err(|_| bad())?,
                head: u32::from_str_radix(head, 16).map_err(|_| bad())?,
            };
            if !valid_name(&entry.name) || entry.data > entry.size {
                return Err(bad());
            }
            files.push(entry);
        }
        Ok(Manifest {
            version,
            log_offset,
            time_ms,
            files,
        })
    }

    /// The segments, as (base, entry), ascending.
    fn segments(&self) -> Vec<(u64, &Entry)> {
        let mut s: Vec<_> = self
            .files
            .iter()
            .filter_map(|f| segment_base(&f.name).map(|b| (b, f)))
            .collect();
        s.sort_by_key(|(b, _)| *b);
        s
    }

    /// The log the segments hold must run without a gap from the first one's base to the
    /// point, each segment's data ending where the next one starts.
    pub(super) fn check_log(&self) -> Result<(), String> {
        let segs = self.segments();
        for w in segs.windows(2) {
            let ((a, ea), (b, _)) = (w[0], w[1]);
            if a + ea.data != b {
                return Err(format!(
                    "segment {} holds log offsets {a}..{} but the next segment starts at {b}",
                    ea.name,
                    a + ea.data
                ));
            }
        }
        match segs.last() {
            Some((b, e)) if b + e.data != self.log_offset => Err(format!(
                "the newest segment {} ends at log offset {}, not at the backup's point {}",
                e.name,
                b + e.data,
                self.log_offset
            )),
            None if self.log_offset != 0 => Err(format!(
                "it names no segment but a point of log offset {}",
                self.log_offset
            )),
            _ => Ok(()),
        }
    }
}

/// Temp file, fsync, rename, fsync of the directory: DIR is a backup from here on.
pub(super) fn write_manifest(to: &Path, m: &Manifest) -> io::Result<()> {
    let tmp = to.join(MANIFEST_TMP);
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&tmp)?;
    f.write_all(m.encode().as_bytes())?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, to.join(MANIFEST))?;
    sync_dir(to)
}

/// Reads and checks `from`'s manifest (not the files it names).
pub fn read_manifest(from: &Path) -> Result<Manifest, String> {
    let path = from.join(MANIFEST);
    let text = match fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "{} is not a complete backup: it has no {MANIFEST} (a backup that is still \
                 running or that failed writes none)",
                from.display()
            ))
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let m = Manifest::parse(&text).map_err(|why| {
        format!(
            "the backup in {} is damaged: {MANIFEST} does not read: {why}",
            from.display()
        )
    })?;
    m.check_log()
        .map_err(|why| format!("the backup in {} is damaged: {why}", from.display()))?;
    Ok(m)
}
