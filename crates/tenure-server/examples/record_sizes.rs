//! Sizes of the chunk records in a device's database (a copy, or a stopped device's).
//!
//! `cargo run --release -p tenure-server --example record_sizes -- DATA_DIR DEVICE`

use tenure_core::ids::DeviceId;
use tenure_server::storage::Storage;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("data directory"));
    let device: u64 = args.next().expect("device id").parse().expect("number");
    let (_s, state) = Storage::open(&dir, DeviceId(device)).expect("open");
    let mut sizes: Vec<(usize, String)> = state
        .chunks
        .values()
        .map(|c| {
            (
                postcard::to_stdvec(c).expect("encode").len(),
                format!("{} store {}", c.id, c.store),
            )
        })
        .collect();
    sizes.sort();
    let total: usize = sizes.iter().map(|s| s.0).sum();
    println!("{} chunks, {} bytes in all", sizes.len(), total);
    for (n, what) in sizes.iter().rev().take(10) {
        println!("{n:>9} B  {what}");
    }
}
