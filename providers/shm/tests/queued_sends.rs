//! A send completes only once its message is in the receiver's segment, where the
//! receiver finds it even after the sender is gone.
//!
//! A sender whose messages find the receiver's ring full (inline messages) or the
//! bounce buffers of its slot busy (bounce-buffer messages) keeps them in a queue of
//! its own memory: those sends do not complete until the queue moves into the ring,
//! and closing the sender fails them (`Canceled`), while every message whose send
//! completed reaches the receiver. An inject (no completion to delay) is queued too;
//! closing waits for the receiver to take it. Two endpoints of one process, each in
//! its own domain; the receiver only makes progress when the test says so.

use fabric_core::prov::{IoVec, Op};
use fabric_core::{Caps, CqEntry, Error, FiAddr, OpFlags};
use fabric_shm::proto::INLINE_MAX;
use fabric_shm::ring::RING_ENTRIES;
use fabric_shm::segment::{BOUNCE_COUNT, BOUNCE_SIZE};
use std::time::{Duration, Instant};

/// Sends beyond what fits in the receiver's segment.
const EXTRA: usize = 20;
/// How long a wait for completions may take.
const LIMIT: Duration = Duration::from_secs(20);

mod common;

use common::Node;

/// An endpoint in a domain of its own.
fn node() -> Node {
    common::node(1024)
}

fn op(iov: &[IoVec], addr: FiAddr, tag: u64) -> Op<'_> {
    Op { iov, addr, context: tag, user_context: 0, data: 0, tag, ignore: 0 }
}

/// Message `i`'s payload.
fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i * 31 + k * 7) as u8).collect()
}

/// The successful completions (contexts) and the failed ones (context, error) that
/// `n`'s queue holds now, after a few rounds of progress.
fn drain(n: &Node) -> (Vec<u64>, Vec<(u64, Error)>) {
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    let mut out = [CqEntry::new(0, Caps::empty()); 16];
    let mut idle = 0;
    while idle < 100 {
        match n.cq.read(&mut out) {
            Ok(k) => {
                ok.extend(out[..k].iter().map(|c| c.op_context));
                idle = 0;
            }
            Err(Error::Avail) => {
                let e = n.cq.readerr().expect("an error entry");
                failed.push((e.entry.op_context, e.err));
                idle = 0;
            }
            Err(Error::Again) => idle += 1,
            Err(e) => panic!("cq read: {e:?}"),
        }
    }
    (ok, failed)
}

/// `a` sends `msgs` (tagged, tag = index) to `to`; none is refused.
fn send_all(a: &Node, to: FiAddr, msgs: &[Vec<u8>]) {
    for (i, m) in msgs.iter().enumerate() {
        let iov = [IoVec { base: m.as_ptr() as *mut u8, len: m.len() }];
        // SAFETY: `msgs` outlives every send: the callers drain the sender's
        // completions (or close it) before dropping them.
        unsafe { a.ep.post_send(&op(&iov, to, i as u64), OpFlags::TAGGED) }.expect("post_send");
    }
}

/// Post one receive per message of `msgs` (buffers in `bufs`), tag = index.
fn post_all(b: &Node, bufs: &mut [Vec<u8>]) {
    for (i, buf) in bufs.iter_mut().enumerate() {
        let iov = [IoVec { base: buf.as_mut_ptr(), len: buf.len() }];
        // SAFETY: `bufs` outlives the receives: the callers read their completions,
        // and close the receiver, before dropping them.
        unsafe { b.ep.post_recv(&op(&iov, FiAddr::UNSPEC, i as u64), OpFlags::TAGGED) }.expect("post_recv");
    }
}

/// Message sizes and how many of them fit in the receiver's segment at once.
fn cases() -> [(usize, usize); 2] {
    [(INLINE_MAX, RING_ENTRIES), (BOUNCE_SIZE, BOUNCE_COUNT)]
}

#[test]
fn queued_sends_complete_once_in_the_receivers_ring() {
    for (size, fits) in cases() {
        let (a, b) = (node(), node());
        let ab = a.av.insert(&[b.ep.getname().expect("name")]).expect("insert")[0];
        let msgs: Vec<Vec<u8>> = (0..fits + EXTRA).map(|i| payload(i, size)).collect();
        send_all(&a, ab, &msgs);
        // The receiver does not look: only what is in its segment completed.
        let (ok, failed) = drain(&a);
        assert_eq!(ok, (0..fits as u64).collect::<Vec<_>>(), "{size} B: sends completed before the receiver looked");
        assert!(failed.is_empty(), "{size} B: {failed:?}");
        // An inject queues behind them (and has no completion).
        let small = [7u8; 8];
        a.ep.inject(&small, &op(&[], ab, 999), OpFlags::TAGGED).expect("inject");
        // The receiver takes everything; the sender's queue follows as room frees.
        let mut bufs: Vec<Vec<u8>> = (0..msgs.len()).map(|_| vec![0u8; size + 8]).collect();
        post_all(&b, &mut bufs);
        let mut last = [0u8; 8];
        let iov = [IoVec { base: last.as_mut_ptr(), len: last.len() }];
        // SAFETY: `last` outlives the receive: its completion is read below.
        unsafe { b.ep.post_recv(&op(&iov, FiAddr::UNSPEC, 999), OpFlags::TAGGED) }.expect("post_recv");
        let (mut got, mut sent) = (Vec::new(), ok);
        let deadline = Instant::now() + LIMIT;
        while got.len() <= msgs.len() || sent.len() < msgs.len() {
            assert!(Instant::now() < deadline, "{size} B: {} received, {} sends completed", got.len(), sent.len());
            let (r, rf) = drain(&b);
            let (s, sf) = drain(&a);
            assert!(rf.is_empty() && sf.is_empty(), "{size} B: {rf:?} {sf:?}");
            got.extend(r);
            sent.extend(s);
        }
        assert_eq!(sent, (0..msgs.len() as u64).collect::<Vec<_>>(), "{size} B: sends, in order");
        let want: Vec<u64> = (0..msgs.len() as u64).chain([999]).collect();
        assert_eq!(got, want, "{size} B: receives, in order, the inject last");
        for (i, (buf, m)) in bufs.iter().zip(&msgs).enumerate() {
            assert_eq!(&buf[..size], &m[..], "{size} B: message {i}");
        }
        assert_eq!(last, small, "{size} B: the injected message");
        a.ep.close().expect("close a");
        b.ep.close().expect("close b");
    }
}

#[test]
fn close_fails_queued_sends_and_completed_ones_arrive() {
    for (size, fits) in cases() {
        let (a, b) = (node(), node());
        let ab = a.av.insert(&[b.ep.getname().expect("name")]).expect("insert")[0];
        let msgs: Vec<Vec<u8>> = (0..fits + EXTRA).map(|i| payload(i, size)).collect();
        send_all(&a, ab, &msgs);
        let (ok, failed) = drain(&a);
        assert_eq!(ok.len(), fits, "{size} B: sends completed before the receiver looked");
        assert!(failed.is_empty(), "{size} B: {failed:?}");
        // The sender leaves: what it still held fails, what completed stays.
        a.ep.close().expect("close a");
        let (ok2, failed) = drain(&a);
        assert!(ok2.is_empty(), "{size} B: completions after close: {ok2:?}");
        let canceled: Vec<(u64, Error)> = (fits as u64..msgs.len() as u64).map(|i| (i, Error::Canceled)).collect();
        assert_eq!(failed, canceled, "{size} B: queued sends fail on close");
        drop(a);
        // The receiver gets exactly the messages whose sends completed.
        let mut bufs: Vec<Vec<u8>> = (0..msgs.len()).map(|_| vec![0u8; size + 8]).collect();
        post_all(&b, &mut bufs);
        let mut got = Vec::new();
        let deadline = Instant::now() + LIMIT;
        while got.len() < fits {
            assert!(Instant::now() < deadline, "{size} B: {} of {fits} received", got.len());
            let (r, rf) = drain(&b);
            assert!(rf.is_empty(), "{size} B: {rf:?}");
            got.extend(r);
        }
        assert_eq!(got, ok, "{size} B: the completed sends arrive, in order");
        for i in 0..fits {
            assert_eq!(&bufs[i][..size], &msgs[i][..], "{size} B: message {i}");
        }
        let (r, rf) = drain(&b);
        assert!(r.is_empty() && rf.is_empty(), "{size} B: more than was sent: {r:?} {rf:?}");
        // Closing cancels the receives nothing matched (their buffers are ours again).
        b.ep.close().expect("close b");
    }
}

#[test]
fn close_waits_for_queued_injects() {
    for (size, fits) in cases() {
        let (a, b) = (node(), node());
        let ab = a.av.insert(&[b.ep.getname().expect("name")]).expect("insert")[0];
        let msgs: Vec<Vec<u8>> = (0..fits + EXTRA).map(|i| payload(i, size)).collect();
        for (i, m) in msgs.iter().enumerate() {
            a.ep.inject(m, &op(&[], ab, i as u64), OpFlags::TAGGED).expect("inject");
        }
        let mut bufs: Vec<Vec<u8>> = (0..msgs.len()).map(|_| vec![0u8; size + 8]).collect();
        std::thread::scope(|s| {
            let receiver = s.spawn(|| {
                // The receiver starts late: the sender is closing by then.
                std::thread::sleep(Duration::from_millis(20));
                post_all(&b, &mut bufs);
                let mut got = Vec::new();
                let deadline = Instant::now() + LIMIT;
                while got.len() < msgs.len() && Instant::now() < deadline {
                    let (r, rf) = drain(&b);
                    assert!(rf.is_empty(), "{size} B: {rf:?}");
                    got.extend(r);
                }
                got
            });
            // Closing waits for the receiver to take what is still queued.
            a.ep.close().expect("close a");
            let got = receiver.join().expect("the receiver");
            assert_eq!(got, (0..msgs.len() as u64).collect::<Vec<_>>(), "{size} B: every inject arrives, in order");
        });
        for (i, (buf, m)) in bufs.iter().zip(&msgs).enumerate() {
            assert_eq!(&buf[..size], &m[..], "{size} B: message {i}");
        }
        let (ok, failed) = drain(&a);
        assert!(ok.is_empty() && failed.is_empty(), "{size} B: injects complete nothing: {ok:?} {failed:?}");
        b.ep.close().expect("close b");
    }
}
