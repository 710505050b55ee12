//! RMA over the tcp provider in one process: a write (completes once the target
//! has the data) and a read, each one at a time, at several sizes. The target's
//! progress is driven from the same thread.

#![forbid(unsafe_code)]
// criterion_group! generates a public function without documentation.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fabric::{Buf, CompletionQueue, MrAccess};
use fabric_benches::rdm_pair;

/// Read the initiator's queue (driving the target too) until the operation's
/// buffer comes back.
fn complete(init: &CompletionQueue, target: &CompletionQueue) -> Buf {
    loop {
        match init.next().expect("reading the queue") {
            Some(Ok(c)) => return c.buffers.into_buf().expect("one buffer"),
            Some(Err(e)) => panic!("RMA failed: {e}"),
            None => {
                let _ = target.next();
            }
        }
    }
}

fn rma(c: &mut Criterion) {
    let mut g = c.benchmark_group("tcp_rdm_rma");
    for &size in &[64usize, 4096, 65536, 1 << 20] {
        let (a, b) = rdm_pair("tcp").expect("tcp RDM pair on loopback");
        let region =
            b.domain.register(Buf::new(size), MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE).expect("register");
        let at = region.remote();
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf = Some(Buf::new(size));
        g.bench_with_input(BenchmarkId::new("write", size), &size, |bench, _| {
            bench.iter(|| {
                a.ep.write(buf.take().expect("buffer"), a.peer, at, 1).expect("write");
                buf = Some(complete(&a.cq, &b.cq));
            })
        });
        g.bench_with_input(BenchmarkId::new("read", size), &size, |bench, _| {
            bench.iter(|| {
                a.ep.read(buf.take().expect("buffer"), a.peer, at, 2).expect("read");
                buf = Some(complete(&a.cq, &b.cq));
            })
        });
        drop(region);
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = rma
}
criterion_main!(benches);
