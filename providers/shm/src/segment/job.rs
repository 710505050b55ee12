//! Jobs: the slot's records through which a receiver and its sender copy one large
//! message together, each claiming chunks of it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Jobs per slot: large messages from one sender that its receiver can be copying
/// together with it at one time.
pub const JOBS: usize = 4;

/// A large message copied by both processes at once (cross-memory attach), in chunks
/// that either claims: the receiver reads chunks (`process_vm_readv`) while the sender,
/// asked by a `Help` entry, writes chunks (`process_vm_writev`), so the copy runs on two
/// cores. A sender that never looks at its rings costs nothing: the receiver claims
/// every chunk itself.
///
/// Only the receiver (the segment's owner) starts a job, and only once the previous use
/// of it is finished (`done` equals its chunk count). A claim names the job's
/// generation, so a late claimer of an earlier use finds a different generation and
/// claims nothing. Every bit pattern is a value; a broken peer can stall or corrupt
/// the message it sends, nothing else.
#[repr(C, align(64))]
pub struct Job {
    /// `generation << 32 | next chunk to claim`. Claimed with compare-and-swap; the
    /// receiver stores a new generation with chunk 0 when it starts a use.
    claim: AtomicU64,
    /// Chunks copied (or failed) under the current generation: each claimer adds one
    /// after its copy returned (Release), so the receiver that reads the count of
    /// chunks (Acquire) sees every byte of them.
    done: AtomicU64,
    /// Non-zero when a claimer's copy failed (an errno).
    err: AtomicU32,
}

impl Job {
    /// Receiver: begin a use under generation `gen` (chunk 0, none done).
    pub fn start(&self, gen: u32) {
        self.done.store(0, Ordering::Relaxed);
        self.err.store(0, Ordering::Relaxed);
        // Release: whoever claims under `gen` (Acquire) sees `done` and `err` reset.
        self.claim.store((gen as u64) << 32, Ordering::Release);
    }

    /// Claim the next of `chunks` chunks under generation `gen`: its index, or `None`
    /// when every chunk is claimed or the job is in another generation.
    pub fn claim(&self, gen: u32, chunks: u32) -> Option<u32> {
        let mut cur = self.claim.load(Ordering::Acquire);
        loop {
            if (cur >> 32) as u32 != gen || (cur as u32) >= chunks {
                return None;
            }
            match self.claim.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(cur as u32),
                Err(now) => cur = now,
            }
        }
    }

    /// Claim chunks of `chunk` bytes (of `total`) under `gen` until none is left,
    /// copying each with `copy(offset, len)`, which returns the chunk's errno (0 when
    /// all of it moved).
    pub fn work(&self, gen: u32, chunks: u32, chunk: u64, total: u64, mut copy: impl FnMut(u64, u64) -> u32) {
        while let Some(k) = self.claim(gen, chunks) {
            let off = k as u64 * chunk;
            let len = chunk.min(total.saturating_sub(off));
            self.finish(copy(off, len));
        }
    }

    /// Claim every chunk left under `gen`: how many that was (the caller counts them as
    /// done with [`Job::finish_many`], having copied none).
    pub fn claim_rest(&self, gen: u32, chunks: u32) -> u32 {
        let mut n = 0;
        while self.claim(gen, chunks).is_some() {
            n += 1;
        }
        n
    }

    /// A claimed chunk is copied (`err` 0) or failed.
    pub fn finish(&self, err: u32) {
        self.finish_many(1, err);
    }

    /// `n` claimed chunks are copied (`err` 0) or failed.
    pub fn finish_many(&self, n: u32, err: u32) {
        if err != 0 {
            self.err.store(err, Ordering::Relaxed);
        }
        // Release: our copy (and `err`) happen before the receiver's Acquire load.
        self.done.fetch_add(n as u64, Ordering::Release);
    }

    /// Chunks finished so far, and the error recorded, if any.
    pub fn progress(&self) -> (u64, u32) {
        let done = self.done.load(Ordering::Acquire);
        (done, self.err.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{new_name, Segment};

    #[test]
    fn job_chunks_are_claimed_once_and_only_in_their_generation() {
        let name = new_name();
        let seg = Segment::create(&name).unwrap();
        let slot = seg.claim_slot("fabric-shm-test-job", 1, 1).unwrap();
        let job = seg.slot(slot).job(0).unwrap();
        assert!(seg.slot(slot).job(JOBS).is_none(), "an index from a peer is checked");
        job.start(7);
        let chunks = 5000u32;
        let claimed: Vec<Vec<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        while let Some(k) = job.claim(7, chunks) {
                            mine.push(k);
                            job.finish(0);
                        }
                        mine
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<u32> = claimed.into_iter().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (0..chunks).collect::<Vec<_>>(), "every chunk claimed exactly once");
        assert_eq!(job.progress(), (chunks as u64, 0));
        // A late claimer of that use, or of an earlier generation, gets nothing.
        assert_eq!(job.claim(7, chunks), None);
        job.start(8);
        assert_eq!(job.claim(7, chunks), None);
        assert_eq!(job.claim(8, 3), Some(0));
        job.finish(5);
        assert_eq!(job.claim_rest(8, 3), 2);
        job.finish_many(2, 0);
        assert_eq!(job.progress(), (3, 5), "the failed chunk's errno stays");
    }
}
