//! Compiles the protocol schemas with protox (a protobuf compiler in Rust), so building needs
//! no `protoc`, then generates prost messages and tonic services from them.
//!
//! With `ROCKLET_PLAYGROUND_DIR` set (dist/build.sh sets it to the built playground), every
//! file under that directory is built into the binary for `rocklet playground`; without it
//! the binary has none and the command says how to get them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            files(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

fn playground() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=ROCKLET_PLAYGROUND_DIR");
    let mut src = String::from("&[\n");
    if let Some(dir) = std::env::var_os("ROCKLET_PLAYGROUND_DIR").filter(|d| !d.is_empty()) {
        let dir = std::fs::canonicalize(&dir)
            .map_err(|e| format!("ROCKLET_PLAYGROUND_DIR={}: {e}", Path::new(&dir).display()))?;
        if !dir.join("index.html").is_file() {
            return Err(format!(
                "ROCKLET_PLAYGROUND_DIR={}: no index.html there (build the playground first: \
                 bash bindings-wasm/build.sh)",
                dir.display()
            )
            .into());
        }
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut all = Vec::new();
        files(&dir, &mut all)?;
        all.sort();
        for f in all {
            println!("cargo:rerun-if-changed={}", f.display());
            let rel = f.strip_prefix(&dir)?.to_string_lossy().replace('\\', "/");
            writeln!(
                src,
                "    ({rel:?}, include_bytes!({:?})),",
                f.display().to_string()
            )?;
        }
    }
    src.push(']');
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR unset")?);
    std::fs::write(out.join("playground_files.rs"), src)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/rocketmq_v2.proto",
        "proto/rocklet_admin.proto",
        "proto/rocklet_security.proto",
        // etcd's KV and Lease services, for cluster mode (a client only).
        "proto/etcd.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    playground()?;
    Ok(())
}
