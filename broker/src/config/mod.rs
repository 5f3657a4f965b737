//! The broker's configuration: the TOML file, merged with command-line flags.
//!
//! The folder: `mod.rs` (`BrokerConfig`, what the broker runs with: its defaults, `from_file`,
//! `validate`; listen addresses), `file.rs` (`FileConfig`, the TOML file below, read as a
//! bounded regular file; declared topics and groups; the data-directory check), `retention.rs`
//! (`RetentionConfig`). A start flows through it once: `FileConfig::load` →
//! `BrokerConfig::from_file` → the flags over it (main.rs) → `validate`, before anything is
//! created.
//!
//! ```toml
//! listen = "127.0.0.1:8081"          # RocketMQ 5 gRPC (and the admin service)
//! data_dir = "./rocklet-data"
//! metrics_listen = "127.0.0.1:9100"  # Prometheus text at /metrics (off when absent)
//! max_long_polling_ms = 30000        # longest a ReceiveMessage waits for a message
//! remoting_listen = "127.0.0.1:10911" # RocketMQ 4 remoting (`off` to disable)
//! namesrv_listen = "127.0.0.1:9876"   # its name-server role (`off` to disable)
//! max_concurrent_streams = 256       # HTTP/2 streams one gRPC connection may have open
//! max_inflight_receive_bytes = 268435456 # receive responses held until written (256 MiB)
//! max_inflight_request_bytes = 268435456 # request bytes held, all clients together (256 MiB)
//! max_batch_messages = 10000         # messages in one SendMessage / SEND_BATCH_MESSAGE
//! max_filter_expression_bytes = 65536 # a filter expression (receive, pull, pop; SQL92: 16384)
//! enable_property_filter = true      # SQL92 filters (RocketMQ's enablePropertyFilter)
//! order_message_enable = false       # routes carry order topics' confs (orderMessageEnable)
//! max_name_bytes = 255               # a topic, group or client id name
//! grpc_max_header_list_bytes = 16384 # HTTP/2 headers (gRPC metadata) of one call
//! remoting_max_header_bytes = 262144 # the header (code, extFields) of one remoting frame
//! max_connections = 10000            # gRPC + remoting + name server connections together
//! idle_timeout_ms = 120000           # close a connection silent for this long
//! request_read_timeout_ms = 30000    # longest a request may take to arrive once begun
//! http2_keepalive_interval_ms = 30000 # gRPC: ping every connection this often
//! http2_keepalive_timeout_ms = 20000 # gRPC: close it when a ping is not answered in time
//! disk_space_warning_level_ratio = 0.90 # new messages refused while the disk is fuller
//!
//! [core]                             # rocklet-core's Config, every field optional
//! flush = "sync"                     # or "async"
//! flush_interval_ms = 500            # async flush: fsync at this interval
//! segment_size = 1073741824
//! transaction_timeout_ms = 6000
//! transaction_check_interval_ms = 30000
//! transaction_check_max = 15
//! delay_levels = [1000, 5000, 10000]
//! max_message_size = 4194304
//! auto_create_topics = true
//!
//! admin_listen = "127.0.0.1:8082"   # the admin services on their own listener
//! console_listen = "127.0.0.1:8083" # the operator console, a web page (off when absent)
//! console_sample_ms = 10000          # the console's time series: one sample per step, 1 h kept
//! file_reserved_time_hours = 72     # retention: segments sealed longer ago go (fractions allowed)
//! delete_when = "04"                 # …at these hours of the day, UTC ("04;16": two)
//! disk_max_used_space_ratio = 0.75   # above it expired segments go at once, whatever the hour
//! disk_space_clean_forcibly_ratio = 0.85 # above it the oldest go, whatever their age
//! retention_check_interval_ms = 10000 # how often retention looks (RocketMQ's cleanResourceInterval)
//! checkpoint_bytes = 268435456       # a checkpoint of the core's state per 256 MiB of log…
//! checkpoint_interval_ms = 60000     # …or per minute (if the log grew): a start reads no more
//! console_allowed_hosts = ["ops.example.com"] # names (host[:port]) the console answers to
//!                                    # besides its own address (and localhost on loopback)
//! metrics_allowed_hosts = ["broker1.example.com:9100"] # the same for the metrics listener
//!
//! [auth]                             # users and ACLs: see crate::auth and the README's Security
//! timestamp_window_s = 300
//! [[auth.users]]
//! access_key = "admin"
//! secret_key = "change-me"
//! super_user = true
//! [[auth.acls]]
//! user = "app"
//! resource = "Topic:orders*"
//! actions = ["Pub", "Sub"]
//!
//! [tls]                              # crate::auth::tls
//! mode = "enforcing"
//! cert = "server.pem"
//! key = "server.key"
//!
//! [[topics]]                         # declared topics (the only ones with auto_create_topics = false)
//! name = "orders"
//! queues = 4
//! message_types = ["NORMAL", "TRANSACTION"]   # absent: every type
//!
//! [[groups]]                         # declared consumer groups, recorded in the log at start
//! name = "order-processors"
//! fifo = true                        # orderly (FIFO) receives; default false
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use rocklet_core::{Config as CoreConfig, Millis};
use serde::Deserialize;

mod file;
mod retention;
#[cfg(test)]
mod tests;

pub use file::{
    check_data_dir, read_regular_file, FileConfig, GroupDecl, TopicDecl, TopicMessageType,
    MAX_CONFIG_FILE_BYTES,
};
pub use retention::{parse_delete_when, CheckpointConfig, RetentionConfig};

/// Default gRPC address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8081";
/// Default data directory.
pub const DEFAULT_DATA_DIR: &str = "./rocklet-data";
/// Default RocketMQ 4 remoting address of the `rocklet broker` command.
pub const DEFAULT_REMOTING_LISTEN: &str = "127.0.0.1:10911";
/// Default name-server address of the `rocklet broker` command.
pub const DEFAULT_NAMESRV_LISTEN: &str = "127.0.0.1:9876";

/// Default HTTP/2 stream limit per gRPC connection ([`BrokerConfig::max_concurrent_streams`]).
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 256;
/// Default byte budget of receive responses in flight
/// ([`BrokerConfig::max_inflight_receive_bytes`]): 256 MiB.
pub const DEFAULT_MAX_INFLIGHT_RECEIVE_BYTES: u64 = 256 << 20;
/// Default budget of request bytes held ([`BrokerConfig::max_inflight_request_bytes`]):
/// 256 MiB.
pub const DEFAULT_MAX_INFLIGHT_REQUEST_BYTES: u64 = 256 << 20;
/// Default most messages in one send request ([`BrokerConfig::max_batch_messages`]).
pub const DEFAULT_MAX_BATCH_MESSAGES: u32 = 10_000;
/// Default longest tag filter expression ([`BrokerConfig::max_filter_expression_bytes`]).
pub const DEFAULT_MAX_FILTER_EXPRESSION_BYTES: usize = 64 << 10;
/// Default longest name ([`BrokerConfig::max_name_bytes`]): RocketMQ's longest group name.
pub const DEFAULT_MAX_NAME_BYTES: usize = 255;
/// Default HTTP/2 header list size of a gRPC call ([`BrokerConfig::grpc_max_header_list_bytes`]).
pub const DEFAULT_GRPC_MAX_HEADER_LIST_BYTES: u32 = 16 << 10;
/// Default connection cap ([`BrokerConfig::max_connections`]).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default idle timeout of a connection ([`BrokerConfig::idle_timeout_ms`]).
pub const DEFAULT_IDLE_TIMEOUT_MS: Millis = 120_000;
/// Default [`BrokerConfig::disk_space_warning_level_ratio`]: RocketMQ's
/// `diskSpaceWarningLevelRatio`.
pub const DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO: f64 = 0.90;

/// Default request read deadline ([`BrokerConfig::request_read_timeout_ms`]).
pub const DEFAULT_REQUEST_READ_TIMEOUT_MS: Millis = 30_000;
/// Default HTTP/2 keepalive ping interval ([`BrokerConfig::http2_keepalive_interval_ms`]).
pub const DEFAULT_HTTP2_KEEPALIVE_INTERVAL_MS: Millis = 30_000;
/// Default HTTP/2 keepalive ping timeout ([`BrokerConfig::http2_keepalive_timeout_ms`]).
pub const DEFAULT_HTTP2_KEEPALIVE_TIMEOUT_MS: Millis = 20_000;
/// Default largest remoting header ([`BrokerConfig::remoting_max_header_bytes`]).
pub const DEFAULT_REMOTING_MAX_HEADER_BYTES: usize = 256 << 10;

/// An optional listener: `HOST:PORT` or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    Off,
    At(SocketAddr),
}

impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(Listen::Off);
        }
        socket_addr(s)
            .map(Listen::At)
            .map_err(|e| format!("{e}, nor `off`"))
    }
}

/// A listen address: `IP:PORT`, `[IPv6]:PORT` or `HOST:PORT` with a host name that resolves
/// (`localhost:8081`; the first address it resolves to is used).
pub fn socket_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("`{s}` is not HOST:PORT (no port)"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("`{s}` is not HOST:PORT"));
    }
    match std::net::ToSocketAddrs::to_socket_addrs(s) {
        Ok(mut it) => it
            .next()
            .ok_or_else(|| format!("`{s}`: host `{host}` resolves to no address")),
        Err(e) => Err(format!("`{s}`: cannot resolve host `{host}`: {e}")),
    }
}

fn opt_socket_addr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    socket_addr(&s).map(Some).map_err(serde::de::Error::custom)
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where an optional listener goes: `None` (not configured) is `default`, except that with
/// the gRPC port 0 (tests: any free port) it is a free port on the gRPC address too.
#[must_use]
pub fn resolve_listen(l: Option<Listen>, default: &str, grpc: SocketAddr) -> Option<SocketAddr> {
    match l {
        Some(Listen::Off) => None,
        Some(Listen::At(a)) => Some(a),
        None if grpc.port() == 0 => Some(SocketAddr::new(grpc.ip(), 0)),
        None => default.parse().ok(),
    }
}

/// Everything the broker runs with.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Use `data_dir` even when it is not empty and holds no Rocklet data (the
    /// `--data-dir-not-empty-ok` flag; see [`check_data_dir`]).
    pub data_dir_not_empty_ok: bool,
    pub metrics_listen: Option<SocketAddr>,
    /// Longest a ReceiveMessage long poll waits.
    pub max_long_polling_ms: Millis,
    /// RocketMQ 4 remoting listener (off when `None`, the library default; the `rocklet`
    /// command defaults to [`DEFAULT_REMOTING_LISTEN`]).
    pub remoting_listen: Option<SocketAddr>,
    /// Name-server listener (off when `None`; the command defaults to [`DEFAULT_NAMESRV_LISTEN`]).
    pub namesrv_listen: Option<SocketAddr>,
    /// Most HTTP/2 streams (concurrent RPCs) one gRPC connection may have open
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`); a client queues calls above it until one ends.
    ///
    /// Default [`DEFAULT_MAX_CONCURRENT_STREAMS`] (256). A RocketMQ 5 client shares one
    /// connection per endpoint between its producers and consumers: one telemetry stream per
    /// client object, one long-polling ReceiveMessage per assigned queue (a push consumer of 8
    /// topics x 16 queues holds 128), plus short sends and acks. 256 leaves room for such a
    /// client twice over while stopping one connection from opening thousands of streams
    /// (without a limit, tonic allows any number).
    pub max_concurrent_streams: u32,
    /// Broker-wide budget of bytes of ReceiveMessage responses in flight: counted from when a
    /// response is built (messages popped) until its stream is dropped (fully written, or the
    /// client gone). A client that never reads its responses holds them in broker memory for
    /// as long as it keeps the stream open; once the budget is used up, a new ReceiveMessage
    /// pops nothing and gets `TOO_MANY_REQUESTS` (clients back off and retry). One response
    /// may exceed what is left, so a single large message is never starved.
    ///
    /// Default [`DEFAULT_MAX_INFLIGHT_RECEIVE_BYTES`] (256 MiB): 64 responses of a 4 MiB
    /// message, or thousands of ordinary ones being written at once.
    pub max_inflight_receive_bytes: u64,
    /// Broker-wide budget of request bytes held, gRPC and remoting together: a request holds
    /// what has arrived of it (a gRPC call its message, a remoting frame its header's length
    /// and then its body) until its handling ends (answered, or its long poll over); what it
    /// declares must only fit in the room left. One client address may hold a quarter of it,
    /// one connection an eighth (each at least the largest request). One that would take the
    /// total or its share past the limit is refused at once: gRPC `TOO_MANY_REQUESTS`
    /// (RocketMQ clients back off and retry), remoting `SYSTEM_BUSY` (2); a remoting frame's
    /// header (needed to answer at all) waits for room instead. Without it, clients that start large sends and stall hold memory without
    /// bound (each connection up to a request's size, for up to `request_read_timeout_ms`).
    ///
    /// Default [`DEFAULT_MAX_INFLIGHT_REQUEST_BYTES`] (256 MiB: 28 of the largest sends at
    /// once, thousands of ordinary ones). At least the largest request
    /// ([`BrokerConfig::max_request_message_bytes`] + `remoting_max_header_bytes`).
    pub max_inflight_request_bytes: u64,
    /// Most messages one send request may carry: a gRPC SendMessage or a remoting
    /// SEND_BATCH_MESSAGE above it is refused whole, naming the limit, before any of it
    /// reaches the core (whose work per batch grows with its count).
    ///
    /// Default [`DEFAULT_MAX_BATCH_MESSAGES`] (10,000). Apache RocketMQ bounds a batch by its
    /// bytes only (4 MiB, `maxMessageSize`; its proxy sizes the gRPC inbound limit as 32
    /// messages of 4 MiB plus 2 MiB); 10,000 is what rocklet's remoting always allowed, so no
    /// v4 client that worked before is refused, while a request of 100,000 one-byte messages
    /// (which held the core thread for minutes) is.
    pub max_batch_messages: u32,
    /// Longest tag filter expression of a ReceiveMessage (`filter_expression.expression`), a
    /// PULL_MESSAGE (`subscription`) or a POP_MESSAGE (`exp`); longer ones are refused
    /// (`ILLEGAL_FILTER_EXPRESSION` / `SUBSCRIPTION_PARSE_FAILED`, `FILTER_TOO_LONG`) before the
    /// filter is built or a long poll holds it. Default
    /// [`DEFAULT_MAX_FILTER_EXPRESSION_BYTES`] (64 KiB: thousands of tags; 16 receives of
    /// 5.9 MB expressions took 1 GB of RSS).
    pub max_filter_expression_bytes: usize,
    /// Whether consumers may filter by SQL92 expressions over message properties
    /// (RocketMQ's `enablePropertyFilter`). Off: a SQL92 filter is refused as Apache refuses
    /// it (gRPC `ILLEGAL_FILTER_EXPRESSION`, remoting `SYSTEM_ERROR` "The broker does not
    /// support consumer to filter message by SQL92"). Default on, where Apache's is off:
    /// Apache's off-default guards against an unbounded evaluator and its per-message bloom
    /// bitmaps; rocklet's expressions are bounded when parsed (16 KiB, depth 64, IN lists of
    /// 1,024) and a receive or pull looks at no more than `max_scan_units` messages, so a
    /// filter costs bounded work per request, and clients that use `bySql` work unconfigured.
    /// A SQL92 expression is held to the smaller of `max_filter_expression_bytes` and the
    /// core's 16 KiB bound.
    pub enable_property_filter: bool,
    /// The name server's `orderMessageEnable`: routes (GET_ROUTEINFO_BY_TOPIC) carry an
    /// order topic's conf as `orderTopicConf` (mqadmin updateTopic -o true puts it), from
    /// which v4 producers build the topic's queue list. Default off, as Apache's: the conf
    /// is kept either way (updateOrderConf reads it back), routes leave it out.
    pub order_message_enable: bool,
    /// Longest name the host keeps or holds for a client: a gRPC request's topic and group
    /// resources, a remoting heartbeat's client id and group names. Default
    /// [`DEFAULT_MAX_NAME_BYTES`] (255, RocketMQ's longest group name; topics are at most
    /// 127, which the core checks).
    pub max_name_bytes: usize,
    /// HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE` of gRPC connections: the metadata of one call.
    /// Default [`DEFAULT_GRPC_MAX_HEADER_LIST_BYTES`] (16 KiB; RocketMQ clients send under
    /// 1 KiB, gRPC Java accepts 8 KiB).
    pub grpc_max_header_list_bytes: u32,
    /// Largest header (code, remark and extFields) of a remoting frame; a frame with a larger
    /// one closes the connection like a malformed frame. Default
    /// [`DEFAULT_REMOTING_MAX_HEADER_BYTES`] (256 KiB: a send's properties field holds at
    /// most 64 KiB, JSON-escaped).
    pub remoting_max_header_bytes: usize,
    /// Most connections open at once, gRPC, remoting and name server together; one accepted
    /// above it is closed at once. The broker lowers it further to what its file descriptor
    /// limit (the soft `RLIMIT_NOFILE`, raised to the hard limit at start) leaves after the
    /// descriptors open at start and a reserve of 128 for storage and the runtime, so clients
    /// can never take the descriptors the log needs. Default [`DEFAULT_MAX_CONNECTIONS`]
    /// (10,000).
    pub max_connections: usize,
    /// A connection is closed after this long without a sign of its peer: remoting, no
    /// request read while none is being handled (v4 clients heartbeat every 30 s; RocketMQ
    /// closes idle channels after 120 s); gRPC, nothing read at all (a live client answers
    /// the keepalive pings, so this closes peers that never sent their HTTP/2 preface or
    /// vanished). Default [`DEFAULT_IDLE_TIMEOUT_MS`] (120 s); above the keepalive interval.
    pub idle_timeout_ms: Millis,
    /// Longest a request may take to arrive once it began: a remoting frame from its first
    /// byte (then the connection is closed), a gRPC call's request message from the call's
    /// start (then the call fails with `DEADLINE_EXCEEDED`, `REQUEST_READ_TIMEOUT`). Telemetry
    /// streams are exempt. Default [`DEFAULT_REQUEST_READ_TIMEOUT_MS`] (30 s: a 9 MiB request
    /// at 3 Mbit/s).
    pub request_read_timeout_ms: Millis,
    /// gRPC: HTTP/2 PING every connection this often. Default
    /// [`DEFAULT_HTTP2_KEEPALIVE_INTERVAL_MS`] (30 s, RocketMQ's proxy's keepalive period).
    pub http2_keepalive_interval_ms: Millis,
    /// gRPC: close a connection whose PING is not acknowledged within this. Default
    /// [`DEFAULT_HTTP2_KEEPALIVE_TIMEOUT_MS`] (20 s, tonic's default).
    pub http2_keepalive_timeout_ms: Millis,
    /// The share of the data directory's file system in use ([`crate::disk::FsSpace::used_ratio`])
    /// from which new messages are refused (`DISK_FULL`) while everything stored is still
    /// served, as RocketMQ's `diskSpaceWarningLevelRatio`. Default
    /// [`DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO`] (0.90). See [`crate::disk_full`].
    pub disk_space_warning_level_ratio: f64,
    pub core: CoreConfig,
    pub topics: Vec<TopicDecl>,
    /// Consumer groups declared at start (`[[groups]]`).
    pub groups: Vec<GroupDecl>,

    /// The admin services' own listener (`None`: served on `listen`).
    pub admin_listen: Option<SocketAddr>,
    /// The operator console's listener (`None`: off).
    pub console_listen: Option<SocketAddr>,
    /// The console's time-series step.
    pub console_sample_ms: Millis,
    /// Names (`host[:port]`; without a port, any port) the console answers to besides the
    /// address a connection reached (and `localhost` when that is loopback): a request whose
    /// `Host` (or, when present, `Origin`) names anything else is refused, as a page of
    /// another site reaching the console through DNS rebinding would. See
    /// [`crate::http::hosts`].
    pub console_allowed_hosts: Vec<String>,
    /// The same for the metrics listener.
    pub metrics_allowed_hosts: Vec<String>,
    /// Users, ACL entries and the replay window.
    pub auth: crate::auth::AuthFileConfig,
    /// TLS of the gRPC, admin and remoting listeners.
    pub tls: crate::auth::tls::TlsFileConfig,
    /// Cluster mode: a broker group on etcd (`None`: a single broker).
    pub cluster: Option<crate::cluster::ClusterConfig>,
    /// Start on a non-loopback address with no user configured (`--insecure-no-auth`;
    /// never from the file, so exposing an open broker is a decision made on the command line).
    pub insecure_no_auth: bool,
    /// Open a damaged log by moving the damage to `quarantine/` in the data directory
    /// instead of refusing to start (`rocklet broker --repair`; never from the file, so a
    /// repair is always a decision made for one start).
    pub repair: bool,
    /// Log retention ([`crate::retention`]).
    pub retention: RetentionConfig,
    /// Checkpoints of the core's state ([`crate::checkpoint`]).
    pub checkpoint: CheckpointConfig,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig::from_file(FileConfig::default())
    }
}

impl BrokerConfig {
    /// Fills what the file leaves out with defaults.
    #[must_use]
    pub fn from_file(f: FileConfig) -> Self {
        BrokerConfig {
            listen: f
                .listen
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default address")),
            data_dir: f
                .data_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            data_dir_not_empty_ok: false,
            metrics_listen: f.metrics_listen,
            max_long_polling_ms: f.max_long_polling_ms.unwrap_or(30_000),
            remoting_listen: match f.remoting_listen {
                Some(Listen::At(a)) => Some(a),
                _ => None,
            },
            namesrv_listen: match f.namesrv_listen {
                Some(Listen::At(a)) => Some(a),
                _ => None,
            },
            max_concurrent_streams: f
                .max_concurrent_streams
                .unwrap_or(DEFAULT_MAX_CONCURRENT_STREAMS),
            max_inflight_receive_bytes: f
                .max_inflight_receive_bytes
                .unwrap_or(DEFAULT_MAX_INFLIGHT_RECEIVE_BYTES),
            max_inflight_request_bytes: f
                .max_inflight_request_bytes
                .unwrap_or(DEFAULT_MAX_INFLIGHT_REQUEST_BYTES),
            max_batch_messages: f.max_batch_messages.unwrap_or(DEFAULT_MAX_BATCH_MESSAGES),
            max_filter_expression_bytes: f
                .max_filter_expression_bytes
                .unwrap_or(DEFAULT_MAX_FILTER_EXPRESSION_BYTES),
            enable_property_filter: f.enable_property_filter.unwrap_or(true),
            order_message_enable: f.order_message_enable.unwrap_or(false),
            max_name_bytes: f.max_name_bytes.unwrap_or(DEFAULT_MAX_NAME_BYTES),
            grpc_max_header_list_bytes: f
                .grpc_max_header_list_bytes
                .unwrap_or(DEFAULT_GRPC_MAX_HEADER_LIST_BYTES),
            remoting_max_header_bytes: f
                .remoting_max_header_bytes
                .unwrap_or(DEFAULT_REMOTING_MAX_HEADER_BYTES),
            max_connections: f.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            idle_timeout_ms: f.idle_timeout_ms.unwrap_or(DEFAULT_IDLE_TIMEOUT_MS),
            request_read_timeout_ms: f
                .request_read_timeout_ms
                .unwrap_or(DEFAULT_REQUEST_READ_TIMEOUT_MS),
            http2_keepalive_interval_ms: f
                .http2_keepalive_interval_ms
                .unwrap_or(DEFAULT_HTTP2_KEEPALIVE_INTERVAL_MS),
            http2_keepalive_timeout_ms: f
                .http2_keepalive_timeout_ms
                .unwrap_or(DEFAULT_HTTP2_KEEPALIVE_TIMEOUT_MS),
            disk_space_warning_level_ratio: f
                .disk_space_warning_level_ratio
                .unwrap_or(DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO),
            core: f.core,
            topics: f.topics,
            groups: f.groups,

            admin_listen: f.admin_listen,
            console_listen: f.console_listen,
            console_sample_ms: f
                .console_sample_ms
                .unwrap_or(crate::console::DEFAULT_SAMPLE_MS),
            console_allowed_hosts: f.console_allowed_hosts,
            metrics_allowed_hosts: f.metrics_allowed_hosts,
            auth: f.auth,
            tls: f.tls,
            // `FileConfig::parse` refused an invalid `[cluster]` already.
            cluster: crate::cluster::ClusterConfig::from_file(f.cluster).unwrap_or(None),
            insecure_no_auth: false,
            repair: false,
            retention: {
                let d = RetentionConfig::default();
                RetentionConfig {
                    file_reserved_time_hours: f
                        .file_reserved_time_hours
                        .unwrap_or(d.file_reserved_time_hours),
                    // `FileConfig::parse` refused a bad one already.
                    delete_when: f
                        .delete_when
                        .as_deref()
                        .map_or(d.delete_when, |v| parse_delete_when(v).unwrap_or_default()),
                    disk_max_used_space_ratio: f
                        .disk_max_used_space_ratio
                        .unwrap_or(d.disk_max_used_space_ratio),
                    disk_space_clean_forcibly_ratio: f
                        .disk_space_clean_forcibly_ratio
                        .unwrap_or(d.disk_space_clean_forcibly_ratio),
                    check_interval_ms: f.retention_check_interval_ms.unwrap_or(d.check_interval_ms),
                }
            },
            checkpoint: {
                let d = CheckpointConfig::default();
                CheckpointConfig {
                    bytes: f.checkpoint_bytes.unwrap_or(d.bytes),
                    interval_ms: f.checkpoint_interval_ms.unwrap_or(d.interval_ms),
                }
            },
        }
    }

    /// Checks what cannot work, with a message naming the field.
    pub fn validate(&self) -> Result<(), String> {
        self.core.validate().map_err(|e| e.to_string())?;
        if self.core.flush_interval_ms == 0 {
            return Err("invalid config `flush_interval_ms`: must be above 0".into());
        }
        if self.max_long_polling_ms == 0 {
            return Err("invalid config `max_long_polling_ms`: must be above 0".into());
        }
        if self.max_concurrent_streams == 0 {
            return Err("invalid config `max_concurrent_streams`: must be above 0 (a connection with no stream can make no call)".into());
        }
        if self.max_inflight_receive_bytes == 0 {
            return Err("invalid config `max_inflight_receive_bytes`: must be above 0 (no receive could ever be answered)".into());
        }
        if self.max_batch_messages == 0 {
            return Err("invalid config `max_batch_messages`: must be above 0 (no send could carry a message)".into());
        }
        for (name, v) in [
            (
                "max_filter_expression_bytes",
                self.max_filter_expression_bytes,
            ),
            ("max_name_bytes", self.max_name_bytes),
            ("max_connections", self.max_connections),
            ("idle_timeout_ms", self.idle_timeout_ms as usize),
            (
                "request_read_timeout_ms",
                self.request_read_timeout_ms as usize,
            ),
            (
                "http2_keepalive_interval_ms",
                self.http2_keepalive_interval_ms as usize,
            ),
            (
                "http2_keepalive_timeout_ms",
                self.http2_keepalive_timeout_ms as usize,
            ),
            (
                "grpc_max_header_list_bytes",
                self.grpc_max_header_list_bytes as usize,
            ),
        ] {
            if v == 0 {
                return Err(format!("invalid config `{name}`: must be above 0"));
            }
        }
        if self.http2_keepalive_interval_ms >= self.idle_timeout_ms {
            return Err("invalid config `idle_timeout_ms`: must be above `http2_keepalive_interval_ms` (a live gRPC client would be closed between two pings)".into());
        }
        if self.remoting_max_header_bytes < 1024 {
            return Err("invalid config `remoting_max_header_bytes`: must be at least 1024 (every remoting request has a header)".into());
        }
        let largest =
            self.max_request_message_bytes() as u64 + self.remoting_max_header_bytes as u64;
        if self.max_inflight_request_bytes < largest {
            return Err(format!(
                "invalid config `max_inflight_request_bytes`: {} is less than the largest request \
                 ({largest} bytes: 2 x the larger of `max_message_size` and `max_batch_size`, \
                 + 1 MiB, + `remoting_max_header_bytes`), which could then never be taken",
                self.max_inflight_request_bytes
            ));
        }

        let r = self.disk_space_warning_level_ratio;
        if !(r > 0.0 && r <= 1.0) {
            return Err(format!(
                "invalid config `disk_space_warning_level_ratio`: {r} is not above 0 and at most 1 \
                 (the share of the disk in use from which new messages are refused)"
            ));
        }
        let r = &self.retention;
        if !(r.file_reserved_time_hours.is_finite() && r.file_reserved_time_hours >= 0.0) {
            return Err(format!(
                "invalid config `file_reserved_time_hours`: {} is not a number of hours (0 or more)",
                r.file_reserved_time_hours
            ));
        }
        for (name, v) in [
            ("disk_max_used_space_ratio", r.disk_max_used_space_ratio),
            (
                "disk_space_clean_forcibly_ratio",
                r.disk_space_clean_forcibly_ratio,
            ),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(format!(
                    "invalid config `{name}`: {v} is not a ratio above 0 and at most 1 (0.75 is 75 %)"
                ));
            }
        }
        if r.check_interval_ms < 10 {
            return Err(format!(
                "invalid config `retention_check_interval_ms`: {} is below 10",
                r.check_interval_ms
            ));
        }
        if self.checkpoint.interval_ms < 100 {
            return Err(format!(
                "invalid config `checkpoint_interval_ms`: {} is below 100",
                self.checkpoint.interval_ms
            ));
        }
        if self.checkpoint.bytes < 1 << 20 {
            return Err(format!(
                "invalid config `checkpoint_bytes`: {} is below 1048576 (1 MiB)",
                self.checkpoint.bytes
            ));
        }
        if self.console_sample_ms < 100 || self.console_sample_ms > 600_000 {
            return Err(format!(
                "invalid config `console_sample_ms`: {} is not within 100 to 600000",
                self.console_sample_ms
            ));
        }
        self.tls.validate()?;
        self.auth.time_check()?;
        self.console_hosts()?;
        self.metrics_hosts()?;
        if let Some(c) = &self.cluster {
            c.validate()?;
        }
        // Declared topics and groups are checked as the core will check them when the
        // broker records them, so a bad one is refused before the data directory is made.
        let most = |what: &str, n: usize, max: u32| {
            if n > max as usize {
                return Err(format!(
                    "invalid config `{what}`: {n} declared, more than `max_{what}` ({max})"
                ));
            }
            Ok(())
        };
        most("topics", self.topics.len(), self.core.max_topics)?;
        most("groups", self.groups.len(), self.core.max_groups)?;
        let mut seen = std::collections::HashSet::new();
        for t in &self.topics {
            rocklet_core::topic::validate_user_topic(&t.name)
                .map_err(|e| format!("invalid config `topics`: `{}`: {e}", t.name))?;
            let queues = t.queues.unwrap_or(self.core.default_queues);
            if queues == 0 || queues > rocklet_core::MAX_QUEUES {
                return Err(format!(
                    "invalid config `topics`: `{}`: {queues} queues is not within 1..={}",
                    t.name,
                    rocklet_core::MAX_QUEUES
                ));
            }
            if !seen.insert(t.name.as_str()) {
                return Err(format!(
                    "invalid config `topics`: `{}` is declared twice",
                    t.name
                ));
            }
            if let Some(types) = &t.message_types {
                if types.is_empty() {
                    return Err(format!(
                        "invalid config `topics`: `{}` accepts no message type",
                        t.name
                    ));
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for g in &self.groups {
            rocklet_core::topic::validate_group(&g.name)
                .map_err(|e| format!("invalid config `groups`: `{}`: {e}", g.name))?;
            if !seen.insert(g.name.as_str()) {
                return Err(format!(
                    "invalid config `groups`: `{}` is declared twice",
                    g.name
                ));
            }
        }
        Ok(())
    }

    /// Most bytes one gRPC request message, or a remoting send's body, may decode to: twice
    /// the largest message or batch (room for properties and framing) plus 1 MiB.
    #[must_use]
    pub fn max_request_message_bytes(&self) -> usize {
        (self.core.max_message_size.max(self.core.max_batch_size) as usize).saturating_mul(2)
            + (1 << 20)
    }

    /// The names the console answers to besides its own address (`console_allowed_hosts`).
    pub fn console_hosts(&self) -> Result<crate::http::hosts::AllowedHosts, String> {
        crate::http::hosts::AllowedHosts::parse(
            "console",
            "console_allowed_hosts",
            &self.console_allowed_hosts,
        )
    }

    /// The names the metrics listener answers to besides its own address
    /// (`metrics_allowed_hosts`).
    pub fn metrics_hosts(&self) -> Result<crate::http::hosts::AllowedHosts, String> {
        crate::http::hosts::AllowedHosts::parse(
            "metrics listener",
            "metrics_allowed_hosts",
            &self.metrics_allowed_hosts,
        )
    }

    /// Every address the broker listens on for clients (gRPC, admin, console, remoting, name
    /// server, metrics), for the refusal to expose an open broker.
    #[must_use]
    pub fn client_listeners(&self) -> Vec<SocketAddr> {
        [
            Some(self.listen),
            self.admin_listen,
            self.console_listen,
            self.remoting_listen,
            self.namesrv_listen,
            self.metrics_listen,
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The message types a topic accepts.
    #[must_use]
    pub fn accepted_types(&self, topic: &str) -> Vec<TopicMessageType> {
        self.topics
            .iter()
            .find(|t| t.name == topic)
            .and_then(|t| t.message_types.clone())
            .unwrap_or_else(|| TopicMessageType::ALL.to_vec())
    }
}
