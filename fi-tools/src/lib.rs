//! fabric's command-line tools, with libfabric's options and output formats so that
//! scripts and habits carry over: `fi_info`, `fi_pingpong`, `fi_strerror`, and `fi_perf`
//! (perftest's tests over any provider).
//!
//! The binaries are thin; what they print and parse lives here, unit-tested against
//! what libfabric 1.17's own tools print.
//!
//! The modules are layered, each importing only those below it:
//!
//! - [`getopt`], [`oob`] (the control connection), [`pattern`] (`-c`'s data) and
//!   [`sizes`] (`-S`) import nothing of this crate;
//! - [`link`]: one side's link to its peer (failures, control messages, fabric
//!   objects, completions, the watchdog), on [`oob`];
//! - [`common`]: the options, entry point and set-up both tools share;
//! - [`pingpong`] and [`fiperf`], each as `mod.rs` (protocol and data path),
//!   `opts.rs` (command line) and `report.rs` (numbers and table);
//! - [`perftest`]: perftest's command lines (`fi_send_lat` & co.) on [`fiperf`];
//! - [`infocmd`] (`fi_info`), on [`getopt`] alone;
//! - [`alloc`]: the programs' allocator, which places large buffers on pages as
//!   libfabric's tools do.

// Unsafe code is denied but in `alloc` (the global allocator), which says why each
// of its blocks is sound.
#![deny(unsafe_code)]

pub mod alloc;
pub mod common;
pub mod fiperf;
pub mod getopt;
pub mod infocmd;
pub mod link;
pub mod oob;
pub mod pattern;
pub mod perftest;
pub mod pingpong;
pub mod sizes;
/// `fi_tostr` formats: shared with the C ABI (`fabric-capi`), so they live in fabric-core.
pub use fabric_core::tostr;

/// The usage text of `fi_strerror`, as libfabric's.
pub const STRERROR_USAGE: &str = "Usage: fi_strerror FI_ERROR_CODE

Displays the error string for the given numeric FI_ERROR_CODE.
FI_ERROR_CODE may be a hexadecimal, octal, or decimal constant.
For convenience, the absolute value of FI_ERROR_CODE will be used.
";

/// Parse `fi_strerror`'s argument as C's `strtol(s, NULL, 0)` reads it (decimal,
/// `0x` hexadecimal, `0` octal, optional sign), and give its absolute value.
/// `Err` is the message libfabric prints.
pub fn parse_errno_arg(s: &str) -> Result<i32, String> {
    let unparsable = || format!("ERROR: unable to parse '{s}'");
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(unparsable());
    }
    let n = i128::from_str_radix(digits, radix).map_err(|_| format!("ERROR: '{s}' is out of range"))?;
    let n = if neg { -n } else { n };
    if n > i128::from(i32::MAX) || n < -i128::from(i32::MAX) {
        return Err(format!("ERROR: '{s}' is out of range"));
    }
    Ok((n as i32).abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_arguments_as_strtol_reads_them() {
        assert_eq!(parse_errno_arg("61"), Ok(61));
        assert_eq!(parse_errno_arg("-61"), Ok(61));
        assert_eq!(parse_errno_arg("+61"), Ok(61));
        assert_eq!(parse_errno_arg("0x10"), Ok(16));
        assert_eq!(parse_errno_arg("010"), Ok(8));
        assert_eq!(parse_errno_arg("0"), Ok(0));
        assert_eq!(parse_errno_arg("abc"), Err("ERROR: unable to parse 'abc'".into()));
        assert_eq!(parse_errno_arg("0x"), Err("ERROR: unable to parse '0x'".into()));
        assert_eq!(parse_errno_arg("12abc"), Err("ERROR: unable to parse '12abc'".into()));
        assert_eq!(parse_errno_arg("08"), Err("ERROR: unable to parse '08'".into()));
        assert_eq!(parse_errno_arg("4294967295"), Err("ERROR: '4294967295' is out of range".into()));
        assert_eq!(
            parse_errno_arg("99999999999999999999999999999999999999999"),
            Err("ERROR: '99999999999999999999999999999999999999999' is out of range".into())
        );
        // What libfabric's fi_strerror prints for these numbers.
        assert_eq!(fabric_core::strerror(parse_errno_arg("-61").unwrap()), "No data available");
        assert_eq!(fabric_core::strerror(parse_errno_arg("265").unwrap()), "Truncation error");
        assert_eq!(fabric_core::strerror(parse_errno_arg("010").unwrap()), "Exec format error");
        assert_eq!(fabric_core::strerror(parse_errno_arg("0").unwrap()), "Success");
        assert_eq!(fabric_core::strerror(parse_errno_arg("1000").unwrap()), "Unspecified error");
        assert_eq!(fabric_core::strerror(parse_errno_arg("255").unwrap()), "Unknown error 255");
    }
}
