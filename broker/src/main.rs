//! `rocklet`: the broker and its admin commands.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use rocklet_broker::clock::SystemClock;
use rocklet_broker::config::{BrokerConfig, FileConfig, DEFAULT_LISTEN};
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
    /// Measure end-to-end sends (or transactions) over gRPC against an in-process broker on a
    /// scratch data directory.
    Bench {
        /// Flush mode of the measured broker.
        #[arg(long, value_enum, default_value = "sync")]
        flush: Flush,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Messages in all.
        #[arg(long, default_value_t = 20_000)]
        messages: usize,
        /// Body size in bytes.
        #[arg(long, default_value_t = 1024)]
        size: usize,
        /// Send each message as a transaction and commit it.
        #[arg(long)]
        transactional: bool,
    },
    /// Talk to a running broker.
    Admin {
        /// The broker's gRPC address.
        #[arg(long, global = true, default_value = DEFAULT_LISTEN, value_name = "HOST:PORT")]
        broker: String,
        #[command(subcommand)]
        command: AdminCmd,
    },
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
    /// Default: ./rocklet-data, or `data_dir` in the config file.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Address for RocketMQ 5 gRPC and the admin service. Default: 127.0.0.1:8081, or `listen` in the config file.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<SocketAddr>,
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
    /// [[topics]] declarations (name, queues, message_types). Flags override the file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Refuse sends to topics that are not declared in the config file's [[topics]].
    #[arg(long)]
    no_auto_create: bool,
    /// Serve Prometheus metrics as text at http://HOST:PORT/metrics (off unless given).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// Log as JSON lines instead of text (filter with RUST_LOG, default `info`).
    #[arg(long)]
    log_json: bool,
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
    /// Commit or roll back a pending transaction by hand.
    Resolve {
        /// Transaction id (16 hex digits, as `pending` shows it).
        txn: String,
        /// What to do.
        #[arg(value_parser = ["commit", "rollback"])]
        resolution: String,
    },
}

fn broker_config(a: &BrokerArgs) -> Result<BrokerConfig, String> {
    let file = match &a.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let mut cfg = BrokerConfig::from_file(file);
    if let Some(d) = &a.data_dir {
        cfg.data_dir = d.clone();
    }
    if let Some(l) = a.listen {
        cfg.listen = l;
    }
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
    cfg.validate()?;
    Ok(cfg)
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
        Cmd::Bench {
            flush,
            clients,
            messages,
            size,
            transactional,
        } => {
            let args = rocklet_broker::bench::BenchArgs {
                flush: match flush {
                    Flush::Sync => FlushMode::Sync,
                    Flush::Async => FlushMode::Async,
                },
                clients,
                messages,
                size,
                transactional,
            };
            rt.block_on(rocklet_broker::bench::run(args))
                .map(|report| print!("{report}"))
        }
        Cmd::Admin { broker, command } => rt.block_on(async {
            let out = match command {
                AdminCmd::Topics => admin::client::topics(&broker).await?,
                AdminCmd::Pending { limit } => admin::client::pending(&broker, limit).await?,
                AdminCmd::Resolve { txn, resolution } => {
                    admin::client::resolve(&broker, &txn, &resolution).await?
                }
            };
            print!("{out}");
            Ok(())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
