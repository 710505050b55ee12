//! `fi_strerror N`: the text of a libfabric error number, as libfabric's tool prints it.

#![forbid(unsafe_code)]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.as_slice() {
        [a] if a == "-h" || a == "--help" => {
            print!("{}", fi_tools::STRERROR_USAGE);
            0
        }
        [a] => match fi_tools::parse_errno_arg(a) {
            Ok(n) => {
                println!("{}", fabric::strerror(n));
                0
            }
            Err(msg) => {
                println!("{msg}\n");
                print!("{}", fi_tools::STRERROR_USAGE);
                1
            }
        },
        _ => {
            print!("{}", fi_tools::STRERROR_USAGE);
            1
        }
    };
    std::process::exit(code);
}
