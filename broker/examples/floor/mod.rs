//! What the two floor examples (`grpc_floor`, `remoting_floor`) share: the listen address from
//! the first argument, the broker's runtime (multi-threaded, one worker per CPU) to serve on,
//! a lock that outlives a panic elsewhere and the wall clock in milliseconds.

use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Serves on the address given as the first argument (`127.0.0.1:0` by default) until `serve`
/// returns; an error is printed and fails the process.
pub fn run<F, Fut>(serve: F) -> ExitCode
where
    F: FnOnce(SocketAddr) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let arg = std::env::args().nth(1);
    let listen: SocketAddr = match arg.as_deref().unwrap_or("127.0.0.1:0").parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: bad address: {e}");
            return ExitCode::FAILURE;
        }
    };
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
    match rt.block_on(serve(listen)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A lock whose holder's panic does not poison it for the other connections.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Milliseconds since the Unix epoch (0 before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
