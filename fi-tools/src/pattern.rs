//! The data-integrity pattern of `fi_pingpong -c`, as libfabric's: message `n` (counted
//! separately for sent and received messages, across sizes) is the alphabet
//! `0-9a-zA-Z` repeated, starting at letter `(n * 7) % 62`. The sender's n-th fill
//! and the receiver's n-th check therefore agree when both run the same test plan.

/// libfabric's `integ_alphabet`.
pub const ALPHABET: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// libfabric's `INTEG_SEED`.
const SEED: u64 = 7;

/// Where a received message differs from the expected pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "data check failed on received message {message}: byte {offset} is 0x{found:02x}, expected 0x{expected:02x} ('{}')",
    char::from(*.expected)
)]
pub struct Mismatch {
    /// The message's number (0 = the first checked).
    pub message: u64,
    /// The offset of the first wrong byte.
    pub offset: usize,
    /// The byte found.
    pub found: u8,
    /// The byte expected.
    pub expected: u8,
}

/// A counter of messages filled, or of messages checked.
#[derive(Debug, Clone, Default)]
pub struct Pattern {
    count: u64,
}

impl Pattern {
    /// A counter at message 0.
    pub fn new() -> Pattern {
        Pattern::default()
    }

    /// The alphabet rotated to start where message `n` starts.
    fn rotated(n: u64) -> [u8; 62] {
        let start = ((n * SEED) % ALPHABET.len() as u64) as usize;
        let mut r = [0u8; 62];
        r[..62 - start].copy_from_slice(&ALPHABET[start..]);
        r[62 - start..].copy_from_slice(&ALPHABET[..start]);
        r
    }

    /// Fill `buf` with the next message's pattern.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let r = Pattern::rotated(self.count);
        self.count += 1;
        for chunk in buf.chunks_mut(r.len()) {
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }

    /// Check `buf` against the next message's pattern.
    pub fn check(&mut self, buf: &[u8]) -> Result<(), Mismatch> {
        let n = self.count;
        let r = Pattern::rotated(n);
        self.count += 1;
        for (i, chunk) in buf.chunks(r.len()).enumerate() {
            if chunk != &r[..chunk.len()] {
                let j = chunk.iter().zip(r.iter()).position(|(a, b)| a != b).unwrap_or(0);
                return Err(Mismatch { message: n, offset: i * r.len() + j, found: chunk[j], expected: r[j] });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libfabric's `pp_fill_buf`, transcribed.
    fn libfabric_fill(iter: u64, buf: &mut [u8]) {
        let mut idx = ((iter * 7) % 62) as usize;
        for b in buf.iter_mut() {
            *b = ALPHABET[idx];
            idx += 1;
            if idx >= 62 {
                idx = 0;
            }
        }
    }

    #[test]
    fn same_bytes_as_libfabric() {
        let mut p = Pattern::new();
        for iter in 0..200u64 {
            let size = (iter as usize * 37) % 300;
            let mut ours = vec![0u8; size];
            let mut theirs = vec![0u8; size];
            p.fill(&mut ours);
            libfabric_fill(iter, &mut theirs);
            assert_eq!(ours, theirs, "message {iter}");
        }
        let mut b = [0u8; 12];
        Pattern::new().fill(&mut b);
        assert_eq!(&b, b"0123456789ab");
        let mut p = Pattern::new();
        p.fill(&mut b);
        p.fill(&mut b);
        assert_eq!(&b, b"789abcdefghi");
    }

    #[test]
    fn check_follows_fill_and_finds_the_bad_byte() {
        let (mut tx, mut rx) = (Pattern::new(), Pattern::new());
        let mut buf = vec![0u8; 1000];
        for _ in 0..5 {
            tx.fill(&mut buf);
            rx.check(&buf).unwrap();
        }
        tx.fill(&mut buf);
        buf[777] ^= 1;
        let e = rx.check(&buf).unwrap_err();
        assert_eq!((e.message, e.offset), (5, 777));
        assert_eq!(e.found ^ 1, e.expected);
        assert!(e.to_string().contains("byte 777"));
        let m = Mismatch { message: 5, offset: 777, found: 0x0a, expected: b'Z' };
        assert_eq!(m.to_string(), "data check failed on received message 5: byte 777 is 0x0a, expected 0x5a ('Z')");
        // Empty messages count too.
        tx.fill(&mut []);
        rx.check(&[]).unwrap();
    }
}
