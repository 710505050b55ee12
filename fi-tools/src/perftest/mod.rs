//! perftest's command lines over any provider: `fi_send_lat`, `fi_send_bw`,
//! `fi_write_lat`, `fi_write_bw`, `fi_read_lat`, `fi_read_bw`, `fi_atomic_lat` and
//! `fi_atomic_bw` take `ib_send_lat`'s (and its siblings') options with their
//! meanings ([`opts`]) and print perftest's banner and table, so that a script
//! written for perftest runs once the program name changes. The tests themselves
//! are `fi_perf`'s ([`crate::fiperf`]): this is its perftest front end.

pub mod opts;

use self::opts::{parse_args, prog_name, usage, PtCmd};
use crate::fiperf::{self, opts::Test};

/// Run the tool of `test` with these arguments (without the program name); the
/// exit status. Notes about ignored options go to standard error first.
pub fn main_with_args(test: Test, args: Vec<String>) -> i32 {
    let usage = usage(test);
    let parsed = match parse_args(test, args) {
        Ok(p) => p,
        Err(msg) => return fiperf::run_parsed(&usage, Err(msg)),
    };
    if parsed.cmd == PtCmd::Version {
        println!("Version: {} (fabric's {}, with perftest 6.06's options)", env!("CARGO_PKG_VERSION"), prog_name(test));
        return 0;
    }
    for note in &parsed.notes {
        eprintln!("{note}");
    }
    fiperf::run_parsed(&usage, Ok(parsed.cmd.into_cmd()))
}
