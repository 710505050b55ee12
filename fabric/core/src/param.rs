//! Configuration parameters, read from the environment under libfabric's names:
//! `FI_<PROV>_<NAME>` for a provider's (`FI_TCP_IFACE`), `FI_<NAME>` for the core's.
//! Every parameter is declared once, with its type and help, so `fi_info -e` can
//! list them all.

use std::ops::RangeInclusive;

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

    /// The help `fi_info -e` prints and `fi_getparams` gives: a provider's
    /// prefixed with its name, the default appended where the help does not
    /// mention one.
    pub fn help_text(&self) -> String {
        let mut help =
            if self.prov == "core" { self.help.to_string() } else { format!("{}: {}", self.prov, self.help) };
        if !self.default.is_empty() && !help.to_ascii_lowercase().contains("default") {
            help.push_str(&format!(" (default: {})", self.default));
        }
        help
    }

    /// The raw value set in the environment, if any.
    pub fn raw(&self) -> Option<String> {
        std::env::var(self.env_name()).ok()
    }

    /// The value as text: the environment's, or the default.
    pub fn get_str(&self) -> Option<String> {
        self.raw().or_else(|| (!self.default.is_empty()).then(|| self.default.to_string()))
    }

    /// The value set in the environment, unless empty or blank (which count as
    /// unset, so `FI_TCP_IFACE= prog` clears a setting).
    pub fn setting(&self) -> Option<String> {
        self.raw().filter(|v| !v.trim().is_empty())
    }

    /// Report that the user's `value` of this parameter cannot be used as given,
    /// once per process, whatever `FI_LOG_LEVEL` says ([`crate::log::config_warn`]):
    /// `why` follows `VAR=value` and says what is wrong and what is done instead
    /// (`"names no interface that is up (lo, eth0); tcp offers nothing"`).
    pub fn complain(&self, value: &str, why: impl std::fmt::Display) {
        crate::log::config_warn(self.prov, &self.env_name(), value, why);
    }

    /// The value as a size within `range` (the provider's limits, stated once
    /// here): the environment's, else the default (`None` if there is none). A
    /// setting that is not a size is reported ([`Param::complain`]) and the
    /// default used; one outside `range` is reported with the range and the
    /// nearest bound used (a size too large is capped).
    pub fn get_size(&self, range: RangeInclusive<usize>) -> Option<usize> {
        let raw = self.setting();
        self.report(raw.as_deref(), self.check_size(raw.as_deref(), range))
    }

    /// The value as a size without limits ([`Param::get_size`] over every size).
    pub fn get_usize(&self) -> Option<usize> {
        self.get_size(0..=usize::MAX)
    }

    /// The value as an integer within `range` (the provider's limits, stated
    /// once here): the environment's, else the default (`None` if there is
    /// none). A setting that is not an integer, or is outside `range`, is
    /// reported ([`Param::complain`], with the range) and the default used: an
    /// integer out of range (a port, an index) has no nearest meaning.
    pub fn get_int(&self, range: RangeInclusive<i64>) -> Option<i64> {
        let raw = self.setting();
        self.report(raw.as_deref(), self.check_int(raw.as_deref(), range))
    }

    /// The value as a boolean; a setting that is not a boolean is reported
    /// ([`Param::complain`]) and the default used.
    pub fn get_bool(&self) -> bool {
        let raw = self.setting();
        self.report(raw.as_deref(), self.check_bool(raw.as_deref()))
    }

    /// A [`Checked`] value, its complaint reported.
    fn report<T>(&self, raw: Option<&str>, c: Checked<T>) -> T {
        if let (Some(v), Some(why)) = (raw, &c.complaint) {
            self.complain(v, why);
        }
        c.value
    }

    /// What is done instead of a refused setting, for a complaint: "using the
    /// default (X)", or "ignored" when there is no default.
    fn instead(&self) -> String {
        if self.default.is_empty() {
            "ignored".to_string()
        } else {
            format!("using the default ({})", self.default)
        }
    }

    /// [`Param::get_size`] of a given setting (`None`: unset), without reporting.
    pub fn check_size(&self, raw: Option<&str>, range: RangeInclusive<usize>) -> Checked<Option<usize>> {
        let default = parse_size(self.default).map(|d| d.clamp(*range.start(), *range.end()));
        let Some(v) = raw.filter(|v| !v.trim().is_empty()) else { return Checked::ok(default) };
        match parse_size(v) {
            Some(n) if range.contains(&n) => Checked::ok(Some(n)),
            Some(n) => {
                let used = n.clamp(*range.start(), *range.end());
                Checked::refused(Some(used), format!("is out of range ({}); using {used}", show_range(&range)))
            }
            None if is_number(v, true) => {
                // Negative, or too large for a size.
                let used = if v.trim().starts_with('-') { *range.start() } else { *range.end() };
                Checked::refused(Some(used), format!("is out of range ({}); using {used}", show_range(&range)))
            }
            None => Checked::refused(
                default,
                format!(
                    "is not a size (a number, decimal or 0x hex, with an optional k, m or g suffix); {}",
                    self.instead()
                ),
            ),
        }
    }

    /// [`Param::get_int`] of a given setting (`None`: unset), without reporting.
    pub fn check_int(&self, raw: Option<&str>, range: RangeInclusive<i64>) -> Checked<Option<i64>> {
        let default = parse_int(self.default).filter(|d| range.contains(d));
        let Some(v) = raw.filter(|v| !v.trim().is_empty()) else { return Checked::ok(default) };
        match parse_int(v) {
            Some(n) if range.contains(&n) => Checked::ok(Some(n)),
            Some(_) => {
                Checked::refused(default, format!("is out of range ({}); {}", show_range(&range), self.instead()))
            }
            None if is_number(v, false) => {
                Checked::refused(default, format!("is out of range ({}); {}", show_range(&range), self.instead()))
            }
            None => Checked::refused(default, format!("is not an integer; {}", self.instead())),
        }
    }

    /// [`Param::get_bool`] of a given setting (`None`: unset), without reporting.
    pub fn check_bool(&self, raw: Option<&str>) -> Checked<bool> {
        let default = parse_bool(self.default).unwrap_or(false);
        let Some(v) = raw.filter(|v| !v.trim().is_empty()) else { return Checked::ok(default) };
        match parse_bool(v) {
            Some(b) => Checked::ok(b),
            None => Checked::refused(
                default,
                format!("is not a boolean (1/0, on/off, true/false, yes/no); {}", self.instead()),
            ),
        }
    }
}

/// A setting checked against its parameter's type and range
/// ([`Param::check_size`], [`Param::check_int`], [`Param::check_bool`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked<T> {
    /// The value to use: the setting's, the default, or the nearest bound.
    pub value: T,
    /// Why the setting was not used as given (`None`: it was, or none was made),
    /// to follow `VAR=value` in the report.
    pub complaint: Option<String>,
}

impl<T> Checked<T> {
    fn ok(value: T) -> Self {
        Checked { value, complaint: None }
    }

    fn refused(value: T, why: String) -> Self {
        Checked { value, complaint: Some(why) }
    }
}

/// `lo to hi`, the bounds as a user reads them.
fn show_range<T: std::fmt::Display>(r: &RangeInclusive<T>) -> String {
    format!("{} to {}", r.start(), r.end())
}

/// Whether `s` is written as a number (decimal, optionally signed, or 0x hex;
/// with a `k`, `m` or `g` suffix if `sized`) that did not parse: one too large
/// or too small for its type.
fn is_number(s: &str, sized: bool) -> bool {
    let s = s.trim();
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let s = s.to_ascii_lowercase();
    let s = if sized { s.strip_suffix(['k', 'm', 'g']).unwrap_or(&s) } else { &s };
    match s.strip_prefix("0x") {
        Some(h) => !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// Parse an integer: decimal (optionally signed) or `0x` hex.
pub fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return i64::from_str_radix(h, 16).ok();
    }
    s.parse().ok()
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

    fn param(kind: ParamType, default: &'static str) -> Param {
        Param { prov: "test", name: "knob", kind, help: "", default }
    }

    #[test]
    fn sizes_in_range() {
        let p = param(ParamType::Size, "8192");
        let r = 0..=(1 << 20);
        assert_eq!(p.check_size(None, r.clone()), Checked::ok(Some(8192)));
        assert_eq!(p.check_size(Some("  "), r.clone()), Checked::ok(Some(8192)));
        assert_eq!(p.check_size(Some("64k"), r.clone()), Checked::ok(Some(65536)));
        assert_eq!(p.check_size(Some("1m"), r.clone()), Checked::ok(Some(1 << 20)));
        let c = p.check_size(Some("99999999999"), r.clone());
        assert_eq!(c.value, Some(1 << 20));
        assert_eq!(c.complaint.as_deref(), Some("is out of range (0 to 1048576); using 1048576"));
        // Too large for any size: capped too.
        let c = p.check_size(Some("99999999999999999999999"), r.clone());
        assert_eq!(c.value, Some(1 << 20));
        assert!(c.complaint.unwrap().contains("out of range"));
        let c = p.check_size(Some("-5"), 16..=64);
        assert_eq!(c.value, Some(16));
        assert_eq!(c.complaint.as_deref(), Some("is out of range (16 to 64); using 16"));
        let c = p.check_size(Some("abc"), r.clone());
        assert_eq!(c.value, Some(8192));
        assert!(c.complaint.unwrap().starts_with("is not a size"), "complaint names the type");
        assert!(p.check_size(Some("abc"), r.clone()).complaint.unwrap().ends_with("using the default (8192)"));
        // No default: unset stays unset, a bad setting is ignored.
        let p = param(ParamType::Size, "");
        assert_eq!(p.check_size(None, r.clone()), Checked::ok(None));
        let c = p.check_size(Some("x"), r);
        assert_eq!(c.value, None);
        assert!(c.complaint.unwrap().ends_with("; ignored"));
    }

    #[test]
    fn ints_in_range() {
        let p = param(ParamType::Int, "");
        let ports = 1..=65535;
        assert_eq!(p.check_int(None, ports.clone()), Checked::ok(None));
        assert_eq!(p.check_int(Some(" 5000 "), ports.clone()), Checked::ok(Some(5000)));
        assert_eq!(p.check_int(Some("0x10"), ports.clone()), Checked::ok(Some(16)));
        let c = p.check_int(Some("70000"), ports.clone());
        assert_eq!(c, Checked::refused(None, "is out of range (1 to 65535); ignored".into()));
        let c = p.check_int(Some("0"), ports.clone());
        assert_eq!(c.value, None);
        assert!(c.complaint.is_some());
        let c = p.check_int(Some("99999999999999999999999"), ports.clone());
        assert_eq!(c.value, None);
        assert!(c.complaint.unwrap().contains("out of range (1 to 65535)"));
        let c = p.check_int(Some("many"), ports.clone());
        assert_eq!(c, Checked::refused(None, "is not an integer; ignored".into()));
        let c = p.check_int(Some("5k"), ports);
        assert_eq!(c, Checked::refused(None, "is not an integer; ignored".into()), "no suffixes on integers");
        let p = param(ParamType::Int, "-1");
        let c = p.check_int(Some("300"), -1..=255);
        assert_eq!(c, Checked::refused(Some(-1), "is out of range (-1 to 255); using the default (-1)".into()));
        assert_eq!(p.check_int(Some("-1"), -1..=255), Checked::ok(Some(-1)));
    }

    #[test]
    fn bools() {
        let p = param(ParamType::Bool, "1");
        assert_eq!(p.check_bool(None), Checked::ok(true));
        assert_eq!(p.check_bool(Some("off")), Checked::ok(false));
        let c = p.check_bool(Some("maybe"));
        assert!(c.value);
        assert_eq!(
            c.complaint.as_deref(),
            Some("is not a boolean (1/0, on/off, true/false, yes/no); using the default (1)")
        );
        assert_eq!(param(ParamType::Bool, "").check_bool(None), Checked::ok(false));
    }

    #[test]
    fn numbers_that_do_not_fit() {
        assert!(is_number("99999999999999999999", false));
        assert!(is_number("-3", false));
        assert!(is_number("0xffffffffffffffffffff", false));
        assert!(is_number("100000000000000000000g", true));
        assert!(!is_number("100000000000000000000g", false));
        assert!(!is_number("abc", true));
        assert!(!is_number("", true));
        assert!(!is_number("0x", true));
        assert!(!is_number("12ab", true));
    }

    #[test]
    fn env_names() {
        let p = Param { prov: "tcp", name: "iface", kind: ParamType::Str, help: "", default: "" };
        assert_eq!(p.env_name(), "FI_TCP_IFACE");
        assert_eq!(core_params()[0].env_name(), "FI_PROVIDER");
    }
}
