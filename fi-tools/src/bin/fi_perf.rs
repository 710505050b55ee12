//! `fi_perf`: perftest's bandwidth and latency tests over fabric.
//!
//! Server: `fi_perf send bw -p tcp -e rdm`; client: `fi_perf send bw -p tcp -e rdm <server>`.
//! `fi_perf -h` lists the options.

#![forbid(unsafe_code)]

fn main() {
    let code = fi_tools::fiperf::main_with_args(std::env::args().skip(1).collect());
    std::process::exit(code);
}
