//! The message sizes both tools test: `-S`'s selection ([`SizeSel`]) and the
//! list of sizes it gives within an endpoint's maximum message size, as libfabric
//! 1.17's `util/pingpong.c` chooses them.

/// The sizes `fi_pingpong` tests when `-S` is not given (those within the endpoint's
/// maximum message size).
pub const DEFAULT_SIZES: [usize; 6] = [64, 256, 1024, 4096, 65536, 1048576];

/// The largest size `-S all` goes to: `(1 << 22) + (1 << 21)` (libfabric's
/// `PP_MAX_DATA_MSG`), or the endpoint's maximum message size if smaller.
pub const MAX_ALL_SIZE: usize = (1 << 22) + (1 << 21);

/// Which sizes to test (`-S`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SizeSel {
    /// No `-S`: [`DEFAULT_SIZES`].
    #[default]
    Default,
    /// `-S all`: 0, 1, then every power of two and one and a half times it.
    All,
    /// `-S <n>`: that size only.
    One(usize),
    /// perftest's `-a`: every power of two from 2 to [`MAX_POW2_SIZE`].
    PowersOfTwo,
}

/// The largest size of perftest's `-a` (2^23).
pub const MAX_POW2_SIZE: usize = 1 << 23;

/// The sizes to test for a selection, given the endpoint's maximum message size.
/// `Err` when a single size given with `-S` exceeds it.
pub fn test_sizes(sel: SizeSel, max_msg_size: usize) -> Result<Vec<usize>, String> {
    match sel {
        SizeSel::One(n) if n > max_msg_size => {
            Err(format!("transfer size {n} exceeds the endpoint's maximum message size {max_msg_size}"))
        }
        SizeSel::One(n) => Ok(vec![n]),
        SizeSel::Default => Ok(DEFAULT_SIZES.iter().copied().take_while(|&s| s <= max_msg_size).collect()),
        SizeSel::PowersOfTwo => {
            Ok((1..=MAX_POW2_SIZE.trailing_zeros()).map(|i| 1usize << i).take_while(|&s| s <= max_msg_size).collect())
        }
        SizeSel::All => {
            let max = max_msg_size.min(MAX_ALL_SIZE);
            let mut out = Vec::new();
            for i in 0..usize::BITS - 1 {
                let pow = if i == 0 { 0 } else { 1usize << i };
                let half_up = if i == 0 { 1 } else { pow + pow / 2 };
                if pow > max {
                    break;
                }
                out.push(pow);
                if half_up > max {
                    break;
                }
                out.push(half_up);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_lists() {
        let all = test_sizes(SizeSel::All, usize::MAX).unwrap();
        assert_eq!(all.len(), 46);
        assert_eq!(&all[..8], &[0, 1, 2, 3, 4, 6, 8, 12]);
        assert_eq!(*all.last().unwrap(), 6 << 20);
        // udp's 1472-byte datagrams.
        assert_eq!(test_sizes(SizeSel::Default, 1472).unwrap(), vec![64, 256, 1024]);
        assert_eq!(*test_sizes(SizeSel::All, 1472).unwrap().last().unwrap(), 1024);
        assert_eq!(test_sizes(SizeSel::All, 1536).unwrap().last(), Some(&1536));
        assert_eq!(test_sizes(SizeSel::Default, usize::MAX).unwrap(), DEFAULT_SIZES.to_vec());
        assert_eq!(test_sizes(SizeSel::One(8 << 20), usize::MAX).unwrap(), vec![8 << 20]);
        assert!(test_sizes(SizeSel::One(2000), 1472).is_err());
        // perftest's -a: 2 to 2^23, within the maximum message size.
        let pow2 = test_sizes(SizeSel::PowersOfTwo, usize::MAX).unwrap();
        assert_eq!((pow2.len(), pow2[0], pow2[1], pow2[22]), (23, 2, 4, 1 << 23));
        assert_eq!(test_sizes(SizeSel::PowersOfTwo, 1472).unwrap(), vec![2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]);
    }
}
