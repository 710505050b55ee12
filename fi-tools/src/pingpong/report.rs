//! `fi_pingpong`'s numbers: libfabric 1.17's table as `util/pingpong.c` prints it,
//! `size_str` (`1.5k`, `4m`), `cnt_str` (`10k`) and the result rows with the same
//! column widths and the same arithmetic (`mod.rs` prints them as each size
//! completes, as `fi_perf`'s does with its [`crate::fiperf::report`]).

use std::time::Duration;

/// The table's header line (without newline).
pub const HEADER: &str = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec";

/// A byte count as libfabric's `size_str` prints it: `64`, `1.5k`, `125k`, `4m`;
/// one decimal when the value is below 10 of its unit and the tenth is non-zero.
pub fn size_str(size: u64) -> String {
    let (base, mag) = if size >= 1 << 30 {
        (1u64 << 30, "g")
    } else if size >= 1 << 20 {
        (1 << 20, "m")
    } else if size >= 1 << 10 {
        (1 << 10, "k")
    } else {
        (1, "")
    };
    let whole = size / base;
    let fraction = if whole < 10 { (size % base) * 10 / base } else { 0 };
    if fraction != 0 {
        format!("{whole}.{fraction}{mag}")
    } else {
        format!("{whole}{mag}")
    }
}

/// A count as libfabric's `cnt_str` prints it: `999`, `1k`, `20k`, `1m`, `2b`
/// (truncated, decimal units).
pub fn cnt_str(cnt: u64) -> String {
    if cnt >= 1_000_000_000 {
        format!("{}b", cnt / 1_000_000_000)
    } else if cnt >= 1_000_000 {
        format!("{}m", cnt / 1_000_000)
    } else if cnt >= 1000 {
        format!("{}k", cnt / 1000)
    } else {
        cnt.to_string()
    }
}

/// One result row (without newline), as libfabric's `show_perf` prints it: the
/// transfer size, iterations sent, acknowledged count (`=n` when all came back),
/// total bytes moved, seconds, MB/s, microseconds per one-way transfer (half a
/// round trip with `xfers_per_iter` 2) and millions of transfers per second.
/// `None` when nothing was sent (libfabric prints no row then).
pub fn perf_row(size: usize, sent: u64, acked: u64, elapsed: Duration, xfers_per_iter: u64) -> Option<String> {
    if sent == 0 {
        return None;
    }
    // libfabric measures whole microseconds and computes usec/xfer in single precision.
    let elapsed_us = elapsed.as_micros().min(i64::MAX as u128) as i64;
    let bytes = sent * size as u64 * xfers_per_iter;
    let ack = if sent == acked {
        format!("={}", cnt_str(acked))
    } else if sent < acked {
        format!("-{}", cnt_str(acked - sent))
    } else {
        format!("+{}", cnt_str(sent - acked))
    };
    let usec_per_xfer = elapsed_us as f32 / sent as f32 / xfers_per_iter as f32;
    let mb_per_sec = bytes as f64 / elapsed_us as f64;
    Some(format!(
        "{:<8}{:<8}{:<9}{:<8}{:8.2}s{:10.2}{:11.2}{:11.2}",
        size_str(size as u64),
        cnt_str(sent),
        ack,
        size_str(bytes),
        elapsed_us as f64 / 1_000_000.0,
        Fixed(mb_per_sec),
        Fixed(f64::from(usec_per_xfer)),
        Fixed(1.0 / f64::from(usec_per_xfer)),
    ))
}

/// A float printed as C's `%W.Nf` prints it: Rust agrees for finite values and
/// infinities, but spells NaN `NaN` where glibc prints `-nan` (0.0 / 0.0 on x86).
struct Fixed(f64);

impl std::fmt::Display for Fixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_nan() {
            let width = f.width().unwrap_or(0);
            return write!(f, "{:>width$}", "-nan");
        }
        std::fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sizes::{test_sizes, SizeSel};

    #[test]
    fn sizes_as_libfabric_prints_them() {
        // Every size string of `fi_pingpong -S all` (libfabric 1.17, tcp msg), in order.
        let want = "0 1 2 3 4 6 8 12 16 24 32 48 64 96 128 192 256 384 512 768 1k 1.5k 2k 3k 4k 6k 8k 12k \
                    16k 24k 32k 48k 64k 96k 128k 192k 256k 384k 512k 768k 1m 1.5m 2m 3m 4m 6m";
        let sizes = test_sizes(SizeSel::All, usize::MAX).unwrap();
        let got: Vec<String> = sizes.iter().map(|&s| size_str(s as u64)).collect();
        assert_eq!(got.join(" "), want);
        // And the totals column of that run (2 iterations, 2 transfers each).
        let totals: Vec<String> = sizes.iter().map(|&s| size_str(s as u64 * 4)).collect();
        assert_eq!(
            totals.join(" "),
            "0 4 8 12 16 24 32 48 64 96 128 192 256 384 512 768 1k 1.5k 2k 3k 4k 6k 8k 12k 16k 24k 32k 48k \
             64k 96k 128k 192k 256k 384k 512k 768k 1m 1.5m 2m 3m 4m 6m 8m 12m 16m 24m"
        );
        assert_eq!(size_str(128_000), "125k");
        assert_eq!(size_str(1 << 30), "1g");
        assert_eq!(size_str(1_610_612_736), "1.5g");
        assert_eq!(size_str(10 * 1024 + 512), "10k");
        assert_eq!(size_str(9 * 1024 + 1023), "9.9k");
    }

    #[test]
    fn counts() {
        assert_eq!(cnt_str(0), "0");
        assert_eq!(cnt_str(999), "999");
        assert_eq!(cnt_str(1000), "1k");
        assert_eq!(cnt_str(20_000), "20k");
        assert_eq!(cnt_str(1_999_999), "1m");
        assert_eq!(cnt_str(3_000_000_000), "3b");
    }

    #[test]
    fn rows_as_libfabric_prints_them() {
        // Lines printed by libfabric 1.17's fi_pingpong on this machine, with the
        // elapsed times (whole microseconds) that give them.
        assert_eq!(
            perf_row(64, 1000, 1000, Duration::from_micros(76_580), 2).unwrap(),
            "64      1k      =1k      125k        0.08s      1.67      38.29       0.03"
        );
        assert_eq!(
            perf_row(0, 2, 2, Duration::from_micros(3699), 2).unwrap(),
            "0       2       =2       0           0.00s      0.00     924.75       0.00"
        );
        assert_eq!(
            perf_row(4 << 20, 2, 2, Duration::from_micros(58_065), 2).unwrap(),
            "4m      2       =2       16m         0.06s    288.94   14516.25       0.00"
        );
        assert_eq!(
            perf_row(1536, 2, 2, Duration::from_micros(57), 2).unwrap(),
            "1.5k    2       =2       6k          0.00s    107.79      14.25       0.07"
        );
        assert_eq!(HEADER.find("#ack"), Some(16));
        assert_eq!(HEADER.find("total"), Some(25));
        assert_eq!(HEADER.find("Mxfers/sec"), Some(68));
        let r = perf_row(64, 10, 7, Duration::from_micros(100), 2).unwrap();
        assert!(r.starts_with("64      10      +3       1.2k    "), "{r}");
        assert!(perf_row(64, 0, 0, Duration::from_micros(100), 2).is_none());
        let r = perf_row(64, 10, 10, Duration::ZERO, 2).unwrap();
        assert!(r.ends_with("0.00s       inf       0.00        inf"), "{r}");
        let r = perf_row(0, 10, 10, Duration::ZERO, 2).unwrap();
        assert!(r.ends_with("0.00s      -nan       0.00        inf"), "{r}");
    }
}
