//! `fi_write_lat`: perftest's `ib_write_lat` over any fabric provider, with its
//! options and output. `fi_write_lat -h` lists the options.

#![forbid(unsafe_code)]

use fi_tools::fiperf::opts::{Measure, Test, Verb};

fn main() {
    let test = Test { verb: Verb::Write, measure: Measure::Lat };
    std::process::exit(fi_tools::perftest::main_with_args(test, std::env::args().skip(1).collect()));
}
