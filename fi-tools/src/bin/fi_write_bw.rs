//! `fi_write_bw`: perftest's `ib_write_bw` over any fabric provider, with its
//! options and output. `fi_write_bw -h` lists the options.

#![forbid(unsafe_code)]

use fi_tools::fiperf::opts::{Measure, Test, Verb};

fn main() {
    let test = Test { verb: Verb::Write, measure: Measure::Bw };
    std::process::exit(fi_tools::perftest::main_with_args(test, std::env::args().skip(1).collect()));
}
