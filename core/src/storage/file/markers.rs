//! The files beside the segments: `LOG_END`, `LOG_START`, `CHECKPOINT`, the recorded sync
//! failures, and the listings of segments and side files.

use super::super::LogEnd;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use std::fs;
use std::io;
use std::path::Path;

/// The file in a [`FileStorage`]'s directory that holds its [`LogEnd`]: four lines of
/// text (`rocklet-log-end 1`, `segment <base>|none`, `end <offset>`, `clean true|false`).
pub const LOG_END_FILE: &str = "LOG_END";
/// The file in a [`FileStorage`]'s directory that says where the log starts once
/// retention retired its oldest segments ([`Storage::log_start`]): written by the core
/// (postcard), replaced atomically. A directory without it starts at its first segment.
pub const LOG_START_FILE: &str = "LOG_START";
pub(super) const LOG_START_TMP: &str = "LOG_START.tmp";
/// The file in a [`FileStorage`]'s directory that holds the newest checkpoint of the core's
/// state ([`Storage::checkpoint`]): written by the core (versioned, CRC-checked), replaced
/// atomically. A directory without it (or with one the core cannot use) replays its whole
/// log on open.
pub const CHECKPOINT_FILE: &str = "CHECKPOINT";
pub(super) const CHECKPOINT_TMP: &str = "CHECKPOINT.tmp";
pub(super) const LOG_END_TMP: &str = "LOG_END.tmp";
pub(super) const SYNC_FAILED: &str = "SYNC_FAILED.";

/// The offsets named by `SYNC_FAILED.<offset>` files in `dir` (a recorded storage failure
/// each): read only, for tools that open a data directory without [`FileStorage`].
pub fn read_failures(dir: &Path) -> io::Result<Vec<u64>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(at) = name.to_str().and_then(|n| n.strip_prefix(SYNC_FAILED)) {
            out.push(at.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not a recorded storage failure (SYNC_FAILED.<20 digits>): \
                         remove it",
                        dir.join(&name).display()
                    ),
                )
            })?);
        }
    }
    Ok(out)
}
pub(super) const LOG_END_HEADER: &str = "rocklet-log-end 1";

/// The side files under `root`, the directory of side-file directory `dir`, named as side
/// files (`dir/a/b`), in no order; none when it does not exist. Read only, for tools that
/// read a data directory without [`FileStorage`] too.
pub fn list_side_files(root: &Path, dir: &str) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut todo = alloc::vec![(root.to_path_buf(), String::from(dir))];
    while let Some((path, name)) = todo.pop() {
        let entries = match fs::read_dir(&path) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let Some(part) = entry.file_name().to_str().map(String::from) else {
                continue;
            };
            let full = format!("{name}/{part}");
            if entry.file_type()?.is_dir() {
                todo.push((entry.path(), full));
            } else {
                out.push(full);
            }
        }
    }
    Ok(out)
}

/// The segment files of the data directory `dir` (20-digit names), by base offset. Read
/// only, for tools that open a data directory without [`FileStorage`].
pub fn list_segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(base) = name.parse() {
                out.push(base);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Reads `LOG_END`; `None` when there is none (a data directory from before it, or
/// RocketMQ's). One that does not parse is refused by name: the check it stands for
/// cannot be made. Read only, for tools that open a data directory without [`FileStorage`].
pub fn read_log_end(dir: &Path) -> io::Result<Option<LogEnd>> {
    let path = dir.join(LOG_END_FILE);
    let text = match fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is unreadable ({why}): it records how far the log reached; restore it \
                 from a backup, or delete it to start without that check",
                path.display()
            ),
        )
    };
    let text = core::str::from_utf8(&text).map_err(|_| bad("not text"))?;
    let mut lines = text.lines();
    if lines.next() != Some(LOG_END_HEADER) {
        return Err(bad("no `rocklet-log-end 1` first line"));
    }
    let mut field = |name: &str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(name))
            .and_then(|v| v.strip_prefix(' '))
            .ok_or_else(|| bad(&format!("no `{name}` line")))
    };
    let segment = match field("segment")? {
        "none" => None,
        v => Some(v.parse().map_err(|_| bad("`segment` is not a number"))?),
    };
    let end = field("end")?
        .parse()
        .map_err(|_| bad("`end` is not a number"))?;
    let clean = match field("clean")? {
        "true" => true,
        "false" => false,
        _ => return Err(bad("`clean` is neither true nor false")),
    };
    Ok(Some(LogEnd {
        segment,
        end,
        clean,
    }))
}
