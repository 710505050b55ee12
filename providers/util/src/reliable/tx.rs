//! The sending side of a channel: queueing messages, building datagrams
//! (new segments, retransmissions, probes, acknowledgements) and time-outs.

use super::*;

impl Channel {
    /// Queue message `id` of `len` bytes. Its bytes are read through the fill
    /// callback of [`Channel::poll_transmit`] (perhaps several times) until
    /// [`Event::Acked`] or [`Event::Failed`] for `id` comes out of
    /// [`Channel::poll_event`]. Fails only on a failed or closed channel.
    pub fn send(&mut self, now: Nanos, id: u64, len: usize) -> Result<(), Violation> {
        self.push(now, id, len, false)
    }

    /// [`Channel::send`] for a message whose sender waits for its
    /// acknowledgement (it completes on it): its last segment carries
    /// [`FLAG_ACK_NOW`], so the receiver acknowledges it at once instead of after
    /// its delay, even if it then stops making progress.
    pub fn send_awaited(&mut self, now: Nanos, id: u64, len: usize) -> Result<(), Violation> {
        self.push(now, id, len, true)
    }

    pub(super) fn push(&mut self, now: Nanos, id: u64, len: usize, awaited: bool) -> Result<(), Violation> {
        if self.failed {
            return Err(Violation::Closed);
        }
        if !self.waiting() {
            // The peer's silence counts from now.
            self.last_heard = now;
        }
        self.msgs.push_back(TxMsg { id, len, cut: 0, last_seq: None, awaited });
        Ok(())
    }

    /// The earliest time [`Channel::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.failed {
            return None;
        }
        let dead = self.waiting().then(|| self.last_heard.after(self.unreachable_ns));
        [self.ack_at, self.rto_at, self.probe_at, dead].into_iter().flatten().min()
    }

    /// Whether [`Channel::handle_timeout`] has work at `now` (what
    /// `poll_timeout().is_some_and(|t| t <= now)` says, without computing the
    /// earliest deadline).
    pub fn timer_due(&self, now: Nanos) -> bool {
        let due = |t: Option<Nanos>| t.is_some_and(|t| t <= now);
        !self.failed
            && (due(self.ack_at)
                || due(self.rto_at)
                || due(self.probe_at)
                || (self.waiting() && self.last_heard.after(self.unreachable_ns) <= now))
    }

    /// Run the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        if self.failed {
            return;
        }
        if self.waiting() && now.nanos_since(self.last_heard) >= self.unreachable_ns {
            self.close();
            return;
        }
        if self.ack_at.is_some_and(|t| now >= t) {
            self.ack_at = None;
            self.ack_now = true;
        }
        if self.rto_at.is_some_and(|t| now >= t) {
            self.stats.timeouts += 1;
            for (i, s) in self.inflight.iter_mut().enumerate() {
                if !s.sacked && !s.queued {
                    s.queued = true;
                    self.retx.push_back(self.snd_una + i as u64);
                }
            }
            self.rto = self.rto.saturating_mul(2).min(self.rto_cap());
            self.rto_at = if self.inflight.is_empty() { None } else { Some(now.after(self.rto)) };
        }
        if self.probe_at.is_some_and(|t| now >= t) {
            if self.window_closed() {
                self.probe_due = true;
                self.rto = self.rto.saturating_mul(2).min(self.rto_cap());
                self.probe_at = Some(now.after(self.rto));
            } else {
                self.probe_at = None;
            }
        }
    }

    /// Build the next datagram to send into `out` (at least [`HEADER_LEN`] +
    /// `mss` bytes) and return its length, or `None` when nothing is due. `fill(id,
    /// off, buf)` must write bytes `off..off + buf.len()` of message `id` into
    /// `buf`.
    pub fn poll_transmit(
        &mut self,
        now: Nanos,
        out: &mut [u8],
        fill: &mut dyn FnMut(u64, usize, &mut [u8]),
    ) -> Option<usize> {
        if self.failed {
            return None;
        }
        // Retransmissions first.
        while let Some(seq) = self.retx.pop_front() {
            if seq < self.snd_una {
                continue;
            }
            let i = (seq - self.snd_una) as usize;
            let Some(s) = self.inflight.get_mut(i) else { continue };
            s.queued = false;
            if s.sacked {
                continue;
            }
            if !s.retx {
                s.retx = true;
                self.resent_inflight += 1;
            }
            s.sent_at = now;
            let (msg, off, len, flags) = (s.msg, s.off, s.len, s.flags);
            self.stats.retransmits += 1;
            if self.rto_at.is_none() {
                self.rto_at = Some(now.after(self.rto));
            }
            return Some(self.data_dgram(out, seq, msg, off, len, flags, fill));
        }
        // New data, as far as the window allows.
        if self.cursor < self.msgs.len() && !self.window_closed() {
            let m = &mut self.msgs[self.cursor];
            let len = (m.len - m.cut).min(self.cfg.mss);
            let mut flags = 0;
            if m.cut == 0 {
                flags |= FLAG_FIRST;
            }
            let (msg, off) = (m.id, m.cut);
            m.cut += len;
            let seq = self.next_seq;
            if m.cut == m.len {
                flags |= FLAG_LAST;
                if m.awaited {
                    flags |= FLAG_ACK_NOW;
                }
                m.last_seq = Some(seq);
                self.cursor += 1;
            }
            self.next_seq += 1;
            self.inflight.push_back(TxSeg {
                msg,
                off,
                len,
                flags,
                sent_at: now,
                retx: false,
                sacked: false,
                queued: false,
            });
            self.stats.segments_sent += 1;
            if self.rto_at.is_none() {
                self.rto_at = Some(now.after(self.rto));
            }
            return Some(self.data_dgram(out, seq, msg, off, len, flags, fill));
        }
        if self.window_closed() && self.inflight.is_empty() && self.probe_at.is_none() {
            self.probe_at = Some(now.after(self.rto));
        }
        if self.probe_due {
            self.probe_due = false;
            let mut h = self.header(Kind::Probe, 0, 0, 0);
            self.ack_fields(&mut h);
            self.seal(&h, out);
            return Some(HEADER_LEN);
        }
        if self.ack_now || self.ack_at.is_some_and(|t| now >= t) {
            let mut h = self.header(Kind::Ack, 0, 0, 0);
            self.ack_fields(&mut h);
            self.seal(&h, out);
            self.stats.acks_sent += 1;
            return Some(HEADER_LEN);
        }
        None
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn data_dgram(
        &mut self,
        out: &mut [u8],
        seq: u64,
        msg: u64,
        off: usize,
        len: usize,
        flags: u8,
        fill: &mut dyn FnMut(u64, usize, &mut [u8]),
    ) -> usize {
        fill(msg, off, &mut out[HEADER_LEN..HEADER_LEN + len]);
        let mut h = self.header(Kind::Data, flags, seq, len);
        self.ack_fields(&mut h);
        self.seal(&h, out);
        HEADER_LEN + len
    }

    /// An acknowledgement-only datagram now, if one is owed (even if its delay has
    /// not run out): for a caller about to go away, so that the peer's last
    /// messages complete without waiting for a retransmission.
    pub fn poll_ack(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.failed || !(self.ack_now || self.ack_at.is_some()) {
            return None;
        }
        let mut h = self.header(Kind::Ack, 0, 0, 0);
        self.ack_fields(&mut h);
        self.seal(&h, out);
        self.stats.acks_sent += 1;
        Some(HEADER_LEN)
    }
}
