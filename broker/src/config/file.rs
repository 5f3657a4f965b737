//! The TOML file: its fields, the declared topics and groups, reading it (a regular file,
//! bounded), and the check that a data directory is not someone else's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rocklet_core::{Config as CoreConfig, Millis};
use serde::Deserialize;

use super::{opt_socket_addr, parse_delete_when, Listen};

/// Message types a topic can accept, as RocketMQ 5 names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TopicMessageType {
    Normal,
    Fifo,
    Delay,
    Transaction,
}

impl TopicMessageType {
    /// Every type.
    pub const ALL: [TopicMessageType; 4] = [
        TopicMessageType::Normal,
        TopicMessageType::Fifo,
        TopicMessageType::Delay,
        TopicMessageType::Transaction,
    ];

    /// The name in the config and in error messages.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TopicMessageType::Normal => "NORMAL",
            TopicMessageType::Fifo => "FIFO",
            TopicMessageType::Delay => "DELAY",
            TopicMessageType::Transaction => "TRANSACTION",
        }
    }
}

/// A topic declared in the config.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicDecl {
    pub name: String,
    /// Queues (default: the core's `default_queues`).
    pub queues: Option<u32>,
    /// Message types the topic accepts (default: every type).
    pub message_types: Option<Vec<TopicMessageType>>,
}

/// A consumer group declared in the config (RocketMQ's subscription group config), applied
/// at every start with [`rocklet_core::Broker::declare_group`]: the log keeps the last
/// declaration, so a group removed from the file keeps what it was last declared as, and one
/// changed here is changed at the next start.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupDecl {
    pub name: String,
    /// Orderly (FIFO) receives: a queue's messages in queue order, one batch of a queue in
    /// flight at a time, a failed message delivered again before the next (RocketMQ's
    /// consumeMessageOrderly). Default false.
    #[serde(default)]
    pub fifo: bool,
}

/// The TOML file, every field optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    #[serde(deserialize_with = "opt_socket_addr")]
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    #[serde(deserialize_with = "opt_socket_addr")]
    pub metrics_listen: Option<SocketAddr>,
    pub max_long_polling_ms: Option<Millis>,
    pub remoting_listen: Option<Listen>,
    pub namesrv_listen: Option<Listen>,
    pub max_concurrent_streams: Option<u32>,
    pub max_inflight_receive_bytes: Option<u64>,
    pub max_inflight_request_bytes: Option<u64>,
    pub max_batch_messages: Option<u32>,
    pub max_filter_expression_bytes: Option<usize>,
    pub enable_property_filter: Option<bool>,
    pub order_message_enable: Option<bool>,
    pub max_name_bytes: Option<usize>,
    pub grpc_max_header_list_bytes: Option<u32>,
    pub remoting_max_header_bytes: Option<usize>,
    pub max_connections: Option<usize>,
    pub idle_timeout_ms: Option<Millis>,
    pub request_read_timeout_ms: Option<Millis>,
    pub http2_keepalive_interval_ms: Option<Millis>,
    pub http2_keepalive_timeout_ms: Option<Millis>,
    pub disk_space_warning_level_ratio: Option<f64>,
    pub core: CoreConfig,
    pub topics: Vec<TopicDecl>,
    pub groups: Vec<GroupDecl>,

    /// The admin services on a listener of their own (default: on `listen`).
    #[serde(deserialize_with = "opt_socket_addr")]
    pub admin_listen: Option<SocketAddr>,
    /// Users and ACL entries (`[auth]`, `[[auth.users]]`, `[[auth.acls]]`).
    pub auth: crate::auth::AuthFileConfig,
    /// TLS of the listeners (`[tls]`).
    pub tls: crate::auth::tls::TlsFileConfig,
    /// Cluster mode (`[cluster]`: etcd endpoints, broker_name, node_id, …).
    pub cluster: crate::cluster::ClusterFileConfig,
    /// The operator console's listener (off when absent).
    pub console_listen: Option<SocketAddr>,
    /// The console's time-series step in ms (default 10 000).
    pub console_sample_ms: Option<Millis>,
    /// Names (`host[:port]`) the console answers to besides its own address.
    pub console_allowed_hosts: Vec<String>,
    /// Names (`host[:port]`) the metrics listener answers to besides its own address.
    pub metrics_allowed_hosts: Vec<String>,
    /// Retention: a segment sealed this many hours ago goes (RocketMQ's fileReservedTime).
    pub file_reserved_time_hours: Option<f64>,
    /// Retention: the hours of the day (UTC) at which expired segments go, `;`-separated
    /// (RocketMQ's deleteWhen).
    pub delete_when: Option<String>,
    /// Retention: above this share of the disk used, expired segments go at once, whatever
    /// the hour (RocketMQ's diskMaxUsedSpaceRatio, as a ratio).
    pub disk_max_used_space_ratio: Option<f64>,
    /// Retention: above this share, the oldest segments go whatever their age (RocketMQ's
    /// diskSpaceCleanForciblyRatio).
    pub disk_space_clean_forcibly_ratio: Option<f64>,
    /// Retention: how often it looks, in ms.
    pub retention_check_interval_ms: Option<Millis>,
    /// A checkpoint of the core's state once the log grew by this many bytes.
    pub checkpoint_bytes: Option<u64>,
    /// A checkpoint once this many ms passed (and the log grew).
    pub checkpoint_interval_ms: Option<Millis>,
}

impl FileConfig {
    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let bytes = read_regular_file(path, MAX_CONFIG_FILE_BYTES)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let text = String::from_utf8(bytes)
            .map_err(|e| format!("config file {}: not UTF-8 text: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("config file {}: {e}", path.display()))
    }

    /// Parses TOML.
    pub fn parse(text: &str) -> Result<Self, String> {
        let f: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        // `[cluster]` is checked here, so a bad one is named rather than ignored.
        crate::cluster::ClusterConfig::from_file(f.cluster.clone())?;
        if let Some(v) = &f.delete_when {
            parse_delete_when(v)?;
        }
        Ok(f)
    }
}

/// Largest config file read (users, ACL entries and declared topics included, a config
/// file is a few KiB; this is a bound, not a budget).
pub const MAX_CONFIG_FILE_BYTES: u64 = 16 << 20;

/// The whole of the regular file at `path`, at most `limit` bytes. Anything else is refused
/// (`InvalidInput`, naming what it is) before a byte is read: a FIFO would block the open
/// until some process writes to it, a device such as `/dev/zero` never ends, a directory has
/// no bytes. A file above `limit` is refused too, and a file that grows past it while being
/// read. `NotFound` stays `NotFound`.
pub fn read_regular_file(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    let not_regular = |m: &std::fs::Metadata| {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        let what = if t.is_fifo() {
            "a FIFO (named pipe)"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        Error::new(
            ErrorKind::InvalidInput,
            format!("{what}, not a regular file: refused (only regular files are read)"),
        )
    };
    let too_large = |len: u64| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("{len} bytes or more, above the {limit} bytes read at most: refused"),
        )
    };
    // Checked before opening: opening a FIFO for reading blocks until a writer comes.
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let f = std::fs::File::open(path)?;
    // The same check on what was opened (the path may have been replaced meanwhile).
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let mut out = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    f.take(limit + 1).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(too_large(out.len() as u64));
    }
    Ok(out)
}

/// Names in a data directory that hold nothing (a new file system's `lost+found`).
const IGNORED_IN_DATA_DIR: &[&str] = &["lost+found"];

/// Whether the file named `name` is one Rocklet writes in a data directory: the lock file
/// every broker and import creates first, or a log segment (20 digits).
fn is_rocklet_file(name: &str) -> bool {
    name == "LOCK" || (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
}

/// Refuses a data directory that would take a user's files for its own: one that exists,
/// is not empty, and holds no Rocklet file (`LOCK` or a log segment), unless
/// `not_empty_ok` (`--data-dir-not-empty-ok`). A missing directory, an empty one, and one
/// a broker or an import wrote are accepted; nothing is created or changed here. An Apache
/// RocketMQ store (a `commitlog/` directory) is refused whatever the flag says, pointing at
/// `rocklet import --from-rocketmq`.
pub fn check_data_dir(dir: &Path, not_empty_ok: bool) -> Result<(), String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(format!(
                "the data directory {} is a file, not a directory: pick another --data-dir",
                dir.display()
            ))
        }
        Err(e) => return Err(format!("cannot read data directory {}: {e}", dir.display())),
    };
    let mut foreign = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("cannot read data directory {}: {e}", dir.display()))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if is_rocklet_file(&name) {
            return Ok(());
        }
        if !IGNORED_IN_DATA_DIR.contains(&name.as_ref()) {
            foreign.push(name.into_owned());
        }
    }
    if foreign.iter().any(|n| n == "commitlog") && dir.join("commitlog").is_dir() {
        // Apache RocketMQ's storePathRootDir: never written to, not even with the flag.
        return Err(format!(
            "the data directory {d} is an Apache RocketMQ store (it holds commitlog/), which              Rocklet does not open in place: import it into a new data directory with              `rocklet import --from-rocketmq {d} --data-dir <new dir>` (the store is only read),              then start the broker with --data-dir <new dir>",
            d = dir.display()
        ));
    }
    if foreign.is_empty() || not_empty_ok {
        return Ok(());
    }
    foreign.sort();
    let shown = foreign
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    let more = foreign.len().saturating_sub(3);
    Err(format!(
        "the data directory {} is not empty and holds no Rocklet data (it holds {shown}{}): \
         refusing to write a broker's log among other files. Pick a new or empty --data-dir, \
         or pass --data-dir-not-empty-ok to use this one anyway",
        dir.display(),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}
