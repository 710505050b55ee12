//! `fi_pingpong`: libfabric's ping-pong latency test, over fabric.
//!
//! Server: `fi_pingpong -p tcp -e rdm`; client: `fi_pingpong -p tcp -e rdm <server>`.
//! `fi_pingpong -h` lists the options.

#![forbid(unsafe_code)]

fn main() {
    let code = fi_tools::pingpong::main_with_args(std::env::args().skip(1).collect());
    std::process::exit(code);
}
