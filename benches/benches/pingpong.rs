//! In-process ping-pong over the tcp provider (RDM, loopback): one round trip per
//! iteration, both sides driven by one thread, buffers recycled through
//! completions as an application would.
#![forbid(unsafe_code)]
// criterion_group! generates a public function without documentation.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fabric::{Buf, CompletionQueue, Error, FiAddr};
use fabric_benches::rdm_pair;

/// Operation contexts, which index the buffer slots.
const A_RECV: usize = 0;
const B_RECV: usize = 1;
const A_SEND: usize = 2;
const B_SEND: usize = 3;

/// Read both queues until the operation `want` has given its buffer back.
fn until(cqs: [&CompletionQueue; 2], slots: &mut [Option<Buf>; 4], want: usize) {
    while slots[want].is_none() {
        for cq in cqs {
            match cq.read_one() {
                Ok(c) => {
                    let mut buf = c.buffers.into_buf().expect("a single buffer comes back");
                    let cap = buf.capacity();
                    buf.set_len(cap).expect("within capacity");
                    slots[c.context as usize] = Some(buf);
                }
                Err(Error::Again) => {}
                Err(e) => panic!("completion error: {e}"),
            }
        }
    }
}

fn pingpong(c: &mut Criterion) {
    let mut g = c.benchmark_group("tcp_rdm_pingpong");
    for &size in &[64usize, 4096, 65536] {
        let (a, b) = rdm_pair("tcp").expect("tcp RDM pair on loopback");
        let mut slots: [Option<Buf>; 4] = std::array::from_fn(|_| Some(Buf::new(size)));
        g.throughput(Throughput::Bytes(2 * size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |bench, _| {
            bench.iter(|| {
                let take = |s: &mut [Option<Buf>; 4], i: usize| s[i].take().expect("buffer is home");
                b.ep.recv(take(&mut slots, B_RECV), FiAddr::UNSPEC, B_RECV as u64).expect("post");
                a.ep.recv(take(&mut slots, A_RECV), FiAddr::UNSPEC, A_RECV as u64).expect("post");
                a.ep.send(take(&mut slots, A_SEND), a.peer, A_SEND as u64).expect("send");
                until([&b.cq, &a.cq], &mut slots, B_RECV);
                b.ep.send(take(&mut slots, B_SEND), b.peer, B_SEND as u64).expect("send");
                until([&a.cq, &b.cq], &mut slots, A_RECV);
                until([&a.cq, &b.cq], &mut slots, A_SEND);
                until([&b.cq, &a.cq], &mut slots, B_SEND);
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = pingpong
}
criterion_main!(benches);
