//! Reliable, ordered delivery of messages over an unreliable datagram transport,
//! as a sans-IO state machine (no sockets, no clock: the caller passes `now`, a [`Nanos`]).
//!
//! One [`Channel`] per peer. The sender hands it messages by id and length
//! ([`Channel::send`]); the channel cuts them into segments of at most `mss` bytes,
//! numbers the segments with a 64-bit sequence (it never wraps), and asks the caller
//! for each segment's bytes when it builds a datagram ([`Channel::poll_transmit`]
//! with a fill callback: the message's memory stays with the caller until the
//! message is acknowledged, and a retransmission reads it again). The receiver
//! feeds every datagram to [`Channel::handle`], which hands segments to the caller
//! strictly in order and each exactly once, with the first and last segment of a
//! message marked. Time-outs come from [`Channel::poll_timeout`] and are handled by
//! [`Channel::handle_timeout`]. What the sender learns comes out of
//! [`Channel::poll_event`]: a message acknowledged (all its segments received), or
//! failed (the peer was declared unreachable, or the channel was closed).
//!
//! The protocol:
//!
//! - Every datagram carries the sender's cumulative acknowledgement (all segments
//!   below `ack` received), a selective-acknowledgement bitmap of the 64 segments
//!   after it, and a window (the highest sequence the receiver will accept, plus
//!   one), so data piggybacks acknowledgements both ways.
//! - Receivers acknowledge at once when a segment arrives out of order, is a
//!   duplicate or a probe; otherwise after `ack_every` segments or `ack_delay`.
//! - Retransmission: after a time-out derived from measured round trips (RFC 6298:
//!   smoothed RTT plus four deviations, Karn's rule, exponential back-off), every
//!   unacknowledged segment is resent; a hole that the selective acknowledgements
//!   show (a later segment arrived) is resent at once, at most once per round trip.
//! - Flow control: the receiver's window counts segments it holds and has not yet
//!   handed over; the caller can refuse a segment (return `false` from the delivery
//!   callback), which keeps it and every later one held until
//!   [`Channel::poll_deliver`] succeeds, so a slow receiver closes the window and
//!   the sender stops. A sender facing a closed window probes it.
//! - A peer that has said nothing for `unreachable_after` while we wait for it is
//!   declared unreachable: every message not yet acknowledged fails.
//! - Integrity: a 32-bit checksum (CRC-32C) covers the header, and the payload
//!   too when the sender sets [`FLAG_SUMMED`] ([`Config::payload_checksum`]);
//!   transports whose datagrams are already checked end to end (UDP's own
//!   checksum) can leave the payload out, or the checksum altogether
//!   ([`Config::header_checksum`], with receivers decoding by
//!   [`Header::decode_with`] without `verify`). A datagram that fails any check
//!   is dropped, as if lost.
//!
//! Datagram layout (little-endian, [`HEADER_LEN`] bytes, then the payload):
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0 | magic | [`MAGIC`] |
//! | 1 | version | [`VERSION`] |
//! | 2 | kind | [`Kind`] |
//! | 3 | flags | [`FLAG_FIRST`], [`FLAG_LAST`], [`FLAG_SUMMED`], [`FLAG_ACK_NOW`] |
//! | 4..8 | epoch | the sender's incarnation (a restarted peer has a new one) |
//! | 8..12 | checksum | over the datagram with this field zero |
//! | 12..16 | len | payload bytes (must match the datagram) |
//! | 16..24 | seq | segment number (data only) |
//! | 24..32 | ack | cumulative acknowledgement |
//! | 32..40 | sack | bit `i`: segment `ack + 1 + i` received |
//! | 40..48 | wnd | the sender of this datagram accepts segments below `wnd` |

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

mod clock;
mod header;
mod rx;
mod tx;

use clock::nanos;
pub use clock::Nanos;
use header::SACK_SPAN;
pub use header::*;

/// A channel's tunables.
#[derive(Debug, Clone)]
pub struct Config {
    /// Most payload bytes in one segment (the datagram limit minus [`HEADER_LEN`]).
    pub mss: usize,
    /// Segments the receiver holds for the caller (in order or not) before it
    /// refuses more; also the most segments a sender has in flight.
    pub window: u32,
    /// Acknowledge at once after this many in-order segments.
    pub ack_every: u32,
    /// Otherwise acknowledge this long after the first unacknowledged segment.
    pub ack_delay: Duration,
    /// Retransmission time-out before any round trip is measured.
    pub rto_initial: Duration,
    /// Smallest retransmission time-out.
    pub rto_min: Duration,
    /// Largest retransmission time-out (the back-off stops there).
    pub rto_max: Duration,
    /// A peer silent this long while we wait for it is unreachable.
    pub unreachable_after: Duration,
    /// Cover payloads with the checksum.
    pub payload_checksum: bool,
    /// Cover headers with the checksum (without it, and without
    /// `payload_checksum`, the checksum field is zero: for transports that check
    /// their datagrams end to end).
    pub header_checksum: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mss: 1472 - HEADER_LEN,
            window: 256,
            ack_every: 32,
            ack_delay: Duration::from_micros(200),
            rto_initial: Duration::from_millis(20),
            rto_min: Duration::from_millis(2),
            rto_max: Duration::from_millis(500),
            unreachable_after: Duration::from_secs(10),
            payload_checksum: true,
            header_checksum: true,
        }
    }
}

/// At least this many retransmissions or probes fit in `unreachable_after`
/// before a silent peer is declared unreachable (the back-off stops short of
/// `rto_max` where it must).
pub const PROBES_BEFORE_UNREACHABLE: u32 = 8;

/// [`Channel::rto_cap`] of a configuration.
fn rto_cap(cfg: &Config) -> Duration {
    cfg.rto_max.min(cfg.unreachable_after / PROBES_BEFORE_UNREACHABLE).max(cfg.rto_min)
}

/// What the sender learns about a message it gave to [`Channel::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Every segment of the message was received by the peer.
    Acked(u64),
    /// The message will not be delivered (peer unreachable, channel closed).
    Failed(u64),
}

/// A segment handed to the receiving caller, in order.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// The first segment of a message.
    pub first: bool,
    /// The last segment of a message.
    pub last: bool,
    /// The segment's bytes.
    pub bytes: &'a [u8],
}

/// Why [`Channel::handle`] refused a datagram. The datagram is dropped; the
/// channel is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// The datagram comes from another incarnation of the peer (`epoch` differs
    /// from the one this channel talks to): the peer restarted, and this channel's
    /// state means nothing to it.
    OtherEpoch(u32),
    /// It acknowledges segments never sent.
    BadAck,
    /// The channel has failed or was closed.
    Closed,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::OtherEpoch(e) => write!(f, "datagram from another incarnation of the peer (epoch {e:#x})"),
            Violation::BadAck => write!(f, "acknowledgement of segments never sent"),
            Violation::Closed => write!(f, "channel closed"),
        }
    }
}

/// Counters, for tests, logs and tuning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Data segments sent for the first time.
    pub segments_sent: u64,
    /// Data segments sent again.
    pub retransmits: u64,
    /// Data segments received that were already received.
    pub duplicates: u64,
    /// Data segments dropped because they were beyond the window.
    pub beyond_window: u64,
    /// Acknowledgement-only datagrams sent.
    pub acks_sent: u64,
    /// Retransmission time-outs.
    pub timeouts: u64,
}

/// A message not yet acknowledged, in the order given.
#[derive(Debug)]
struct TxMsg {
    id: u64,
    len: usize,
    /// Bytes already cut into segments.
    cut: usize,
    /// The message's last segment, once cut.
    last_seq: Option<u64>,
    /// The sender waits for its acknowledgement ([`FLAG_ACK_NOW`]).
    awaited: bool,
}

/// A segment sent and not yet acknowledged cumulatively.
#[derive(Debug)]
struct TxSeg {
    msg: u64,
    off: usize,
    len: usize,
    flags: u8,
    sent_at: Nanos,
    /// Sent more than once (its round trip is not sampled: Karn).
    retx: bool,
    /// A selective acknowledgement says the peer has it.
    sacked: bool,
    /// Waiting in the retransmit queue.
    queued: bool,
}

/// A received segment the caller has not taken yet.
#[derive(Debug)]
struct Held {
    flags: u8,
    data: Vec<u8>,
}

/// One peer's reliable, ordered message channel. See the module documentation.
#[derive(Debug)]
pub struct Channel {
    cfg: Config,
    /// Our incarnation, sent in every datagram.
    epoch: u32,
    /// The peer's incarnation, learnt from its first datagram.
    peer_epoch: Option<u32>,
    /// Set once failed or closed: no more traffic, every event emitted.
    failed: bool,

    // ---- sending ----
    /// The next segment number to assign.
    next_seq: u64,
    /// The oldest segment not cumulatively acknowledged (`inflight[0]`).
    snd_una: u64,
    /// The peer accepts segments below this.
    peer_wnd: u64,
    /// Messages given and not yet reported by [`Channel::poll_event`], in
    /// order: the first `acked` of them acknowledged, the others not yet.
    msgs: VecDeque<TxMsg>,
    /// Messages at the front of `msgs` acknowledged and not yet reported (their
    /// [`Event::Acked`] comes out of [`Channel::poll_event`] before anything in
    /// `events`, which only [`Channel::close`] fills, after reporting them).
    acked: usize,
    /// Index in `msgs` of the first message not fully cut into segments.
    cursor: usize,
    /// Segments `snd_una..next_seq`, indexed by `seq - snd_una`.
    inflight: VecDeque<TxSeg>,
    /// Segments to send again, oldest first (may hold stale entries: checked).
    retx: VecDeque<u64>,
    /// Segments of `inflight` sent more than once.
    resent_inflight: usize,
    /// Smoothed round trip, in nanoseconds, once measured.
    srtt: Option<u64>,
    /// Its mean deviation, in nanoseconds.
    rttvar: u64,
    /// The retransmission time-out, in nanoseconds.
    rto: u64,
    /// `rto_min`, and the largest `rto` ([`Channel::rto_cap`], computed once),
    /// in nanoseconds (saturated).
    rto_min_ns: u64,
    rto_cap_ns: u64,
    /// `ack_delay` and `unreachable_after` in nanoseconds (saturated).
    ack_delay_ns: u64,
    unreachable_ns: u64,
    /// When the oldest unacknowledged segment times out.
    rto_at: Option<Nanos>,
    /// When to probe a closed window.
    probe_at: Option<Nanos>,
    probe_due: bool,
    /// The last time a valid datagram came from the peer, or the time we started
    /// waiting for it.
    last_heard: Nanos,

    // ---- receiving ----
    /// Every segment below this was received.
    rcv_nxt: u64,
    /// Every segment below this was handed to the caller (`delivered <= rcv_nxt`).
    delivered: u64,
    /// Segments `delivered..rcv_nxt`, received in order and refused by the caller.
    held: VecDeque<Held>,
    /// Segments above `rcv_nxt`, received early.
    ooo: BTreeMap<u64, Held>,
    /// In-order segments received since our last acknowledgement.
    ack_owed: u32,
    /// When the delayed acknowledgement is due.
    ack_at: Option<Nanos>,
    /// An acknowledgement is due now.
    ack_now: bool,
    /// Buffers of consumed held segments, for reuse.
    spare: Vec<Vec<u8>>,

    events: VecDeque<Event>,
    stats: Stats,
}

impl Channel {
    /// A channel to one peer, sending `epoch` as our incarnation.
    pub fn new(cfg: Config, epoch: u32, now: Nanos) -> Channel {
        let cap = rto_cap(&cfg);
        let min_ns = nanos(cfg.rto_min);
        let (ack_delay_ns, unreachable_ns) = (nanos(cfg.ack_delay), nanos(cfg.unreachable_after));
        let rto = nanos(cfg.rto_initial);
        let wnd = cfg.window as u64;
        Channel {
            cfg,
            epoch,
            peer_epoch: None,
            failed: false,
            next_seq: 0,
            snd_una: 0,
            peer_wnd: wnd,
            msgs: VecDeque::new(),
            acked: 0,
            cursor: 0,
            inflight: VecDeque::new(),
            retx: VecDeque::new(),
            resent_inflight: 0,
            srtt: None,
            rttvar: 0,
            rto,
            rto_min_ns: min_ns,
            rto_cap_ns: nanos(cap),
            ack_delay_ns,
            unreachable_ns,
            rto_at: None,
            probe_at: None,
            probe_due: false,
            last_heard: now,
            rcv_nxt: 0,
            delivered: 0,
            held: VecDeque::new(),
            ooo: BTreeMap::new(),
            ack_owed: 0,
            ack_at: None,
            ack_now: false,
            spare: Vec::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The peer's incarnation, once heard from.
    #[inline]
    pub fn peer_epoch(&self) -> Option<u32> {
        self.peer_epoch
    }

    /// Whether the channel failed or was closed.
    #[inline]
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Messages given and not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.msgs.len() - self.acked
    }

    /// Whether we are waiting for the peer: data in flight, or a message that a
    /// closed window keeps back.
    fn waiting(&self) -> bool {
        !self.inflight.is_empty() || self.cursor < self.msgs.len()
    }

    /// Nothing to send, nothing unacknowledged, nothing owed to the peer.
    pub fn is_idle(&self) -> bool {
        !self.waiting() && !self.ack_now && self.ack_at.is_none() && !self.probe_due
    }

    /// Whether [`Channel::poll_event`] has something.
    #[inline]
    pub fn has_events(&self) -> bool {
        self.acked > 0 || !self.events.is_empty()
    }

    /// The next thing the sender learnt. Messages are reported in the order
    /// they were given to [`Channel::send`], each once.
    #[inline]
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.acked > 0 {
            self.acked -= 1;
            self.cursor -= 1;
            return self.msgs.pop_front().map(|m| Event::Acked(m.id));
        }
        self.events.pop_front()
    }

    /// Close the channel: every message not acknowledged fails.
    pub fn close(&mut self) {
        if self.failed {
            return;
        }
        self.failed = true;
        for (i, m) in self.msgs.drain(..).enumerate() {
            self.events.push_back(if i < self.acked { Event::Acked(m.id) } else { Event::Failed(m.id) });
        }
        self.acked = 0;
        self.cursor = 0;
        self.inflight.clear();
        self.resent_inflight = 0;
        self.retx.clear();
        self.held.clear();
        self.ooo.clear();
        self.rto_at = None;
        self.probe_at = None;
        self.ack_at = None;
        self.ack_now = false;
        self.probe_due = false;
    }

    /// The largest retransmission (and probe) interval: `rto_max`, and never more
    /// than an [`PROBES_BEFORE_UNREACHABLE`]th of `unreachable_after` (nor less
    /// than `rto_min`). So a peer is declared unreachable only after that many
    /// retransmissions or probes went unanswered, not after the two or three a
    /// back-off to `rto_max` would leave room for when `unreachable_after` is
    /// short: with 10 % loss each way, four unanswered probes in a row are
    /// likely enough to happen in a long stall.
    fn rto_cap(&self) -> u64 {
        self.rto_cap_ns
    }

    /// A message waits to be cut but the peer's window (or our in-flight limit)
    /// allows no new segment.
    fn window_closed(&self) -> bool {
        self.cursor < self.msgs.len()
            && (self.next_seq >= self.peer_wnd || self.inflight.len() >= self.cfg.window as usize)
    }

    /// Fill the acknowledgement fields and clear what we owed.
    fn ack_fields(&mut self, h: &mut Header) {
        h.ack = self.rcv_nxt;
        let mut sack = 0u64;
        if !self.ooo.is_empty() {
            for (&seq, _) in self.ooo.range(self.rcv_nxt + 1..=self.rcv_nxt + SACK_SPAN) {
                sack |= 1 << (seq - self.rcv_nxt - 1);
            }
        }
        h.sack = sack;
        h.wnd = self.delivered + self.cfg.window as u64;
        self.ack_owed = 0;
        self.ack_at = None;
        self.ack_now = false;
    }

    /// Write `h` into `out`, with the checksum the configuration asks for.
    fn seal(&self, h: &Header, out: &mut [u8]) {
        if self.cfg.header_checksum || h.flags & FLAG_SUMMED != 0 {
            h.encode(out);
        } else {
            h.write(out);
        }
    }

    fn header(&self, kind: Kind, flags: u8, seq: u64, len: usize) -> Header {
        let summed = if self.cfg.payload_checksum { FLAG_SUMMED } else { 0 };
        Header { kind, flags: flags | summed, epoch: self.epoch, len: len as u32, seq, ack: 0, sack: 0, wnd: 0 }
    }

    /// Segments received and not yet taken by the caller.
    #[inline]
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Whether [`Channel::poll_transmit`] has work now: a datagram to send (an
    /// acknowledgement or probe due, a retransmission, new data the window
    /// allows), or the probe timer of a closed window to start. A delayed
    /// acknowledgement is due once [`Channel::handle_timeout`] found its time
    /// come.
    #[inline]
    pub fn wants_transmit(&self) -> bool {
        !self.failed
            && (self.ack_now
                || self.probe_due
                || !self.retx.is_empty()
                || (self.cursor < self.msgs.len()
                    && (!self.window_closed() || (self.inflight.is_empty() && self.probe_at.is_none()))))
    }
}

#[cfg(test)]
mod tests;
