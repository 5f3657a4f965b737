//! Opening the data directory, starting the core thread, the gRPC server and the metrics
//! endpoint, and stopping them in order (stop accepting, answer what is in flight, flush).

use std::net::SocketAddr;
use std::sync::Arc;

use rocklet_core::config::StoreHost;
use rocklet_core::{AnyStorage, Broker, FileStorage};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{info, warn};

use crate::admin::AdminService;
use crate::auth::admin::{AdminGate, SecurityService};
use crate::auth::tls::Tls;
use crate::auth::Auth;
use crate::budget::RequestBudget;
use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::driver::{self, CoreHandle, Fatal};
use crate::grpc::gate::GateLayer;
use crate::grpc::service::Messaging;
use crate::metrics::{self, Metrics};
use crate::net::{self, ConnLimit};
use crate::pb::admin::admin_server::AdminServer;
use crate::pb::admin::security_server::SecurityServer;
use crate::pb::v2::messaging_service_server::MessagingServiceServer;
use crate::remoting::conn::Ctx as RemotingCtx;
use crate::remoting::server::{Listeners, RemotingServer};

/// A broker that is serving.
#[derive(Debug)]
pub struct RunningBroker {
    /// Where gRPC is served (the real port when the config said 0).
    pub addr: SocketAddr,
    /// Where metrics are served.
    pub metrics_addr: Option<SocketAddr>,
    /// The core thread.
    pub core: CoreHandle,
    /// The broker's own metrics.
    pub metrics: Arc<Metrics>,
    /// Where RocketMQ 4 remoting is served (`None`: off).
    pub remoting_addr: Option<SocketAddr>,
    /// Where the name-server role is served (`None`: off).
    pub namesrv_addr: Option<SocketAddr>,
    /// Where the admin services are served when they have a listener of their own.
    pub admin_addr: Option<SocketAddr>,
    /// Where the operator console is served (`None`: off).
    pub console_addr: Option<SocketAddr>,
    /// Users and ACLs.
    pub auth: Arc<Auth>,
    /// TLS of the listeners (`None`: plaintext).
    pub tls: Option<Arc<Tls>>,
    /// Cluster mode: what this node knows of its group, and its replication address.
    pub cluster: Option<(crate::cluster::View, SocketAddr)>,
    remoting: Option<RemotingServer>,
    stop_admin: Option<oneshot::Sender<()>>,
    admin_server: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    tls_reloader: Option<JoinHandle<()>>,
    stop_server: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    metrics_task: Option<JoinHandle<()>>,
    /// Background tasks: rates and the disk-full guard (once a second), retention.
    samplers: Vec<JoinHandle<()>>,
    console: Option<crate::console::RunningConsole>,
    core_thread: Option<std::thread::JoinHandle<()>>,
}

/// Opens the data directory (recovering the log) and starts serving.
pub async fn start(mut cfg: BrokerConfig, clock: Arc<dyn Clock>) -> Result<RunningBroker, String> {
    cfg.validate()?;
    // Descriptors: as many as the hard limit allows; connections are capped below them.
    let fd_limit = net::raise_fd_limit();
    // The remoting listener first: its address is the store host of every record
    // (RocketMQ's brokerIP1:listenPort), as v4 clients compute offset message ids from it.
    let remoting_listeners = if cfg.remoting_listen.is_some() || cfg.namesrv_listen.is_some() {
        Some(Listeners::bind(cfg.remoting_listen, cfg.namesrv_listen).await?)
    } else {
        None
    };
    if let Some(a) = remoting_listeners.as_ref().and_then(Listeners::broker_addr) {
        cfg.core.store_host = store_host(a, cfg.core.store_host);
    }
    // Every socket before the data directory: a port in use (or a bad certificate) stops the
    // start with nothing created on disk.
    let tls = Tls::load(&cfg.tls)?;
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    cfg.listen = addr;
    let metrics_listener = match cfg.metrics_listen {
        Some(a) => Some(
            metrics::render::bind(a)
                .await
                .map_err(|e| format!("cannot listen for metrics on {a}: {e}"))?,
        ),
        None => None,
    };
    let admin_listener = match cfg.admin_listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .map_err(|e| format!("cannot listen for admin on {a}: {e}"))?,
        ),
        None => None,
    };
    let console_listener = match cfg.console_listen {
        Some(a) => Some(crate::console::bind(a).await?),
        None => None,
    };
    // A data directory that is a file, or holds someone else's files (only read here).
    crate::config::check_data_dir(&cfg.data_dir, cfg.data_dir_not_empty_ok)?;
    crate::backup::refuse_backup_dir(&cfg.data_dir)?;
    // Users and the refusal to serve an open broker beyond loopback, before the data
    // directory too (auth.json is only read: a directory that does not exist has none).
    let m = Arc::new(Metrics::default());
    let auth = Auth::open(&cfg.auth, Some(&cfg.data_dir), clock.clone(), m.clone())?;
    if !auth.enabled() && !cfg.insecure_no_auth {
        if let Some(a) = cfg
            .client_listeners()
            .into_iter()
            .find(|a| !a.ip().is_loopback())
        {
            return Err(format!(
                "refusing to listen on {a} with authentication off: anyone who can reach it could                  read, write and administer everything. Declare users in the config file                  ([[auth.users]], at least one with super_user = true), or listen on loopback                  only, or pass --insecure-no-auth to run open on purpose"
            ));
        }
    }
    if !auth.enabled() && cfg.insecure_no_auth {
        warn!("authentication is off (--insecure-no-auth): every client may do everything");
    }

    let mut core_cfg = cfg.core.clone();
    // Long polling needs to know when queues get messages.
    core_cfg.notify_available = true;
    // Cluster mode, sync replication: replies wait for the SyncStateSet as for an fsync.
    if let Some(c) = &cfg.cluster {
        core_cfg.replicated_acks = c.replication == crate::cluster::ReplicationMode::Sync;
    }
    // The console tells each message's story from the core's trace events.
    if cfg.console_listen.is_some() {
        core_cfg.trace = true;
    }
    let dir = cfg.data_dir.clone();
    let storage = FileStorage::open(&dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => {
            format!(
                "{e}: another rocklet broker is running on {}; stop it or pick another --data-dir",
                dir.display()
            )
        }
        _ => format!("cannot open data directory {}: {e}", dir.display()),
    })?;
    let started = std::time::Instant::now();
    // Not clean: the segments' cached pages were dropped, recovery reads the disk.
    let last_stop_clean = storage.was_clean();
    // Segment files as RocketMQ's commit log has them: exactly segment_size long.
    let storage = AnyStorage::File(storage.preallocate(core_cfg.segment_size));
    let opened = if cfg.repair {
        Broker::open_repairing(core_cfg, storage, clock.now())
    } else if cfg.cluster.is_some() {
        // Every node starts as a replica; an election makes one the master.
        Broker::open_replica(core_cfg, storage, clock.now())
    } else {
        Broker::open(core_cfg, storage, clock.now())
    };
    let mut broker = opened.map_err(|e| match e {
        rocklet_core::Error::Corrupted { .. } => format!(
            "the log in {} is damaged, and nothing was changed: {e}. Restore the data \
             directory from a backup, or start once with --repair to keep every valid record \
             and move the damaged bytes to {}",
            dir.display(),
            dir.join(rocklet_core::QUARANTINE_DIR).display()
        ),
        e => format!("cannot recover the log in {}: {e}", dir.display()),
    })?;
    let r = broker.recovery_report();
    info!(
        data_dir = %dir.display(),
        segments = r.segments,
        records = r.records,
        bytes_scanned = r.bytes_scanned,
        bytes_truncated = r.bytes_truncated,
        pending_transactions = broker.pending_transaction_count(),
        pending_delays = broker.pending_delay_count(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        last_stop_clean,
        from_checkpoint = ?r.checkpoint,
        "log recovered"
    );
    if let Some(why) = &r.checkpoint_unused {
        warn!(file = %dir.join(rocklet_core::CHECKPOINT_FILE).display(), reason = %why, "the checkpoint was not used: the whole log was replayed");
    }
    for cut in &r.cuts {
        warn!(offset = cut.offset, bytes = cut.bytes, reason = %cut.reason, kept_as = ?cut.kept_as, "recovery cut a torn tail");
    }
    for q in r
        .quarantined
        .iter()
        .filter(|q| q.name.ends_with(".missing"))
    {
        warn!(offset = q.offset, bytes = q.bytes, reason = %q.reason, note = %dir.join(rocklet_core::QUARANTINE_DIR).join(&q.name).display(), "repair found log offsets missing (no segment file holds them); recorded in quarantine, the log goes on without them");
    }
    for q in r
        .quarantined
        .iter()
        .filter(|q| !q.name.ends_with(".missing"))
    {
        warn!(offset = q.offset, bytes = q.bytes, reason = %q.reason, file = %dir.join(rocklet_core::QUARANTINE_DIR).join(&q.name).display(), "repair moved damaged bytes to quarantine");
    }
    if cfg.repair {
        info!(
            records = r.records,
            damaged_ranges = r.quarantined.len(),
            bytes_quarantined = r.bytes_quarantined(),
            "repair done"
        );
    }
    // In cluster mode the master declares them once elected (a replica writes nothing).
    let declared = if cfg.cluster.is_some() {
        (&[][..], &[][..])
    } else {
        (&cfg.topics[..], &cfg.groups[..])
    };
    for t in declared.0 {
        let queues = t.queues.unwrap_or(cfg.core.default_queues);
        broker
            .create_topic(&t.name, queues)
            .map_err(|e| format!("cannot record topic `{}` in {}: {e}", t.name, dir.display()))?
            .map_err(|e| format!("invalid config `topics`: `{}`: {e}", t.name))?;
    }
    for g in declared.1 {
        broker
            .declare_group(&g.name, g.fifo)
            .map_err(|e| format!("cannot record group `{}` in {}: {e}", g.name, dir.display()))?
            .map_err(|e| format!("invalid config `groups`: `{}`: {e}", g.name))?;
    }

    let open = net::open_fds();
    let cap = net::connection_cap(cfg.max_connections, fd_limit, open);
    if cap < cfg.max_connections {
        warn!(max_connections = cfg.max_connections, cap, fd_limit = ?fd_limit, fds_open = open, reserve = net::FD_RESERVE, "the file descriptor limit caps connections below max_connections");
    }
    let conn_limit = Arc::new(ConnLimit::new(cap, m.clone()));
    // One budget of request bytes held for every listener; one client address and one
    // connection hold at most a share of it.
    let largest = cfg.max_request_message_bytes() as u64 + cfg.remoting_max_header_bytes as u64;
    let request_budget = RequestBudget::shared(cfg.max_inflight_request_bytes, largest, m.clone());
    let (core, core_thread) = driver::spawn(broker, clock.clone(), m.clone())
        .map_err(|e| format!("cannot start the core thread: {e}"))?;
    let cluster = match &cfg.cluster {
        Some(c) => {
            let view = crate::cluster::View::default();
            view.min_in_sync_replicas.store(
                u64::from(c.min_in_sync_replicas),
                std::sync::atomic::Ordering::Relaxed,
            );
            let (repl, _task) = crate::cluster::node::start(
                c.clone(),
                core.clone(),
                view.clone(),
                cfg.listen,
                cfg.topics.clone(),
                cfg.groups.clone(),
                cfg.core.default_queues,
                crate::cluster::replication::max_frame(&cfg.core),
                remoting_listeners.as_ref().and_then(Listeners::broker_addr),
            )
            .await?;
            let _ = m.cluster.set(view.clone());
            Some((view, repl))
        }
        None => None,
    };
    let cfg = Arc::new(cfg);
    let max_decode = cfg.max_request_message_bytes();
    let service = Messaging::new(core.clone(), cfg.clone(), m.clone())
        .with_clock(clock.clone())
        .with_auth(auth.clone())
        .with_cluster(cluster.as_ref().map(|c| c.0.clone()));
    service.spawn_renewer();
    let messaging = MessagingServiceServer::new(service)
        .max_decoding_message_size(max_decode)
        .max_encoding_message_size(max_decode);
    // The admin services: a super user once authentication is on.
    let gate = AdminGate::new(auth.clone());
    let admin = AdminServer::with_interceptor(
        AdminService::new(core.clone(), clock.clone(), m.clone()),
        gate.clone(),
    );
    let security = SecurityServer::with_interceptor(SecurityService::new(auth.clone()), gate);
    let (admin_here, security_here, admin_elsewhere) = if admin_listener.is_some() {
        (None, None, Some((admin, security)))
    } else {
        (Some(admin), Some(security), None)
    };
    let handshake = std::time::Duration::from_millis(cfg.request_read_timeout_ms);
    let tls_for = |t: &Option<Arc<Tls>>| t.as_ref().map(|t| (t.clone(), handshake));
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    // Our own accept loop: the connection cap, TCP_NODELAY, and a pause when out of
    // descriptors (tonic's stream over the listener retried at once, spinning a core).
    let idle = std::time::Duration::from_millis(cfg.idle_timeout_ms);
    let incoming = ReceiverStream::new(net::grpc_incoming(
        listener,
        conn_limit.clone(),
        idle,
        m.clone(),
        tls_for(&tls),
    ));
    let ms = std::time::Duration::from_millis;
    let mut gate_layer = GateLayer::new(
        ms(cfg.request_read_timeout_ms),
        request_budget.clone(),
        max_decode,
        m.clone(),
        auth.clone(),
    );
    if admin_elsewhere.is_some() {
        gate_layer = gate_layer.without_admin();
    }
    let server = tokio::spawn(
        crate::grpc::builder(&cfg)
            .layer(gate_layer)
            // Cluster mode: a master names its epoch and node in every reply.
            .layer(crate::cluster::reply::EpochLayer::new(
                cluster.as_ref().map(|c| c.0.clone()),
                cfg.cluster.as_ref().map_or(0, |c| c.node_id),
            ))
            .add_service(messaging)
            .add_optional_service(admin_here)
            .add_optional_service(security_here)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stop_rx.await;
            }),
    );
    let (admin_addr, stop_admin, admin_server) = match (admin_listener, admin_elsewhere) {
        (Some(l), Some((admin, security))) => {
            let a = l.local_addr().map_err(|e| e.to_string())?;
            let incoming = ReceiverStream::new(net::grpc_incoming(
                l,
                conn_limit.clone(),
                idle,
                m.clone(),
                tls_for(&tls),
            ));
            let (tx, rx) = oneshot::channel::<()>();
            let server = tokio::spawn(
                tonic::transport::Server::builder()
                    .http2_keepalive_interval(Some(ms(cfg.http2_keepalive_interval_ms)))
                    .http2_keepalive_timeout(Some(ms(cfg.http2_keepalive_timeout_ms)))
                    .add_service(admin)
                    .add_service(security)
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = rx.await;
                    }),
            );
            info!(admin = %a, "serving the admin services on their own listener");
            (Some(a), Some(tx), Some(server))
        }
        _ => (None, None, None),
    };
    let console = match console_listener {
        Some(l) => {
            let c = crate::console::Console::new(
                core.clone(),
                clock.clone(),
                m.clone(),
                auth.clone(),
                cfg.console_sample_ms,
                cfg.console_hosts()?,
            );
            if let (Some(cc), Some((view, _))) = (&cfg.cluster, &cluster) {
                c.set_cluster(crate::console::cluster::ClusterLink::new(cc, view.clone()));
            }
            let running = c.serve(l, tls.clone());
            info!(console = %running.addr, "serving the operator console");
            Some(running)
        }
        None => None,
    };
    let tls_reloader = tls.as_ref().map(Tls::spawn_reloader);
    // putTps and getTransferredTps (GET_BROKER_RUNTIME_INFO) from counters sampled each second.
    let rates_task = tokio::spawn(crate::rates::sample(core.clone(), m.clone()));
    // New messages refused past disk_space_warning_level_ratio.
    let disk_full_task = tokio::spawn(crate::disk_full::guard(
        core.clone(),
        cfg.disk_space_warning_level_ratio,
        m.clone(),
    ));
    let retention_task = tokio::spawn(crate::retention::run(
        core.clone(),
        clock.clone(),
        m.clone(),
        cfg.retention.clone(),
    ));
    let checkpoint_task =
        tokio::spawn(crate::checkpoint::run(core.clone(), cfg.checkpoint.clone()));
    let (metrics_addr, metrics_task) = match metrics_listener {
        Some(l) => {
            let a = l.local_addr().ok();
            (
                a,
                Some(tokio::spawn(metrics::render::serve(
                    l,
                    core.clone(),
                    m.clone(),
                    cfg.metrics_hosts()?,
                ))),
            )
        }
        None => (None, None),
    };
    let remoting = remoting_listeners.map(|listeners| {
        let ctx = RemotingCtx::new(core.clone(), cfg.clone())
            .with_cluster(cluster.as_ref().map(|c| c.0.clone()))
            .with_auth(auth.clone())
            .with_clock(clock.clone())
            .with_metrics(m.clone())
            .with_conn_limit(conn_limit.clone())
            .with_request_budget(request_budget.clone())
            .with_tls(tls.clone(), handshake);
        let _ = m.remoting.set(ctx.stats());
        let r = RemotingServer::serve(listeners, ctx);
        info!(remoting = ?r.addr, namesrv = ?r.namesrv_addr, "serving RocketMQ 4 remoting");
        r
    });
    info!(%addr, metrics = ?metrics_addr, replication = ?cluster.as_ref().map(|c| c.1), max_connections = cap, flush = ?cfg.core.flush, data_dir = %dir.display(), "rocklet broker serving RocketMQ 5 gRPC");
    Ok(RunningBroker {
        addr,
        metrics_addr,
        core,
        metrics: m,
        remoting_addr: remoting.as_ref().and_then(|r| r.addr),
        namesrv_addr: remoting.as_ref().and_then(|r| r.namesrv_addr),
        admin_addr,
        console_addr: console.as_ref().map(|c| c.addr),
        console,
        auth,
        tls,
        cluster,
        remoting,
        stop_admin,
        admin_server,
        tls_reloader,
        stop_server: Some(stop_tx),
        server: Some(server),
        metrics_task,
        samplers: vec![rates_task, disk_full_task, retention_task, checkpoint_task],
        core_thread: Some(core_thread),
    })
}

impl RunningBroker {
    /// Why the broker stopped serving for good, if it did: a failed fsync or a panic of the
    /// core thread (see [`Fatal`]). It then answers every request with an error; stop it and
    /// start it again (recovery reads what is on disk).
    #[must_use]
    pub fn fatal(&self) -> Option<Fatal> {
        self.core.fatal()
    }

    /// Waits until the broker fails for good (see [`RunningBroker::fatal`]).
    pub async fn wait_fatal(&self) -> Fatal {
        self.core.wait_fatal().await
    }

    /// Stops accepting, lets in-flight calls finish (long polls are cut short), flushes the
    /// log and stops the core thread.
    pub async fn stop(self) {
        self.stop_within(STREAMS_GRACE).await;
    }

    /// [`RunningBroker::stop`], waiting at most `grace` for open gRPC calls and streams.
    pub async fn stop_within(mut self, grace: std::time::Duration) {
        if let Some(t) = self.metrics_task.take() {
            t.abort();
        }
        for t in self.samplers.drain(..) {
            t.abort();
        }
        if let Some(c) = self.console.take() {
            c.stop();
        }
        if let Some(mut r) = self.remoting.take() {
            r.stop();
        }
        if let Some(t) = self.tls_reloader.take() {
            t.abort();
        }
        if let Some(s) = self.stop_admin.take() {
            let _ = s.send(());
        }
        if let Some(a) = self.admin_server.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), a).await;
        }
        if let Some(s) = self.stop_server.take() {
            let _ = s.send(());
        }
        if let Some(server) = self.server.take() {
            // Telemetry streams never end by themselves: give the server a moment, then go on.
            match tokio::time::timeout(grace, server).await {
                Ok(Ok(Err(e))) => warn!(error = %e, "gRPC server stopped with an error"),
                Ok(_) => {}
                Err(_) => info!(
                    ?grace,
                    "open streams did not close in time; stopping anyway"
                ),
            }
        }
        self.core.shutdown().await;
        if let Some(j) = self.core_thread.take() {
            let _ = tokio::task::spawn_blocking(move || j.join()).await;
        }
    }
}

/// The store host records name for a remoting listener on `addr` (RocketMQ's brokerIP1 and
/// listenPort): its address and port, IPv4 or IPv6 as the listener is (an IPv4-mapped IPv6
/// address is IPv4); a listener on every IPv6 address (`::`) names `configured`'s address
/// with its port. Offset message ids are then 32 hex digits for IPv4, 56 for IPv6, as
/// RocketMQ's.
#[must_use]
pub fn store_host(addr: SocketAddr, configured: StoreHost) -> StoreHost {
    let port = addr.port();
    match addr {
        SocketAddr::V4(a) => StoreHost::V4(a.ip().octets(), port),
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => StoreHost::V4(v4.octets(), port),
            None if a.ip().is_unspecified() => match configured {
                StoreHost::V4(ip, _) => StoreHost::V4(ip, port),
                StoreHost::V6(ip, _) => StoreHost::V6(ip, port),
            },
            None => StoreHost::V6(a.ip().octets(), port),
        },
    }
}

/// How long a stop waits for open gRPC calls and streams.
const STREAMS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The same wait on a master that has handed mastership over and then passed requests on
/// until its clients moved to the new master ([`crate::cluster::node::before_stop`]): what
/// is still open by then is a stream of a client that no longer sends here.
const HANDED_OVER_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// How long the stop after a [`Fatal`] failure may take before the process exits anyway.
const FATAL_STOP_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs until SIGINT or SIGTERM, then stops cleanly (`Ok`). When the broker fails for good
/// (a failed fsync, a panic of the core thread: [`Fatal`]) it stops its listeners, letting
/// the error replies already given go out, and returns `Err`: the process exits non-zero
/// and its supervisor restarts it (crash-only; recovery reads what is on disk).
pub async fn run_until_signal(cfg: BrokerConfig, clock: Arc<dyn Clock>) -> Result<(), String> {
    // Listen for the signals before serving: a supervisor (or a test) may send SIGTERM as
    // soon as the broker logs its addresses, and that must stop it cleanly, not kill it.
    let signals = Signals::listen();
    let running = start(cfg, clock).await?;
    let fatal = tokio::select! {
        () = signals.wait() => None,
        f = running.wait_fatal() => Some(f),
    };
    match fatal {
        None => {
            // Cluster mode: a master first hands mastership to an in-sync replica, so the
            // group goes on without waiting for its lease to expire.
            let handed_over = match &running.cluster {
                Some((view, _)) => crate::cluster::node::before_stop(view).await,
                None => false,
            };
            info!("signal received: flushing and stopping");
            running
                .stop_within(if handed_over {
                    HANDED_OVER_GRACE
                } else {
                    STREAMS_GRACE
                })
                .await;
            info!("stopped");
            Ok(())
        }
        Some(f) => {
            warn!(reason = %f, "stopping after a fatal failure; exiting non-zero so the supervisor restarts the broker");
            if tokio::time::timeout(FATAL_STOP_LIMIT, running.stop())
                .await
                .is_err()
            {
                warn!("the stop took longer than {FATAL_STOP_LIMIT:?}; exiting anyway");
            }
            Err(format!(
                "{f}; restart the broker: recovery keeps what is durable"
            ))
        }
    }
}

/// SIGINT and SIGTERM, caught from creation on.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    async fn wait(self) {
        #[cfg(unix)]
        {
            match (self.term, self.int) {
                (Some(mut term), Some(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                (Some(mut term), None) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                }
                (None, Some(mut int)) => {
                    let _ = int.recv().await;
                }
                (None, None) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
