//! What the cluster tests share (broker/tests/cluster*.rs): etcd on free ports, the nodes of
//! a broker group as `rocklet` processes, and finding the master through routes.
#![allow(dead_code)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::{res, BrokerProc, Client};
use rocklet_broker::pb::v2 as pb;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// etcd on free ports in a temporary directory, one member or several; killed when dropped.
pub struct Etcd {
    children: Vec<Child>,
    /// The client URLs, comma-joined (what `--cluster etcd=…` takes).
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    /// One member.
    pub fn start() -> Self {
        Self::start_members(1)
    }

    /// A cluster of `n` members (`n` = 3: any one may fail, a majority of two goes on).
    pub fn start_members(n: usize) -> Self {
        let bin = std::env::var("ROCKLET_ETCD").unwrap_or_else(|_| "etcd".into());
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("e{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut children = Vec::new();
        let mut urls = Vec::new();
        for (i, &(client, peer)) in ports.iter().enumerate() {
            let url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let child = Command::new(&bin)
                .arg("--data-dir")
                .arg(dir.path().join(format!("etcd{i}")))
                .args(["--name", &format!("e{i}")])
                .args([
                    "--listen-client-urls",
                    &url,
                    "--advertise-client-urls",
                    &url,
                ])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start `{bin}` (install Debian's etcd-server, or set ROCKLET_ETCD): {e}"
                    )
                });
            children.push(child);
            urls.push(url);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for &(client, _) in &ports {
            while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
                assert!(Instant::now() < deadline, "etcd did not listen on {client}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Etcd {
            children,
            url: urls.join(","),
            _dir: dir,
        }
    }
}

impl Etcd {
    /// Sends `sig` (`-STOP`, `-CONT`, …) to every member.
    pub fn signal(&self, sig: &str) {
        for c in &self.children {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    /// SIGKILLs member `i` (the others go on while they are a majority).
    pub fn kill_member(&mut self, i: usize) {
        let _ = self.children[i].kill();
        let _ = self.children[i].wait();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One node of the group: its data directory survives restarts.
pub struct Node {
    pub id: u32,
    pub dir: PathBuf,
    pub proc: Option<BrokerProc>,
    /// Serve RocketMQ 4 remoting and the name-server role (free ports).
    pub remoting: bool,
    /// `--replication async`.
    pub async_replication: bool,
    /// Fixed gRPC, remoting and name-server ports, kept across restarts (clients configured
    /// with every node's address find the group again after any number of restarts).
    pub ports: Option<[u16; 3]>,
    /// More arguments for `rocklet broker` (e.g. `--config FILE`).
    pub extra: Vec<String>,
}

impl Node {
    pub fn start(id: u32, dir: &Path, etcd: &str) -> Self {
        let mut n = Node {
            id,
            dir: dir.to_path_buf(),
            proc: None,
            remoting: false,
            async_replication: false,
            ports: None,
            extra: Vec::new(),
        };
        n.restart(etcd);
        n
    }

    pub fn start_v4(id: u32, dir: &Path, etcd: &str) -> Self {
        let mut n = Node {
            id,
            dir: dir.to_path_buf(),
            proc: None,
            remoting: true,
            async_replication: false,
            ports: None,
            extra: Vec::new(),
        };
        n.restart(etcd);
        n
    }

    /// The remoting and name-server addresses, from the log.
    /// A node on fixed gRPC, remoting and name-server ports (free now), started with `extra`.
    pub fn start_fixed(id: u32, dir: &Path, etcd: &str, extra: &[String]) -> Self {
        let mut n = Node {
            id,
            dir: dir.to_path_buf(),
            proc: None,
            remoting: true,
            async_replication: false,
            ports: Some([free_port(), free_port(), free_port()]),
            extra: extra.to_vec(),
        };
        n.restart(etcd);
        n
    }

    pub fn v4_addrs(&self) -> (SocketAddr, SocketAddr) {
        let log = self.proc.as_ref().unwrap().log();
        let find = |key: &str| -> SocketAddr {
            let i = log
                .find(key)
                .unwrap_or_else(|| panic!("no {key} in\n{log}"))
                + key.len();
            log[i..]
                .chars()
                .take_while(|c| *c != ')')
                .collect::<String>()
                .parse()
                .unwrap()
        };
        (find("remoting=Some("), find("namesrv=Some("))
    }

    pub fn restart(&mut self, etcd: &str) {
        let cluster = format!("etcd={etcd}");
        let id = self.id.to_string();
        let fixed: Vec<String> = match self.ports {
            Some([grpc, remoting, namesrv]) => vec![
                "--listen".into(),
                format!("127.0.0.1:{grpc}"),
                "--remoting-listen".into(),
                format!("127.0.0.1:{remoting}"),
                "--namesrv-listen".into(),
                format!("127.0.0.1:{namesrv}"),
            ],
            None if self.remoting => Vec::new(),
            None => ["--remoting-listen", "off", "--namesrv-listen", "off"]
                .map(String::from)
                .to_vec(),
        };
        let off: Vec<&str> = fixed
            .iter()
            .chain(&self.extra)
            .map(String::as_str)
            .collect();
        let mode: &[&str] = if self.async_replication {
            &["--replication", "async"]
        } else {
            &[]
        };
        // The group is g1 unless `extra` names one (`--broker-name g2`).
        let group: &[&str] = if self.extra.iter().any(|a| a == "--broker-name") {
            &[]
        } else {
            &["--broker-name", "g1"]
        };
        let args: Vec<&str> = off
            .iter()
            .chain(mode)
            .chain(group)
            .copied()
            .chain(["--flush", "sync", "--cluster", &cluster, "--node-id", &id])
            .collect();
        let trace = std::env::var_os("ROCKLET_CLUSTER_TRACE").is_some();
        let env: &[(&str, &str)] = if trace {
            &[("RUST_LOG", "info,rocklet_broker::cluster=debug")]
        } else {
            &[]
        };
        self.proc = Some(BrokerProc::start_env(&self.dir, &args, env));
    }

    pub fn addr(&self) -> Option<SocketAddr> {
        self.proc.as_ref().map(|p| p.addr)
    }
}

pub async fn timed<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(Duration::from_secs(3), f).await.ok()
}

/// The group's master as `at` routes it.
pub async fn route(at: SocketAddr, topic: &str) -> Option<SocketAddr> {
    let mut c = timed(Client::connect(format!("http://{at}"))).await?.ok()?;
    let r = timed(c.query_route(pb::QueryRouteRequest {
        topic: res(topic),
        endpoints: None,
    }))
    .await?
    .ok()?
    .into_inner();
    let q = r.message_queues.first()?;
    let a = q.broker.as_ref()?.endpoints.as_ref()?.addresses.first()?;
    format!("{}:{}", a.host, a.port).parse().ok()
}

/// The master, asked of every live node until one names a master that serves.
pub async fn find_master(addrs: &[SocketAddr], topic: &str) -> Option<SocketAddr> {
    for &a in addrs {
        if let Some(m) = route(a, topic).await {
            if addrs.contains(&m) {
                return Some(m);
            }
        }
    }
    None
}

/// A TCP proxy the test controls, standing for the network between two processes: cut, it
/// drops every connection it carries and closes each new one at once (a partition); healed,
/// it carries new connections again. Stops when dropped.
pub struct Proxy {
    pub addr: SocketAddr,
    cut: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy on a free 127.0.0.1 port to `to` (which need not listen yet).
    pub async fn start(to: SocketAddr) -> Self {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (cut, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = l.accept().await else {
                    continue;
                };
                if *rx.borrow() {
                    drop(down);
                    continue;
                }
                let mut rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(to).await else {
                        return;
                    };
                    let _ = down.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = rx.wait_for(|&c| c) => {}
                    }
                    // Both ends dropped here: the peers see the connection end.
                });
            }
        });
        Proxy { addr, cut, task }
    }

    /// Drops every connection and refuses new ones until [`Proxy::heal`].
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The network of one node: everything it exchanges with etcd and with the other nodes goes
/// through a [`Proxy`] the test can cut. Its etcd client uses `etcd`; replicas reach its
/// replication stream through `replication` (`--replication-advertise`), and its gRPC
/// address in routes and for writes replicas forward is `grpc` (`--advertise`). Clients the
/// test runs talk to the node's own `--listen` address, as clients on its side of a
/// partition would.
pub struct NodeNet {
    pub etcd: Proxy,
    pub replication: Proxy,
    pub grpc: Proxy,
    /// The node's own gRPC port (`--listen`), kept across restarts.
    pub grpc_port: u16,
    /// The node's own replication port (`--replication-listen`).
    pub replication_port: u16,
}

impl NodeNet {
    pub async fn start(etcd: &str) -> Self {
        let etcd_addr: SocketAddr = etcd.trim_start_matches("http://").parse().unwrap();
        let (grpc_port, repl_port) = (free_port(), free_port());
        NodeNet {
            etcd: Proxy::start(etcd_addr).await,
            replication: Proxy::start(([127, 0, 0, 1], repl_port).into()).await,
            grpc: Proxy::start(([127, 0, 0, 1], grpc_port).into()).await,
            grpc_port,
            replication_port: repl_port,
        }
    }

    /// The etcd URL the node is given.
    pub fn etcd_url(&self) -> String {
        format!("http://{}", self.etcd.addr)
    }

    /// `rocklet broker` arguments putting the node behind these proxies.
    pub fn args(&self) -> Vec<String> {
        let repl_port = self.replication_port;
        vec![
            "--listen".into(),
            format!("127.0.0.1:{}", self.grpc_port),
            "--advertise".into(),
            self.grpc.addr.to_string(),
            "--replication-listen".into(),
            format!("127.0.0.1:{repl_port}"),
            "--replication-advertise".into(),
            self.replication.addr.to_string(),
        ]
    }

    /// Isolates the node: from etcd, from its replicas, from forwarded writes.
    pub fn cut(&self) {
        self.etcd.cut();
        self.replication.cut();
        self.grpc.cut();
    }

    pub fn heal(&self) {
        self.etcd.heal();
        self.replication.heal();
        self.grpc.heal();
    }
}

/// Everything a fresh consumer group receives from `at`, by message id (acked as received).
pub async fn consume_ids(at: SocketAddr, topic: &str, group: &str) -> Vec<String> {
    let mut c = crate::common::connect(at).await;
    crate::common::receive_all(&mut c, topic, group)
        .await
        .iter()
        .map(|m| m.system_properties.as_ref().unwrap().message_id.clone())
        .collect()
}

/// The state of one replica's replication link through a [`LinkProxy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Up,
    /// Nothing passes either way and the sockets stay open: a paused peer's kernel, or a
    /// network that drops packets instead of resetting. The bytes are held, not lost.
    Stalled,
    /// The connection is dropped, and new ones from that replica are closed at once.
    Cut,
}

/// A TCP proxy in front of one node's replication listener (`--replication-advertise` names
/// it) that tells its connections apart by replica: each opens with a HELLO frame naming its
/// node (`cluster::replication`), so the test can stall or cut the link of one replica and
/// leave the other's alone. Stops when dropped.
pub struct LinkProxy {
    pub addr: SocketAddr,
    links: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<u32, tokio::sync::watch::Sender<Link>>>,
    >,
    task: tokio::task::JoinHandle<()>,
}

impl LinkProxy {
    /// A proxy on a free 127.0.0.1 port to `to` (which need not listen yet).
    pub async fn start(to: SocketAddr) -> Self {
        use rocklet_broker::cluster::replication::{read_frame, write_frame, Hello, HELLO};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let links = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
            u32,
            tokio::sync::watch::Sender<Link>,
        >::new()));
        let map = links.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut down, _)) = l.accept().await else {
                    continue;
                };
                let map = map.clone();
                tokio::spawn(async move {
                    let Ok(Ok((HELLO, hello))) = tokio::time::timeout(
                        Duration::from_secs(5),
                        read_frame(&mut down, 1 << 20),
                    )
                    .await
                    else {
                        return;
                    };
                    let Ok(h) = serde_json::from_slice::<Hello>(&hello) else {
                        return;
                    };
                    let link = map
                        .lock()
                        .unwrap()
                        .entry(h.node)
                        .or_insert_with(|| tokio::sync::watch::channel(Link::Up).0)
                        .subscribe();
                    if *link.borrow() == Link::Cut {
                        return;
                    }
                    let Ok(mut up) = tokio::net::TcpStream::connect(to).await else {
                        return;
                    };
                    let _ = down.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    if write_frame(&mut up, HELLO, &[&hello]).await.is_err() {
                        return;
                    }
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::select! {
                        () = pump(dr, uw, link.clone()) => {}
                        () = pump(ur, dw, link) => {}
                    }
                    // Both ends dropped here: the peers see the connection end.
                });
            }
        });
        LinkProxy { addr, links, task }
    }

    /// Sets the link of replica `node` (its connections now and later).
    pub fn set(&self, node: u32, to: Link) {
        self.links
            .lock()
            .unwrap()
            .entry(node)
            .or_insert_with(|| tokio::sync::watch::channel(Link::Up).0)
            .send_replace(to);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `r` to `w` while the link is up; holds what it read while the link is stalled;
/// ends when it is cut or either side closes.
async fn pump(
    mut r: impl tokio::io::AsyncRead + Unpin,
    mut w: impl tokio::io::AsyncWrite + Unpin,
    mut link: tokio::sync::watch::Receiver<Link>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = tokio::select! {
            n = r.read(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = link.wait_for(|l| *l == Link::Cut) => return,
        };
        let up = matches!(
            link.wait_for(|l| *l != Link::Stalled).await.as_deref(),
            Ok(Link::Up)
        );
        if !up || w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The official clients' producers (broker/tests/cluster-clients) and what their ledgers
/// tell.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One producer process and the ledger lines it wrote.
pub struct Producer {
    pub name: &'static str,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Producer {
    pub fn spawn(name: &'static str, mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {name} producer {cmd:?}: {e}"));
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Producer { name, child, lines }
    }

    /// Times (Unix ms) of its acknowledgements: ACK, COMMIT and HALF lines.
    pub fn ack_times(&self) -> Vec<u64> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                let mut w = l.split(' ');
                match w.next() {
                    Some("ACK" | "COMMIT" | "HALF") => w.nth(1).and_then(|t| t.parse().ok()),
                    _ => None,
                }
            })
            .collect()
    }

    /// The outage a kill at `killed_at` caused this client: its longest time without an
    /// acknowledgement, from its last one before the kill on. (Replies the old master
    /// released just before it died arrive after the kill, so "the first acknowledgement
    /// after the kill" would often measure nothing.)
    pub fn outage(&self, killed_at: u64) -> Option<u64> {
        let mut t = self.ack_times();
        t.sort_unstable();
        let from = t.iter().rposition(|&x| x <= killed_at)?;
        t[from..].windows(2).map(|w| w[1] - w[0]).max()
    }

    pub fn count(&self, kind: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.split(' ').next() == Some(kind))
            .count()
    }

    /// Ids it acknowledged (or decided to commit once its half was acknowledged).
    pub fn must_deliver(&self) -> HashSet<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                let mut w = l.split(' ');
                match w.next() {
                    Some("ACK" | "COMMIT" | "HALF") => w.next().map(str::to_string),
                    _ => None,
                }
            })
            .collect()
    }

    pub fn tail(&self) -> String {
        let l = self.lines.lock().unwrap();
        l[l.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every body the group `group` can receive from `master` (acked as received).
pub async fn consume_bodies(master: SocketAddr, topic: &str, group: &str) -> Vec<String> {
    let mut c = crate::common::connect(master).await;
    crate::common::receive_all(&mut c, topic, group)
        .await
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

pub fn percentile(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

pub async fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn nodes_addrs(nodes: &[Node]) -> Vec<SocketAddr> {
    nodes.iter().filter_map(Node::addr).collect()
}

/// A 3-node group on fixed ports (transaction checks after 2 s, so what a failover leaves
/// open is resolved within a run) under load from the official producers of
/// broker/tests/cluster-clients: the Python v5 client (`ROCKLET_PYTHON`) and the v4 Java
/// client (`ROCKLET_V4_CLASSPATH`), each acknowledged 20 times before `start` returns.
pub struct ClientsRun {
    pub etcd: Etcd,
    pub root: tempfile::TempDir,
    pub nodes: Vec<Node>,
    pub producers: [Producer; 2],
    topic: String,
    python: String,
    grpc: String,
    stop: PathBuf,
}

impl ClientsRun {
    /// `linger`: how long (s) each producer answers checks after it stops sending.
    pub async fn start(topic: &str, linger: &str) -> Self {
        let python = std::env::var("ROCKLET_PYTHON")
            .expect("ROCKLET_PYTHON: a Python with rocketmq-python-client (tests/ci/cluster.sh)");
        let classpath = std::env::var("ROCKLET_V4_CLASSPATH").expect(
            "ROCKLET_V4_CLASSPATH: the v4 client's jars and V4Producer (tests/ci/cluster.sh)",
        );
        let etcd = Etcd::start();
        let root = tempfile::tempdir().unwrap();
        let cfg = root.path().join("rocklet.toml");
        std::fs::write(
            &cfg,
            "[core]\ntransaction_timeout_ms = 2000\ntransaction_check_interval_ms = 2000\n",
        )
        .unwrap();
        let extra = vec!["--config".to_string(), cfg.display().to_string()];
        let nodes: Vec<Node> = (1..=3)
            .map(|i| Node::start_fixed(i, &root.path().join(format!("n{i}")), &etcd.url, &extra))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while find_master(&nodes_addrs(&nodes), topic).await.is_none() {
            assert!(Instant::now() < deadline, "no master elected");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ports: Vec<[u16; 3]> = nodes.iter().map(|n| n.ports.unwrap()).collect();
        // One address: the Python client sends a list ("a;b;c") as the HTTP/2 `:authority`
        // joined with commas, which the broker's HTTP/2 layer resets as a protocol error. Any
        // node answers QueryRoute with the master.
        let grpc = format!("127.0.0.1:{}", ports[0][0]);
        let namesrv = ports
            .iter()
            .map(|p| format!("127.0.0.1:{}", p[2]))
            .collect::<Vec<_>>()
            .join(";");
        let stop = root.path().join("stop");
        let mut py = Command::new(&python);
        py.arg(format!("{CLIENTS}/producer.py"))
            .args([&grpc, topic, "py"])
            .arg(&stop)
            .env("LINGER_S", linger);
        let mut java = Command::new("java");
        java.arg(format!(
            "-Drocketmq.log.root={}",
            root.path().join("logs").display()
        ))
        .args(["-cp", &classpath, "V4Producer", &namesrv, topic, "v4"])
        .arg(&stop)
        .env("LINGER_S", linger);
        let producers = [Producer::spawn("python", py), Producer::spawn("v4", java)];
        for p in &producers {
            wait_for(
                &format!("{}: 20 acknowledgements", p.name),
                Duration::from_secs(90),
                || p.ack_times().len() >= 20,
            )
            .await;
        }
        ClientsRun {
            etcd,
            root,
            nodes,
            producers,
            topic: topic.to_string(),
            python,
            grpc,
            stop,
        }
    }

    /// Stops the producers, then resolves what they left open: the Python client 5.1.2 opens
    /// a telemetry stream again only when a settings write fails (every 300 s) or its route
    /// names a new address, so once the master it streamed to died, checks cannot reach it;
    /// a producer process started again (as after a deploy) sends nothing (the stop file
    /// exists) and answers checks for a while. Returns the bodies consumer group `group`
    /// then gets from the master, and how many checks the second producer answered.
    pub async fn finish(&self, group: &str) -> (Vec<String>, usize) {
        std::fs::write(&self.stop, b"").unwrap();
        for p in &self.producers {
            wait_for(
                &format!("{} producer done", p.name),
                Duration::from_secs(60),
                || p.count("DONE") == 1,
            )
            .await;
        }
        let mut again = Command::new(&self.python);
        again
            .arg(format!("{CLIENTS}/producer.py"))
            .args([&self.grpc, &self.topic, "py"])
            .arg(&self.stop)
            .env("LINGER_S", "8");
        let resolver = Producer::spawn("python (again)", again);
        wait_for(
            "the second python producer done",
            Duration::from_secs(60),
            || resolver.count("DONE") == 1,
        )
        .await;
        let checks = resolver.count("CHECK");
        eprintln!("python (again): answered {checks} checks");
        let master = find_master(&nodes_addrs(&self.nodes), &self.topic)
            .await
            .expect("a master at the end");
        (consume_bodies(master, &self.topic, group).await, checks)
    }
}

/// The official clients' producer programs.
const CLIENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cluster-clients");
