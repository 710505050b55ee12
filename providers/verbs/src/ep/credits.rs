//! Flow control of an iWARP connection: receive credits.
//!
//! iWARP has no receiver-not-ready retry: a SEND that finds no receive buffer
//! posted ends the connection (a TERMINATE, DDP layer, "no buffer available").
//! So on iWARP each side counts the peer's buffers it may still fill
//! ([`Credits::avail`]: the peer posts [`NRX`](super::NRX) per connection), and
//! the buffers it has re-posted since it last told the peer
//! ([`Credits::owed`]). Every SEND takes one credit; a frame without a credit
//! waits in its connection's backlog. A receiver returns credits in a small
//! control SEND ([`encode`]: shorter than any frame's header, like the first
//! marker) once it owes [`THRESHOLD`] of them; the last [`RESERVE`] credits
//! are kept for those control SENDs (and the first marker), so a side can
//! always tell the other what it re-posted.
//!
//! No deadlock: a side whose frames wait (at most `RESERVE` credits left) has
//! had at least `NRX - RESERVE` of its SENDs taken by the peer and not yet
//! returned, and `NRX - RESERVE >= THRESHOLD`, so the peer owes a credit
//! message, which it can send if it has a credit. If both sides had none,
//! each spent its last on a credit message returning at least one credit,
//! and the later of the two to arrive left its receiver with a credit: a
//! contradiction. A control SEND costs the peer a buffer too: it is owed back
//! like any other, in a later credit message (only once `THRESHOLD` are owed,
//! so credit messages do not answer each other for ever).
//!
//! This is a state machine without I/O ([`Credits`]): the connection calls it
//! as it posts SENDs, re-posts buffers and receives credit messages.

/// Credits kept back from frames for control SENDs (credit messages, the
/// first marker).
pub(super) const RESERVE: u32 = 4;
/// Re-posted buffers owed before a credit message goes.
pub(super) const THRESHOLD: u32 = 16;
/// A credit message: these 4 bytes, then the credits returned (u32, little
/// endian).
pub(super) const TAG: [u8; 4] = *b"FBCR";
/// Bytes of a credit message.
pub(super) const MSG_LEN: usize = 8;
// Shorter than any frame's header: never taken for a frame.
const _: () = assert!(MSG_LEN < fabric_util::wire::HDR_LEN);

/// A credit message returning `n` credits.
pub(super) fn encode(n: u32) -> [u8; MSG_LEN] {
    super::conn::ctl_msg(TAG, &n.to_le_bytes())
}

/// The credits a received SEND's bytes return, if it is a credit message.
pub(super) fn decode(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(super::conn::ctl_value::<MSG_LEN>(TAG, bytes)?.try_into().ok()?))
}

/// One connection's credits (iWARP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Credits {
    /// The peer's receive buffers we may still fill.
    avail: u32,
    /// Our receive buffers re-posted since we last told the peer.
    owed: u32,
}

impl Credits {
    /// A connection whose peer posted `peer_buffers` receive buffers.
    pub(super) fn new(peer_buffers: u32) -> Credits {
        debug_assert!(peer_buffers >= RESERVE + THRESHOLD, "too few buffers for flow control");
        Credits { avail: peer_buffers, owed: 0 }
    }

    /// Credits left.
    #[cfg(test)]
    pub(super) fn avail(&self) -> u32 {
        self.avail
    }

    /// Re-posted buffers not yet returned.
    #[cfg(test)]
    pub(super) fn owed(&self) -> u32 {
        self.owed
    }

    /// Whether a frame (an engine SEND) may go now: more credits left than
    /// the reserve.
    pub(super) fn frame_ok(&self) -> bool {
        self.avail > RESERVE
    }

    /// A frame's SEND is posted (the caller checked [`Credits::frame_ok`]).
    pub(super) fn frame_sent(&mut self) {
        debug_assert!(self.frame_ok());
        self.avail = self.avail.saturating_sub(1);
    }

    /// Whether a control SEND may go now (from the reserve).
    pub(super) fn control_ok(&self) -> bool {
        self.avail > 0
    }

    /// A control SEND that returns no credits (the first marker) is posted.
    pub(super) fn control_sent(&mut self) {
        debug_assert!(self.control_ok());
        self.avail = self.avail.saturating_sub(1);
    }

    /// The peer returned `n` credits.
    pub(super) fn granted(&mut self, n: u32) {
        self.avail = self.avail.saturating_add(n);
    }

    /// One of our receive buffers was re-posted.
    pub(super) fn reposted(&mut self) {
        self.owed += 1;
    }

    /// The credits a credit message should return now: `Some` once
    /// [`THRESHOLD`] are owed and a credit is left to send it with.
    pub(super) fn update_due(&self) -> Option<u32> {
        (self.owed >= THRESHOLD && self.control_ok()).then_some(self.owed)
    }

    /// A credit message returning `n` (from [`Credits::update_due`]) is posted.
    pub(super) fn update_sent(&mut self, n: u32) {
        self.owed -= n.min(self.owed);
        self.control_sent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const N: u32 = super::super::NRX as u32;

    #[test]
    fn messages_round_trip_and_are_shorter_than_a_frame() {
        assert_eq!(decode(&encode(0)), Some(0));
        assert_eq!(decode(&encode(77)), Some(77));
        assert_eq!(decode(&encode(u32::MAX)), Some(u32::MAX));
        assert_ne!(&TAG[..], &super::super::conn::FIRST_MARKER[..]);
        assert_eq!(decode(b"FBCR"), None, "too short");
        assert_eq!(decode(b"FBCX\x01\0\0\0"), None, "another tag");
        assert_eq!(decode(b"FBCR\x01\0\0\0\0"), None, "too long");
    }

    #[test]
    fn write_data_messages_round_trip_and_differ_from_credit_messages() {
        use super::super::conn::{decode_write_data, write_data_msg, WRITE_DATA_LEN};
        for d in [0, 1, 0xDA7A_0000_0000_0001, u64::MAX] {
            assert_eq!(decode_write_data(&write_data_msg(d)), Some(d));
            assert_eq!(decode(&write_data_msg(d)), None, "not a credit message");
        }
        assert_eq!(decode_write_data(&encode(5)), None, "a credit message is no write data");
        assert_eq!(decode_write_data(&write_data_msg(7)[..WRITE_DATA_LEN - 1]), None, "too short");
    }

    #[test]
    fn frames_stop_at_the_reserve_and_control_messages_use_it() {
        let mut c = Credits::new(N);
        for _ in 0..N - RESERVE {
            assert!(c.frame_ok());
            c.frame_sent();
        }
        assert!(!c.frame_ok(), "frames leave the reserve");
        assert_eq!(c.avail(), RESERVE);
        assert_eq!(c.update_due(), None, "nothing owed");
        for _ in 0..THRESHOLD {
            c.reposted();
        }
        assert_eq!(c.update_due(), Some(THRESHOLD));
        c.update_sent(THRESHOLD);
        assert_eq!((c.avail(), c.owed()), (RESERVE - 1, 0));
        c.granted(10);
        assert!(c.frame_ok());
        assert_eq!(c.avail(), RESERVE - 1 + 10);
    }

    #[test]
    fn no_credit_message_without_a_credit() {
        let mut c = Credits::new(N);
        for _ in 0..N - RESERVE {
            c.frame_sent();
        }
        for _ in 0..RESERVE {
            c.control_sent();
        }
        for _ in 0..THRESHOLD * 2 {
            c.reposted();
        }
        assert!(!c.control_ok());
        assert_eq!(c.update_due(), None, "no credit to send it with");
        c.granted(1);
        assert_eq!(c.update_due(), Some(THRESHOLD * 2));
    }

    /// One side of a simulated connection: its credits, its receive buffers
    /// (posted, or holding a message not yet handled), what it has to send.
    struct Side {
        cr: Credits,
        posted: u32,
        /// Messages received, not yet handled (their buffers not re-posted).
        unread: VecDeque<Msg>,
        /// Frames waiting to be sent.
        want: u32,
        frames_in: u32,
        /// Whether this side reads what arrives (else its buffers stay full).
        reading: bool,
    }

    #[derive(Debug, Clone, Copy)]
    enum Msg {
        Frame,
        Credit(u32),
    }

    impl Side {
        fn new(want: u32) -> Side {
            Side { cr: Credits::new(N), posted: N, unread: VecDeque::new(), want, frames_in: 0, reading: true }
        }
    }

    /// Drive two sides, one step at a time in an order `pick` chooses, until
    /// nothing moves; every SEND must find a posted buffer.
    fn run(a_want: u32, b_want: u32, mut pick: impl FnMut(usize) -> usize) -> [Side; 2] {
        let mut s = [Side::new(a_want), Side::new(b_want)];
        // The wires, in order: wire[i] carries side i's SENDs to the other.
        let mut wire: [VecDeque<Msg>; 2] = [VecDeque::new(), VecDeque::new()];
        loop {
            // What may happen now: (side, action).
            let mut can = Vec::new();
            for i in 0..2 {
                let o = 1 - i;
                if s[i].want > 0 && s[i].cr.frame_ok() {
                    can.push((i, 0));
                }
                if s[i].cr.update_due().is_some() {
                    can.push((i, 1));
                }
                if !wire[i].is_empty() {
                    can.push((o, 2));
                }
                if s[i].reading && !s[i].unread.is_empty() {
                    can.push((i, 3));
                }
            }
            if can.is_empty() {
                return s;
            }
            let (i, what) = can[pick(can.len()) % can.len()];
            let o = 1 - i;
            match what {
                0 => {
                    s[i].cr.frame_sent();
                    s[i].want -= 1;
                    wire[i].push_back(Msg::Frame);
                }
                1 => {
                    let n = s[i].cr.update_due().expect("due");
                    s[i].cr.update_sent(n);
                    wire[i].push_back(Msg::Credit(n));
                }
                2 => {
                    // Side i receives the next SEND from side o.
                    let m = wire[o].pop_front().expect("on the wire");
                    assert!(s[i].posted > 0, "a SEND found no buffer posted: the connection would end");
                    s[i].posted -= 1;
                    s[i].unread.push_back(m);
                }
                _ => {
                    let m = s[i].unread.pop_front().expect("unread");
                    match m {
                        Msg::Frame => s[i].frames_in += 1,
                        Msg::Credit(n) => s[i].cr.granted(n),
                    }
                    s[i].posted += 1;
                    s[i].cr.reposted();
                }
            }
        }
    }

    /// A small deterministic generator (xorshift), for the step order.
    fn rng(seed: u64) -> impl FnMut(usize) -> usize {
        let mut x = seed | 1;
        move |_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as usize
        }
    }

    #[test]
    fn every_frame_arrives_in_any_order_of_events() {
        for seed in 1..200u64 {
            let (a, b) = (((seed * 37) % 1000) as u32, ((seed * 101) % 700) as u32);
            let s = run(a, b, rng(seed));
            assert_eq!((s[0].want, s[1].want), (0, 0), "seed {seed}: frames still waiting: a deadlock");
            assert_eq!((s[1].frames_in, s[0].frames_in), (a, b), "seed {seed}: every frame arrived");
            for side in &s {
                assert_eq!(side.posted, N, "seed {seed}: every buffer re-posted");
                assert!(side.cr.owed() < THRESHOLD, "seed {seed}: no credit message left due");
            }
        }
    }

    #[test]
    fn one_way_bursts_and_lockstep_both_finish() {
        // Always the first thing possible (sends before receives): the
        // sender runs into the reserve at once.
        let s = run(5000, 0, |_| 0);
        assert_eq!((s[0].want, s[1].frames_in), (0, 5000));
        // Always the last (receives first).
        let s = run(3000, 3000, |n| n.wrapping_sub(1));
        assert_eq!((s[0].want, s[1].want), (0, 0));
        assert_eq!((s[0].frames_in, s[1].frames_in), (3000, 3000));
    }

    #[test]
    fn a_receiver_that_stops_reading_stops_the_sender_before_its_buffers_run_out() {
        let mut s = [Side::new(1000), Side::new(0)];
        s[1].reading = false;
        let mut wire: VecDeque<Msg> = VecDeque::new();
        // The sender sends all it may; the receiver takes them into buffers
        // but never handles them.
        while s[0].cr.frame_ok() && s[0].want > 0 {
            s[0].cr.frame_sent();
            s[0].want -= 1;
            wire.push_back(Msg::Frame);
        }
        while let Some(m) = wire.pop_front() {
            assert!(s[1].posted > 0, "a SEND found no buffer");
            s[1].posted -= 1;
            s[1].unread.push_back(m);
        }
        assert_eq!(s[0].want, 1000 - (N - RESERVE), "the sender stops at the reserve");
        assert_eq!(s[1].posted, RESERVE, "the reserve's buffers are still posted");
    }
}
