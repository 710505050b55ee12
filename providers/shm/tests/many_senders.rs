//! A receiver whose senders claimed slots past the first 64 of its segment (the
//! first word of its claim bitmap): one progress call that finds the first slot
//! busy still polls a busy slot of the second word, although no other slot of the
//! first word is claimed. Endpoints of one process, each in its own domain.

use fabric_core::prov::{IoVec, Op};
use fabric_core::{Address, Caps, CqEntry, Error, FiAddr, OpFlags};
use fabric_shm::segment::{Segment, SLOTS};
use std::time::{Duration, Instant};

mod common;

use common::Node;

/// How long a wait may take.
const LIMIT: Duration = Duration::from_secs(20);

/// The segment name behind an endpoint's address.
fn seg_name(n: &Node) -> String {
    match n.ep.getname().expect("getname") {
        Address::Str(s) => s.strip_prefix("fi_shm://").expect("an shm address").to_string(),
        other => panic!("not an shm address: {other:?}"),
    }
}

/// `from` sends 8 bytes, tagged `tag`, to `to` (its handle in `from`'s AV).
fn send(from: &Node, to: FiAddr, tag: u64) {
    let buf = tag.to_le_bytes();
    let iov = [IoVec { base: buf.as_ptr() as *mut u8, len: buf.len() }];
    let op = Op { iov: &iov, addr: to, context: tag, user_context: 0, data: 0, tag, ignore: 0 };
    // SAFETY: an inline send: the payload is copied into the ring before it returns.
    unsafe { from.ep.post_send(&op, OpFlags::TAGGED) }.expect("send");
}

/// Post a tagged receive for any tag into `buf`.
fn post_recv(n: &Node, buf: &mut [u8; 8], context: u64) {
    let iov = [IoVec { base: buf.as_mut_ptr(), len: buf.len() }];
    let op = Op { iov: &iov, addr: FiAddr::UNSPEC, context, user_context: 0, data: 0, tag: 0, ignore: u64::MAX };
    // SAFETY: the callers keep `buf` until the receive completed.
    unsafe { n.ep.post_recv(&op, OpFlags::TAGGED) }.expect("recv");
}

/// Read `n`'s queue until `want` completions came (their contexts, sorted).
fn wait_for(n: &Node, want: usize) -> Vec<u64> {
    let mut got = Vec::new();
    let mut out = [CqEntry::new(0, Caps::empty()); 16];
    let start = Instant::now();
    while got.len() < want {
        match n.cq.read(&mut out) {
            Ok(k) => got.extend(out[..k].iter().map(|c| c.op_context)),
            Err(Error::Again) => assert!(start.elapsed() < LIMIT, "{} of {want} completions", got.len()),
            Err(e) => panic!("cq read: {e:?}"),
        }
    }
    got.sort_unstable();
    got
}

#[test]
fn a_busy_first_slot_does_not_hide_the_second_word() {
    let rx = common::node(256);
    let name = seg_name(&rx);
    let addr = Address::Str(format!("fi_shm://{name}"));
    // Sender k claims slot k of the receiver's segment with its first send: 0, the
    // 63 others of the first word, then 64.
    let senders: Vec<(Node, FiAddr)> = (0..65)
        .map(|_| {
            let n = common::node(16);
            let to = n.av.insert(std::slice::from_ref(&addr)).expect("av insert")[0];
            (n, to)
        })
        .collect();
    let mut bufs = vec![[0u8; 8]; 65];
    for (k, b) in bufs.iter_mut().enumerate() {
        post_recv(&rx, b, k as u64);
    }
    for (k, (n, to)) in senders.iter().enumerate() {
        send(n, *to, k as u64);
        assert_eq!(wait_for(n, 1), [k as u64], "sender {k}'s completion");
        // The receives match in the order posted, the messages come in order.
        assert_eq!(wait_for(&rx, 1), [k as u64], "sender {k}'s message");
        assert_eq!(u64::from_le_bytes(bufs[k]), k as u64);
    }
    let owner = Segment::attach(&name).expect("attach");
    let mut bits = [0u64; SLOTS / 64];
    owner.claimed_slots(&mut bits);
    assert_eq!((bits[0], bits[1]), (u64::MAX, 1), "slots 0 to 64 claimed");
    // Senders 1 to 63 go; the receiver releases their slots as it polls.
    let mut senders = senders.into_iter();
    let (first, to_first) = senders.next().expect("sender 0");
    let (last, to_last) = senders.next_back().expect("sender 64");
    drop(senders);
    let start = Instant::now();
    let mut out = [CqEntry::new(0, Caps::empty()); 1];
    loop {
        owner.claimed_slots(&mut bits);
        if bits[0] == 1 {
            break;
        }
        assert!(start.elapsed() < LIMIT, "slots left claimed: {:#x}", bits[0]);
        assert_eq!(rx.cq.read(&mut out), Err(Error::Again));
    }
    assert_eq!(bits[1], 1, "slot 64 still claimed");
    // Slot 0 and slot 64 busy: one read, driving progress once, gets both.
    let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
    for round in 0..100u64 {
        post_recv(&rx, &mut a, 0);
        post_recv(&rx, &mut b, 1);
        send(&first, to_first, 2 * round);
        send(&last, to_last, 2 * round + 1);
        let mut two = [CqEntry::new(0, Caps::empty()); 2];
        assert_eq!(rx.cq.read(&mut two), Ok(2), "round {round}: both messages in one poll");
        let mut tags = [two[0].tag, two[1].tag];
        tags.sort_unstable();
        assert_eq!(tags, [2 * round, 2 * round + 1]);
        assert_eq!([u64::from_le_bytes(a), u64::from_le_bytes(b)], [2 * round, 2 * round + 1]);
        assert_eq!(wait_for(&first, 1), [2 * round]);
        assert_eq!(wait_for(&last, 1), [2 * round + 1]);
    }
}
