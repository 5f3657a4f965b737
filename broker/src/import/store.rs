//! An Apache RocketMQ store on disk, read only: the commit log's files, the JSON config
//! files and the timer checkpoint. Nothing here opens a file for writing.
//!
//! ```text
//!  <storePathRootDir>/
//!    commitlog/00000000000000000000   mapped files of mappedFileSizeCommitLog bytes each,
//!    commitlog/00000000001073741824   named by the log offset of their first byte
//!    config/topics.json               {"topicConfigTable": {name: {readQueueNums, writeQueueNums, …}}}
//!    config/subscriptionGroup.json    {"subscriptionGroupTable": {name: {consumeMessageOrderly, …}}}
//!    config/consumerOffset.json       {"offsetTable": {"topic@group": {queueId: offset}}}
//!    config/delayOffset.json          {"offsetTable": {level: offset in SCHEDULE_TOPIC_XXXX queue level-1}}
//!    config/timercheck                lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset,
//!                                     masterTimerQueueOffset: big-endian i64s at 0, 8, 16, 24
//! ```
//!
//! The JSON files are fastjson's: a map with integer keys is written with bare numbers as
//! keys (`{0:12,1:3}`), which [`lenient_json`] quotes before parsing. When a file is missing
//! or empty RocketMQ reads its `.bak` copy, and so does this.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rocklet_core::record::{self, Corruption, Decoded, RecordView};
use rocklet_core::Millis;

use super::MoveError;
use crate::config::read_regular_file;

/// One file of the commit log.
#[derive(Debug, Clone)]
struct Segment {
    base: u64,
    path: PathBuf,
    len: u64,
}

/// A RocketMQ store root.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    segments: Vec<Segment>,
}

/// What a scan of the commit log found besides its records.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScanEnd {
    /// Records read.
    pub records: u64,
    /// Offset after the last record.
    pub end: u64,
    /// Invalid bytes at the end of the last file with no valid record after them (a torn
    /// tail), as RocketMQ's recovery would cut them:
    /// (offset, bytes up to the end of the file, reason).
    pub cut: Option<(u64, u64, String)>,
}

/// The timer checkpoint (`config/timercheck`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerCheckpoint {
    /// The timer wheel delivered every slot before this time.
    pub last_read_time_ms: Millis,
    /// Records of `rmq_sys_wheel_timer` queue 0 below this offset were taken into the wheel.
    pub last_timer_queue_offset: u64,
}

/// Bytes read from a file at once while scanning.
const CHUNK: usize = 8 << 20;

/// Largest `config/*.json` read whole (a consumerOffset.json of 100,000 queues is a few
/// MiB; a bigger file is refused, not read until memory runs out).
pub const MAX_CONFIG_JSON_BYTES: u64 = 256 << 20;

impl Store {
    /// Opens the store at `root`: lists `commitlog/` and checks that its files follow each
    /// other.
    pub fn open(root: &Path) -> Result<Store, MoveError> {
        let dir = root.join("commitlog");
        let entries = fs::read_dir(&dir).map_err(|e| {
            MoveError::refused(format!(
                "{} has no commit log ({}: {e}); --from-rocketmq takes RocketMQ's storePathRootDir, the directory that holds commitlog/ and config/",
                root.display(),
                dir.display()
            ))
        })?;
        let mut segments = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| MoveError::io(&dir, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let path = entry.path();
            let meta = fs::metadata(&path).map_err(|e| MoveError::io(&path, e))?;
            if meta.is_dir() {
                return Err(MoveError::refused(format!(
                    "{} is a directory: a commit log spread over several directories (storePathCommitLog with `;`) or a DLedger commit log is not read; point --from-rocketmq at a store whose commitlog/ holds the files",
                    path.display()
                )));
            }
            if !meta.is_file() {
                // A FIFO would block the open, a device never ends: neither is a commit log.
                return Err(MoveError::refused(format!(
                    "{} is not a regular file (a FIFO, device or socket): a commit-log file is a regular file, and nothing else is read",
                    path.display()
                )));
            }
            let base = (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
                .then(|| name.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| {
                    MoveError::refused(format!(
                        "{} is not a commit-log file (RocketMQ names them by their offset in 20 digits, and would refuse to load this directory too)",
                        path.display()
                    ))
                })?;
            segments.push(Segment {
                base,
                path,
                len: meta.len(),
            });
        }
        segments.sort_by_key(|s| s.base);
        if segments.is_empty() {
            return Err(MoveError::refused(format!(
                "{} holds no commit-log file",
                dir.display()
            )));
        }
        for w in segments.windows(2) {
            if w[0].base + w[0].len != w[1].base {
                return Err(MoveError::refused(format!(
                    "the commit log is not contiguous: {} holds {} bytes from offset {}, but the next file starts at {} (a file is missing or was truncated)",
                    w[0].path.display(),
                    w[0].len,
                    w[0].base,
                    w[1].base
                )));
            }
        }
        Ok(Store {
            root: root.to_path_buf(),
            segments,
        })
    }

    /// The store root.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Offset of the first byte the commit log still holds (above 0 once RocketMQ deleted
    /// old files).
    #[must_use]
    pub fn first_offset(&self) -> u64 {
        self.segments[0].base
    }

    /// Calls `visit` with every record of the commit log, in log order, with its offset.
    /// A blank ends a file; zeros end the data. Invalid bytes at the end of the last file,
    /// with no valid record after them, are reported in [`ScanEnd::cut`] (RocketMQ's
    /// recovery cuts them); anywhere else — a valid record after them included — they
    /// refuse the store, naming the file and offsets.
    pub fn scan(
        &self,
        mut visit: impl FnMut(u64, &RecordView<'_>) -> Result<(), MoveError>,
    ) -> Result<ScanEnd, MoveError> {
        let mut out = ScanEnd {
            end: self.segments[0].base,
            ..ScanEnd::default()
        };
        for (i, seg) in self.segments.iter().enumerate() {
            let last = i + 1 == self.segments.len();
            let mut r = Reader::open(seg)?;
            let max = u32::try_from(seg.len).unwrap_or(u32::MAX);
            loop {
                let at = r.pos();
                if at >= seg.len {
                    break;
                }
                r.fill(record::BLANK_LEN)?;
                if r.bytes().len() < record::BLANK_LEN || r.bytes()[..8] == [0; 8] {
                    // The end of the data: what follows must be zeros too (checked for every
                    // file but the last, whose tail the next write would have overwritten).
                    if !last && !r.rest_is_zero()? {
                        return Err(damaged(
                            seg,
                            at,
                            "zeros followed by data before the end of a file that is not the last",
                        ));
                    }
                    break;
                }
                let decoded = loop {
                    match record::decode_rocketmq(r.bytes(), max) {
                        Ok(Decoded::Incomplete { needed: Some(n) }) if r.can_fill(n) => {
                            let before = r.bytes().len();
                            r.fill(n)?;
                            if r.bytes().len() == before {
                                // The file is shorter than it was listed: what is there is cut.
                                break Ok(Decoded::Incomplete { needed: Some(n) });
                            }
                        }
                        other => break other,
                    }
                };
                let offset = seg.base + at;
                match decoded {
                    Ok(Decoded::Record(rec)) => {
                        if rec.header.phys_offset != offset {
                            let why = Corruption::PhysOffsetMismatch {
                                stored: rec.header.phys_offset,
                                actual: offset,
                            };
                            return Err(damaged(seg, at, &why.to_string()));
                        }
                        visit(offset, &rec)?;
                        let len = rec.total_size as usize;
                        out.records += 1;
                        out.end = offset + len as u64;
                        r.advance(len);
                    }
                    Ok(Decoded::Blank { .. }) => {
                        out.end = seg.base + seg.len;
                        break;
                    }
                    Ok(Decoded::Repaired { .. }) => {
                        return Err(damaged(
                            seg,
                            at,
                            "a Rocklet repair blank: this is not a RocketMQ commit log",
                        ));
                    }
                    Ok(Decoded::Incomplete { .. }) | Err(_) if last => {
                        let reason = match decoded {
                            Err(e) => e.to_string(),
                            _ => String::from("a record cut short by the end of the file"),
                        };
                        // A torn tail is damage with nothing valid after it. A valid record
                        // further on means the damage is in the middle of the data: the
                        // records it hides cannot be read, and cutting there would drop
                        // every record after it too.
                        if let Some(next) = next_record(seg, at + 1, max)? {
                            return Err(damaged(
                                seg,
                                at,
                                &format!(
                                    "{reason}, and a valid record follows at offset {} ({} + {}): {} bytes in the middle of the log cannot be read, this is not a torn tail",
                                    seg.base + next,
                                    seg.path.display(),
                                    next,
                                    next - at
                                ),
                            ));
                        }
                        out.cut = Some((offset, seg.len - at, reason));
                        break;
                    }
                    Ok(Decoded::Incomplete { .. }) => {
                        return Err(damaged(
                            seg,
                            at,
                            "a record cut short by the end of the file",
                        ));
                    }
                    Err(e) => return Err(damaged(seg, at, &e.to_string())),
                }
            }
        }
        Ok(out)
    }

    /// The bytes of the record at `offset` (one [`Store::scan`] reported).
    pub fn read_record(&self, offset: u64) -> Result<Vec<u8>, MoveError> {
        let seg = self
            .segments
            .iter()
            .rev()
            .find(|s| s.base <= offset)
            .ok_or_else(|| {
                MoveError::refused(format!("no commit-log file holds offset {offset}"))
            })?;
        let f = File::open(&seg.path).map_err(|e| MoveError::io(&seg.path, e))?;
        let at = offset - seg.base;
        let mut len = [0u8; 4];
        f.read_exact_at(&mut len, at)
            .map_err(|e| MoveError::io(&seg.path, e))?;
        let len = u32::from_be_bytes(len) as u64;
        if len < record::FIXED_LEN_V4 as u64 || at + len > seg.len {
            return Err(damaged(
                seg,
                at,
                "impossible record length on a second read (the store changed during the import?)",
            ));
        }
        let mut bytes = vec![0; len as usize];
        f.read_exact_at(&mut bytes, at)
            .map_err(|e| MoveError::io(&seg.path, e))?;
        Ok(bytes)
    }

    /// A JSON file of `config/`, parsed leniently ([`lenient_json`]); its `.bak` when it is
    /// missing or empty, as RocketMQ loads it. `None` when neither exists.
    pub fn config_json(
        &self,
        name: &str,
    ) -> Result<Option<(serde_json::Value, PathBuf)>, MoveError> {
        let dir = self.root.join("config");
        for path in [dir.join(name), dir.join(format!("{name}.bak"))] {
            let bytes = match read_regular_file(&path, MAX_CONFIG_JSON_BYTES) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                    return Err(MoveError::refused(format!("{}: {e}", path.display())))
                }
                Err(e) => return Err(MoveError::io(&path, e)),
            };
            let text = String::from_utf8(bytes).map_err(|e| {
                MoveError::refused(format!("{} is not UTF-8 text: {e}", path.display()))
            })?;
            if text.trim().is_empty() {
                continue;
            }
            let value = serde_json::from_str(&lenient_json(&text)).map_err(|e| {
                MoveError::refused(format!("{} is not RocketMQ's JSON: {e}", path.display()))
            })?;
            return Ok(Some((value, path)));
        }
        Ok(None)
    }

    /// The timer checkpoint, `None` when the store has none.
    pub fn timer_checkpoint(&self) -> Result<Option<TimerCheckpoint>, MoveError> {
        let path = self.root.join("config").join("timercheck");
        // Checked before opening: a FIFO would block the open until a writer came.
        match fs::metadata(&path) {
            Ok(m) if !m.is_file() => {
                return Err(MoveError::refused(format!(
                    "{} is not a regular file (a FIFO, device, socket or directory): refused, only regular files are read",
                    path.display()
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(MoveError::io(&path, e)),
        }
        let mut f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(MoveError::io(&path, e)),
        };
        let mut b = [0u8; 32];
        f.read_exact(&mut b).map_err(|e| MoveError::io(&path, e))?;
        let long = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Ok(Some(TimerCheckpoint {
            last_read_time_ms: long(0).max(0) as u64,
            last_timer_queue_offset: long(16).max(0) as u64,
        }))
    }
}

/// The position (in the file) of the first valid record of `seg` at or after `from`, if
/// any: a record whose PHYSICALOFFSET names its own place and that decodes whole. Read in
/// chunks; each position is first tested on its magic code and stored offset alone.
fn next_record(seg: &Segment, from: u64, max: u32) -> Result<Option<u64>, MoveError> {
    // TOTALSIZE 4, MAGICCODE 4, BODYCRC 4, QUEUEID 4, FLAG 4, QUEUEOFFSET 8, PHYSICALOFFSET 8.
    const HEAD: usize = 36;
    let file = File::open(&seg.path).map_err(|e| MoveError::io(&seg.path, e))?;
    let read = |at: u64, buf: &mut Vec<u8>, n: usize| -> Result<(), MoveError> {
        let n = n.min(usize::try_from(seg.len.saturating_sub(at)).unwrap_or(usize::MAX));
        buf.resize(n, 0);
        let mut got = 0;
        while got < n {
            match file.read_at(&mut buf[got..], at + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(MoveError::io(&seg.path, e)),
            }
        }
        buf.truncate(got);
        Ok(())
    };
    let (mut chunk, mut rec) = (Vec::new(), Vec::new());
    let mut start = from;
    while start + HEAD as u64 <= seg.len {
        read(start, &mut chunk, CHUNK + HEAD)?;
        if chunk.len() < HEAD {
            break;
        }
        for i in 0..=chunk.len() - HEAD {
            let h = &chunk[i..i + HEAD];
            let magic = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            if magic != record::MESSAGE_MAGIC && magic != record::MESSAGE_MAGIC_V2 {
                continue;
            }
            let at = start + i as u64;
            let stored = u64::from_be_bytes(h[28..36].try_into().expect("8 bytes"));
            if stored != seg.base + at {
                continue;
            }
            let size = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            if size > max || u64::from(size) > seg.len - at {
                continue;
            }
            read(at, &mut rec, size as usize)?;
            if let Ok(Decoded::Record(r)) = record::decode_rocketmq(&rec, max) {
                if r.header.phys_offset == seg.base + at {
                    return Ok(Some(at));
                }
            }
        }
        start += (chunk.len() - HEAD + 1) as u64;
    }
    Ok(None)
}

fn damaged(seg: &Segment, at: u64, why: &str) -> MoveError {
    MoveError::refused(format!(
        "the commit log is damaged at offset {} ({} + {at}): {why}; RocketMQ's own recovery would stop there too. Nothing was imported",
        seg.base + at,
        seg.path.display()
    ))
}

/// A window over one file, refilled as records need it.
struct Reader<'a> {
    seg: &'a Segment,
    file: File,
    buf: Vec<u8>,
    /// Start of the unread part of `buf`.
    start: usize,
    /// File offset of `buf[0]`.
    base: u64,
}

impl<'a> Reader<'a> {
    fn open(seg: &'a Segment) -> Result<Self, MoveError> {
        let file = File::open(&seg.path).map_err(|e| MoveError::io(&seg.path, e))?;
        Ok(Reader {
            seg,
            file,
            buf: Vec::new(),
            start: 0,
            base: 0,
        })
    }
    fn pos(&self) -> u64 {
        self.base + self.start as u64
    }
    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
    fn advance(&mut self, n: usize) {
        self.start += n;
    }
    /// Whether `n` bytes from here are within the file.
    fn can_fill(&self, n: usize) -> bool {
        self.pos() + n as u64 <= self.seg.len && self.bytes().len() < n
    }
    /// Reads until `n` bytes are buffered from here, or the file ends.
    fn fill(&mut self, n: usize) -> Result<(), MoveError> {
        if self.bytes().len() >= n {
            return Ok(());
        }
        self.buf.drain(..self.start);
        self.base += self.start as u64;
        self.start = 0;
        let file_end = self.seg.len;
        let want = n.max(CHUNK) as u64;
        let target = (self.base + want).min(file_end) - self.base;
        let have = self.buf.len();
        if (target as usize) > have {
            self.buf.resize(target as usize, 0);
            let mut read = have;
            while read < self.buf.len() {
                match self
                    .file
                    .read_at(&mut self.buf[read..], self.base + read as u64)
                {
                    Ok(0) => break,
                    Ok(k) => read += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(MoveError::io(&self.seg.path, e)),
                }
            }
            self.buf.truncate(read);
        }
        Ok(())
    }
    /// Whether every byte from here to the end of the file is zero.
    fn rest_is_zero(&mut self) -> Result<bool, MoveError> {
        loop {
            if self.bytes().iter().any(|&b| b != 0) {
                return Ok(false);
            }
            let n = self.bytes().len();
            self.advance(n);
            if self.pos() >= self.seg.len {
                return Ok(true);
            }
            self.fill(CHUNK)?;
            if self.bytes().is_empty() {
                return Ok(true);
            }
        }
    }
}

/// fastjson's JSON with bare keys (`{0:12}`, as it writes maps with integer keys) made
/// standard: every key outside a string is quoted. Values are left as they are.
#[must_use]
pub fn lenient_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    // Containers open so far: b'{' or b'['.
    let mut stack: Vec<u8> = Vec::new();
    let mut expect_key = false;
    let mut chars = text.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        match c {
            '"' => {
                out.push(c);
                let mut escaped = false;
                for (_, c) in chars.by_ref() {
                    out.push(c);
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                expect_key = false;
            }
            '{' => {
                stack.push(b'{');
                expect_key = true;
                out.push(c);
            }
            '[' => {
                stack.push(b'[');
                expect_key = false;
                out.push(c);
            }
            '}' | ']' => {
                stack.pop();
                expect_key = false;
                out.push(c);
            }
            ',' => {
                expect_key = stack.last() == Some(&b'{');
                out.push(c);
            }
            ':' => {
                expect_key = false;
                out.push(c);
            }
            c if c.is_whitespace() => out.push(c),
            c if expect_key => {
                // A bare key: up to the colon or whitespace.
                out.push('"');
                out.push(c);
                while let Some(&(_, n)) = chars.peek() {
                    if n == ':' || n.is_whitespace() {
                        break;
                    }
                    out.push(n);
                    chars.next();
                }
                out.push('"');
                expect_key = false;
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastjson_integer_keys_are_quoted() {
        let text = r#"{"offsetTable":{"T@g":{0:12,1:3},"U@g":{ 2 : 7 }},"list":[1,2,{3:4}],"s":"a{0:1}\"x"}"#;
        let v: serde_json::Value = serde_json::from_str(&lenient_json(text)).unwrap();
        assert_eq!(v["offsetTable"]["T@g"]["0"], 12);
        assert_eq!(v["offsetTable"]["T@g"]["1"], 3);
        assert_eq!(v["offsetTable"]["U@g"]["2"], 7);
        assert_eq!(v["list"][1], 2);
        assert_eq!(v["list"][2]["3"], 4);
        assert_eq!(v["s"], "a{0:1}\"x");
        // Standard JSON goes through unchanged.
        let std = r#"{"a": {"b": [1, "2"]}}"#;
        assert_eq!(lenient_json(std), std);
    }
}
