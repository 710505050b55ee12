//! Logging as libfabric does it: `FI_LOG_LEVEL` (warn, info, debug, trace) and
//! optionally `FI_LOG_PROV` to keep one provider, written to standard error.
//!
//! One kind of message is written whatever `FI_LOG_LEVEL` says: a problem the
//! user caused and must fix, above all an environment variable set to a value that
//! cannot be used as given ([`config_warn`]). Those are written at warn level in
//! the same format, once per process each ([`warn_once`]).
//!
//! A log line is plain text for the user, never Rust's debug text: an address
//! prints as `127.0.0.1:47942`, not `Some(127.0.0.1:47942)`; a value that may be
//! missing through [`or_unknown`] (`unknown` when it is). `fi_log!` invocations
//! use no `{:?}`: a test (`tests/log_lines.rs`) scans the source tree for them.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Mutex, OnceLock};

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
        level: std::env::var("FI_LOG_LEVEL").ok().and_then(|v| parse_level_setting(&v)),
        prov: std::env::var("FI_LOG_PROV").ok().filter(|s| !s.trim().is_empty()),
    })
}

/// `FI_LOG_LEVEL`'s value as a level; an empty one is unset, an unknown one is
/// reported ([`config_warn`]) and leaves logging off.
fn parse_level_setting(v: &str) -> Option<Level> {
    if v.trim().is_empty() {
        return None;
    }
    let l = Level::parse(v);
    if l.is_none() {
        config_warn("core", "FI_LOG_LEVEL", v, "is not a log level (warn, info, debug, trace); logging stays off");
    }
    l
}

/// The level `FI_LOG_LEVEL` sets, if any. The first call reads the environment
/// (and reports a value that is no level).
pub fn level() -> Option<Level> {
    config().level
}

/// The provider `FI_LOG_PROV` keeps, if set.
pub fn log_prov() -> Option<&'static str> {
    config().prov.as_deref()
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
    emit(level, prov, subsys, args);
}

/// One line in libfabric's format, whatever the configuration says, written
/// with one `write` (standard error is unbuffered: `eprintln!` writes each
/// piece of the format on its own, and the lines of processes sharing a stderr,
/// MPI ranks under `mpirun`, came out cut into each other).
fn emit(level: Level, prov: &str, subsys: &str, msg: impl fmt::Display) {
    use std::io::Write;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let line = format!("fabric:{}:{}::{}:{}:<{}> {}\n", std::process::id(), now, prov, subsys, level.name(), msg);
    // A log line that cannot be written is dropped, as eprintln! would not.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Write `msg` at warn level whatever `FI_LOG_LEVEL` and `FI_LOG_PROV` say, the
/// first time this process sees `key`; later calls with the same key write
/// nothing. For problems the user caused and must fix (a port number out of
/// range, a variable set to a bad value: see [`config_warn`]), which a quiet
/// refusal would hide. Returns whether the line was written now.
pub fn warn_once(key: &str, prov: &str, subsys: &str, msg: impl fmt::Display) -> bool {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let fresh = {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        seen.get_or_insert_with(HashSet::new).insert(key.to_string())
    };
    if fresh {
        emit(Level::Warn, prov, subsys, msg);
    }
    fresh
}

/// Report an environment variable the user set to a value that cannot be used as
/// given (not of its type, out of range, naming nothing that exists): one warn
/// line, `VAR=value why`, written whatever `FI_LOG_LEVEL` says and once per
/// process for each variable and value ([`warn_once`]). `why` follows the value
/// and says what is wrong and what is done instead: `"is not a size; using the
/// default (8192)"`. `prov` is the provider whose variable it is (`core` for the
/// framework's). Returns whether the line was written now.
pub fn config_warn(prov: &str, var: &str, value: &str, why: impl fmt::Display) -> bool {
    let key = format!("{var}\0{value}");
    warn_once(&key, prov, "core", format_args!("{var}={} {why}", shown(value)))
}

/// An optional value as a log line shows it: the value's own text, or `unknown`
/// when it is missing (never `Some(..)`/`None`).
///
/// ```
/// use fabric_core::log::or_unknown;
/// let peer: Option<std::net::SocketAddr> = "127.0.0.1:47942".parse().ok();
/// assert_eq!(format!("connection from {}", or_unknown(peer)), "connection from 127.0.0.1:47942");
/// assert_eq!(format!("connection from {}", or_unknown(None::<u32>)), "connection from unknown");
/// ```
pub fn or_unknown<T: fmt::Display>(value: Option<T>) -> OrUnknown<T> {
    OrUnknown(value)
}

/// What [`or_unknown`] returns: displays the value, or `unknown`.
#[derive(Debug, Clone, Copy)]
pub struct OrUnknown<T>(pub Option<T>);

impl<T: fmt::Display> fmt::Display for OrUnknown<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("unknown"),
        }
    }
}

/// A value as the user would type it: bare when that is unambiguous, else quoted
/// with escapes.
fn shown(value: &str) -> String {
    if !value.is_empty() && value.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\'' && c != '\\') {
        value.to_string()
    } else {
        format!("{value:?}")
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warn_once_dedups_by_key() {
        assert!(warn_once("log test key 1", "core", "core", "first"));
        assert!(!warn_once("log test key 1", "core", "core", "again"));
        assert!(warn_once("log test key 2", "core", "core", "another"));
    }

    #[test]
    fn config_warn_dedups_by_variable_and_value() {
        assert!(config_warn("tcp", "FI_TEST_LOG_A", "x", "is bad"));
        assert!(!config_warn("tcp", "FI_TEST_LOG_A", "x", "is bad for another reason"));
        assert!(config_warn("tcp", "FI_TEST_LOG_A", "y", "is bad"));
        assert!(config_warn("tcp", "FI_TEST_LOG_B", "x", "is bad"));
    }

    #[test]
    fn values_are_shown_unambiguously() {
        assert_eq!(shown("nope"), "nope");
        assert_eq!(shown("99999999999"), "99999999999");
        assert_eq!(shown(""), "\"\"");
        assert_eq!(shown("a b"), "\"a b\"");
        assert_eq!(shown("x\ny"), "\"x\\ny\"");
    }

    #[test]
    fn level_settings() {
        assert_eq!(parse_level_setting("info"), Some(Level::Info));
        assert_eq!(parse_level_setting(" WARN "), Some(Level::Warn));
        assert_eq!(parse_level_setting(""), None);
        assert_eq!(parse_level_setting("loud"), None);
    }
}
