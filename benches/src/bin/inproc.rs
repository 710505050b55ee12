//! The in-process round trip of `../shared/tools/inproc` through the safe Rust API
//! (`fabric_benches::inproc`), with `lf_inproc`'s arguments (`inproc PROVIDER ITERS
//! SIZE`), so that `instr.sh` counts its instructions per round trip the same way:
//! `cargo run --release -p fabric-benches --bin inproc shm 1000 64`.

#![forbid(unsafe_code)]

use fabric_benches::inproc::InProc;

fn main() -> fabric::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let prov = args.get(1).map_or("shm", String::as_str);
    let iters: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let size: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let mut pair = InProc::open(prov, size)?;
    let start = std::time::Instant::now();
    for _ in 0..iters {
        pair.round_trip()?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    println!("{prov} size {size}: {us:.3} usec per round trip ({iters} iterations)");
    Ok(())
}
