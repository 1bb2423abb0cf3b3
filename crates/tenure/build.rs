//! Generates a gRPC client for the subset of etcd's v3 API that `tenure bench lookup
//! --etcd` compares against (`etcd/rpc.proto`), with `protox` (pure Rust: no system
//! `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("etcd");
    let file = root.join("rpc.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&root])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
