//! `fi_perf`'s numbers: latency statistics over per-iteration samples, bandwidth
//! with a per-window peak, and their output as perftest prints them (same header
//! lines, same column formats) or as one JSON object per size.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// perftest's rule line.
pub const RESULT_LINE: &str = "---------------------------------------------------------------------------------------";

/// perftest's header of bandwidth results (`RESULT_FMT`).
pub const HEADER_BW: &str = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";

/// perftest's header of bandwidth results with `--report_gbits` (`RESULT_FMT_G`).
pub const HEADER_BW_G: &str = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";

/// perftest's box a server prints while it waits for its client.
pub const WAITING_BOX: &str = "\n************************************\n\
                               * Waiting for client to connect... *\n\
                               ************************************";

/// perftest's `--report_gbits` unit: 10^9 bits per second, in bytes per second.
pub const GBIT: f64 = 125_000_000.0;

/// perftest's header of latency results (`RESULT_FMT_LAT`).
pub const HEADER_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
                              t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// perftest's header of latency results in duration mode (`RESULT_FMT_LAT_DUR`).
pub const HEADER_LAT_DUR: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// A latency row of duration mode, as perftest's `REPORT_FMT_LAT_DUR`: the
/// average latency and the transactions per second.
pub fn lat_dur_row(size: usize, iterations: u64, avg: f64, tps: f64) -> String {
    format!(" {size:<7}       {iterations}            {avg:<7.2}        {tps:<7.2}")
}

/// perftest's megabyte: bandwidth is reported in units of 2^20 bytes per second.
pub const MB: f64 = 1_048_576.0;

/// Statistics of latency samples, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    /// Samples.
    pub count: usize,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// The median ("typical"; the mean of the two middle samples of an even count).
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation (of the population of samples).
    pub stdev: f64,
    /// 99th percentile (nearest rank: the smallest sample with at least 99% of
    /// the samples at or below it).
    pub p99: f64,
    /// 99.9th percentile (nearest rank).
    pub p99_9: f64,
}

impl LatStats {
    /// The statistics of `samples` (microseconds), which are sorted in place.
    /// `None` without samples.
    pub fn from_samples(samples: &mut [f64]) -> Option<LatStats> {
        let n = samples.len();
        if n == 0 {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let typical = if n % 2 == 1 { samples[n / 2] } else { (samples[n / 2 - 1] + samples[n / 2]) / 2.0 };
        let avg = samples.iter().sum::<f64>() / n as f64;
        let var = samples.iter().map(|s| (s - avg) * (s - avg)).sum::<f64>() / n as f64;
        Some(LatStats {
            count: n,
            min: samples[0],
            max: samples[n - 1],
            typical,
            avg,
            stdev: var.sqrt(),
            p99: nearest_rank(samples, 0.99),
            p99_9: nearest_rank(samples, 0.999),
        })
    }

    /// The statistics of durations in nanoseconds, each divided by `divisor`
    /// (2 for round trips reported one way). `samples` is reused as scratch.
    pub fn from_nanos(nanos: &[u64], divisor: f64, scratch: &mut Vec<f64>) -> Option<LatStats> {
        scratch.clear();
        scratch.extend(nanos.iter().map(|&ns| ns as f64 / 1000.0 / divisor));
        LatStats::from_samples(scratch)
    }
}

/// The nearest-rank percentile `p` (0 < p <= 1) of sorted samples.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let n = sorted.len();
    // The rank, rounded up, computed so that p * n exact integers stay exact.
    let rank = ((p * n as f64) - 1e-9).ceil().max(1.0) as usize;
    sorted[rank.min(n) - 1]
}

/// Bandwidth results of one size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwStats {
    /// Peak bandwidth, MB/s (the best window's, at least the average).
    pub peak_mb: f64,
    /// Average bandwidth, MB/s: bytes over the whole timed run.
    pub avg_mb: f64,
    /// Message rate, millions of messages per second.
    pub mpps: f64,
}

impl BwStats {
    /// From the size, the timed operations, their total time and the best
    /// window's rate (operations per second; 0 when no window completed).
    pub fn new(size: usize, iterations: u64, elapsed: Duration, best_window_rate: f64) -> BwStats {
        let secs = elapsed.as_secs_f64();
        let rate = iterations as f64 / secs;
        let peak = if best_window_rate.is_finite() && best_window_rate > rate { best_window_rate } else { rate };
        BwStats { peak_mb: peak * size as f64 / MB, avg_mb: rate * size as f64 / MB, mpps: rate / 1e6 }
    }
}

impl BwStats {
    /// The figures as the client's `DONE` carries them to the target of its
    /// one-sided operations: ` peak=<MB/s> avg=<MB/s> mpps=<Mpps>`.
    pub fn encode(&self) -> String {
        format!(" peak={} avg={} mpps={}", self.peak_mb, self.avg_mb, self.mpps)
    }

    /// [`BwStats::encode`]'s figures; `None` unless all three are there, finite
    /// and not negative.
    pub fn decode(msg: &str) -> Option<BwStats> {
        let num = |k: &str| {
            let v: f64 = msg.split(' ').find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))?.parse().ok()?;
            (v.is_finite() && v >= 0.0).then_some(v)
        };
        Some(BwStats { peak_mb: num("peak")?, avg_mb: num("avg")?, mpps: num("mpps")? })
    }
}

/// The peak rate over windows of a fixed number of completions: the run is cut
/// into consecutive windows of at least `w` operations and the best window's rate
/// is the peak. (perftest takes the best interval between any post and any later
/// completion; providers that complete operations in batches, as one socket read
/// delivers many messages, make short intervals meaningless, so the windows here
/// are long: see [`Windows::size_for`].)
/// Times are nanoseconds on one clock: this process's ([`Windows::tick`], which
/// reads the clock only at window boundaries) or the peer's, as it reports them
/// ([`Windows::advance_to`]).
#[derive(Debug, Clone)]
pub struct Windows {
    w: u64,
    count: u64,
    start_count: u64,
    start_ns: u64,
    epoch: Instant,
    best: f64,
}

impl Windows {
    /// The window for a run of `iterations` operations with `depth` in flight: a
    /// tenth of the run, and at least two full pipes (at most the whole run).
    pub fn size_for(iterations: u64, depth: usize) -> u64 {
        (2 * depth as u64).max(iterations.div_ceil(10)).clamp(1, iterations.max(1))
    }

    /// Windows of `w` operations on this process's clock, starting now.
    pub fn new(w: u64) -> Windows {
        Windows::at(w, 0)
    }

    /// Windows of `w` operations on a clock that reads `start_ns` now.
    pub fn at(w: u64, start_ns: u64) -> Windows {
        Windows { w: w.max(1), count: 0, start_count: 0, start_ns, epoch: Instant::now(), best: 0.0 }
    }

    /// One operation completed, now (on this process's clock).
    #[inline]
    pub fn tick(&mut self) {
        self.count += 1;
        if self.count - self.start_count >= self.w {
            let now = self.epoch.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
            self.boundary(now);
        }
    }

    /// `count` operations had completed since the start at `at_ns` (reports that
    /// come in batches, such as credits): a window ends once it holds at least `w`.
    #[inline]
    pub fn advance_to(&mut self, count: u64, at_ns: u64) {
        if count > self.count {
            self.count = count;
            if self.count - self.start_count >= self.w {
                self.boundary(at_ns);
            }
        }
    }

    #[cold]
    fn boundary(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.start_ns) as f64 / 1e9;
        if dt > 0.0 {
            self.best = self.best.max((self.count - self.start_count) as f64 / dt);
        }
        self.start_count = self.count;
        self.start_ns = now_ns;
    }

    /// The best window's rate in operations per second (0 if no window ended).
    pub fn best(&self) -> f64 {
        self.best
    }
}

/// What a result line says about the run, for JSON output.
#[derive(Debug, Clone)]
pub struct RunInfo<'a> {
    /// `send_bw`, `write_lat`, ...
    pub test: &'a str,
    /// `client` or `server`.
    pub side: &'a str,
    /// The provider.
    pub provider: &'a str,
    /// `msg` or `rdm`.
    pub endpoint: &'a str,
}

/// The row of `-b`: both directions' figures added, as perftest's
/// `print_full_bw_report` adds the peer's report to its own (peaks too).
pub fn bidir_sum(mine: &BwStats, peer: &BwStats) -> BwStats {
    BwStats { peak_mb: mine.peak_mb + peer.peak_mb, avg_mb: mine.avg_mb + peer.avg_mb, mpps: mine.mpps + peer.mpps }
}

/// A bandwidth row, as perftest's `REPORT_FMT`.
pub fn bw_row(size: usize, iterations: u64, s: &BwStats) -> String {
    format!(
        " {size:<7}    {iterations:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        s.peak_mb, s.avg_mb, s.mpps
    )
}

/// A bandwidth row as perftest prints small Gbit/s figures (`REPORT_FMT_EXT`,
/// used with `--report_gbits` when the average is below 0.1).
pub fn bw_row_ext(size: usize, iterations: u64, peak: f64, avg: f64, mpps: f64) -> String {
    format!(" {size:<7}    {iterations}           {peak:<7.6}            {avg:<7.6}            {mpps:<7.6}")
}

/// The settings perftest's banner shows, in fabric's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct PerftestBanner {
    /// The title: `Send Latency Test`, `RDMA_Write BW Test`, ...
    pub title: String,
    /// `Device`: the domain.
    pub device: String,
    /// `Transport type`: the provider.
    pub transport: String,
    /// `Connection type`: the endpoint type (`RDM`, `MSG`).
    pub connection: String,
    /// `TX depth`, shown by the client (latency tests: 1).
    pub tx_depth: Option<usize>,
    /// `RX depth`, shown by the server of send tests.
    pub rx_depth: Option<usize>,
    /// `CQ Moderation`, shown in bandwidth tests.
    pub cq_mod: Option<u32>,
    /// `Mtu` in bytes.
    pub mtu: usize,
    /// `Link type`: the fabric.
    pub link: String,
    /// `Max inline data` (send and write: the inject size) or `Outstand reads`
    /// (read and atomic: operations in flight).
    pub inline_or_outstanding: (bool, usize),
    /// `rdma_cm QPs`: connected (MSG) endpoints, which the provider's
    /// connection manager connects (`Data ex. method : rdma_cm`; the server says
    /// it waits for the client's connection, as perftest's).
    pub rdma_cm: bool,
    /// The server's banner.
    pub server: bool,
}

impl PerftestBanner {
    /// The banner, as perftest's `ctx_print_test_info` prints it, without the
    /// final newline.
    pub fn render(&self) -> String {
        let on = |b: bool| if b { "ON" } else { "OFF" };
        let mut o = String::new();
        let _ = writeln!(o, "{RESULT_LINE}");
        let _ = writeln!(o, "                    {}", self.title);
        let _ = writeln!(o, " Dual-port       : OFF\t\tDevice         : {}", self.device);
        let _ = writeln!(o, " Number of qps   : 1\t\tTransport type : {}", self.transport);
        let _ = writeln!(o, " Connection type : {}\t\tUsing SRQ      : OFF", self.connection);
        // Neither relaxed ordering nor the ibv_wr_* calls are asked for.
        let _ = writeln!(o, " PCIe relax order: OFF");
        let _ = writeln!(o, " ibv_wr* API     : OFF");
        if let Some(d) = self.tx_depth {
            let _ = writeln!(o, " TX depth        : {d}");
        }
        if let Some(d) = self.rx_depth {
            let _ = writeln!(o, " RX depth        : {d}");
        }
        if let Some(q) = self.cq_mod {
            let _ = writeln!(o, " CQ Moderation   : {q}");
        }
        let _ = writeln!(o, " Mtu             : {}[B]", self.mtu);
        let _ = writeln!(o, " Link type       : {}", self.link);
        match self.inline_or_outstanding {
            (true, n) => {
                let _ = writeln!(o, " Max inline data : {n}[B]");
            }
            (false, n) => {
                let _ = writeln!(o, " Outstand reads  : {n}");
            }
        }
        let _ = writeln!(o, " rdma_cm QPs\t : {}", on(self.rdma_cm));
        let _ = writeln!(o, " Data ex. method : {}", if self.rdma_cm { "rdma_cm" } else { "Ethernet" });
        if self.rdma_cm && self.server {
            let _ = writeln!(o, "{RESULT_LINE}");
            let _ = writeln!(o, " Waiting for client rdma_cm QP to connect");
            let _ = writeln!(o, " Please run the same command with the IB/RoCE interface IP");
        }
        let _ = write!(o, "{RESULT_LINE}");
        o
    }
}

/// perftest's lines naming the two ends (`ctx_print_pingpong_data`), with fabric
/// addresses for its LID, QPN and PSN, then the rule line.
pub fn perftest_addresses(local: &str, remote: &str) -> String {
    format!(" local address: {local}\n remote address: {remote}\n{RESULT_LINE}")
}

/// A latency row, as perftest's `REPORT_FMT_LAT`.
pub fn lat_row(size: usize, iterations: u64, s: &LatStats) -> String {
    format!(
        " {size:<7} {iterations}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p99_9
    )
}

/// A JSON string literal.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON number with `decimals` decimals; `null` when not finite (JSON has no
/// infinities or NaN).
fn json_num(out: &mut String, v: f64, decimals: usize) {
    if v.is_finite() {
        let _ = write!(out, "{v:.decimals$}");
    } else {
        out.push_str("null");
    }
}

fn json_head(run: &RunInfo<'_>, size: usize, iterations: u64) -> String {
    let mut o = String::from("{\"test\":");
    json_str(&mut o, run.test);
    o.push_str(",\"side\":");
    json_str(&mut o, run.side);
    o.push_str(",\"provider\":");
    json_str(&mut o, run.provider);
    o.push_str(",\"endpoint\":");
    json_str(&mut o, run.endpoint);
    let _ = write!(o, ",\"bytes\":{size},\"iterations\":{iterations}");
    o
}

/// A bandwidth result as one JSON object (one line, no newline).
pub fn bw_json(run: &RunInfo<'_>, size: usize, iterations: u64, s: &BwStats) -> String {
    let mut o = json_head(run, size, iterations);
    for (k, v, d) in [("bw_peak_mb_sec", s.peak_mb, 2), ("bw_avg_mb_sec", s.avg_mb, 2), ("msg_rate_mpps", s.mpps, 6)] {
        let _ = write!(o, ",\"{k}\":");
        json_num(&mut o, v, d);
    }
    o.push('}');
    o
}

/// A latency result as one JSON object (one line, no newline).
pub fn lat_json(run: &RunInfo<'_>, size: usize, iterations: u64, s: &LatStats) -> String {
    let mut o = json_head(run, size, iterations);
    let fields = [
        ("t_min_usec", s.min),
        ("t_max_usec", s.max),
        ("t_typical_usec", s.typical),
        ("t_avg_usec", s.avg),
        ("t_stdev_usec", s.stdev),
        ("p99_usec", s.p99),
        ("p99_9_usec", s.p99_9),
    ];
    for (k, v) in fields {
        let _ = write!(o, ",\"{k}\":");
        json_num(&mut o, v, 3);
    }
    let _ = write!(o, ",\"samples\":{}}}", s.count);
    o
}

/// perftest's banner before the table: the test's title and its settings.
pub fn banner(title: &str, lines: &[(&str, String)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{RESULT_LINE}");
    let _ = writeln!(out, "                    {title}");
    for pair in lines.chunks(2) {
        let mut line = String::new();
        for (i, (k, v)) in pair.iter().enumerate() {
            if i == 0 {
                let _ = write!(line, " {k:<16}: {v}");
            } else {
                let pad = 32usize.saturating_sub(line.len());
                let _ = write!(line, "{:pad$}{k:<15}: {v}", "");
            }
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = write!(out, "{RESULT_LINE}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn statistics_of_known_samples() {
        // 1..=100: median 50.5, mean 50.5, population stdev sqrt((100^2-1)/12).
        let mut s: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let st = LatStats::from_samples(&mut s).unwrap();
        assert_eq!(st.count, 100);
        assert_eq!((st.min, st.max), (1.0, 100.0));
        assert!(close(st.typical, 50.5) && close(st.avg, 50.5));
        assert!(close(st.stdev, (9999.0f64 / 12.0).sqrt()), "{}", st.stdev);
        assert_eq!((st.p99, st.p99_9), (99.0, 100.0));
        // 1..=1000: the 99% is the 990th, the 99.9% the 999th.
        let mut s: Vec<f64> = (1..=1000).map(f64::from).collect();
        let st = LatStats::from_samples(&mut s).unwrap();
        assert_eq!((st.p99, st.p99_9, st.typical), (990.0, 999.0, 500.5));
        // Odd count, one outlier.
        let mut s = vec![2.0, 2.0, 9.0, 2.0, 2.0];
        let st = LatStats::from_samples(&mut s).unwrap();
        assert_eq!((st.min, st.max, st.typical), (2.0, 9.0, 2.0));
        assert!(close(st.avg, 3.4));
        assert!(close(st.stdev, 2.8), "{}", st.stdev);
        assert_eq!((st.p99, st.p99_9), (9.0, 9.0));
        // One sample; none.
        let st = LatStats::from_samples(&mut [7.5]).unwrap();
        assert_eq!((st.min, st.max, st.typical, st.avg, st.stdev, st.p99), (7.5, 7.5, 7.5, 7.5, 0.0, 7.5));
        assert!(LatStats::from_samples(&mut []).is_none());
        // Round trips in nanoseconds, reported one way in microseconds.
        let mut scratch = Vec::new();
        let st = LatStats::from_nanos(&[4000, 2000, 6000], 2.0, &mut scratch).unwrap();
        assert_eq!((st.min, st.typical, st.max), (1.0, 2.0, 3.0));
    }

    #[test]
    fn bandwidth_arithmetic() {
        // 1000 messages of 1 MiB in one second: 1000 MB/s, 0.001 Mpps.
        let s = BwStats::new(1 << 20, 1000, Duration::from_secs(1), 2000.0);
        assert!(close(s.avg_mb, 1000.0) && close(s.mpps, 0.001) && close(s.peak_mb, 2000.0));
        // The peak is never below the average.
        let s = BwStats::new(1 << 20, 1000, Duration::from_secs(1), 10.0);
        assert!(close(s.peak_mb, s.avg_mb));
        let s = BwStats::new(0, 1_000_000, Duration::from_millis(500), 0.0);
        assert!(close(s.avg_mb, 0.0) && close(s.mpps, 2.0));
        assert_eq!(Windows::size_for(1000, 128), 256);
        assert_eq!(Windows::size_for(100_000, 128), 10_000);
        assert_eq!(Windows::size_for(10, 128), 10);
        assert_eq!(Windows::size_for(1001, 1), 101);
        assert_eq!(Windows::size_for(0, 1), 1);
        let mut w = Windows::new(2);
        w.tick();
        assert_eq!(w.best(), 0.0);
        std::thread::sleep(Duration::from_millis(2));
        w.tick();
        assert!(w.best() > 0.0 && w.best() <= 1000.0, "{}", w.best());
        // Batches on the peer's clock: a window ends once it holds at least w.
        let mut w = Windows::at(10, 5_000);
        w.advance_to(4, 6_000);
        assert_eq!(w.best(), 0.0);
        w.advance_to(12, 1_005_000);
        assert!(close(w.best(), 12_000.0), "{}", w.best());
        w.advance_to(3, 2_000_000);
        w.advance_to(22, 3_005_000);
        assert!(close(w.best(), 12_000.0), "{}", w.best());
        w.advance_to(40, 3_006_000);
        assert!(close(w.best(), 18_000_000.0), "{}", w.best());
    }

    #[test]
    fn rows_as_perftest_prints_them() {
        assert_eq!(HEADER_BW.find("#iterations"), Some(12));
        assert_eq!(HEADER_BW.find("MsgRate[Mpps]"), Some(67));
        assert!(HEADER_LAT.contains("t_typical[usec]") && HEADER_LAT.contains("99.9% percentile[usec]"));
        let s = BwStats { peak_mb: 11034.01, avg_mb: 11033.27, mpps: 0.176532 };
        // perftest: " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf"
        assert_eq!(bw_row(65536, 1000, &s), " 65536      1000             11034.01            11033.27\t\t   0.176532");
        let st =
            LatStats { count: 1000, min: 1.01, max: 5.5, typical: 1.2, avg: 1.25, stdev: 0.1, p99: 2.0, p99_9: 5.0 };
        assert_eq!(
            lat_row(2, 1000, &st),
            " 2       1000          1.01           5.50         1.20     \t       1.25        \t0.10   \t\t2.00    \t\t5.00   "
        );
        let b = banner("Send BW Test", &[("Provider", "tcp".into()), ("Endpoint", "rdm".into())]);
        assert!(b.starts_with(RESULT_LINE) && b.ends_with(RESULT_LINE), "{b}");
        assert!(b.contains("                    Send BW Test\n Provider        : tcp"), "{b}");
        assert!(b.contains("Endpoint       : rdm\n"), "{b}");
    }

    #[test]
    fn perftest_banner_line_for_line() {
        let b = PerftestBanner {
            title: "Send BW Test".into(),
            device: "lo".into(),
            transport: "tcp".into(),
            connection: "RDM".into(),
            tx_depth: Some(128),
            rx_depth: None,
            cq_mod: Some(1),
            mtu: 4096,
            link: "127.0.0.0/8".into(),
            inline_or_outstanding: (true, 8192),
            rdma_cm: false,
            server: false,
        };
        let want = [
            RESULT_LINE,
            "                    Send BW Test",
            " Dual-port       : OFF\t\tDevice         : lo",
            " Number of qps   : 1\t\tTransport type : tcp",
            " Connection type : RDM\t\tUsing SRQ      : OFF",
            " PCIe relax order: OFF",
            " ibv_wr* API     : OFF",
            " TX depth        : 128",
            " CQ Moderation   : 1",
            " Mtu             : 4096[B]",
            " Link type       : 127.0.0.0/8",
            " Max inline data : 8192[B]",
            " rdma_cm QPs\t : OFF",
            " Data ex. method : Ethernet",
            RESULT_LINE,
        ];
        assert_eq!(b.render().lines().collect::<Vec<_>>(), want);
        let b = PerftestBanner {
            tx_depth: None,
            rx_depth: Some(512),
            cq_mod: None,
            inline_or_outstanding: (false, 16),
            rdma_cm: true,
            server: true,
            ..b
        };
        let r = b.render();
        // perftest's server with -R (rdma_cm), line for line.
        let tail = format!(
            " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n{RESULT_LINE}\n Waiting for client rdma_cm QP to \
             connect\n Please run the same command with the IB/RoCE interface IP\n{RESULT_LINE}"
        );
        assert!(r.ends_with(&tail), "{r}");
        assert!(r.contains("\n RX depth        : 512\n Mtu "), "{r}");
        assert!(r.contains("\n Outstand reads  : 16\n rdma_cm QPs\t : ON\n"), "{r}");
        // perftest: " %-7lu       %lu            %-7.2f        %-7.2f"
        assert_eq!(lat_dur_row(2, 23051, 65.114, 7679.51), " 2             23051            65.11          7679.51");
        let st = BwStats { peak_mb: 0.0, avg_mb: 28.7, mpps: 0.000459 };
        assert_eq!(BwStats::decode(&st.encode()), Some(st));
        assert_eq!(BwStats::decode(" peak=1 avg=2"), None);
        assert_eq!(BwStats::decode(" peak=1 avg=NaN mpps=1"), None);
        assert_eq!(BwStats::decode(""), None);
        assert!(!r.contains("TX depth") && !r.contains("CQ Moderation"), "{r}");
        assert_eq!(perftest_addresses("a", "b"), format!(" local address: a\n remote address: b\n{RESULT_LINE}"));
        assert_eq!(
            WAITING_BOX.lines().collect::<Vec<_>>()[1..],
            ["*".repeat(36), "* Waiting for client to connect... *".into(), "*".repeat(36)]
        );
        // perftest: " %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf"
        assert_eq!(
            bw_row_ext(2, 1000, 0.05, 0.04, 1.5),
            " 2          1000           0.050000            0.040000            1.500000"
        );
        assert_eq!(HEADER_BW_G.replace("Gb/sec", "MB/sec"), HEADER_BW);
        // -b: perftest adds the peer's figures to its own, the peak too.
        let a = BwStats { peak_mb: 51.98, avg_mb: 47.10, mpps: 0.000754 };
        let b = BwStats { peak_mb: 48.54, avg_mb: 48.53, mpps: 0.000777 };
        let s = bidir_sum(&a, &b);
        assert_eq!(bw_row(65536, 1000, &s), " 65536      1000             100.52             95.63  \t\t   0.001531");
        assert_eq!(bidir_sum(&b, &a), s);
    }

    #[test]
    fn json_objects() {
        let run = RunInfo { test: "send_bw", side: "client", provider: "tcp", endpoint: "rdm" };
        let s = BwStats { peak_mb: 11034.014, avg_mb: 11033.27, mpps: 0.1765321 };
        assert_eq!(
            bw_json(&run, 65536, 1000, &s),
            "{\"test\":\"send_bw\",\"side\":\"client\",\"provider\":\"tcp\",\"endpoint\":\"rdm\",\"bytes\":65536,\
             \"iterations\":1000,\"bw_peak_mb_sec\":11034.01,\"bw_avg_mb_sec\":11033.27,\"msg_rate_mpps\":0.176532}"
        );
        let s = BwStats { peak_mb: f64::INFINITY, avg_mb: f64::NAN, mpps: 1.0 };
        assert!(bw_json(&run, 0, 1, &s).contains("\"bw_peak_mb_sec\":null,\"bw_avg_mb_sec\":null,"));
        let run = RunInfo { test: "send_lat", side: "server", provider: "a\"b\\c\n", endpoint: "msg" };
        let st = LatStats { count: 3, min: 1.0, max: 3.0, typical: 2.0, avg: 2.0, stdev: 0.8165, p99: 3.0, p99_9: 3.0 };
        assert_eq!(
            lat_json(&run, 2, 3, &st),
            "{\"test\":\"send_lat\",\"side\":\"server\",\"provider\":\"a\\\"b\\\\c\\n\",\"endpoint\":\"msg\",\
             \"bytes\":2,\"iterations\":3,\"t_min_usec\":1.000,\"t_max_usec\":3.000,\"t_typical_usec\":2.000,\
             \"t_avg_usec\":2.000,\"t_stdev_usec\":0.817,\"p99_usec\":3.000,\"p99_9_usec\":3.000,\"samples\":3}"
        );
        let mut o = String::new();
        json_str(&mut o, "\u{1}");
        assert_eq!(o, "\"\\u0001\"");
    }
}
