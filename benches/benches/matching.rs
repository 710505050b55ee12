//! Tag matching in the shared layer: posting and matching with queues of various
//! depths, the cost an RDM receive pays before any byte moves.
#![forbid(unsafe_code)]
// criterion_group! generates a public function without documentation.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use fabric::FiAddr;
use fabric_util::matcher::{Matcher, MsgSpec, RecvSpec};

fn recv(tag: u64) -> RecvSpec {
    RecvSpec { tagged: true, src: FiAddr::UNSPEC, tag, ignore: 0, user_context: tag }
}

fn msg(tag: u64) -> MsgSpec {
    MsgSpec { tagged: true, src: FiAddr(0), tag }
}

fn matching(c: &mut Criterion) {
    let mut g = c.benchmark_group("tag_matching");
    for &depth in &[0usize, 16, 256] {
        // `depth` non-matching receives stay posted; each iteration posts one
        // matching receive at the back and matches a message against it.
        g.bench_with_input(BenchmarkId::new("posted_depth", depth), &depth, |b, &depth| {
            let mut m: Matcher<u64, u64> = Matcher::with_capacity(depth + 1, 1);
            for i in 0..depth {
                m.push_posted(recv(1_000_000 + i as u64), 0);
            }
            b.iter(|| {
                m.push_posted(recv(7), 1);
                let id = m.match_posted(black_box(&msg(7))).expect("match");
                black_box(m.remove_posted(id));
            })
        });
        g.bench_with_input(BenchmarkId::new("unexpected_depth", depth), &depth, |b, &depth| {
            let mut m: Matcher<u64, u64> = Matcher::with_capacity(1, depth + 1);
            for i in 0..depth {
                m.push_unexpected(msg(1_000_000 + i as u64), 0);
            }
            b.iter(|| {
                m.push_unexpected(msg(7), 1);
                let id = m.match_unexpected(black_box(&recv(7))).expect("match");
                black_box(m.remove_unexpected(id));
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = matching
}
criterion_main!(benches);
