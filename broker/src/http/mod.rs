//! The one small HTTP/1.1 server of the broker's web listeners: the metrics
//! ([`crate::metrics`]), the playground ([`crate::playground`]) and the console
//! ([`crate::console`]). Each keeps its own routes behind a [`Handler`]; this module holds
//! the accept loop, the request reader and the one set of limits they all obey.
//!
//! A request flows: [`serve`] accepts a connection and takes one of [`MAX_CONNECTIONS`]
//! slots (none free: `503`), runs the TLS handshake when the listener has TLS, then
//! [`read_request`] reads one request under the limits below (a refusal is answered with
//! [`Handler::refusal`]), the handler answers it ([`Handler::respond`]), the response is
//! written with the handler's fixed [`Handler::HEADERS`] and the connection closes
//! (`Connection: close`: one request per connection, so no keep-alive state is held).
//!
//! Limits (the same for all three, each the strongest any of them had before):
//! - head (request line and headers): [`MAX_HEAD`] bytes (`431`), at most [`MAX_HEADERS`]
//!   header lines (`431`);
//! - body: [`MAX_BODY`] bytes by `Content-Length` (`413`); chunked bodies are refused (`400`);
//! - time: the whole request within [`READ_TIMEOUT`], and no read waiting longer than
//!   [`IDLE_TIMEOUT`] for the next bytes (`408` either way), so a client sending a byte now
//!   and then cannot hold a slot;
//! - connections: [`MAX_CONNECTIONS`] per listener at once (`503`).
//!
//! [`hosts`] is the `Host`/`Origin` check (the defence against DNS rebinding) the console
//! and the metrics use.

pub mod hosts;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::info;

use crate::auth::tls::Tls;

/// Largest request head (request line and headers).
pub const MAX_HEAD: usize = 8 << 10;
/// Most header lines in a head.
pub const MAX_HEADERS: usize = 64;
/// Largest request body.
pub const MAX_BODY: usize = 64 << 10;
/// Connections served at once by one listener; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 64;
/// Longest a whole request (and a TLS handshake before it) may take to arrive.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest one read waits for the next bytes of a request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// A server's routes.
pub trait Handler: Send + Sync + 'static {
    /// What the listener is, for logs and messages (`console`).
    const NAME: &'static str;
    /// Headers every response of this server carries besides `Content-Type`,
    /// `Content-Length` and `Connection: close`.
    const HEADERS: &'static [(&'static str, &'static str)] = &[];

    /// Answers one request that reached the listener at `local` from `peer`.
    fn respond(
        &self,
        req: HttpRequest,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> impl Future<Output = Response> + Send;

    /// The answer to a request refused before it reached [`Handler::respond`] (a limit, a
    /// malformed head): plain text unless the server speaks another format.
    fn refusal(&self, status: u16, msg: &str) -> Response {
        Response::text(status, msg)
    }
}

/// Serves `handler` on `listener` (over TLS when `tls` is given) until the task is dropped.
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, tls: Option<Arc<Tls>>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                crate::net::accept_failed(&e, H::NAME).await;
                continue;
            }
        };
        let (handler, tls) = (handler.clone(), tls.clone());
        let slot = slots.clone().try_acquire_owned();
        tokio::spawn(async move {
            let Ok(_slot) = slot else {
                let mut sock = sock;
                let msg = format!(
                    "the {} serves {MAX_CONNECTIONS} connections at once; try again",
                    H::NAME
                );
                let _ = write_response::<H, _>(&mut sock, &handler.refusal(503, &msg), true).await;
                let _ = sock.shutdown().await;
                return;
            };
            connection(&*handler, sock, peer, tls).await;
        });
    }
}

async fn connection<H: Handler>(h: &H, sock: TcpStream, peer: SocketAddr, tls: Option<Arc<Tls>>) {
    let _ = sock.set_nodelay(true);
    let Ok(local) = sock.local_addr() else {
        return;
    };
    let deadline = Instant::now() + READ_TIMEOUT;
    match tls {
        None => exchange(h, sock, peer, local, deadline).await,
        Some(tls) => match tokio::time::timeout_at(deadline, tls.accept(sock, false)).await {
            Ok(Ok(s)) => exchange(h, s, peer, local, deadline).await,
            Ok(Err(e)) => {
                info!(%peer, error = %e, listener = H::NAME, "HTTP connection refused: TLS")
            }
            Err(_) => {
                info!(%peer, listener = H::NAME, "HTTP connection closed: no TLS handshake in time")
            }
        },
    }
}

/// One request and its response (the connection closes after it).
async fn exchange<H: Handler, S: AsyncRead + AsyncWrite + Unpin>(
    h: &H,
    mut s: S,
    peer: SocketAddr,
    local: SocketAddr,
    deadline: Instant,
) {
    let mut head_only = false;
    let resp = match tokio::time::timeout_at(deadline, read_request(&mut s)).await {
        Err(_) => h.refusal(
            408,
            &format!(
                "the request did not arrive within {} s",
                READ_TIMEOUT.as_secs()
            ),
        ),
        Ok(Err(Refused(status, msg))) => h.refusal(status, &msg),
        Ok(Ok(req)) => {
            head_only = req.method == "HEAD";
            h.respond(req, peer, local).await
        }
    };
    let _ = write_response::<H, _>(&mut s, &resp, !head_only).await;
    let _ = s.shutdown().await;
}

/// A parsed HTTP request.
#[derive(Debug, Default)]
pub struct HttpRequest {
    pub method: String,
    /// The path, percent-decoded, without the query.
    pub path: String,
    pub query: Vec<(String, String)>,
    /// Names lower-cased, values trimmed.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The value of the first pair named `name`.
fn first<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

impl HttpRequest {
    /// A header by lower-case name.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        first(&self.headers, name)
    }

    /// A query parameter.
    #[must_use]
    pub fn param(&self, name: &str) -> Option<&str> {
        first(&self.query, name)
    }
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// `status` with `body` of `content_type`.
    #[must_use]
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// `status` with `msg` and a newline as plain text.
    #[must_use]
    pub fn text(status: u16, msg: &str) -> Self {
        Response::new(status, "text/plain; charset=utf-8", format!("{msg}\n"))
    }
}

/// A request refused while it was read: the status and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub u16, pub String);

/// The reason phrase of the statuses the servers answer.
#[must_use]
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    }
}

/// Writes `r` with the fixed headers of the server `H`; its body unless `with_body` is
/// false (the answer to `HEAD`, whose `Content-Length` is that of the body not sent).
pub async fn write_response<H: Handler, W: AsyncWrite + Unpin>(
    w: &mut W,
    r: &Response,
    with_body: bool,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    let fixed = H::HEADERS.iter().map(|(k, v)| (*k, *v));
    for (k, v) in fixed.chain(r.headers.iter().map(|(k, v)| (*k, v.as_str()))) {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes()).await?;
    if with_body {
        w.write_all(&r.body).await?;
    }
    w.flush().await
}

/// Reads more of the `what` (`request head`, `request body`) into `buf`, waiting at most
/// [`IDLE_TIMEOUT`]; the stream's end before the `what` ended is refused.
async fn read_more<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    what: &str,
) -> Result<(), Refused> {
    let mut chunk = [0u8; 4096];
    match tokio::time::timeout(IDLE_TIMEOUT, r.read(&mut chunk)).await {
        Err(_) => Err(Refused(
            408,
            format!(
                "nothing of the {what} arrived for {} s",
                IDLE_TIMEOUT.as_secs()
            ),
        )),
        Ok(Err(e)) => Err(Refused(400, format!("reading the {what}: {e}"))),
        Ok(Ok(0)) => Err(Refused(
            400,
            format!("the connection closed before the {what} ended"),
        )),
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// Reads one request: a head of at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] headers and
/// a body of at most [`MAX_BODY`] (`Content-Length`; chunked bodies are refused), each read
/// within [`IDLE_TIMEOUT`]. The caller bounds the whole by [`READ_TIMEOUT`].
pub async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<HttpRequest, Refused> {
    let too_big = || {
        Refused(
            431,
            format!("the request head is over {} KiB", MAX_HEAD >> 10),
        )
    };
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(too_big());
        }
        read_more(r, &mut buf, "request head").await?;
    };
    if head_end > MAX_HEAD {
        return Err(too_big());
    }
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| Refused(400, "the request head is not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(Refused(400, format!("bad request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Refused(
            400,
            format!("{version} is not served (HTTP/1.1 only)"),
        ));
    }
    let mut req = HttpRequest {
        method: method.to_string(),
        ..HttpRequest::default()
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    req.path = percent_decode(path);
    req.query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    for l in lines {
        if req.headers.len() == MAX_HEADERS {
            return Err(Refused(
                431,
                format!("the request has over {MAX_HEADERS} headers"),
            ));
        }
        let Some((k, v)) = l.split_once(':') else {
            return Err(Refused(400, format!("bad header line {l:?}")));
        };
        req.headers
            .push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    if req.header("transfer-encoding").is_some() {
        return Err(Refused(
            400,
            "chunked bodies are not served; send Content-Length".into(),
        ));
    }
    let len = match req.header("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| Refused(400, format!("Content-Length {v:?} is not a number")))?,
    };
    if len > MAX_BODY {
        return Err(Refused(
            413,
            format!("the request body is over {} KiB", MAX_BODY >> 10),
        ));
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        read_more(r, &mut body, "request body").await?;
    }
    body.truncate(len);
    req.body = body;
    Ok(req)
}

/// Decodes `%XX` and `+` (a space) of a path or query.
#[must_use]
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("%25DLQ%25g+x"), "%DLQ%g x");
        assert_eq!(percent_decode("50%"), "50%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[tokio::test]
    async fn requests_are_bounded() {
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(read_request(&mut big.as_bytes()).await.unwrap_err().0, 431);
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: y\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(many.len() < MAX_HEAD);
        assert_eq!(read_request(&mut many.as_bytes()).await.unwrap_err().0, 431);
        let body = format!(
            "POST /api/resolve HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert_eq!(read_request(&mut body.as_bytes()).await.unwrap_err().0, 413);
        let ok = "GET /api/topics?after=3&limit=10 HTTP/1.1\r\nHost: x\r\n\r\n";
        let r = read_request(&mut ok.as_bytes()).await.unwrap();
        assert_eq!(
            (r.path.as_str(), r.param("after"), r.header("host")),
            ("/api/topics", Some("3"), Some("x"))
        );
        let bad = "GET / SPDY/3\r\n\r\n";
        assert_eq!(read_request(&mut bad.as_bytes()).await.unwrap_err().0, 400);
        let chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            read_request(&mut chunked.as_bytes()).await.unwrap_err().0,
            400
        );
    }
}
