//! The in-process round trip (`fabric_benches::inproc`: one thread, A sends 64 B
//! tagged to B, B answers, every completion read) on every default provider, through
//! the safe Rust API. `benches/instr.sh` counts the same round trip's instructions,
//! through this API and through the C ABI, against libfabric's.
#![forbid(unsafe_code)]
// criterion_group! generates a public function without documentation.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fabric_benches::inproc::InProc;

fn inproc(c: &mut Criterion) {
    let mut g = c.benchmark_group("inproc_round_trip");
    for prov in ["shm", "tcp", "udp"] {
        for size in [64usize, 4096] {
            let mut pair = InProc::open(prov, size).expect("an in-process RDM pair");
            g.bench_with_input(BenchmarkId::new(prov, size), &size, |bench, _| {
                bench.iter(|| pair.round_trip().expect("round trip"));
            });
        }
    }
    g.finish();
}

criterion_group!(benches, inproc);
criterion_main!(benches);
