//! `rocklet`: the broker and its admin commands.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use rocklet_broker::clock::SystemClock;
use rocklet_broker::config::{
    resolve_listen, BrokerConfig, FileConfig, DEFAULT_NAMESRV_LISTEN, DEFAULT_REMOTING_LISTEN,
};
use rocklet_broker::{admin, client, server};
use rocklet_core::FlushMode;
use tracing_subscriber::EnvFilter;

#[path = "main/cli.rs"]
mod cli;

use cli::{
    AclCmd, AdminCmd, BenchCli, BenchMode, BenchStorage, BrokerArgs, Cli, ClusterCmd, Cmd,
    ExportArgs, Flush, ImportArgs, ReadArgs, Replication, SendArgs, UserCmd,
};

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
    start: rocklet_broker::client::Start,
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
        start,
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
    a.late_wait = secs(c.late_wait, "--late-wait")?;
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
    a.rss_max_per_million = c.rss_max_per_million;
    a.retain_every = c.retain_every;
    a.segment_size = c.segment_size;
    a.checkpoint_every = c.checkpoint_every;
    Ok(a)
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
    let report = rocklet_broker::import::run(&opts).map_err(|e| format!("import {e}"))?;
    print_report(&report, a.json)
}

/// An import's or export's report: JSON with `--json`, else its text.
fn print_report(
    report: &(impl serde::Serialize + std::fmt::Display),
    json: bool,
) -> Result<(), String> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).map_err(|e| e.to_string())?
        );
    } else {
        print!("{report}");
    }
    Ok(())
}

fn export(a: ExportArgs) -> Result<(), String> {
    let core = match &a.config {
        Some(p) => rocklet_broker::config::FileConfig::load(p)?.core,
        None => rocklet_core::Config::default(),
    };
    let opts = rocklet_broker::export::Options {
        from: a.from,
        to: a.to_rocketmq,
        core,
        commitlog_file_size: a.commitlog_file_size,
    };
    let report = rocklet_broker::export::run(&opts).map_err(|e| format!("export {e}"))?;
    print_report(&report, a.json)
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
        Cmd::Export(args) => export(args),
        Cmd::Send(a) => {
            let target = a.client.clone().target();
            match send_cmd(a) {
                Ok(msgs) => rt
                    .block_on(rocklet_broker::client::send(&target, msgs))
                    .map(|out| print!("{out}")),
                Err(e) => Err(e),
            }
        }
        Cmd::Consume(a) => read_run(
            &rt,
            read_cmd(a.read, a.group, Some(a.wait), client::Start::Broker),
        ),
        Cmd::Tail(a) => {
            let start = if a.from_beginning {
                client::Start::Broker
            } else {
                client::Start::End
            };
            read_run(&rt, read_cmd(a.read, a.group, None, start))
        }
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
                AdminCmd::Cluster {
                    action:
                        Some(ClusterCmd::Handoff {
                            cluster,
                            prefix,
                            broker_name,
                            to,
                        }),
                    ..
                } => {
                    let etcd = rocklet_broker::cluster::ClusterConfig::parse_endpoints(&cluster)?;
                    rocklet_broker::cluster::handoff(&etcd, &prefix, &broker_name, to).await?
                }
                AdminCmd::Cluster {
                    cluster: Some(cluster),
                    prefix,
                    action: None,
                } => {
                    let etcd = rocklet_broker::cluster::ClusterConfig::parse_endpoints(&cluster)?;
                    rocklet_broker::cluster::describe(&etcd, &prefix).await?
                }
                AdminCmd::Cluster {
                    cluster: None,
                    action: None,
                    ..
                } => return Err("rocklet admin cluster: --cluster etcd=URL is required".into()),
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
