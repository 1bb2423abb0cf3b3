//! Generates the gRPC code from `proto/*.proto` (`tenure.proto`, `elections.proto`,
//! `snapshots.proto`, `cluster.proto`, one package) with `protox` (a pure-Rust protobuf
//! compiler), so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files: Vec<_> = [
        "tenure.proto",
        "elections.proto",
        "snapshots.proto",
        "cluster.proto",
    ]
    .iter()
    .map(|f| root.join(f))
    .collect();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, [&root])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Object content is `bytes::Bytes`: sliced into blocks and messages without copies.
        .bytes(".tenure.v1.PutObjectRequest.data")
        .bytes(".tenure.v1.UploadRequest.data")
        .bytes(".tenure.v1.UploadPartRequest.data")
        .bytes(".tenure.v1.GetObjectResponse.data")
        .compile_fds(fds)?;
    Ok(())
}
