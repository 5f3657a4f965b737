//! The Apache RocketMQ store the export writes: the commit log (files of
//! `mappedFileSizeCommitLog` bytes named by their first offset, a blank closing each file a
//! record does not fit in, as RocketMQ's CommitLog appends) and the JSON files of `config/`.
//! No consume queue, index or checkpoint is written: RocketMQ 5.x, finding no consume queue,
//! dispatches the whole commit log again at start (its reput starts at the commit log's
//! first offset) and builds them.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rocklet_core::record::{self, Header};

use super::MoveError;

/// RocketMQ's END_FILE_MIN_BLANK_LENGTH: a record goes into a file only when this much room
/// is left after it, for the blank that closes the file.
const MIN_BLANK: u64 = 8;

/// The commit log being written.
pub(super) struct CommitLog {
    dir: PathBuf,
    file_size: u64,
    file: Option<(u64, File)>,
    /// Log offset of the next record.
    pub next: u64,
    buf: Vec<u8>,
    pub files: u64,
}

impl CommitLog {
    pub(super) fn create(root: &Path, file_size: u64) -> Result<Self, MoveError> {
        let dir = root.join("commitlog");
        fs::create_dir_all(&dir).map_err(|e| MoveError::io(&dir, e))?;
        Ok(CommitLog {
            dir,
            file_size,
            file: None,
            next: 0,
            buf: Vec::new(),
            files: 0,
        })
    }

    /// Appends a record with `header` (its physical offset is set here) and returns its log
    /// offset.
    pub(super) fn append(
        &mut self,
        header: &Header,
        body: &[u8],
        topic: &str,
        props: &[u8],
    ) -> Result<u64, MoveError> {
        let len = record::encoded_len(header, body.len(), topic.len(), props.len()) as u64;
        if len + MIN_BLANK > self.file_size {
            return Err(MoveError::refused(format!(
                "a message of topic {topic} takes {len} bytes, more than a commit-log file of {} bytes holds: export with a larger --commitlog-file-size",
                self.file_size
            )));
        }
        let in_file = self.next % self.file_size;
        if self.file.is_some() && in_file + len + MIN_BLANK > self.file_size {
            // The blank that closes the file: its length is the rest of the file.
            self.buf.clear();
            record::encode_blank(&mut self.buf, (self.file_size - in_file) as u32);
            self.write_at(self.next, &self.buf.clone())?;
            self.next += self.file_size - in_file;
        }
        let base = self.next - self.next % self.file_size;
        if self.file.as_ref().is_none_or(|(b, _)| *b != base) {
            self.open_file(base)?;
        }
        let h = Header {
            phys_offset: self.next,
            ..*header
        };
        self.buf.clear();
        record::encode(&mut self.buf, &h, body, topic, props).map_err(|e| {
            MoveError::refused(format!(
                "a message of topic {topic} cannot be written: {e:?}"
            ))
        })?;
        let at = self.next;
        let bytes = std::mem::take(&mut self.buf);
        let r = self.write_at(at, &bytes);
        self.buf = bytes;
        r?;
        self.next += len;
        Ok(at)
    }

    fn open_file(&mut self, base: u64) -> Result<(), MoveError> {
        let path = self.dir.join(format!("{base:020}"));
        let f = OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| MoveError::io(&path, e))?;
        // RocketMQ loads only files of exactly mappedFileSizeCommitLog bytes (sparse here).
        f.set_len(self.file_size)
            .map_err(|e| MoveError::io(&path, e))?;
        if let Some((_, old)) = self.file.take() {
            old.sync_all().map_err(|e| MoveError::io(&self.dir, e))?;
        }
        self.file = Some((base, f));
        self.files += 1;
        Ok(())
    }

    fn write_at(&mut self, at: u64, bytes: &[u8]) -> Result<(), MoveError> {
        let Some((base, f)) = &self.file else {
            return Ok(());
        };
        f.write_all_at(bytes, at - base)
            .map_err(|e| MoveError::io(&self.dir, e))
    }

    pub(super) fn finish(mut self) -> Result<(), MoveError> {
        if let Some((_, f)) = self.file.take() {
            f.sync_all().map_err(|e| MoveError::io(&self.dir, e))?;
        }
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| MoveError::io(&self.dir, e))
    }
}

/// A JSON string as fastjson writes it.
fn js(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// `config/topics.json`: each topic with its queue count (read and write), perm 6 (read and
/// write), single-tag filtering, as `TopicConfig` serializes.
pub(super) fn topics_json(topics: &BTreeMap<String, u32>) -> String {
    let rows: Vec<String> = topics
        .iter()
        .map(|(t, q)| {
            format!(
                "{}:{{\"attributes\":{{}},\"order\":false,\"perm\":6,\"readQueueNums\":{q},\"topicFilterType\":\"SINGLE_TAG\",\"topicName\":{},\"topicSysFlag\":0,\"writeQueueNums\":{q}}}",
                js(t),
                js(t)
            )
        })
        .collect();
    format!(
        "{{\n\t\"dataVersion\":{{\"counter\":1,\"stateVersion\":0,\"timestamp\":0}},\n\t\"topicConfigTable\":{{{}}}\n}}\n",
        rows.join(",")
    )
}

/// `config/subscriptionGroup.json`: each group as `SubscriptionGroupConfig` serializes, a
/// FIFO group with `consumeMessageOrderly` (how RocketMQ 5.x marks an orderly group, for its
/// v5 clients' FIFO receives and v4 orderly pops).
pub(super) fn groups_json(groups: &BTreeMap<String, bool>) -> String {
    let rows: Vec<String> = groups
        .iter()
        .map(|(g, fifo)| {
            format!(
                "{}:{{\"attributes\":{{}},\"brokerId\":0,\"consumeBroadcastEnable\":true,\"consumeEnable\":true,\"consumeFromMinEnable\":true,\"consumeMessageOrderly\":{fifo},\"consumeTimeoutMinute\":15,\"groupName\":{},\"groupSysFlag\":0,\"notifyConsumerIdsChangedEnable\":true,\"retryMaxTimes\":16,\"retryQueueNums\":1,\"whichBrokerWhenConsumeSlowly\":1}}",
                js(g),
                js(g)
            )
        })
        .collect();
    format!(
        "{{\n\t\"dataVersion\":{{\"counter\":1,\"stateVersion\":0,\"timestamp\":0}},\n\t\"subscriptionGroupTable\":{{{}}}\n}}\n",
        rows.join(",")
    )
}

/// `config/consumerOffset.json`: `topic@group` → queue id → offset, with fastjson's bare
/// integer keys.
pub(super) fn offsets_json(offsets: &BTreeMap<(String, String), BTreeMap<u32, u64>>) -> String {
    let rows: Vec<String> = offsets
        .iter()
        .map(|((topic, group), queues)| {
            let q: Vec<String> = queues.iter().map(|(q, o)| format!("{q}:{o}")).collect();
            format!("{}:{{{}}}", js(&format!("{topic}@{group}")), q.join(","))
        })
        .collect();
    format!(
        "{{\n\t\"dataVersion\":{{\"counter\":1,\"stateVersion\":0,\"timestamp\":0}},\n\t\"offsetTable\":{{{}}}\n}}\n",
        rows.join(",")
    )
}

/// Writes `config/<name>` (durably).
pub(super) fn write_config(root: &Path, name: &str, text: &str) -> Result<(), MoveError> {
    let dir = root.join("config");
    fs::create_dir_all(&dir).map_err(|e| MoveError::io(&dir, e))?;
    let path = dir.join(name);
    let mut f = File::create(&path).map_err(|e| MoveError::io(&path, e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| MoveError::io(&path, e))
}
