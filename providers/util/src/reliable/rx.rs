//! The receiving side of a channel: datagrams in, acknowledgements and
//! round-trip samples taken, segments delivered in order (or held while the
//! caller refuses them).

use super::*;

impl Channel {
    /// Take in a datagram from the peer, already decoded by [`Header::decode`].
    /// Segments that become deliverable are handed to `deliver` in order; it
    /// returns `false` to refuse one (it and every later segment stay held until
    /// [`Channel::poll_deliver`]).
    pub fn handle(
        &mut self,
        now: Nanos,
        h: &Header,
        payload: &[u8],
        deliver: &mut dyn FnMut(Segment<'_>) -> bool,
    ) -> Result<(), Violation> {
        // The common datagram: the next data segment in order, acknowledging
        // every segment in flight, no selective acknowledgement, nothing
        // retransmitted in flight, nothing held or received early. Its effect is
        // the general walk's below, without the checks that cannot apply.
        if h.kind == Kind::Data
            && h.sack == 0
            && h.ack == self.next_seq
            && h.seq == self.rcv_nxt
            && self.peer_epoch == Some(h.epoch)
            && !self.failed
            && self.resent_inflight == 0
            && self.held.is_empty()
            && self.ooo.is_empty()
            && h.seq < self.delivered + self.cfg.window as u64
        {
            self.last_heard = now;
            if h.ack > self.snd_una {
                // `inflight` holds `snd_una..next_seq`: its last segment is the
                // newest acknowledged, never retransmitted (`resent_inflight`).
                if let Some(sent) = self.inflight.back().and_then(|s| (!s.sacked).then_some(s.sent_at)) {
                    self.sample_rtt(now.nanos_since(sent));
                }
                self.inflight.clear();
                self.snd_una = h.ack;
                self.count_acked();
                self.rto_at = None;
            }
            self.on_wnd(h.wnd);
            let seg = Segment { first: h.flags & FLAG_FIRST != 0, last: h.flags & FLAG_LAST != 0, bytes: payload };
            if deliver(seg) {
                self.delivered += 1;
            } else {
                let s = self.stored(h.flags, payload);
                self.held.push_back(s);
            }
            self.rcv_nxt += 1;
            self.owe_ack(now, h.flags);
            return Ok(());
        }
        if self.failed {
            return Err(Violation::Closed);
        }
        if self.peer_epoch.is_some_and(|e| e != h.epoch) {
            return Err(Violation::OtherEpoch(h.epoch));
        }
        // Checked before the peer's epoch is learnt from a first datagram: a
        // refused datagram leaves the channel unchanged (it used to set
        // `peer_epoch`, so a bogus first datagram pinned the channel to its epoch).
        if h.ack > self.next_seq {
            return Err(Violation::BadAck);
        }
        if self.peer_epoch.is_none() {
            self.peer_epoch = Some(h.epoch);
        }
        self.last_heard = now;
        self.on_ack(now, h);
        match h.kind {
            Kind::Ack => {}
            Kind::Probe => self.ack_now = true,
            Kind::Data => self.on_data(now, h, payload, deliver),
        }
        Ok(())
    }

    pub(super) fn on_ack(&mut self, now: Nanos, h: &Header) {
        if let Some(sent) = self.rtt_sample_from(h) {
            self.sample_rtt(now.nanos_since(sent));
        }
        if h.ack > self.snd_una {
            let n = (h.ack - self.snd_una) as usize;
            if self.resent_inflight == 0 {
                if n == self.inflight.len() {
                    self.inflight.clear();
                } else {
                    self.inflight.drain(..n);
                }
            } else {
                for s in self.inflight.drain(..n) {
                    self.resent_inflight -= usize::from(s.retx);
                }
            }
            self.snd_una = h.ack;
            self.count_acked();
            self.rto_at = if self.inflight.is_empty() { None } else { Some(now.after(self.rto)) };
        }
        if h.sack != 0 && !self.inflight.is_empty() {
            let guard = self.srtt.unwrap_or(self.rto);
            let top = h.ack + SACK_SPAN - h.sack.leading_zeros() as u64; // highest sacked seq
            for i in 0..SACK_SPAN {
                let seq = h.ack + 1 + i;
                if seq >= self.next_seq {
                    break;
                }
                if h.sack & (1 << i) != 0 && seq >= self.snd_una {
                    self.inflight[(seq - self.snd_una) as usize].sacked = true;
                }
            }
            // Holes below the highest segment the peer has: resend, once per RTT.
            let end = top.min(self.next_seq);
            for seq in self.snd_una..end {
                let s = &mut self.inflight[(seq - self.snd_una) as usize];
                if !s.sacked && !s.queued && now.nanos_since(s.sent_at) >= guard {
                    s.queued = true;
                    self.retx.push_back(seq);
                }
            }
        }
        self.on_wnd(h.wnd);
    }

    /// Counts the messages at the front of `msgs` that `snd_una` now covers
    /// (reported by `poll_event`).
    #[inline(always)]
    fn count_acked(&mut self) {
        while let Some(m) = self.msgs.get(self.acked) {
            match m.last_seq {
                Some(l) if l < self.snd_una => self.acked += 1,
                _ => break,
            }
        }
    }

    /// Takes in the window the peer advertises.
    #[inline(always)]
    fn on_wnd(&mut self, wnd: u64) {
        if wnd > self.peer_wnd {
            self.peer_wnd = wnd;
            if !self.window_closed() {
                self.probe_at = None;
            }
        }
    }

    /// Notes an in-order segment received: acknowledge at once after
    /// `ack_every` of them or when the sender waits, otherwise after `ack_delay`.
    #[inline(always)]
    fn owe_ack(&mut self, now: Nanos, flags: u8) {
        self.ack_owed += 1;
        if self.ack_owed >= self.cfg.ack_every || flags & FLAG_ACK_NOW != 0 {
            self.ack_now = true;
        } else if self.ack_at.is_none() {
            self.ack_at = Some(now.after(self.ack_delay_ns));
        }
    }

    /// When the segment that acknowledgement `h` answers was sent, if that is
    /// known: the most recently sent segment that `h` newly acknowledges
    /// (cumulatively or selectively), never retransmitted (Karn), and not
    /// acknowledged before.
    ///
    /// (This used to be the newest segment the cumulative acknowledgement covers,
    /// whatever it was. When a retransmission fills a hole, the cumulative
    /// acknowledgement jumps over segments that had waited at the receiver for
    /// it, and their age is not a round trip: the fault-injection tests saw the
    /// smoothed RTT of a 50 us path climb to ~300 ms at 10% loss, the RTO pinned
    /// at `rto_max` and 3000 messages take 30 s instead of a fraction of one. So
    /// now a cumulative advance is sampled only if no segment it covers was
    /// retransmitted and its newest segment was not selectively acknowledged
    /// already; a selective acknowledgement is sampled from the newest segment it
    /// reports for the first time.)
    pub(super) fn rtt_sample_from(&self, h: &Header) -> Option<Nanos> {
        let mut sent: Option<Nanos> = None;
        if h.ack > self.snd_una {
            let n = (h.ack - self.snd_una) as usize;
            let newest = &self.inflight[n - 1];
            if !newest.sacked && (self.resent_inflight == 0 || !self.inflight.range(..n).any(|s| s.retx)) {
                sent = Some(newest.sent_at);
            }
        }
        let mut bits = h.sack;
        while bits != 0 {
            let seq = h.ack + 1 + u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            if seq >= self.next_seq {
                break;
            }
            if seq < self.snd_una {
                continue;
            }
            let s = &self.inflight[(seq - self.snd_una) as usize];
            if !s.sacked && !s.retx && sent.map_or(true, |t| s.sent_at > t) {
                sent = Some(s.sent_at);
            }
        }
        sent
    }

    #[inline]
    pub(super) fn sample_rtt(&mut self, r: u64) {
        // In nanoseconds (u64: 584 years), which is cheaper than `Duration`'s
        // arithmetic on every acknowledgement.
        let s = match self.srtt {
            None => {
                self.rttvar = r / 2;
                r
            }
            Some(s) => {
                self.rttvar = self.rttvar.saturating_mul(3).saturating_add(s.abs_diff(r)) / 4;
                s.saturating_mul(7).saturating_add(r) / 8
            }
        };
        self.srtt = Some(s);
        // (`rto_min_ns <= rto_cap_ns`: the cap is at least `rto_min`.)
        let rto = s.saturating_add(self.rttvar.saturating_mul(4).max(100_000));
        self.rto = rto.clamp(self.rto_min_ns, self.rto_cap_ns);
    }

    pub(super) fn stored(&mut self, flags: u8, payload: &[u8]) -> Held {
        let mut data = self.spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(payload);
        Held { flags, data }
    }

    pub(super) fn on_data(
        &mut self,
        now: Nanos,
        h: &Header,
        payload: &[u8],
        deliver: &mut dyn FnMut(Segment<'_>) -> bool,
    ) {
        let seq = h.seq;
        if seq < self.rcv_nxt || (!self.ooo.is_empty() && self.ooo.contains_key(&seq)) {
            self.stats.duplicates += 1;
            self.ack_now = true;
            return;
        }
        if seq >= self.delivered + self.cfg.window as u64 {
            self.stats.beyond_window += 1;
            self.ack_now = true;
            return;
        }
        if seq > self.rcv_nxt {
            let s = self.stored(h.flags, payload);
            self.ooo.insert(seq, s);
            self.ack_now = true;
            return;
        }
        // In order.
        let seg = Segment { first: h.flags & FLAG_FIRST != 0, last: h.flags & FLAG_LAST != 0, bytes: payload };
        if self.held.is_empty() && deliver(seg) {
            self.delivered += 1;
        } else {
            let s = self.stored(h.flags, payload);
            self.held.push_back(s);
        }
        self.rcv_nxt += 1;
        let mut filled = false;
        while let Some(s) = if self.ooo.is_empty() { None } else { self.ooo.remove(&self.rcv_nxt) } {
            filled = true;
            self.held.push_back(s);
            self.rcv_nxt += 1;
        }
        if filled {
            self.ack_now = true;
            self.drain_held(deliver);
        }
        self.owe_ack(now, h.flags);
    }

    pub(super) fn drain_held(&mut self, deliver: &mut dyn FnMut(Segment<'_>) -> bool) -> bool {
        let mut any = false;
        while let Some(s) = self.held.front() {
            let seg = Segment { first: s.flags & FLAG_FIRST != 0, last: s.flags & FLAG_LAST != 0, bytes: &s.data };
            if !deliver(seg) {
                break;
            }
            any = true;
            self.delivered += 1;
            if let Some(s) = self.held.pop_front() {
                if self.spare.len() < 64 {
                    self.spare.push(s.data);
                }
            }
        }
        any
    }

    /// Hand held segments to the caller again (after it made room). If any is
    /// taken, the window opened: an acknowledgement tells the peer.
    pub fn poll_deliver(&mut self, deliver: &mut dyn FnMut(Segment<'_>) -> bool) {
        if !self.held.is_empty() && self.drain_held(deliver) {
            self.ack_now = true;
        }
    }
}
