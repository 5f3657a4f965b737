//! `rocklet`: the broker and its admin commands.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use rocklet_broker::clock::SystemClock;
use rocklet_broker::config::{
    resolve_listen, socket_addr, BrokerConfig, FileConfig, Listen, DEFAULT_LISTEN,
    DEFAULT_NAMESRV_LISTEN, DEFAULT_REMOTING_LISTEN,
};
use rocklet_broker::{admin, server};
use rocklet_core::FlushMode;
use tracing_subscriber::EnvFilter;

/// Rocklet: a RocketMQ-compatible transactional message broker.
///
/// Official RocketMQ 5 clients (Java, Python, Node, Rust, Go…) connect to it unchanged over
/// gRPC, plaintext, at the `--listen` address.
#[derive(Debug, Parser)]
#[command(name = "rocklet", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
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
    /// Send messages to a topic of a running broker: each BODY is one message (none: one per
    /// line of stdin). Prints each message id and queue offset.
    Send(SendArgs),
    /// Receive messages of a topic as a consumer group, print one line each and ack them;
    /// stops after --count messages or when none came for --wait seconds.
    Consume(ConsumeArgs),
    /// Follow a topic: print its messages as they arrive, as consumer group --group (acked,
    /// so a later tail carries on where this one stopped), until Ctrl-C or --count.
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
struct ClientArgs {
    /// The broker's RocketMQ 5 gRPC address (`HOST:PORT`; `https://HOST:PORT` for TLS).
    #[arg(long, env = "ROCKLET_ADDR", default_value = DEFAULT_LISTEN, value_name = "HOST:PORT")]
    broker: String,
    /// Access key (when the broker has authentication on).
    #[arg(long, env = "ROCKLET_ACCESS_KEY", value_name = "AK")]
    access_key: Option<String>,
    /// Its secret key (prefer the environment variable: flags show in `ps`).
    #[arg(
        long,
        env = "ROCKLET_SECRET_KEY",
        value_name = "SK",
        hide_env_values = true
    )]
    secret_key: Option<String>,
    /// CA certificate (PEM) to verify the broker's TLS certificate; implies TLS.
    #[arg(long, env = "ROCKLET_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Name the broker's certificate is for (default: the host of --broker).
    #[arg(long, value_name = "NAME")]
    tls_domain: Option<String>,
}

impl ClientArgs {
    fn target(self) -> rocklet_broker::client::Target {
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
struct SendArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The topic.
    #[arg(long, short)]
    topic: String,
    /// Message tag.
    #[arg(long)]
    tag: Option<String>,
    /// Message key (repeat for more).
    #[arg(long = "key", value_name = "KEY")]
    keys: Vec<String>,
    /// Deliver the messages this many milliseconds after they are sent.
    #[arg(long, value_name = "MS")]
    delay_ms: Option<u64>,
    /// Message bodies (none: each line of stdin is one).
    #[arg(value_name = "BODY")]
    bodies: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct ReadArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The topic.
    #[arg(long, short)]
    topic: String,
    /// Tag filter: `*` for every message, `a || b` for either tag.
    #[arg(long, default_value = "*")]
    tags: String,
    /// Stop after this many messages.
    #[arg(long, short = 'n')]
    count: Option<u64>,
    /// Print queue, offset, message id, tag, keys and delivery attempt before each body.
    #[arg(long, short)]
    verbose: bool,
}

#[derive(Debug, clap::Args)]
struct ConsumeArgs {
    #[command(flatten)]
    read: ReadArgs,
    /// Consumer group.
    #[arg(long, short, default_value = "rocklet-cli")]
    group: String,
    /// Stop when no message came for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3.0)]
    wait: f64,
}

#[derive(Debug, clap::Args)]
struct TailArgs {
    #[command(flatten)]
    read: ReadArgs,
    /// Consumer group.
    #[arg(long, short, default_value = "rocklet-tail")]
    group: String,
}

#[derive(Debug, clap::Args)]
struct PlaygroundArgs {
    /// Where to serve it.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080", value_parser = socket_addr)]
    listen: SocketAddr,
}

fn send_cmd(a: SendArgs) -> Result<Vec<rocklet_broker::client::Outgoing>, String> {
    let bodies: Vec<Vec<u8>> = if a.bodies.is_empty() {
        let mut v = Vec::new();
        for l in std::io::stdin().lines() {
            v.push(
                l.map_err(|e| format!("cannot read stdin: {e}"))?
                    .into_bytes(),
            );
        }
        v
    } else {
        a.bodies.into_iter().map(String::into_bytes).collect()
    };
    Ok(bodies
        .into_iter()
        .map(|body| rocklet_broker::client::Outgoing {
            topic: a.topic.clone(),
            body,
            tag: a.tag.clone(),
            keys: a.keys.clone(),
            delay_ms: a.delay_ms,
        })
        .collect())
}

fn read_cmd(
    a: ReadArgs,
    group: String,
    idle: Option<f64>,
) -> Result<
    (
        rocklet_broker::client::Target,
        rocklet_broker::client::Reading,
    ),
    String,
> {
    let idle = idle
        .map(|s| {
            std::time::Duration::try_from_secs_f64(s)
                .map_err(|_| format!("--wait {s}: expected a non-negative number of seconds"))
        })
        .transpose()?;
    let r = rocklet_broker::client::Reading {
        topic: a.topic,
        group,
        tags: a.tags,
        count: a.count,
        idle,
        verbose: a.verbose,
    };
    Ok((a.client.target(), r))
}

fn read_run(
    rt: &tokio::runtime::Runtime,
    x: Result<
        (
            rocklet_broker::client::Target,
            rocklet_broker::client::Reading,
        ),
        String,
    >,
) -> Result<(), String> {
    let (t, r) = x?;
    let mut out = std::io::stdout().lock();
    rt.block_on(async {
        tokio::select! {
            r = rocklet_broker::client::consume(&t, &r, &mut out) => r.map(|_| ()),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

#[derive(Debug, clap::Args)]
struct BenchCli {
    /// What to measure (`recover`: embedded file storage only, time to reopen a filled log).
    #[arg(value_enum)]
    mode: Option<BenchMode>,
    /// A running RocketMQ 5 gRPC endpoint (HOST:PORT); without it and without --embedded, a
    /// broker is started in-process on a scratch directory.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "embedded")]
    endpoint: Option<String>,
    /// A running broker's RocketMQ 4 remoting listener (HOST:PORT): the send mode over
    /// remoting, as the official v4 clients do it (SEND_MESSAGE_V2, PULL_MESSAGE of 32).
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["embedded", "endpoint"])]
    remoting: Option<String>,
    /// Drive the core in this process instead of going through gRPC.
    #[arg(long)]
    embedded: bool,
    /// Embedded storage.
    #[arg(long, value_enum, default_value = "memory")]
    storage: BenchStorage,
    /// Where embedded file storage (and `recover`) writes a scratch log (removed after).
    #[arg(long, value_name = "DIR", default_value = "target/bench-data")]
    dir: PathBuf,
    /// Flush mode of the embedded or in-process broker.
    #[arg(long, value_enum, default_value = "sync")]
    flush: Flush,
    /// Concurrent clients (gRPC: a connection each; embedded: requests per group commit).
    #[arg(long, visible_alias = "threads", default_value_t = 16)]
    clients: usize,
    /// Concurrent consumers.
    #[arg(long, default_value_t = 2)]
    consumers: usize,
    /// Messages (transactions) in all, unless --duration.
    #[arg(long, visible_alias = "messages", default_value_t = 20_000)]
    count: u64,
    /// Run for this many seconds instead of a count.
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Start at most this many operations per second, all clients together (default: as
    /// fast as replies come). A punctuality run uses it so checks come due spread out, not
    /// as one burst.
    #[arg(long, value_name = "PER_SEC")]
    rate: Option<f64>,
    /// Body size in bytes (at least 16: the bench's header).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Transaction outcomes commit:rollback:unknown in parts; unknown ones are decided by the
    /// check (even sequence numbers commit).
    #[arg(long, default_value = "1:0:0")]
    mix: String,
    /// Pending transactions prepared before the measured part (their checks answer rollback).
    #[arg(long, default_value_t = 0)]
    backlog: u64,
    /// Hold the backlog's first check this long (ms; check immunity) so it stays pending
    /// through the run; default: checked after the transaction timeout, during the run.
    #[arg(long, value_name = "MS")]
    backlog_check_after_ms: Option<u64>,
    /// Transaction timeout before the first check (ms): set on the embedded or in-process
    /// broker; with --endpoint, the remote broker's value (for punctuality figures).
    #[arg(long, value_name = "MS", default_value_t = 6_000)]
    check_after_ms: u64,
    /// Delay mode: delays spread from 1 ms up to this (plus levels 1 and 2 embedded).
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    delay_max_ms: u64,
    /// How long to wait after producing for consumption and checks to finish.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    drain_timeout: f64,
    /// Topic (default per mode: RockletBenchTxn, RockletBenchDelay, RockletBenchNormal).
    #[arg(long)]
    topic: Option<String>,
    /// Consumer group.
    #[arg(long, default_value = "RockletBenchConsumer")]
    group: String,
    /// Consume mode: declare the group FIFO (with --endpoint: through rocklet's admin
    /// service) and send FIFO messages of --message-groups groups; the check also wants each
    /// message group consumed in order.
    #[arg(long)]
    fifo: bool,
    /// Message groups of a --fifo run (message `seq` is of group `seq % N`).
    #[arg(long, value_name = "N", default_value_t = 32)]
    message_groups: u64,
    /// No live line each second.
    #[arg(long)]
    quiet: bool,
    /// Sign every call with this access key (and --secret-key); the in-process broker gets
    /// it as a super user, so authentication is on.
    #[arg(long, value_name = "AK", requires = "secret_key")]
    access_key: Option<String>,
    #[arg(long, value_name = "SK", requires = "access_key")]
    secret_key: Option<String>,
    /// TLS: the CA certificate (PEM) the broker's certificate is verified against.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// The name the broker's certificate is for.
    #[arg(long, value_name = "NAME", default_value = "localhost")]
    tls_domain: String,
    /// The in-process broker's certificate chain and key (PEM): it serves TLS enforcing.
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With --endpoint or --remoting: the broker's process id on this machine; its CPU time over the run
    /// (from /proc/PID/stat) is reported per message or transaction.
    #[arg(long, value_name = "PID")]
    broker_pid: Option<u32>,
    /// With --embedded: every N stored messages print the messages stored so far and this
    /// process's resident memory (VmRSS), and at the end the bytes of it per stored message
    /// (least squares over the samples after the first), with and without the bench's own
    /// per-message ledger.
    #[arg(long, value_name = "N")]
    rss_every: Option<u64>,
    /// With --embedded --storage file: every N stored messages retire every sealed segment
    /// (log retention, forced; the files are deleted on another thread), so the latencies
    /// include its cost.
    #[arg(long, value_name = "N")]
    retain_every: Option<u64>,
    /// With --embedded: the core's segment size in bytes (default 1 GiB).
    #[arg(long, value_name = "BYTES")]
    segment_size: Option<u64>,
    /// Same as the `txn` mode (kept for older scripts).
    #[arg(long, hide = true)]
    transactional: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BenchMode {
    Txn,
    Send,
    Delay,
    Consume,
    Recover,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BenchStorage {
    Memory,
    File,
}

fn bench_args(c: BenchCli) -> Result<rocklet_broker::bench::BenchArgs, String> {
    use rocklet_broker::bench::{BenchArgs, Mix, Mode, Target};
    let mode = match (c.mode, c.transactional) {
        (Some(BenchMode::Txn), _) | (None, true) => Mode::Txn,
        (Some(BenchMode::Send) | None, _) => Mode::Send,
        (Some(BenchMode::Delay), _) => Mode::Delay,
        (Some(BenchMode::Consume), _) => Mode::Consume,
        (Some(BenchMode::Recover), _) => Mode::Recover,
    };
    let target = if c.embedded || mode == Mode::Recover {
        Target::Embedded(match (c.storage, mode) {
            (BenchStorage::File, _) | (_, Mode::Recover) => Some(c.dir),
            (BenchStorage::Memory, _) => None,
        })
    } else if let Some(e) = c.endpoint {
        Target::Endpoint(e)
    } else if let Some(e) = c.remoting {
        Target::Remoting(e)
    } else {
        Target::InProcess
    };
    let secs = |s: f64, flag: &str| {
        std::time::Duration::try_from_secs_f64(s)
            .map_err(|_| format!("{flag} {s}: expected a non-negative number of seconds"))
    };
    let mut a = BenchArgs::new(mode, target);
    a.flush = match c.flush {
        Flush::Sync => FlushMode::Sync,
        Flush::Async => FlushMode::Async,
    };
    a.clients = c.clients;
    a.consumers = c.consumers;
    a.count = c.count;
    a.duration = c.duration.map(|d| secs(d, "--duration")).transpose()?;
    a.rate = match c.rate {
        Some(r) if !(r.is_finite() && r > 0.0) => {
            return Err(format!(
                "--rate {r}: expected a number of operations per second above 0"
            ))
        }
        r => r,
    };
    a.size = c.size;
    a.mix = Mix::parse(&c.mix)?;
    a.backlog = c.backlog;
    a.backlog_check_after_ms = c.backlog_check_after_ms;
    a.check_after_ms = c.check_after_ms;
    a.delay_max_ms = c.delay_max_ms;
    a.drain_timeout = secs(c.drain_timeout, "--drain-timeout")?;
    a.topic = c.topic;
    a.group = c.group;
    a.fifo = c.fifo;
    a.message_groups = c.message_groups;
    a.live = !c.quiet;
    a.credentials = c.access_key.zip(c.secret_key);
    a.tls = c.tls_ca.map(|ca| rocklet_broker::bench::BenchTls {
        ca,
        domain: c.tls_domain,
        cert: c.tls_cert,
        key: c.tls_key,
    });
    a.broker_pid = c.broker_pid;
    a.rss_every = c.rss_every;
    a.retain_every = c.retain_every;
    a.segment_size = c.segment_size;
    Ok(a)
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Flush {
    /// Acknowledge a write only after the fsync that covers it (group commit).
    Sync,
    /// Acknowledge at once; fsync every flush interval.
    Async,
}

#[derive(Debug, clap::Args)]
struct BrokerArgs {
    /// Directory of the commit log (created if missing; one broker at a time, held by a LOCK file).
    /// Default: ./rocklet-data, or `data_dir` in the config file. A directory that is not
    /// empty and holds no Rocklet data is refused (see --data-dir-not-empty-ok).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Use the data directory even though it is not empty and holds no Rocklet data (other
    /// files stay as they are; the broker adds its own beside them).
    #[arg(long)]
    data_dir_not_empty_ok: bool,
    /// Address for RocketMQ 5 gRPC and the admin service. Default: 127.0.0.1:8081, or `listen` in the config file.
    #[arg(long, value_name = "HOST:PORT", value_parser = socket_addr)]
    listen: Option<SocketAddr>,
    /// RocketMQ 4 remoting address (v4 clients), or `off`. Default: 127.0.0.1:10911 (a free
    /// port when --listen has port 0), or `remoting_listen` in the config file.
    #[arg(long, value_name = "HOST:PORT|off")]
    remoting_listen: Option<Listen>,
    /// Name-server address for v4 clients (routes point at the remoting address), or `off`.
    /// Default: 127.0.0.1:9876 (a free port when --listen has port 0), or `namesrv_listen`.
    #[arg(long, value_name = "HOST:PORT|off")]
    namesrv_listen: Option<Listen>,
    /// When writes become durable: `sync` (after an fsync, before the reply) or `async` (the default;
    /// fsync every flush interval). Overrides `core.flush` in the config file.
    #[arg(long, value_enum, value_name = "MODE")]
    flush: Option<Flush>,
    /// Interval between fsyncs under async flush, in ms (default 500).
    #[arg(long, value_name = "MS")]
    flush_interval_ms: Option<u64>,
    /// TOML config file: listen, data_dir, metrics_listen,
    /// max_long_polling_ms, a [core] table with every core setting (segment_size, flush,
    /// max_message_size, transaction_timeout_ms, transaction_check_interval_ms,
    /// transaction_check_max, delay_levels, default_queues, auto_create_topics,
    /// flush_interval_ms, …) and
    /// [[topics]] declarations (name, queues, message_types) and [[groups]] declarations
    /// (name, fifo). Flags override the file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Refuse sends to topics that are not declared in the config file's [[topics]].
    #[arg(long)]
    no_auto_create: bool,
    /// Serve Prometheus metrics as text at http://HOST:PORT/metrics (off unless given).
    #[arg(long, value_name = "HOST:PORT", value_parser = socket_addr)]
    metrics_listen: Option<SocketAddr>,
    /// Log as JSON lines instead of text (filter with RUST_LOG, default `info`).
    #[arg(long)]
    log_json: bool,
    /// Open a damaged log. Without it the broker refuses to start when the log holds damage
    /// that is not a torn tail (bad bytes followed by valid records, damage in an older
    /// segment, another program's files), and names the segment and offset. With it, every
    /// valid record is kept where it is, and each damaged range is moved, byte for byte, to
    /// DATA_DIR/quarantine/; the log reports what it moved.
    #[arg(long)]
    repair: bool,
    /// Serve the admin services on this address only (default: on --listen). Or
    /// `admin_listen` in the config file.
    #[arg(long, value_name = "HOST:PORT", value_parser = socket_addr)]
    admin_listen: Option<SocketAddr>,
    /// Start even on a non-loopback address with no user configured (authentication off:
    /// anyone who reaches the broker may do anything).
    #[arg(long)]
    insecure_no_auth: bool,
    /// Serve the operator console (a web page: overview charts, topics, pending
    /// transactions, message search, delays, dead letters) at http://HOST:PORT/ (off unless
    /// given). Or `console_listen` in the config file. With users configured it needs a
    /// super user's access key and secret key.
    #[arg(long, value_name = "HOST:PORT")]
    console_listen: Option<SocketAddr>,
    /// Cluster mode: `etcd=http://HOST:2379[,http://HOST:2379…]`. The node starts as a
    /// replica of its broker group; etcd elects the master. Or `[cluster]` in the config file.
    #[arg(long, value_name = "etcd=URL[,URL…]")]
    cluster: Option<String>,
    /// Cluster mode: the broker group's name.
    #[arg(long, value_name = "NAME")]
    broker_name: Option<String>,
    /// Cluster mode: this node's id in its group.
    #[arg(long, value_name = "ID")]
    node_id: Option<u32>,
    /// Cluster mode: the gRPC address routes give clients when this node is master
    /// (default: --listen).
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<SocketAddr>,
    /// Cluster mode: where a master serves its log to replicas (default: --listen's IP, a
    /// free port; published in etcd).
    #[arg(long, value_name = "HOST:PORT")]
    replication_listen: Option<SocketAddr>,
    /// Cluster mode: the replication address published in etcd for replicas to connect to,
    /// when it differs from the one bound (a proxy or NAT in between; default: the bound
    /// address).
    #[arg(long, value_name = "HOST:PORT")]
    replication_advertise: Option<SocketAddr>,
    /// Cluster mode: `sync` (default: a write is answered once the SyncStateSet holds it) or
    /// `async` (answered at once, as RocketMQ's ASYNC_MASTER).
    #[arg(long, value_enum, value_name = "MODE")]
    replication: Option<Replication>,
    /// Cluster mode: nodes, the master included, that must hold a write before it is
    /// answered under sync replication (default 2).
    #[arg(long, value_name = "N")]
    min_in_sync_replicas: Option<u32>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Replication {
    Sync,
    Async,
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// RocketMQ's storePathRootDir: the directory holding commitlog/ and config/.
    #[arg(long, value_name = "DIR")]
    from_rocketmq: PathBuf,
    /// The new data directory (must not exist, or be empty).
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// The config file the broker will run with (its [core] table: segment_size,
    /// max_message_size, delay_levels, …).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn import(a: ImportArgs) -> Result<(), String> {
    let core = match &a.config {
        Some(p) => rocklet_broker::config::FileConfig::load(p)?.core,
        None => rocklet_core::Config::default(),
    };
    let opts = rocklet_broker::import::Options {
        from: a.from_rocketmq,
        data_dir: a.data_dir,
        core,
    };
    let report = rocklet_broker::import::run(&opts).map_err(|e| e.to_string())?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        print!("{report}");
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
enum AdminCmd {
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
    Cluster {
        /// etcd: `etcd=http://HOST:2379[,…]` as `rocklet broker --cluster` takes it.
        #[arg(long, value_name = "etcd=URL[,URL…]")]
        cluster: String,
        /// Key prefix the brokers use.
        #[arg(long, default_value = rocklet_broker::cluster::DEFAULT_PREFIX)]
        prefix: String,
    },
}

#[derive(Debug, Subcommand)]
enum UserCmd {
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
enum AclCmd {
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

fn broker_config(a: &BrokerArgs) -> Result<BrokerConfig, String> {
    let file = match &a.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let (file_remoting, file_namesrv) = (file.remoting_listen, file.namesrv_listen);
    let mut cfg = BrokerConfig::from_file(file);
    if let Some(d) = &a.data_dir {
        cfg.data_dir = d.clone();
    }
    cfg.data_dir_not_empty_ok = a.data_dir_not_empty_ok;
    if let Some(l) = a.listen {
        cfg.listen = l;
    }
    cfg.repair = a.repair;
    cfg.insecure_no_auth = a.insecure_no_auth;
    if let Some(l) = a.admin_listen {
        cfg.admin_listen = Some(l);
    }
    if let Some(l) = a.console_listen {
        cfg.console_listen = Some(l);
    }
    let remoting = a.remoting_listen.or(file_remoting);
    cfg.remoting_listen = resolve_listen(remoting, DEFAULT_REMOTING_LISTEN, cfg.listen);
    let namesrv = a.namesrv_listen.or(file_namesrv);
    cfg.namesrv_listen = resolve_listen(namesrv, DEFAULT_NAMESRV_LISTEN, cfg.listen);
    match a.flush {
        Some(Flush::Sync) => cfg.core.flush = FlushMode::Sync,
        Some(Flush::Async) => cfg.core.flush = FlushMode::Async,
        None => {}
    }
    if let Some(ms) = a.flush_interval_ms {
        cfg.core.flush_interval_ms = ms;
    }
    if a.no_auto_create {
        cfg.core.auto_create_topics = false;
    }
    if let Some(m) = a.metrics_listen {
        cfg.metrics_listen = Some(m);
    }
    cluster_args(a, &mut cfg)?;
    cfg.validate()?;
    Ok(cfg)
}

/// `--cluster` and its flags over the file's `[cluster]`.
fn cluster_args(a: &BrokerArgs, cfg: &mut BrokerConfig) -> Result<(), String> {
    use rocklet_broker::cluster::{self, ClusterConfig, ReplicationMode};
    let any = a.broker_name.is_some()
        || a.node_id.is_some()
        || a.advertise.is_some()
        || a.replication_listen.is_some()
        || a.replication_advertise.is_some()
        || a.replication.is_some()
        || a.min_in_sync_replicas.is_some();
    let etcd = a
        .cluster
        .as_deref()
        .map(ClusterConfig::parse_endpoints)
        .transpose()?;
    let mut c = match (cfg.cluster.take(), etcd) {
        (Some(mut c), Some(e)) => {
            c.etcd = e;
            c
        }
        (Some(c), None) => c,
        (None, Some(e)) => ClusterConfig {
            etcd: e,
            broker_name: a
                .broker_name
                .clone()
                .ok_or("--cluster needs --broker-name")?,
            node_id: a.node_id.ok_or("--cluster needs --node-id")?,
            advertise: None,
            replication_listen: None,
            replication_advertise: None,
            replication: ReplicationMode::Sync,
            min_in_sync_replicas: cluster::DEFAULT_MIN_IN_SYNC,
            lease_ttl_s: cluster::DEFAULT_LEASE_TTL_S,
            replica_max_lag_ms: cluster::DEFAULT_REPLICA_MAX_LAG_MS,
            prefix: cluster::DEFAULT_PREFIX.into(),
        },
        (None, None) => {
            if any {
                return Err("--broker-name, --node-id, --advertise, --replication-listen, --replication-advertise, --replication and --min-in-sync-replicas need --cluster etcd=URL".into());
            }
            return Ok(());
        }
    };
    if let Some(n) = &a.broker_name {
        c.broker_name.clone_from(n);
    }
    if let Some(id) = a.node_id {
        c.node_id = id;
    }
    if a.advertise.is_some() {
        c.advertise = a.advertise;
    }
    if a.replication_listen.is_some() {
        c.replication_listen = a.replication_listen;
    }
    if a.replication_advertise.is_some() {
        c.replication_advertise = a.replication_advertise;
    }
    match a.replication {
        Some(Replication::Sync) => c.replication = ReplicationMode::Sync,
        Some(Replication::Async) => c.replication = ReplicationMode::Async,
        None => {}
    }
    if let Some(n) = a.min_in_sync_replicas {
        c.min_in_sync_replicas = n;
    }
    cfg.cluster = Some(c);
    Ok(())
}

fn init_logs(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Cmd::Broker(args) => {
            init_logs(args.log_json);
            match broker_config(&args) {
                Ok(cfg) => rt.block_on(server::run_until_signal(cfg, Arc::new(SystemClock))),
                Err(e) => Err(e),
            }
        }
        Cmd::Bench(c) => match bench_args(*c) {
            Ok(args) => match rt.block_on(rocklet_broker::bench::run(args)) {
                Ok(report) => {
                    print!("{}", report.text);
                    if report.ok {
                        Ok(())
                    } else {
                        Err("the run failed its correctness check or had errors (see above)".into())
                    }
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        Cmd::Import(args) => import(args),
        Cmd::Send(a) => {
            let target = a.client.clone().target();
            match send_cmd(a) {
                Ok(msgs) => rt
                    .block_on(rocklet_broker::client::send(&target, msgs))
                    .map(|out| print!("{out}")),
                Err(e) => Err(e),
            }
        }
        Cmd::Consume(a) => read_run(&rt, read_cmd(a.read, a.group, Some(a.wait))),
        Cmd::Tail(a) => read_run(&rt, read_cmd(a.read, a.group, None)),
        Cmd::Playground(a) => rt.block_on(async {
            let l = rocklet_broker::playground::bind(a.listen).await?;
            let addr = l.local_addr().map_err(|e| e.to_string())?;
            println!("playground at http://{addr}/ (Ctrl-C stops it)");
            tokio::select! {
                () = rocklet_broker::playground::serve(l) => Ok(()),
                _ = tokio::signal::ctrl_c() => Ok(()),
            }
        }),
        Cmd::Admin {
            broker,
            access_key,
            secret_key,
            tls_ca,
            tls_domain,
            command,
        } => rt.block_on(async {
            use rocklet_broker::auth::admin::{client as sec, set_client_options, ClientOptions};
            use rocklet_broker::pb::admin as pb;
            set_client_options(ClientOptions {
                access_key,
                secret_key,
                tls_ca,
                tls_domain,
            });
            let out = match command {
                AdminCmd::User(UserCmd::Add {
                    user: access_key,
                    secret,
                    super_user,
                    session_token,
                }) => {
                    let user = pb::User {
                        access_key,
                        secret_key: secret,
                        super_user,
                        session_token: session_token.unwrap_or_default(),
                        from_config: false,
                    };
                    sec::user_add(&broker, user).await?
                }
                AdminCmd::User(UserCmd::Remove { user }) => {
                    sec::user_remove(&broker, &user).await?
                }
                AdminCmd::User(UserCmd::List) => sec::user_list(&broker).await?,
                AdminCmd::Acl(AclCmd::Add {
                    user,
                    resource,
                    actions,
                    decision,
                    source_ips,
                }) => {
                    let entry = pb::AclEntry {
                        user,
                        resource,
                        actions,
                        decision,
                        source_ips,
                        from_config: false,
                    };
                    sec::acl_add(&broker, entry).await?
                }
                AdminCmd::Acl(AclCmd::Remove { user, resource }) => {
                    sec::acl_remove(&broker, &user, &resource).await?
                }
                AdminCmd::Acl(AclCmd::List { user }) => sec::acl_list(&broker, &user).await?,
                AdminCmd::Topics => admin::client::topics(&broker).await?,
                AdminCmd::Cluster { cluster, prefix } => {
                    let etcd = rocklet_broker::cluster::ClusterConfig::parse_endpoints(&cluster)?;
                    rocklet_broker::cluster::describe(&etcd, &prefix).await?
                }
                AdminCmd::Pending { limit } => admin::client::pending(&broker, limit).await?,
                AdminCmd::Group {
                    name,
                    fifo,
                    no_fifo,
                } => {
                    let declare = (fifo || no_fifo).then_some(fifo);
                    admin::client::group(&broker, &name, declare).await?
                }
                AdminCmd::Resolve { txn, resolution } => {
                    admin::client::resolve(&broker, &txn, &resolution).await?
                }
                AdminCmd::Backup { to } => {
                    let to = std::path::absolute(&to)
                        .map_err(|e| format!("cannot resolve {}: {e}", to.display()))?;
                    admin::client::backup(&broker, &to.to_string_lossy()).await?
                }
                AdminCmd::Restore { from, to } => {
                    let r = tokio::task::spawn_blocking(move || {
                        rocklet_broker::backup::restore(&from, &to).map(|r| (r, to))
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                    let (r, to) = r?;
                    format!(
                        "restored log offset {} (backed up at {} ms, by rocklet {}) into {}: {} \
                         files, {} bytes, {:.3} s\n",
                        r.log_offset,
                        r.time_ms,
                        r.version,
                        to.display(),
                        r.files,
                        r.bytes,
                        r.elapsed.as_secs_f64()
                    )
                }
            };
            print!("{out}");
            Ok(())
        }),
    };
    // Whatever is still running (a stop cut short after a fatal failure) must not hold the
    // exit back.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
