//! Configuration parameters, read from the environment under libfabric's names:
//! `FI_<PROV>_<NAME>` for a provider's (`FI_TCP_IFACE`), `FI_<NAME>` for the core's.
//! Every parameter is declared once, with its type and help, so `fi_info -e` can
//! list them all.

use crate::fi_log;
use crate::log::Level;

/// The type of a parameter's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// Text.
    Str,
    /// A signed integer.
    Int,
    /// A size (accepts `k`, `m`, `g` suffixes).
    Size,
    /// A boolean: 1/0, on/off, true/false, yes/no.
    Bool,
}

impl ParamType {
    /// How `fi_info -e` names the type.
    pub fn name(self) -> &'static str {
        match self {
            ParamType::Str => "String",
            ParamType::Int => "Integer",
            ParamType::Size => "size_t",
            ParamType::Bool => "Boolean (0/1, on/off, true/false, yes/no)",
        }
    }
}

/// One declared parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// The provider (`tcp`), or `core` for framework-wide ones.
    pub prov: &'static str,
    /// The name below the provider (`iface`).
    pub name: &'static str,
    /// The value's type.
    pub kind: ParamType,
    /// What it does.
    pub help: &'static str,
    /// The default, as text (empty: none).
    pub default: &'static str,
}

impl Param {
    /// The environment variable: `FI_TCP_IFACE`, or `FI_PROVIDER` for the core.
    pub fn env_name(&self) -> String {
        if self.prov == "core" {
            format!("FI_{}", self.name.to_ascii_uppercase())
        } else {
            format!("FI_{}_{}", self.prov.to_ascii_uppercase(), self.name.to_ascii_uppercase())
        }
    }

    /// The raw value set in the environment, if any.
    pub fn raw(&self) -> Option<String> {
        std::env::var(self.env_name()).ok()
    }

    /// The value as text: the environment's, or the default.
    pub fn get_str(&self) -> Option<String> {
        self.raw().or_else(|| (!self.default.is_empty()).then(|| self.default.to_string()))
    }

    /// The value as a size; an unparsable setting is logged and the default used.
    pub fn get_usize(&self) -> Option<usize> {
        if let Some(v) = self.raw() {
            match parse_size(&v) {
                Some(n) => return Some(n),
                None => fi_log!(
                    Level::Warn,
                    self.prov,
                    "core",
                    "{}={} is not a size; using the default",
                    self.env_name(),
                    v
                ),
            }
        }
        parse_size(self.default)
    }

    /// The value as a boolean; an unparsable setting is logged and the default used.
    pub fn get_bool(&self) -> bool {
        if let Some(v) = self.raw() {
            match parse_bool(&v) {
                Some(b) => return b,
                None => fi_log!(
                    Level::Warn,
                    self.prov,
                    "core",
                    "{}={} is not a boolean; using the default",
                    self.env_name(),
                    v
                ),
            }
        }
        parse_bool(self.default).unwrap_or(false)
    }
}

/// Parse a size: decimal or `0x` hex, with an optional `k`, `m` or `g` suffix.
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let (num, mult) = match lower.chars().last()? {
        'k' => (&lower[..lower.len() - 1], 1usize << 10),
        'm' => (&lower[..lower.len() - 1], 1 << 20),
        'g' => (&lower[..lower.len() - 1], 1 << 30),
        _ => (&lower[..], 1),
    };
    let n = if let Some(h) = num.strip_prefix("0x") { usize::from_str_radix(h, 16).ok()? } else { num.parse().ok()? };
    n.checked_mul(mult)
}

/// Parse a boolean as libfabric does.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" | "y" => Some(true),
        "0" | "off" | "false" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// The framework's own parameters.
pub fn core_params() -> Vec<Param> {
    vec![
        Param {
            prov: "core",
            name: "provider",
            kind: ParamType::Str,
            help: "Only use specified provider (default: all available); a comma list, ^ to exclude",
            default: "",
        },
        Param {
            prov: "core",
            name: "log_level",
            kind: ParamType::Str,
            help: "Specify logging level: warn, info, debug, trace (default: none)",
            default: "",
        },
        Param {
            prov: "core",
            name: "log_prov",
            kind: ParamType::Str,
            help: "Specify specific provider to log (default: all)",
            default: "",
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_bools_parse() {
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("0x10"), Some(16));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999g"), None);
        assert_eq!(parse_bool("Yes"), Some(true));
        assert_eq!(parse_bool("off"), Some(false));
        assert_eq!(parse_bool("maybe"), None);
    }

    #[test]
    fn env_names() {
        let p = Param { prov: "tcp", name: "iface", kind: ParamType::Str, help: "", default: "" };
        assert_eq!(p.env_name(), "FI_TCP_IFACE");
        assert_eq!(core_params()[0].env_name(), "FI_PROVIDER");
    }
}
