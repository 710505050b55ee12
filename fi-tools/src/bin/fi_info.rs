//! `fi_info`: what the providers offer, with libfabric's options and formats.
//!
//! `fi_info` (short list), `fi_info -v` (everything), `fi_info -i SUBSTR` (in full,
//! the entries whose text contains SUBSTR), `fi_info -l` (providers), `fi_info -e`
//! (parameters); `fi_info -h` lists the options.

#![forbid(unsafe_code)]

use fi_tools::infocmd::{self, InfoCmd};
use std::io::Write;

fn main() {
    std::process::exit(run());
}

fn run() -> i32 {
    let cmd = match infocmd::parse_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}", e.msg);
            if e.usage {
                eprint!("{}", infocmd::USAGE);
            }
            return e.status;
        }
    };
    let mut out = std::io::stdout().lock();
    let text = match cmd {
        InfoCmd::Help => infocmd::USAGE.to_string(),
        InfoCmd::Version => infocmd::version_text(env!("CARGO_PKG_VERSION"), env!("CARGO_PKG_VERSION")),
        InfoCmd::List => fabric::all_providers().iter().map(|p| infocmd::list_entry(p.name(), p.version())).collect(),
        InfoCmd::Env(filter) => fabric::params()
            .iter()
            .filter(|p| infocmd::env_matches(p, filter.as_deref()))
            .map(|p| infocmd::env_entry(p, p.raw().as_deref()))
            .collect(),
        InfoCmd::Query { hints, verbose, filter } => match fabric::getinfo(&hints) {
            Ok(infos) => infocmd::format_infos_matching(&infos, verbose, filter.as_deref()),
            Err(e) => {
                // libfabric prints the number alone; the text says why.
                eprintln!("fi_getinfo: {} ({e})", -e.errno());
                if let Some(hint) = hints.prov_name.as_deref().and_then(fabric::not_built_hint) {
                    eprintln!("fi_info: {hint}");
                } else if e == fabric::Error::NoData
                    && fabric::log::level().map_or(true, |l| l < fabric::log::Level::Info)
                {
                    // The user's own mistakes (a bad variable, a port out of range)
                    // were reported above; the providers' other reasons are at info.
                    eprintln!("fi_info: no provider offers what was asked; FI_LOG_LEVEL=info says why each refused");
                }
                return e.errno();
            }
        },
    };
    // A closed pipe (`fi_info | head`) is not an error worth a panic.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    0
}
