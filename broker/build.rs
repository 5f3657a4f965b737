//! Compiles the protocol schemas with protox (a protobuf compiler in Rust), so building needs
//! no `protoc`, then generates prost messages and tonic services from them.

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
    Ok(())
}
