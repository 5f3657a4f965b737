//! `rocklet playground`: the browser playground (bindings-wasm/playground, with its built
//! wasm module) served from files built into the binary, so anyone with the binary has it.
//!
//! The files are there when the binary was built with `ROCKLET_PLAYGROUND_DIR` naming the
//! built playground (dist/build.sh does); [`FILES`] is empty otherwise and the command says
//! how to build them in.
//!
//! Unlike the console and the metrics listener, it answers any `Host` (no DNS-rebinding
//! check): it serves only these static files, the same for everyone and public in the
//! repository, and holds no state or data (the playground's broker runs in the browser
//! with in-memory storage), so a page of another site that reads them learns nothing.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::http::{self, Handler, HttpRequest, Response};

/// Path (relative, `/`-separated) and bytes of every file of the playground.
pub static FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/playground_files.rs"));

/// Why the playground cannot be served by this binary.
pub const NOT_BUILT_IN: &str = "this rocklet binary was built without the playground. \
    Build it in with `bash dist/build.sh` (the broker tarball's binary has it), or: \
    `bash bindings-wasm/build.sh && ROCKLET_PLAYGROUND_DIR=bindings-wasm/playground \
    cargo build --release -p rocklet-broker`";

/// The file a request path names (`/` is `index.html`; query strings are ignored).
#[must_use]
pub fn lookup(path: &str) -> Option<&'static [u8]> {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let rel = path.trim_start_matches('/');
    let rel = if rel.is_empty() { "index.html" } else { rel };
    FILES.iter().find(|(p, _)| *p == rel).map(|(_, b)| *b)
}

/// The content type of a file, by its extension (`application/wasm` lets browsers compile
/// the module while it streams in).
#[must_use]
pub fn content_type(path: &str) -> &'static str {
    let path = path.split(['?', '#']).next().unwrap_or("");
    if path.is_empty() || path.ends_with('/') || path.ends_with(".html") {
        return "text/html; charset=utf-8";
    }
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("ts") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Binds `addr` (before anything is printed, so a port in use fails at once).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    if FILES.is_empty() {
        return Err(NOT_BUILT_IN.into());
    }
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// The playground's routes: `GET` and `HEAD` of the built-in files.
#[derive(Debug)]
struct Files;

impl Handler for Files {
    const NAME: &'static str = "playground";
    const HEADERS: &'static [(&'static str, &'static str)] = &[("Cache-Control", "no-cache")];

    async fn respond(&self, req: HttpRequest, _: SocketAddr, _: SocketAddr) -> Response {
        if req.method != "GET" && req.method != "HEAD" {
            return Response::new(405, "text/plain", &b"only GET and HEAD\n"[..]);
        }
        match lookup(&req.path) {
            Some(b) => Response::new(200, content_type(&req.path), b),
            None => Response::new(404, "text/plain", &b"not found\n"[..]),
        }
    }
}

/// Serves GET and HEAD of the built-in files ([`crate::http`]) until the task is dropped.
pub async fn serve(listener: TcpListener) {
    http::serve(listener, Arc::new(Files), None).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_by_extension() {
        assert_eq!(
            content_type("/pkg/rocklet_wasm_bg.wasm"),
            "application/wasm"
        );
        assert_eq!(
            content_type("/app.js?v=1"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type("/index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type("/"), "text/html; charset=utf-8");
        assert_eq!(content_type("/x.bin"), "application/octet-stream");
    }

    #[test]
    fn paths_outside_the_files_are_not_found() {
        assert!(lookup("/../Cargo.toml").is_none());
        assert!(lookup("/nothing-here").is_none());
        // Built in or not, the root names index.html.
        assert_eq!(lookup("/").is_some(), lookup("/index.html").is_some());
    }
}
