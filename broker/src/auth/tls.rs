//! TLS for the gRPC (and admin) listeners, terminated in the broker's own accept loop with
//! rustls, in the modes of RocketMQ's `tls.server.mode`:
//!
//! - `disabled`: plaintext only (the default).
//! - `permissive`: TLS and plaintext on the same port, told apart by the first byte a client
//!   sends (a TLS handshake record starts with 0x16; an HTTP/2 preface with `P`, a remoting
//!   frame with a length byte).
//! - `enforcing`: TLS only. A plaintext HTTP/2 client is answered with a GOAWAY frame
//!   (`INADEQUATE_SECURITY`, debug data naming the problem) and closed, so gRPC clients
//!   report "TLS required" instead of a bare reset.
//!
//! The certificate chain and key are PEM files, read again when they change (checked every
//! `reload_interval_ms`) or on SIGHUP; a reload that fails keeps the old ones and logs why.
//! Client certificates are verified against `client_ca` when it is set (`client_auth =
//! "required"` refuses clients without one, `"optional"` verifies those that present one).
//! `required` needs `enforcing`: in `permissive` a plaintext client presents no certificate
//! and would be served all the same, so that combination is refused at start.
//!
//! Which official clients use TLS by default: the Java v5 client (`enableSsl` true), Go
//! (`EnableSsl` true) and C# (`SslEnabled` true); Python (`tls_enable=False`), Node
//! (`sslEnabled` false) and Rust (`enable_tls` false) do not. The Java, Go and C# clients
//! do not verify the server's certificate; Python's `grpc.ssl_channel_credentials()` does
//! (against `GRPC_DEFAULT_SSL_ROOTS_FILE_PATH` or the system roots).

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Default interval between checks of the certificate files.
pub const DEFAULT_RELOAD_INTERVAL_MS: u64 = 10_000;

/// `tls.server.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Disabled,
    Permissive,
    Enforcing,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "disabled" => Ok(Mode::Disabled),
            "permissive" => Ok(Mode::Permissive),
            "enforcing" => Ok(Mode::Enforcing),
            _ => Err(format!(
                "`{s}` is not a TLS mode (disabled, permissive, enforcing)"
            )),
        }
    }
}

/// Whether clients must present a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    #[default]
    None,
    Optional,
    Required,
}

/// The `[tls]` table of the config file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsFileConfig {
    pub mode: Option<Mode>,
    /// PEM certificate chain, leaf first.
    pub cert: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// PEM CA certificates client certificates are verified against.
    pub client_ca: Option<PathBuf>,
    pub client_auth: Option<ClientAuth>,
    pub reload_interval_ms: Option<u64>,
}

impl TlsFileConfig {
    /// The mode in force.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.mode.unwrap_or_default()
    }

    /// What cannot work, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.mode() == Mode::Disabled {
            return Ok(());
        }
        if self.cert.is_none() || self.key.is_none() {
            return Err(
                "invalid config `tls`: modes permissive and enforcing need `cert` and `key`".into(),
            );
        }
        let auth = self.client_auth.unwrap_or_default();
        if auth != ClientAuth::None && self.client_ca.is_none() {
            return Err("invalid config `tls.client_auth`: needs `client_ca`".into());
        }
        if self.client_ca.is_some() && auth == ClientAuth::None {
            return Err(
                "invalid config `tls.client_ca`: set `client_auth` to \"optional\" or \"required\""
                    .into(),
            );
        }
        if self.mode() == Mode::Permissive && auth == ClientAuth::Required {
            return Err(
                "invalid config `tls`: `tls.mode = \"permissive\"` with `tls.client_auth = \"required\"` \
                 would still serve plaintext clients, which present no certificate; set `tls.mode = \
                 \"enforcing\"` to require a certificate of every client, or `tls.client_auth = \
                 \"optional\"`"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Files and when they last changed.
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(paths: &[&Path]) -> Stamp {
    paths
        .iter()
        .map(|p| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
        })
        .collect()
}

/// A listener's TLS: the mode and the acceptors in force (swapped on reload).
#[derive(Debug)]
pub struct Tls {
    mode: Mode,
    cfg: TlsFileConfig,
    /// (ALPN h2 for gRPC, no ALPN for remoting)
    acceptors: RwLock<(Arc<rustls::ServerConfig>, Arc<rustls::ServerConfig>)>,
    stamp: std::sync::Mutex<Stamp>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn build(
    cfg: &TlsFileConfig,
) -> Result<(Arc<rustls::ServerConfig>, Arc<rustls::ServerConfig>), String> {
    let cert_path = cfg.cert.as_deref().ok_or("no tls.cert")?;
    let key_path = cfg.key.as_deref().ok_or("no tls.key")?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_path)
        .and_then(|i| i.collect())
        .map_err(|e| {
            format!(
                "cannot read the certificate chain {}: {e}",
                cert_path.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", cert_path.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key_path)
        .map_err(|e| format!("cannot read the private key {}: {e}", key_path.display()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match (&cfg.client_ca, cfg.client_auth.unwrap_or_default()) {
        (Some(ca), auth) if auth != ClientAuth::None => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca)
                .map_err(|e| format!("cannot read tls.client_ca {}: {e}", ca.display()))?
            {
                let c =
                    c.map_err(|e| format!("cannot read tls.client_ca {}: {e}", ca.display()))?;
                roots
                    .add(c)
                    .map_err(|e| format!("tls.client_ca {}: {e}", ca.display()))?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            );
            let v = if auth == ClientAuth::Optional {
                v.allow_unauthenticated()
            } else {
                v
            };
            builder.with_client_cert_verifier(v.build().map_err(|e| format!("tls.client_ca: {e}"))?)
        }
        _ => builder.with_no_client_auth(),
    };
    let plain = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls.cert and tls.key do not make a certificate: {e}"))?;
    let mut h2 = plain.clone();
    // gRPC clients (grpc-java, grpc-js, grpcio) insist on ALPN h2.
    h2.alpn_protocols = vec![b"h2".to_vec()];
    Ok((Arc::new(h2), Arc::new(plain)))
}

impl Tls {
    /// The TLS of a config; `None` when disabled.
    pub fn load(cfg: &TlsFileConfig) -> Result<Option<Arc<Self>>, String> {
        cfg.validate()?;
        if cfg.mode() == Mode::Disabled {
            return Ok(None);
        }
        let acceptors = build(cfg)?;
        let t = Tls {
            mode: cfg.mode(),
            cfg: cfg.clone(),
            acceptors: RwLock::new(acceptors),
            stamp: std::sync::Mutex::new(stamp(&Self::paths_of(cfg))),
        };
        info!(mode = ?t.mode, cert = ?cfg.cert, client_auth = ?cfg.client_auth.unwrap_or_default(), "TLS on");
        Ok(Some(Arc::new(t)))
    }

    fn paths_of(cfg: &TlsFileConfig) -> Vec<&Path> {
        [&cfg.cert, &cfg.key, &cfg.client_ca]
            .into_iter()
            .filter_map(|p| p.as_deref())
            .collect()
    }

    /// The mode.
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Reads the files again if they changed (or `force`); `Ok(true)` when new ones apply.
    pub fn reload(&self, force: bool) -> Result<bool, String> {
        let now = stamp(&Self::paths_of(&self.cfg));
        {
            let mut s = self
                .stamp
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !force && *s == now {
                return Ok(false);
            }
            *s = now;
        }
        let a = build(&self.cfg)?;
        *self
            .acceptors
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = a;
        Ok(true)
    }

    /// Reloads when the files change, and on SIGHUP, until dropped with the runtime.
    pub fn spawn_reloader(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let t = self.clone();
        let every = Duration::from_millis(
            t.cfg
                .reload_interval_ms
                .unwrap_or(DEFAULT_RELOAD_INTERVAL_MS)
                .max(100),
        );
        tokio::spawn(async move {
            #[cfg(unix)]
            let mut hup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            loop {
                #[cfg(unix)]
                let forced = match hup.as_mut() {
                    Some(h) => tokio::select! {
                        _ = h.recv() => true,
                        () = tokio::time::sleep(every) => false,
                    },
                    None => {
                        tokio::time::sleep(every).await;
                        false
                    }
                };
                #[cfg(not(unix))]
                let forced = {
                    tokio::time::sleep(every).await;
                    false
                };
                match t.reload(forced) {
                    Ok(true) => {
                        info!(cert = ?t.cfg.cert, sighup = forced, "TLS certificate reloaded")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        warn!(error = %e, "TLS certificate reload failed; the previous certificate stays in use")
                    }
                }
            }
        })
    }

    fn acceptor(&self, h2: bool) -> TlsAcceptor {
        let a = self
            .acceptors
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        TlsAcceptor::from(if h2 { a.0.clone() } else { a.1.clone() })
    }

    /// Looks at the first byte and completes a TLS handshake, or passes plaintext through
    /// (permissive), or refuses it (enforcing: `Err`). `h2`: the gRPC listener.
    pub async fn accept(&self, tcp: TcpStream, h2: bool) -> io::Result<MaybeTls> {
        let mut first = [0u8; 1];
        let n = tcp.peek(&mut first).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before sending anything",
            ));
        }
        if first[0] == TLS_HANDSHAKE {
            let s = self.acceptor(h2).accept(tcp).await?;
            return Ok(MaybeTls::Tls(Box::new(s)));
        }
        match self.mode {
            Mode::Enforcing => {
                let mut tcp = tcp;
                if h2 && first[0] == b'P' {
                    let _ = tcp.write_all(&goaway_inadequate_security()).await;
                    let _ = tcp.flush().await;
                }
                let _ = tcp.shutdown().await;
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    PLAINTEXT_REFUSED,
                ))
            }
            _ => Ok(MaybeTls::Plain(tcp)),
        }
    }
}

/// The first byte of a TLS handshake record.
pub const TLS_HANDSHAKE: u8 = 0x16;
/// Why a plaintext connection was refused (log and GOAWAY debug data).
pub const PLAINTEXT_REFUSED: &str =
    "TLS required: this rocklet listener is in tls mode enforcing; enable TLS in the client";

/// An empty SETTINGS frame (the server preface) and a GOAWAY with INADEQUATE_SECURITY (0xc).
fn goaway_inadequate_security() -> Vec<u8> {
    let debug = PLAINTEXT_REFUSED.as_bytes();
    let mut f = vec![0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    let len = 8 + debug.len() as u32;
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.extend_from_slice(&[0x7, 0, 0, 0, 0, 0]);
    f.extend_from_slice(&0u32.to_be_bytes());
    f.extend_from_slice(&0xcu32.to_be_bytes());
    f.extend_from_slice(debug);
    f
}

/// A connection, in TLS or plaintext.
#[derive(Debug)]
pub enum MaybeTls {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl MaybeTls {
    /// The TCP stream underneath.
    #[must_use]
    pub fn tcp(&self) -> &TcpStream {
        match self {
            MaybeTls::Plain(t) => t,
            MaybeTls::Tls(t) => t.get_ref().0,
        }
    }

    /// Whether the connection is TLS.
    #[must_use]
    pub fn is_tls(&self) -> bool {
        matches!(self, MaybeTls::Tls(_))
    }
}

impl AsyncRead for MaybeTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(t) => Pin::new(t).poll_read(cx, buf),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MaybeTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(t) => Pin::new(t).poll_write(cx, buf),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(t) => Pin::new(t).poll_flush(cx),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(t) => Pin::new(t).poll_shutdown(cx),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(t) => t.is_write_vectored(),
            MaybeTls::Tls(t) => t.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goaway_frame_layout() {
        let f = goaway_inadequate_security();
        assert_eq!(&f[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0], "empty SETTINGS");
        let len = u32::from_be_bytes([0, f[9], f[10], f[11]]) as usize;
        assert_eq!(f[12], 7, "GOAWAY");
        assert_eq!(len, f.len() - 18);
        assert_eq!(&f[22..26], &[0, 0, 0, 0xc]);
    }

    #[test]
    fn config_is_checked() {
        assert!(TlsFileConfig::default().validate().is_ok());
        let c = TlsFileConfig {
            mode: Some(Mode::Enforcing),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("cert"));
        let c = TlsFileConfig {
            mode: Some(Mode::Permissive),
            cert: Some("c".into()),
            key: Some("k".into()),
            client_auth: Some(ClientAuth::Required),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().contains("client_ca"));
        let c = TlsFileConfig {
            client_ca: Some("ca".into()),
            ..c
        };
        let e = c.validate().unwrap_err();
        assert!(
            e.contains("tls.mode = \"permissive\"") && e.contains("tls.client_auth = \"required\""),
            "{e}"
        );
        let c = TlsFileConfig {
            mode: Some(Mode::Enforcing),
            ..c
        };
        c.validate().unwrap();
        assert_eq!("Enforcing".parse::<Mode>().unwrap(), Mode::Enforcing);
    }
}
