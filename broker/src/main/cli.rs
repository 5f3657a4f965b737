//! The `rocklet` command line: its clap argument structs, one per subcommand (what they
//! mean is in each flag's doc; `main.rs` turns them into the broker's config and runs them).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use rocklet_broker::config::{socket_addr, Listen, DEFAULT_LISTEN};

/// Rocklet: a RocketMQ-compatible transactional message broker.
///
/// Official RocketMQ 5 clients (Java, Python, Node, Rust, Go…) connect to it unchanged over
/// gRPC, plaintext, at the `--listen` address.
#[derive(Debug, Parser)]
#[command(name = "rocklet", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Run the broker (stops cleanly on SIGINT/SIGTERM after flushing the log).
    Broker(BrokerArgs),
    /// Benchmark sends, transactions, delays or consumption, with a correctness check
    /// (exit 1 if a committed message was lost or duplicated, a rolled-back one delivered or
    /// a delayed one early). Against `--endpoint` (any RocketMQ 5 gRPC endpoint), an
    /// in-process broker over gRPC loopback (default), or `--embedded` (the core in-process).
    Bench(Box<BenchCli>),
    /// Convert an Apache RocketMQ 4.x/5.x store into a new Rocklet data directory (the store
    /// is only read): messages keep their topics, queues and queue offsets, consumer offsets
    /// stay valid, transactions and delayed messages carry on. Prints what it did.
    Import(ImportArgs),
    /// Convert a stopped broker's data directory (or a backup directory) into a new Apache
    /// RocketMQ 5.x store (the source is only read): messages keep their topics, queues and
    /// queue offsets, consumer offsets and groups carry over, transactions and delayed
    /// messages as RocketMQ writes them. Prints what it did.
    Export(ExportArgs),
    /// Send messages to a topic of a running broker: each BODY is one message (none: one per
    /// line of stdin). Prints each message id and queue offset.
    Send(SendArgs),
    /// Receive messages of a topic as a consumer group, print one line each and ack them;
    /// stops after --count messages or when none came for --wait seconds.
    Consume(ConsumeArgs),
    /// Follow a topic: print the messages sent from now on as they arrive (the whole topic
    /// with --from-beginning), as consumer group --group (acked, so a later tail carries on
    /// where this one stopped), until Ctrl-C or --count.
    Tail(TailArgs),
    /// Serve the browser playground (the wasm core, built into this binary) at
    /// http://HOST:PORT/.
    Playground(PlaygroundArgs),
    /// Talk to a running broker.
    Admin {
        /// The broker's gRPC (or --admin-listen) address; `https://HOST:PORT` for TLS.
        #[arg(
            long,
            global = true,
            env = "ROCKLET_ADDR",
            default_value = DEFAULT_LISTEN,
            value_name = "HOST:PORT"
        )]
        broker: String,
        /// Access key of a super user (when the broker has authentication on).
        #[arg(long, global = true, env = "ROCKLET_ACCESS_KEY", value_name = "AK")]
        access_key: Option<String>,
        /// Its secret key (prefer the environment variable: flags show in `ps`).
        #[arg(
            long,
            global = true,
            env = "ROCKLET_SECRET_KEY",
            value_name = "SK",
            hide_env_values = true
        )]
        secret_key: Option<String>,
        /// CA certificate (PEM) to verify the broker's TLS certificate; implies TLS.
        #[arg(long, global = true, env = "ROCKLET_TLS_CA", value_name = "FILE")]
        tls_ca: Option<PathBuf>,
        /// Name the broker's certificate is for (default: the host of --broker).
        #[arg(long, global = true, value_name = "NAME")]
        tls_domain: Option<String>,
        #[command(subcommand)]
        command: AdminCmd,
    },
}

/// How `send`, `consume` and `tail` reach the broker.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClientArgs {
    /// The broker's RocketMQ 5 gRPC address (`HOST:PORT`; `https://HOST:PORT` for TLS).
    #[arg(long, env = "ROCKLET_ADDR", default_value = DEFAULT_LISTEN, value_name = "HOST:PORT")]
    pub(crate) broker: String,
    /// Access key (when the broker has authentication on).
    #[arg(long, env = "ROCKLET_ACCESS_KEY", value_name = "AK")]
    pub(crate) access_key: Option<String>,
    /// Its secret key (prefer the environment variable: flags show in `ps`).
    #[arg(
        long,
        env = "ROCKLET_SECRET_KEY",
        value_name = "SK",
        hide_env_values = true
    )]
    pub(crate) secret_key: Option<String>,
    /// CA certificate (PEM) to verify the broker's TLS certificate; implies TLS.
    #[arg(long, env = "ROCKLET_TLS_CA", value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// Name the broker's certificate is for (default: the host of --broker).
    #[arg(long, value_name = "NAME")]
    pub(crate) tls_domain: Option<String>,
}

impl ClientArgs {
    pub(crate) fn target(self) -> rocklet_broker::client::Target {
        rocklet_broker::client::Target {
            addr: self.broker,
            options: rocklet_broker::auth::admin::ClientOptions {
                access_key: self.access_key,
                secret_key: self.secret_key,
                tls_ca: self.tls_ca,
                tls_domain: self.tls_domain,
            },
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct SendArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// The topic.
    #[arg(long, short)]
    pub(crate) topic: String,
    /// Message tag.
    #[arg(long)]
    pub(crate) tag: Option<String>,
    /// Message key (repeat for more).
    #[arg(long = "key", value_name = "KEY")]
    pub(crate) keys: Vec<String>,
    /// Deliver the messages this many milliseconds after they are sent.
    #[arg(long, value_name = "MS")]
    pub(crate) delay_ms: Option<u64>,
    /// Message bodies (none: each line of stdin is one).
    #[arg(value_name = "BODY")]
    pub(crate) bodies: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ReadArgs {
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// The topic.
    #[arg(long, short)]
    pub(crate) topic: String,
    /// Tag filter: `*` for every message, `a || b` for either tag.
    #[arg(long, default_value = "*")]
    pub(crate) tags: String,
    /// Stop after this many messages.
    #[arg(long, short = 'n')]
    pub(crate) count: Option<u64>,
    /// Print queue, offset, message id, tag, keys and delivery attempt before each body.
    #[arg(long, short)]
    pub(crate) verbose: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ConsumeArgs {
    #[command(flatten)]
    pub(crate) read: ReadArgs,
    /// Consumer group.
    #[arg(long, short, default_value = "rocklet-cli")]
    pub(crate) group: String,
    /// Stop when no message came for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3.0)]
    pub(crate) wait: f64,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TailArgs {
    #[command(flatten)]
    pub(crate) read: ReadArgs,
    /// Consumer group.
    #[arg(long, short, default_value = "rocklet-tail")]
    pub(crate) group: String,
    /// In queues the group never read, start at the first message (replay the topic), not
    /// at the end (only messages sent from now on). A group carries on where it stopped
    /// either way.
    #[arg(long)]
    pub(crate) from_beginning: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PlaygroundArgs {
    /// Where to serve it.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080", value_parser = socket_addr)]
    pub(crate) listen: SocketAddr,
}

#[derive(Debug, clap::Args)]
pub(crate) struct BenchCli {
    /// What to measure (`recover`: embedded file storage only, time to reopen a filled log).
    #[arg(value_enum)]
    pub(crate) mode: Option<BenchMode>,
    /// A running RocketMQ 5 gRPC endpoint (HOST:PORT); without it and without --embedded, a
    /// broker is started in-process on a scratch directory.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "embedded")]
    pub(crate) endpoint: Option<String>,
    /// A RocketMQ 4 name server (HOST:PORT, as v4 clients' namesrvAddr: Rocklet's or Apache
    /// RocketMQ's; Rocklet's broker listener answers routes too): the send mode over remoting
    /// against the broker its route names, as the official v4 clients do it (SEND_MESSAGE_V2,
    /// PULL_MESSAGE of 32).
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["embedded", "endpoint"])]
    pub(crate) remoting: Option<String>,
    /// Drive the core in this process instead of going through gRPC.
    #[arg(long)]
    pub(crate) embedded: bool,
    /// Embedded storage.
    #[arg(long, value_enum, default_value = "memory")]
    pub(crate) storage: BenchStorage,
    /// Where embedded file storage (and `recover`) writes a scratch log (removed after).
    #[arg(long, value_name = "DIR", default_value = "target/bench-data")]
    pub(crate) dir: PathBuf,
    /// Flush mode of the embedded or in-process broker.
    #[arg(long, value_enum, default_value = "sync")]
    pub(crate) flush: Flush,
    /// Concurrent clients (gRPC: a connection each; embedded: requests per group commit).
    #[arg(long, visible_alias = "threads", default_value_t = 16)]
    pub(crate) clients: usize,
    /// Concurrent consumers.
    #[arg(long, default_value_t = 2)]
    pub(crate) consumers: usize,
    /// Messages (transactions) in all, unless --duration.
    #[arg(long, visible_alias = "messages", default_value_t = 20_000)]
    pub(crate) count: u64,
    /// Run for this many seconds instead of a count.
    #[arg(long, value_name = "SECS")]
    pub(crate) duration: Option<f64>,
    /// Start at most this many operations per second, all clients together (default: as
    /// fast as replies come). A punctuality run uses it so checks come due spread out, not
    /// as one burst.
    #[arg(long, value_name = "PER_SEC")]
    pub(crate) rate: Option<f64>,
    /// Body size in bytes (at least 16: the bench's header).
    #[arg(long, default_value_t = 1024)]
    pub(crate) size: usize,
    /// Transaction outcomes commit:rollback:unknown in parts; unknown ones are decided by the
    /// check (even sequence numbers commit).
    #[arg(long, default_value = "1:0:0")]
    pub(crate) mix: String,
    /// Pending transactions prepared before the measured part (their checks answer rollback).
    #[arg(long, default_value_t = 0)]
    pub(crate) backlog: u64,
    /// Hold the backlog's first check this long (ms; check immunity) so it stays pending
    /// through the run; default: checked after the transaction timeout, during the run.
    #[arg(long, value_name = "MS")]
    pub(crate) backlog_check_after_ms: Option<u64>,
    /// Transaction timeout before the first check (ms): set on the embedded or in-process
    /// broker; with --endpoint, the remote broker's value (for punctuality figures).
    #[arg(long, value_name = "MS", default_value_t = 6_000)]
    pub(crate) check_after_ms: u64,
    /// Delay mode: delays spread from 1 ms up to this (plus levels 1 and 2 embedded).
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    pub(crate) delay_max_ms: u64,
    /// How long to wait after producing for consumption and checks to finish.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub(crate) drain_timeout: f64,
    /// After a drain that timed out, how much longer to wait for the messages still due
    /// (delivered late after a failover): those that come are reported late, not missing.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub(crate) late_wait: f64,
    /// Topic (default per mode: RockletBenchTxn, RockletBenchDelay, RockletBenchNormal).
    #[arg(long)]
    pub(crate) topic: Option<String>,
    /// Consumer group.
    #[arg(long, default_value = "RockletBenchConsumer")]
    pub(crate) group: String,
    /// Consume mode: declare the group FIFO (with --endpoint: through rocklet's admin
    /// service) and send FIFO messages of --message-groups groups; the check also wants each
    /// message group consumed in order.
    #[arg(long)]
    pub(crate) fifo: bool,
    /// Message groups of a --fifo run (message `seq` is of group `seq % N`).
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub(crate) message_groups: u64,
    /// No live line each second.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Sign every call with this access key (and --secret-key); the in-process broker gets
    /// it as a super user, so authentication is on.
    #[arg(long, value_name = "AK", requires = "secret_key")]
    pub(crate) access_key: Option<String>,
    #[arg(long, value_name = "SK", requires = "access_key")]
    pub(crate) secret_key: Option<String>,
    /// TLS: the CA certificate (PEM) the broker's certificate is verified against.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// The name the broker's certificate is for.
    #[arg(long, value_name = "NAME", default_value = "localhost")]
    pub(crate) tls_domain: String,
    /// The in-process broker's certificate chain and key (PEM): it serves TLS enforcing.
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    pub(crate) tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// With --endpoint or --remoting: the broker's process id on this machine; its CPU time over the run
    /// (from /proc/PID/stat) is reported per message or transaction.
    #[arg(long, value_name = "PID")]
    pub(crate) broker_pid: Option<u32>,
    /// With --embedded: every N stored messages print the messages stored so far and this
    /// process's resident memory (VmRSS), and at the end the bytes of it per stored message
    /// (least squares over the samples after the first), with and without the bench's own
    /// per-message ledger.
    #[arg(long, value_name = "N")]
    pub(crate) rss_every: Option<u64>,
    /// With --rss-every: fail the run when the resident memory per million stored messages
    /// (the slope, without the bench's own ledger) is above BYTES.
    #[arg(long, value_name = "BYTES")]
    pub(crate) rss_max_per_million: Option<u64>,
    /// With --embedded --storage file: every N stored messages retire every sealed segment
    /// (log retention, forced; the files are deleted on another thread), so the latencies
    /// include its cost.
    #[arg(long, value_name = "N")]
    pub(crate) retain_every: Option<u64>,
    /// With --embedded: the core's segment size in bytes (default 1 GiB).
    #[arg(long, value_name = "BYTES")]
    pub(crate) segment_size: Option<u64>,
    /// recover: record a checkpoint each time the log grew by BYTES while filling (as the
    /// broker's `checkpoint_bytes`); the reopen replays only the log after the newest one,
    /// and the run fails if it replays more.
    #[arg(long, value_name = "BYTES")]
    pub(crate) checkpoint_every: Option<u64>,
    /// Same as the `txn` mode (kept for older scripts).
    #[arg(long, hide = true)]
    pub(crate) transactional: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum BenchMode {
    Txn,
    Send,
    Delay,
    Consume,
    Recover,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum BenchStorage {
    Memory,
    File,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Flush {
    /// Acknowledge a write only after the fsync that covers it (group commit).
    Sync,
    /// Acknowledge at once; fsync every flush interval.
    Async,
}

#[derive(Debug, clap::Args)]
pub(crate) struct BrokerArgs {
    /// Directory of the commit log (created if missing; one broker at a time, held by a LOCK file).
    /// Default: ./rocklet-data, or `data_dir` in the config file. A directory that is not
    /// empty and holds no Rocklet data is refused (see --data-dir-not-empty-ok).
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Use the data directory even though it is not empty and holds no Rocklet data (other
    /// files stay as they are; the broker adds its own beside them).
    #[arg(long)]
    pub(crate) data_dir_not_empty_ok: bool,
    /// Address for RocketMQ 5 gRPC and the admin service. Default: 127.0.0.1:8081, or `listen` in the config file.
    #[arg(long, value_name = "HOST:PORT", value_parser = socket_addr)]
    pub(crate) listen: Option<SocketAddr>,
    /// RocketMQ 4 remoting address (v4 clients), or `off`. Default: 127.0.0.1:10911 (a free
    /// port when --listen has port 0), or `remoting_listen` in the config file.
    #[arg(long, value_name = "HOST:PORT|off")]
    pub(crate) remoting_listen: Option<Listen>,
    /// Name-server address for v4 clients (routes point at the remoting address), or `off`.
    /// Default: 127.0.0.1:9876 (a free port when --listen has port 0), or `namesrv_listen`.
    #[arg(long, value_name = "HOST:PORT|off")]
    pub(crate) namesrv_listen: Option<Listen>,
    /// When writes become durable: `sync` (after an fsync, before the reply) or `async` (the default;
    /// fsync every flush interval). Overrides `core.flush` in the config file.
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) flush: Option<Flush>,
    /// Interval between fsyncs under async flush, in ms (default 500).
    #[arg(long, value_name = "MS")]
    pub(crate) flush_interval_ms: Option<u64>,
    /// TOML config file: listen, data_dir, metrics_listen,
    /// max_long_polling_ms, a [core] table with every core setting (segment_size, flush,
    /// max_message_size, transaction_timeout_ms, transaction_check_interval_ms,
    /// transaction_check_max, delay_levels, default_queues, auto_create_topics,
    /// flush_interval_ms, …) and
    /// [[topics]] declarations (name, queues, message_types) and [[groups]] declarations
    /// (name, fifo). Flags override the file.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Refuse sends to topics that are not declared in the config file's [[topics]].
    #[arg(long)]
    pub(crate) no_auto_create: bool,
    /// Serve Prometheus metrics as text at http://HOST:PORT/metrics (off unless given).
    #[arg(long, value_name = "HOST:PORT", value_parser = socket_addr)]
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// Log as JSON lines instead of text (filter with RUST_LOG, default `info`).
    #[arg(long)]
    pub(crate) log_json: bool,
    /// Open a damaged log. Without it the broker refuses to start when the log holds damage
    /// that is not a torn tail (bad bytes followed by valid records, damage in an older
    /// segment, another program's files), and names the segment and offset. With it, every
    /// valid record is kept where it is, and each damaged range is moved, byte for byte, to
    /// DATA_DIR/quarantine/; the log reports what it moved.
    #[arg(long)]
    pub(crate) repair: bool,
    /// Serve the admin services on this address only (default: on --listen). Or
    /// `admin_listen` in the config file.
    #[arg(long, value_name = "HOST:PORT", value_parser = socket_addr)]
    pub(crate) admin_listen: Option<SocketAddr>,
    /// Start even on a non-loopback address with no user configured (authentication off:
    /// anyone who reaches the broker may do anything).
    #[arg(long)]
    pub(crate) insecure_no_auth: bool,
    /// Serve the operator console (a web page: overview charts, topics, pending
    /// transactions, message search, delays, dead letters) at http://HOST:PORT/ (off unless
    /// given). Or `console_listen` in the config file. With users configured it needs a
    /// super user's access key and secret key.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) console_listen: Option<SocketAddr>,
    /// Cluster mode: `etcd=http://HOST:2379[,http://HOST:2379…]`. The node starts as a
    /// replica of its broker group; etcd elects the master. Or `[cluster]` in the config file.
    #[arg(long, value_name = "etcd=URL[,URL…]")]
    pub(crate) cluster: Option<String>,
    /// Cluster mode: the broker group's name.
    #[arg(long, value_name = "NAME")]
    pub(crate) broker_name: Option<String>,
    /// Cluster mode: this node's id in its group.
    #[arg(long, value_name = "ID")]
    pub(crate) node_id: Option<u32>,
    /// Cluster mode: the gRPC address routes give clients when this node is master
    /// (default: --listen).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) advertise: Option<SocketAddr>,
    /// Cluster mode: where a master serves its log to replicas (default: --listen's IP, a
    /// free port; published in etcd).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) replication_listen: Option<SocketAddr>,
    /// Cluster mode: the replication address published in etcd for replicas to connect to,
    /// when it differs from the one bound (a proxy or NAT in between; default: the bound
    /// address).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) replication_advertise: Option<SocketAddr>,
    /// Cluster mode: `sync` (default: a write is answered once the SyncStateSet holds it) or
    /// `async` (answered at once, as RocketMQ's ASYNC_MASTER).
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) replication: Option<Replication>,
    /// Cluster mode: nodes, the master included, that must hold a write before it is
    /// answered under sync replication (default 2).
    #[arg(long, value_name = "N")]
    pub(crate) min_in_sync_replicas: Option<u32>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Replication {
    Sync,
    Async,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    /// RocketMQ's storePathRootDir: the directory holding commitlog/ and config/.
    #[arg(long, value_name = "DIR")]
    pub(crate) from_rocketmq: PathBuf,
    /// The new data directory (must not exist, or be empty).
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: PathBuf,
    /// The config file the broker will run with (its [core] table: segment_size,
    /// max_message_size, delay_levels, …).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// The new RocketMQ store root (storePathRootDir: commitlog/ and config/ are written
    /// there); must not exist, or be empty.
    #[arg(long, value_name = "DIR")]
    pub(crate) to_rocketmq: PathBuf,
    /// The data directory of a stopped broker, or a backup directory.
    #[arg(long, value_name = "DATA_DIR")]
    pub(crate) from: PathBuf,
    /// The config file the broker ran with (its [core] table).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The RocketMQ broker's mappedFileSizeCommitLog (bytes of each commit-log file).
    #[arg(long, value_name = "BYTES", default_value_t = rocklet_broker::export::DEFAULT_COMMITLOG_FILE_SIZE)]
    pub(crate) commitlog_file_size: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AdminCmd {
    /// List topics and their queues.
    Topics,
    /// List pending (half) transactions: id, producer group, topic, age, checks, next check.
    Pending {
        /// Show at most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// Show a consumer group, or declare it FIFO (orderly receives) or not. Declare a group
    /// before its push consumers start: they choose how to consume when they connect.
    Group {
        /// The consumer group.
        name: String,
        /// Declare it FIFO.
        #[arg(long, conflicts_with = "no_fifo")]
        fifo: bool,
        /// Declare it not FIFO.
        #[arg(long)]
        no_fifo: bool,
    },
    /// Commit or roll back a pending transaction by hand.
    Resolve {
        /// Transaction id (16 hex digits, as `pending` shows it).
        txn: String,
        /// What to do.
        #[arg(value_parser = ["commit", "rollback"])]
        resolution: String,
    },
    /// Back up the running broker's data directory into DIR, a directory on the broker's
    /// host: the log up to a durable point, users, quarantine, and a manifest. Into a DIR
    /// holding an earlier backup only what is new is copied. Prints what it copied.
    Backup {
        /// The backup directory (relative: to this command's working directory).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
    /// Restore a backup into a new or empty data directory (no broker needed): checks every
    /// file against the backup's manifest first, refusing a damaged or incomplete backup.
    /// Then start `rocklet broker --data-dir DATA_DIR`.
    Restore {
        /// The backup directory.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
        /// The new data directory.
        #[arg(long, value_name = "DATA_DIR")]
        to: PathBuf,
    },
    /// Users (access key and secret key); the first one must be a super user.
    #[command(subcommand)]
    User(UserCmd),
    /// ACL entries of users (RocketMQ 5's ACL 2.0 model).
    #[command(subcommand)]
    Acl(AclCmd),
    /// Cluster mode: every broker group in etcd — master, epoch, SyncStateSet, live nodes and
    /// replica lag (read from etcd, not from --broker).
    #[command(subcommand_negates_reqs = true)]
    Cluster {
        /// etcd: `etcd=http://HOST:2379[,…]` as `rocklet broker --cluster` takes it.
        #[arg(long, value_name = "etcd=URL[,URL…]", required = true)]
        cluster: Option<String>,
        /// Key prefix the brokers use.
        #[arg(long, default_value = rocklet_broker::cluster::DEFAULT_PREFIX)]
        prefix: String,
        #[command(subcommand)]
        action: Option<ClusterCmd>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCmd {
    /// The group's master hands mastership to an in-sync replica at once (no wait for its
    /// lease): the most advanced member of the SyncStateSet, or --to. The old master then
    /// passes what clients send on to the new one until it is restarted (it then follows as a
    /// replica). SIGTERM on a master hands over the same way before it stops.
    Handoff {
        /// etcd: `etcd=http://HOST:2379[,…]` as `rocklet broker --cluster` takes it.
        #[arg(long, value_name = "etcd=URL[,URL…]")]
        cluster: String,
        /// Key prefix the brokers use.
        #[arg(long, default_value = rocklet_broker::cluster::DEFAULT_PREFIX)]
        prefix: String,
        /// The broker group.
        #[arg(long, value_name = "G")]
        broker_name: String,
        /// The node to take over; it must be in the SyncStateSet.
        #[arg(long, value_name = "N")]
        to: Option<u32>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum UserCmd {
    /// Add a user, or replace one added here before (kept in DATA_DIR/auth.json).
    Add {
        /// The new user's access key.
        #[arg(value_name = "ACCESS_KEY")]
        user: String,
        /// The secret key (or ROCKLET_NEW_SECRET_KEY).
        #[arg(long, env = "ROCKLET_NEW_SECRET_KEY", hide_env_values = true)]
        secret: String,
        /// A super user may do everything, admin included.
        #[arg(long = "super")]
        super_user: bool,
        /// Requests must also carry this session token.
        #[arg(long)]
        session_token: Option<String>,
    },
    /// Remove a user added here, with its ACL entries.
    Remove {
        #[arg(value_name = "ACCESS_KEY")]
        user: String,
    },
    /// List users (never their secrets).
    List,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AclCmd {
    /// Add an entry, or replace the one of the same user and resource.
    Add {
        /// The user (access key).
        #[arg(long)]
        user: String,
        /// Topic:<name>, Group:<name>, Cluster; `*` for any name, a trailing `*` for a prefix.
        #[arg(long)]
        resource: String,
        /// Pub, Sub, Create, Update, Delete, Get, List, All (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        actions: Vec<String>,
        /// Allow or Deny (any matching Deny wins).
        #[arg(long, default_value = "Allow")]
        decision: String,
        /// Source addresses or CIDR ranges the entry applies to (comma-separated; default: any).
        #[arg(long, value_delimiter = ',')]
        source_ips: Vec<String>,
    },
    /// Remove the entry of a user on a resource.
    Remove {
        #[arg(long)]
        user: String,
        #[arg(long)]
        resource: String,
    },
    /// List entries (of one user, or all).
    List {
        #[arg(long, default_value = "")]
        user: String,
    },
}
