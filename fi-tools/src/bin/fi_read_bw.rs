//! `fi_read_bw`: perftest's `ib_read_bw` over any fabric provider, with its
//! options and output. `fi_read_bw -h` lists the options.

#![forbid(unsafe_code)]

use fi_tools::fiperf::opts::{Measure, Test, Verb};

fn main() {
    let test = Test { verb: Verb::Read, measure: Measure::Bw };
    std::process::exit(fi_tools::perftest::main_with_args(test, std::env::args().skip(1).collect()));
}
