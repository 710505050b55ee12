//! The rendezvous protocol for large messages, as sans-IO state (no sockets, no
//! time): the sender announces a message (`Rts` with an id), the receiver answers
//! once it has a place for it (`Cts`) or refuses it (`Nack`: discarded), and only
//! then does the sender send the data (`Data` with the id). Unexpected large
//! messages thus cost the receiver a header, not their size. A message sent with
//! `FI_DELIVERY_COMPLETE` is announced with `HdrFlags::DC`; once its data is in
//! the receive the receiver answers `Ack` with the id, and the sender keeps the
//! message ([`RndvSend::await_ack`]) until then.
//!
//! A transport keeps one [`RndvSend`] and one [`RndvRecv`] per endpoint, keyed by
//! peer (a connection, an address), frames the headers with `wire`, and moves the
//! bytes. Every input that comes from a peer is checked: an id the sender never
//! announced, a second answer to the same id, data for an id never cleared, or
//! data whose length differs from the announcement is a [`RndvError`], which the
//! transport treats as a protocol error of that peer.

use std::fmt;

/// A peer broke the rendezvous protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RndvError {
    /// An answer (`Cts`/`Nack`) or data for an id that is not waiting.
    UnknownId(u64),
    /// Data whose length differs from what was announced.
    LengthMismatch {
        /// The id.
        id: u64,
        /// The length the request announced.
        announced: u64,
        /// The length the data frame carries.
        got: u64,
    },
}

impl fmt::Display for RndvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RndvError::UnknownId(id) => write!(f, "rendezvous frame for unknown id {id}"),
            RndvError::LengthMismatch { id, announced, got } => {
                write!(f, "rendezvous {id}: data of {got} bytes for a message of {announced}")
            }
        }
    }
}

impl std::error::Error for RndvError {}

/// The sender's side, per endpoint: announced messages waiting for an answer,
/// by peer.
#[derive(Debug)]
pub struct RndvSend<K, S> {
    /// The next id to announce; ids start at 1 and are never reused by an
    /// endpoint (a u64 does not wrap in practice), so a message keeps its id when
    /// its peer's connection is replaced.
    next_id: u64,
    /// Announced and unanswered messages: (peer, id, message), in announcement order.
    waiting: Vec<(K, u64, S)>,
    /// Messages sent with `FI_DELIVERY_COMPLETE` whose data went out, waiting for
    /// the receiver's `Ack`: (peer, id, message).
    acking: Vec<(K, u64, S)>,
}

impl<K, S> Default for RndvSend<K, S> {
    fn default() -> Self {
        RndvSend { next_id: 1, waiting: Vec::new(), acking: Vec::new() }
    }
}

impl<K: Copy + PartialEq, S> RndvSend<K, S> {
    /// No message announced yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Announce a message to `peer`: keep it, and return the id to put in the `Rts`.
    pub fn announce(&mut self, peer: K, msg: S) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push((peer, id, msg));
        id
    }

    /// `peer` cleared `id`: the message to send now as `Data`.
    pub fn handle_cts(&mut self, peer: K, id: u64) -> Result<S, RndvError> {
        self.take(peer, id)
    }

    /// `peer` discarded `id`: the message, to complete without sending.
    pub fn handle_nack(&mut self, peer: K, id: u64) -> Result<S, RndvError> {
        self.take(peer, id)
    }

    fn take(&mut self, peer: K, id: u64) -> Result<S, RndvError> {
        let pos = self.waiting.iter().position(|(p, i, _)| *p == peer && *i == id).ok_or(RndvError::UnknownId(id))?;
        Ok(self.waiting.remove(pos).2)
    }

    /// The data of `id` (a message `handle_cts` gave back, announced with
    /// `HdrFlags::DC`) went out to `peer`: keep the message until its `Ack`.
    pub fn await_ack(&mut self, peer: K, id: u64, msg: S) {
        self.acking.push((peer, id, msg));
    }

    /// `peer` acknowledged the delivery of `id`: the message, to complete. An id
    /// not waiting for an acknowledgement (never announced, not yet cleared, not
    /// announced for one, or acknowledged already) is the peer's protocol error.
    pub fn handle_ack(&mut self, peer: K, id: u64) -> Result<S, RndvError> {
        let pos = self.acking.iter().position(|(p, i, _)| *p == peer && *i == id).ok_or(RndvError::UnknownId(id))?;
        Ok(self.acking.swap_remove(pos).2)
    }

    /// The messages of `from` now wait on `to` (a connection was replaced).
    pub fn rekey(&mut self, from: K, to: K) {
        for w in self.waiting.iter_mut().chain(self.acking.iter_mut()).filter(|w| w.0 == from) {
            w.0 = to;
        }
    }

    /// Take every message waiting on a peer that is gone: those announced, in
    /// announcement order, then those waiting for their acknowledgement.
    pub fn drain_peer(&mut self, peer: K) -> Vec<S> {
        let mut out = Vec::new();
        for v in [&mut self.waiting, &mut self.acking] {
            let mut i = 0;
            while i < v.len() {
                if v[i].0 == peer {
                    out.push(v.remove(i).2);
                } else {
                    i += 1;
                }
            }
        }
        out
    }

    /// Take every waiting message (the endpoint closes): those announced, in
    /// announcement order, then those waiting for their acknowledgement.
    pub fn drain(&mut self) -> impl Iterator<Item = S> + '_ {
        self.waiting.drain(..).chain(self.acking.drain(..)).map(|w| w.2)
    }

    /// Messages waiting for an answer or an acknowledgement.
    pub fn len(&self) -> usize {
        self.waiting.len() + self.acking.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.acking.is_empty()
    }
}

/// The receiver's side, per endpoint: receives cleared to send, waiting for data.
#[derive(Debug)]
pub struct RndvRecv<K, T> {
    /// Cleared messages: (peer, id, announced length, where the data goes).
    waiting: Vec<(K, u64, u64, T)>,
}

impl<K, T> Default for RndvRecv<K, T> {
    fn default() -> Self {
        RndvRecv { waiting: Vec::new() }
    }
}

impl<K: Copy + PartialEq, T> RndvRecv<K, T> {
    /// Nothing cleared yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Clear message `id` of `peer` (announced with `len` bytes) to land in
    /// `target`; the caller sends the `Cts`.
    pub fn clear(&mut self, peer: K, id: u64, len: u64, target: T) {
        self.waiting.push((peer, id, len, target));
    }

    /// `peer` sent the data of `id` with `len` bytes: where it goes.
    pub fn handle_data(&mut self, peer: K, id: u64, len: u64) -> Result<(T, u64), RndvError> {
        let pos =
            self.waiting.iter().position(|(p, i, _, _)| *p == peer && *i == id).ok_or(RndvError::UnknownId(id))?;
        let announced = self.waiting[pos].2;
        if announced != len {
            return Err(RndvError::LengthMismatch { id, announced, got: len });
        }
        let (_, _, len, t) = self.waiting.swap_remove(pos);
        Ok((t, len))
    }

    /// Forget cleared message `id` of `peer` (its `Cts` could not be sent): where
    /// its data would have gone.
    pub fn cancel(&mut self, peer: K, id: u64) -> Option<T> {
        let pos = self.waiting.iter().position(|(p, i, _, _)| *p == peer && *i == id)?;
        Some(self.waiting.swap_remove(pos).3)
    }

    /// Take every cleared message of a peer that is gone.
    pub fn drain_peer(&mut self, peer: K) -> Vec<T> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].0 == peer {
                out.push(self.waiting.swap_remove(i).3);
            } else {
                i += 1;
            }
        }
        out
    }

    /// Take every cleared message (the endpoint closes).
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.waiting.drain(..).map(|w| w.3)
    }

    /// Messages cleared and waiting for data.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Header, OpCode};
    use fabric_testkit::Rng;
    use std::collections::VecDeque;

    /// A frame on the simulated wire: the header and, for data, the message index.
    type Frame = (Header, Option<usize>);

    /// Two ends in memory: the sender announces `n` messages; the receiver clears
    /// or discards each at a random moment (as receives get posted); frames flow in
    /// order on each direction, and the two ends take turns at random. Every message
    /// is delivered or discarded exactly once, with its own length.
    #[test]
    fn every_message_settles_once_in_any_interleaving() {
        for seed in 1..200u64 {
            let mut rng = Rng::new(seed);
            let n = 1 + rng.index(20);
            let lens: Vec<u64> = (0..n).map(|_| 1 + rng.below(1 << 30)).collect();
            let mut tx: RndvSend<u8, usize> = RndvSend::new();
            let mut rx: RndvRecv<u8, usize> = RndvRecv::new();
            let mut to_rx: VecDeque<Frame> = VecDeque::new();
            let mut to_tx: VecDeque<Frame> = VecDeque::new();
            for (i, &len) in lens.iter().enumerate() {
                let id = tx.announce(0, i);
                to_rx.push_back((Header { len, id, ..Header::new(OpCode::Rts) }, None));
            }
            // Requests the receiver has seen but not yet answered: (id, len).
            let mut pending: Vec<(u64, u64)> = Vec::new();
            let mut delivered = vec![0u32; n];
            let mut discarded = vec![0u32; n];
            let mut sent_done = vec![0u32; n];
            for _ in 0..10_000 {
                match rng.below(3) {
                    0 => {
                        if let Some((h, msg)) = to_rx.pop_front() {
                            match h.op {
                                OpCode::Rts => pending.push((h.id, h.len)),
                                OpCode::Data => {
                                    let (t, len) = rx.handle_data(0, h.id, h.len).expect("cleared id");
                                    assert_eq!(Some(t), msg);
                                    assert_eq!(len, lens[t]);
                                    delivered[t] += 1;
                                }
                                other => panic!("unexpected {other:?}"),
                            }
                        }
                    }
                    1 if !pending.is_empty() => {
                        let k = rng.index(pending.len());
                        let (id, len) = pending.swap_remove(k);
                        if rng.below(5) == 0 {
                            to_tx.push_back((Header { id, ..Header::new(OpCode::Nack) }, None));
                        } else {
                            // The target is the message index, which the receiver
                            // learns from the id here (ids are 1-based in order).
                            rx.clear(0, id, len, (id - 1) as usize);
                            to_tx.push_back((Header { id, ..Header::new(OpCode::Cts) }, None));
                        }
                    }
                    _ => {
                        if let Some((h, _)) = to_tx.pop_front() {
                            match h.op {
                                OpCode::Cts => {
                                    let m = tx.handle_cts(0, h.id).expect("announced id");
                                    sent_done[m] += 1;
                                    let data = Header { len: lens[m], id: h.id, ..Header::new(OpCode::Data) };
                                    to_rx.push_back((data, Some(m)));
                                }
                                OpCode::Nack => {
                                    let m = tx.handle_nack(0, h.id).expect("announced id");
                                    discarded[m] += 1;
                                }
                                other => panic!("unexpected {other:?}"),
                            }
                        }
                    }
                }
            }
            // Drain what is left in flight, in order.
            loop {
                let mut moved = false;
                for (id, len) in pending.drain(..) {
                    rx.clear(0, id, len, (id - 1) as usize);
                    to_tx.push_back((Header { id, ..Header::new(OpCode::Cts) }, None));
                }
                while let Some((h, _)) = to_tx.pop_front() {
                    moved = true;
                    if h.op == OpCode::Cts {
                        let m = tx.handle_cts(0, h.id).unwrap();
                        sent_done[m] += 1;
                        to_rx.push_back((Header { len: lens[m], id: h.id, ..Header::new(OpCode::Data) }, Some(m)));
                    } else {
                        discarded[tx.handle_nack(0, h.id).unwrap()] += 1;
                    }
                }
                while let Some((h, msg)) = to_rx.pop_front() {
                    moved = true;
                    match h.op {
                        OpCode::Rts => pending.push((h.id, h.len)),
                        _ => {
                            let (t, _) = rx.handle_data(0, h.id, h.len).unwrap();
                            assert_eq!(Some(t), msg);
                            delivered[t] += 1;
                        }
                    }
                }
                if !moved && pending.is_empty() {
                    break;
                }
            }
            for i in 0..n {
                assert_eq!(delivered[i] + discarded[i], 1, "seed {seed}: message {i} settled once");
                assert_eq!(sent_done[i], delivered[i], "seed {seed}: data sent only when cleared");
            }
            assert!(tx.is_empty() && rx.is_empty());
        }
    }

    #[test]
    fn hostile_answers_are_errors() {
        let mut tx: RndvSend<u32, &str> = RndvSend::new();
        let id = tx.announce(7, "m");
        assert_eq!(tx.handle_cts(7, id + 1), Err(RndvError::UnknownId(id + 1)));
        assert_eq!(tx.handle_cts(8, id), Err(RndvError::UnknownId(id)), "another peer answering");
        assert_eq!(tx.handle_cts(7, id), Ok("m"));
        assert_eq!(tx.handle_cts(7, id), Err(RndvError::UnknownId(id)), "a second answer");
        assert_eq!(tx.handle_nack(7, 0), Err(RndvError::UnknownId(0)));

        let mut rx: RndvRecv<u32, &str> = RndvRecv::new();
        rx.clear(7, 1, 100, "t");
        assert_eq!(rx.handle_data(8, 1, 100), Err(RndvError::UnknownId(1)), "another peer's id");
        assert_eq!(rx.handle_data(7, 1, 101), Err(RndvError::LengthMismatch { id: 1, announced: 100, got: 101 }));
        assert_eq!(rx.handle_data(7, 1, 100), Ok(("t", 100)));
        assert_eq!(rx.handle_data(7, 1, 100), Err(RndvError::UnknownId(1)), "data twice");
    }

    #[test]
    fn delivery_acknowledgements_and_hostile_ones() {
        let mut tx: RndvSend<u32, &str> = RndvSend::new();
        let id = tx.announce(7, "dc");
        assert_eq!(tx.handle_ack(7, id), Err(RndvError::UnknownId(id)), "an ack before the data was cleared");
        let m = tx.handle_cts(7, id).unwrap();
        tx.await_ack(7, id, m);
        assert_eq!(tx.len(), 1);
        assert_eq!(tx.handle_cts(7, id), Err(RndvError::UnknownId(id)), "a clear to send after the data");
        assert_eq!(tx.handle_nack(7, id), Err(RndvError::UnknownId(id)));
        assert_eq!(tx.handle_ack(8, id), Err(RndvError::UnknownId(id)), "another peer's ack");
        assert_eq!(tx.handle_ack(7, id + 1), Err(RndvError::UnknownId(id + 1)), "an unknown id");
        assert_eq!(tx.handle_ack(7, id), Ok("dc"));
        assert_eq!(tx.handle_ack(7, id), Err(RndvError::UnknownId(id)), "a second ack");
        assert!(tx.is_empty());
        // A message waiting for its ack moves with its peer and fails with it.
        let a = tx.announce(1, "a");
        let m = tx.handle_cts(1, a).unwrap();
        tx.await_ack(1, a, m);
        tx.announce(1, "b");
        tx.rekey(1, 2);
        assert_eq!(tx.handle_ack(1, a), Err(RndvError::UnknownId(a)));
        assert_eq!(tx.drain_peer(2), vec!["b", "a"]);
        assert!(tx.is_empty());
    }

    #[test]
    fn a_lost_peer_gives_back_what_waited() {
        let mut tx: RndvSend<u8, u32> = RndvSend::new();
        tx.announce(1, 1);
        tx.announce(2, 2);
        let moved = tx.announce(3, 3);
        tx.rekey(3, 1);
        assert_eq!(tx.handle_cts(3, moved), Err(RndvError::UnknownId(moved)));
        assert_eq!(tx.drain_peer(1), vec![1, 3]);
        assert_eq!(tx.drain().collect::<Vec<_>>(), vec![2]);
        let mut rx: RndvRecv<u8, u32> = RndvRecv::new();
        rx.clear(1, 1, 10, 10);
        rx.clear(2, 1, 10, 20);
        rx.clear(1, 2, 10, 11);
        let mut gone = rx.drain_peer(1);
        gone.sort();
        assert_eq!(gone, vec![10, 11]);
        assert_eq!(rx.len(), 1);
    }
}
