//! Two RDM endpoints that connect to each other at once keep one connection, and
//! no operation is lost on the other. The connection of the larger name loses
//! (the smaller name's refuses it with a reject and closes it). The case that
//! failed: the loser reads the reject, and the close, before the winner's hello
//! has been read. Its operations must wait for the winner, not fail with the
//! close (Open MPI over the C ABI saw `MPI_Alltoall` fail in about half of its
//! 8-rank runs).

mod common;

use common::{rdm_endpoint, wait};
use fabric_core::prov::{IoVec, Op};
use fabric_core::*;

fn op(iov: &[IoVec], addr: FiAddr, ctx: u64) -> Op<'_> {
    Op { iov, addr, context: ctx, user_context: ctx, data: 0, tag: 0, ignore: 0 }
}

#[test]
fn the_losing_connections_operations_wait_for_the_winner() {
    let p = fabric_tcp::provider();
    let info = p.getinfo(&Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true)).unwrap().remove(0);
    let dom = p.fabric(&info).unwrap().domain(&info).unwrap();
    for round in 0..20 {
        let a = rdm_endpoint(&dom, &info);
        let b = rdm_endpoint(&dom, &info);
        let (na, nb) = (a.ep.getname().unwrap(), b.ep.getname().unwrap());
        // `small` refuses `large`'s connection: its own wins.
        let (small, large) = if na.sockaddr() < nb.sockaddr() { (&a, &b) } else { (&b, &a) };
        let to_small = large.av.insert(&[small.ep.getname().unwrap()]).unwrap()[0];
        let to_large = small.av.insert(&[large.ep.getname().unwrap()]).unwrap()[0];
        let mut m1 = format!("from the larger name, round {round}").into_bytes();
        let mut m2 = format!("from the smaller name, round {round}").into_bytes();
        let (mut r1, mut r2) = (vec![0u8; 64], vec![0u8; 64]);
        let s1 = [IoVec { base: m1.as_mut_ptr(), len: m1.len() }];
        let s2 = [IoVec { base: m2.as_mut_ptr(), len: m2.len() }];
        let i1 = [IoVec { base: r1.as_mut_ptr(), len: r1.len() }];
        let i2 = [IoVec { base: r2.as_mut_ptr(), len: r2.len() }];
        // SAFETY: every buffer outlives the completions awaited below.
        unsafe {
            small.ep.post_recv(&op(&i1, FiAddr::UNSPEC, 1), OpFlags::empty()).unwrap();
            large.ep.post_recv(&op(&i2, FiAddr::UNSPEC, 2), OpFlags::empty()).unwrap();
            large.ep.post_send(&op(&s1, to_small, 3), OpFlags::empty()).unwrap();
        }
        // The larger name connects and says hello.
        for _ in 0..20 {
            let _ = large.cq.read(&mut []);
        }
        // The smaller name connects too before it has read that hello; then it
        // reads it and refuses it (its own connection wins), and closes it.
        // SAFETY: as above.
        unsafe { small.ep.post_send(&op(&s2, to_large, 4), OpFlags::empty()).unwrap() };
        for _ in 0..20 {
            let _ = small.cq.read(&mut []);
        }
        // The larger name reads the refusal and the close before the winning
        // connection's hello (which it accepts in the same pass, unread).
        let mut on_small = [wait(&small.cq, &large.cq), wait(&small.cq, &large.cq)];
        let mut on_large = [wait(&large.cq, &small.cq), wait(&large.cq, &small.cq)];
        on_small.sort_by_key(|c| c.as_ref().map_or(0, |e| e.op_context));
        on_large.sort_by_key(|c| c.as_ref().map_or(0, |e| e.op_context));
        let [recv1, sent2] = on_small.map(|c| c.unwrap_or_else(|e| panic!("round {round}: {e:?}")));
        let [recv2, sent1] = on_large.map(|c| c.unwrap_or_else(|e| panic!("round {round}: {e:?}")));
        assert_eq!((recv1.op_context, sent2.op_context, recv2.op_context, sent1.op_context), (1, 4, 2, 3));
        assert_eq!(&r1[..recv1.len], &m1[..], "round {round}");
        assert_eq!(&r2[..recv2.len], &m2[..], "round {round}");
    }
}
