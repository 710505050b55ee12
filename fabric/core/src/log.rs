//! Logging as libfabric does it: `FI_LOG_LEVEL` (warn, info, debug, trace) and
//! optionally `FI_LOG_PROV` to keep one provider, written to standard error.

use std::fmt;
use std::sync::OnceLock;

/// Log levels, least verbose first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Problems.
    Warn = 1,
    /// Decisions worth knowing (why a provider refused hints).
    Info = 2,
    /// Detail.
    Debug = 3,
    /// Everything.
    Trace = 4,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        }
    }

    /// Parse `FI_LOG_LEVEL`'s value.
    pub fn parse(s: &str) -> Option<Level> {
        match s.trim().to_ascii_lowercase().as_str() {
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" => Some(Level::Debug),
            "trace" => Some(Level::Trace),
            _ => None,
        }
    }
}

struct Config {
    level: Option<Level>,
    prov: Option<String>,
}

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| Config {
        level: std::env::var("FI_LOG_LEVEL").ok().and_then(|v| Level::parse(&v)),
        prov: std::env::var("FI_LOG_PROV").ok().filter(|s| !s.is_empty()),
    })
}

/// Whether a message at `level` from `prov` would be written.
pub fn enabled(level: Level, prov: &str) -> bool {
    let c = config();
    match c.level {
        Some(l) if level <= l => c.prov.as_deref().map_or(true, |p| p == prov || prov == "core"),
        _ => false,
    }
}

/// Write one log line: `fabric:PID:SECONDS::PROV:SUBSYS:<LEVEL> message`.
pub fn write(level: Level, prov: &str, subsys: &str, args: fmt::Arguments<'_>) {
    if !enabled(level, prov) {
        return;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    eprintln!("fabric:{}:{}::{}:{}:<{}> {}", std::process::id(), now, prov, subsys, level.name(), args);
}

/// Log a message: `fi_log!(Level::Info, "tcp", "core", "refused: {}", why)`.
#[macro_export]
macro_rules! fi_log {
    ($level:expr, $prov:expr, $subsys:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level, $prov) {
            $crate::log::write($level, $prov, $subsys, format_args!($($arg)*));
        }
    };
}
