//! Cost of one durable commit on this disk: raw `fdatasync` after a small overwrite or an
//! append, against one redb commit of a record of a given size (what `Storage::commit`
//! does for each driver batch).
//!
//! `cargo run --release -p tenure-server --example storage_cost -- [DIR] [N]`

use redb::{Database, Durability, TableDefinition};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

const T: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("chunks");

fn report(what: &str, mut us: Vec<f64>) {
    us.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| us[((us.len() as f64 - 1.0) * q) as usize];
    println!(
        "{what:<44} p50 {:>7.1} us  p90 {:>7.1} us  p99 {:>7.1} us",
        p(0.5),
        p(0.9),
        p(0.99)
    );
}

fn time(n: usize, mut f: impl FnMut(usize)) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let t = Instant::now();
            f(i);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "/tmp/tenure-storage-cost".into()),
    );
    let n: usize = args.next().map(|s| s.parse().unwrap()).unwrap_or(2000);
    std::fs::create_dir_all(&dir).unwrap();

    // Raw: overwrite 4 KiB in place, then fdatasync.
    let path = dir.join("raw");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.write_all_at(&vec![0u8; 1 << 20], 0).unwrap();
    f.sync_all().unwrap();
    let page = vec![7u8; 4096];
    report(
        "pwrite 4 KiB in place + fdatasync",
        time(n, |i| {
            f.write_all_at(&page, ((i % 256) * 4096) as u64).unwrap();
            f.sync_data().unwrap();
        }),
    );
    report(
        "pwrite 4 KiB in place + fsync",
        time(n, |i| {
            f.write_all_at(&page, ((i % 256) * 4096) as u64).unwrap();
            f.sync_all().unwrap();
        }),
    );
    report(
        "fdatasync, nothing written",
        time(n, |_| {
            f.sync_data().unwrap();
        }),
    );
    // Append 256 bytes, then fdatasync (a log: the file grows, metadata changes).
    let mut log = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(dir.join("log"))
        .unwrap();
    let rec = vec![3u8; 256];
    report(
        "append 256 B + fdatasync (growing file)",
        time(n, |_| {
            log.write_all(&rec).unwrap();
            log.sync_data().unwrap();
        }),
    );
    // Preallocated log: overwrite sequentially within allocated space.
    let pre = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(dir.join("prealloc"))
        .unwrap();
    pre.write_all_at(&vec![0u8; 64 << 20], 0).unwrap();
    pre.sync_all().unwrap();
    report(
        "seq write 256 B in preallocated + fdatasync",
        time(n, |i| {
            pre.write_all_at(&rec, (i * 256) as u64).unwrap();
            pre.sync_data().unwrap();
        }),
    );
    // redb commits of one record of several sizes, as Storage::commit does.
    for size in [64usize, 1024, 4096, 16384, 65536] {
        for two_phase in [false, true] {
            let p = dir.join(format!("db-{size}-{two_phase}.redb"));
            let _ = std::fs::remove_file(&p);
            let db = Database::create(&p).unwrap();
            let v = vec![5u8; size];
            let chunks = 64u64;
            let samples = time(n, |i| {
                let mut tx = db.begin_write().unwrap();
                tx.set_durability(Durability::Immediate).unwrap();
                tx.set_two_phase_commit(two_phase);
                {
                    let mut t = tx.open_table(T).unwrap();
                    t.insert((1, i as u64 % chunks), v.as_slice()).unwrap();
                }
                tx.commit().unwrap();
            });
            report(
                &format!("redb commit, 1 record of {size} B, 2pc={two_phase}"),
                samples,
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
