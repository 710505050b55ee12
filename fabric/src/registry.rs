//! The provider registry and discovery (`fi_getinfo`).

use fabric_core::fi_log;
use fabric_core::log::Level;
use fabric_core::param::{core_params, Param};
use fabric_core::prov::Provider;
use fabric_core::{Error, Hints, Info, Result};
use std::sync::{Arc, Mutex, OnceLock};

/// Providers registered at run time, in registration order.
fn registered() -> &'static Mutex<Vec<Arc<dyn Provider>>> {
    static REGISTERED: Mutex<Vec<Arc<dyn Provider>>> = Mutex::new(Vec::new());
    &REGISTERED
}

/// The built-in providers the cargo features enable, best first, created once.
fn builtins() -> &'static [Arc<dyn Provider>] {
    static BUILTINS: OnceLock<Vec<Arc<dyn Provider>>> = OnceLock::new();
    BUILTINS.get_or_init(|| {
        vec![
            // Hardware first, as libfabric orders them: where a device exists it
            // is the best; where none does, verbs offers nothing.
            #[cfg(feature = "verbs")]
            fabric_verbs::provider(),
            #[cfg(feature = "tcp")]
            fabric_tcp::provider(),
            #[cfg(feature = "shm")]
            fabric_shm::provider(),
            #[cfg(feature = "udp")]
            fabric_udp::provider(),
        ]
    })
}

/// How to get a provider this build leaves out (an opt-in cargo feature), for
/// the tools to say when asked for it: `None` for a provider built in or unknown.
pub fn not_built_hint(name: &str) -> Option<&'static str> {
    match name {
        #[cfg(not(feature = "verbs"))]
        "verbs" => Some(
            "the verbs provider is not built in: build with `--features verbs` \
             (Debian packages: libibverbs-dev librdmacm-dev libclang-dev clang pkg-config; \
             at run time libibverbs1 librdmacm1 ibverbs-providers)",
        ),
        _ => None,
    }
}

/// Register an out-of-tree provider at run time. It is listed after the built-in
/// ones; a provider registered under a name already listed (built-in or
/// registered) replaces that one, in its place.
pub fn register_provider(p: Arc<dyn Provider>) {
    let mut r = registered().lock().unwrap_or_else(|e| e.into_inner());
    match r.iter_mut().find(|q| q.name() == p.name()) {
        Some(slot) => *slot = p,
        None => r.push(p),
    }
}

/// Every provider, whatever `FI_PROVIDER` says: the built-in ones enabled by
/// cargo features, then the registered ones (for `fi_info -l`).
pub fn all_providers() -> Vec<Arc<dyn Provider>> {
    let mut v: Vec<Arc<dyn Provider>> = builtins().to_vec();
    let r = registered().lock().unwrap_or_else(|e| e.into_inner());
    for p in r.iter() {
        match v.iter_mut().find(|q| q.name() == p.name()) {
            Some(slot) => *slot = Arc::clone(p),
            None => v.push(Arc::clone(p)),
        }
    }
    v
}

/// The providers in use: [`all_providers`] minus those `FI_PROVIDER` excludes.
pub fn providers() -> Vec<Arc<dyn Provider>> {
    let filter = std::env::var("FI_PROVIDER").unwrap_or_default();
    let all = all_providers();
    check_env(&all);
    all.into_iter().filter(|p| provider_allowed(&filter, p.name())).collect()
}

/// Report (once per process, whatever `FI_LOG_LEVEL` says) the core's variables
/// set to values that cannot be used: `FI_PROVIDER` naming a provider that is
/// not among `provs`, `FI_LOG_PROV` naming none of them, `FI_LOG_LEVEL` naming
/// no level.
fn check_env(provs: &[Arc<dyn Provider>]) {
    fabric_core::log::level();
    let names: Vec<&str> = provs.iter().map(|p| p.name()).collect();
    if let Ok(filter) = std::env::var("FI_PROVIDER") {
        if let Some(why) = unknown_providers(&filter, &names) {
            fabric_core::log::config_warn("core", "FI_PROVIDER", &filter, why);
        }
    }
    if let Some(want) = fabric_core::log::log_prov() {
        if want != "core" && !names.iter().any(|n| provider_allowed(want, n)) {
            fabric_core::log::config_warn(
                "core",
                "FI_LOG_PROV",
                want,
                format_args!("names none of the providers ({}); only the core's messages are logged", names.join(", ")),
            );
        }
    }
}

/// What is wrong with an `FI_PROVIDER`-style filter whose names include some that
/// match none of `names` (`None`: every name matches one).
fn unknown_providers(filter: &str, names: &[&str]) -> Option<String> {
    let list = filter.trim();
    let list = list.strip_prefix('^').unwrap_or(list);
    let unknown: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty() && !names.iter().any(|n| provider_allowed(item, n)))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    let mut why = if unknown.len() == 1 && unknown[0] == list.trim() {
        format!("names no provider built in or registered (those are: {})", names.join(", "))
    } else {
        format!(
            "names {}, which {} no provider built in or registered (those are: {})",
            unknown.join(", "),
            if unknown.len() == 1 { "is" } else { "are" },
            names.join(", ")
        )
    };
    for u in &unknown {
        if let Some(hint) = not_built_hint(&u.to_ascii_lowercase()) {
            why.push_str("; ");
            why.push_str(hint);
        }
    }
    Some(why)
}

/// Whether a provider filter in `FI_PROVIDER` syntax allows `name`: an empty filter
/// allows every provider; `a,b` allows only those listed; `^a,b` allows all but
/// those listed. Names compare without regard to case and surrounding spaces, and
/// a listed name also matches a layered provider (`tcp` matches `tcp;ofi_rxm`).
pub fn provider_allowed(filter: &str, name: &str) -> bool {
    let filter = filter.trim();
    let (exclude, list) = match filter.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, filter),
    };
    let mut items = list.split(',').map(str::trim).filter(|s| !s.is_empty()).peekable();
    if items.peek().is_none() {
        return true;
    }
    let listed = items.any(|item| {
        item.eq_ignore_ascii_case(name) || name.split(';').any(|part| part.trim().eq_ignore_ascii_case(item))
    });
    listed != exclude
}

/// Discover what the enabled providers offer for `hints` (`fi_getinfo`).
///
/// Every provider allowed by `FI_PROVIDER` and by `hints.prov_name` (same syntax)
/// is asked; its entries that fail [`Info::check`] are dropped, each refusal
/// logged at info level (`FI_LOG_LEVEL=info`) with the provider and the reason;
/// the rest are narrowed to the hints ([`Info::narrow`]) and returned in provider
/// order, best first. `Err(NoData)` when nothing is left.
pub fn getinfo(hints: &Hints) -> Result<Vec<Info>> {
    let env = std::env::var("FI_PROVIDER").unwrap_or_default();
    let all = all_providers();
    check_env(&all);
    getinfo_from(&all, &env, hints)
}

/// [`getinfo`] over a given provider list and `FI_PROVIDER`-style filter.
pub fn getinfo_from(provs: &[Arc<dyn Provider>], filter: &str, hints: &Hints) -> Result<Vec<Info>> {
    let mut out = Vec::new();
    let mut reasons = 0usize;
    for p in provs {
        let name = p.name();
        if !provider_allowed(filter, name) {
            fi_log!(Level::Info, name, "core", "provider {} excluded by FI_PROVIDER={}", name, filter);
            reasons += 1;
            continue;
        }
        if let Some(want) = &hints.prov_name {
            if !provider_allowed(want, name) {
                fi_log!(Level::Info, name, "core", "provider {} excluded by hints (prov_name {})", name, want);
                reasons += 1;
                continue;
            }
        }
        let infos = match p.getinfo(hints) {
            Ok(v) => v,
            Err(e) => {
                fi_log!(Level::Info, name, "core", "provider {} offers nothing for the hints: {}", name, e);
                reasons += 1;
                continue;
            }
        };
        if infos.is_empty() {
            fi_log!(Level::Info, name, "core", "provider {} returned no entries", name);
            reasons += 1;
        }
        for mut info in infos {
            match info.check(hints) {
                Ok(()) => {
                    info.narrow(hints);
                    out.push(info);
                }
                Err(why) => {
                    fi_log!(
                        Level::Info,
                        name,
                        "core",
                        "provider {} refused entry (domain {}, {}): {}",
                        name,
                        info.domain_attr.name,
                        info.ep_attr.ep_type,
                        why
                    );
                    reasons += 1;
                }
            }
        }
    }
    if out.is_empty() {
        fi_log!(
            Level::Info,
            "core",
            "core",
            "no provider matches the hints ({} providers, {} refusals logged above)",
            provs.len(),
            reasons
        );
        return Err(Error::NoData);
    }
    Ok(out)
}

/// Every declared parameter: the core's, then each provider's (for `fi_info -e`).
pub fn params() -> Vec<Param> {
    let mut v = core_params();
    for p in all_providers() {
        v.extend(p.params());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric_core::prov::FabricOps;
    use fabric_core::{Caps, EpType};

    #[test]
    fn unknown_provider_names_are_found() {
        let names = ["tcp", "shm", "udp"];
        assert_eq!(unknown_providers("", &names), None);
        assert_eq!(unknown_providers("tcp, UDP", &names), None);
        assert_eq!(unknown_providers("^shm", &names), None);
        let why = unknown_providers("nope", &names).unwrap();
        assert!(why.starts_with("names no provider built in"), "{why}");
        let why = unknown_providers("tcp,nope", &names).unwrap();
        assert!(why.starts_with("names nope, which is no provider"), "{why}");
        assert!(why.contains("tcp, shm, udp"), "{why}");
        let why = unknown_providers("^nope,zip", &names).unwrap();
        assert!(why.starts_with("names nope, zip, which are"), "{why}");
    }

    #[test]
    fn filter_syntax() {
        assert!(provider_allowed("", "tcp"));
        assert!(provider_allowed("  ", "tcp"));
        assert!(provider_allowed("^", "tcp"));
        assert!(provider_allowed("tcp", "tcp"));
        assert!(provider_allowed("TCP", "tcp"));
        assert!(!provider_allowed("udp", "tcp"));
        assert!(provider_allowed("udp, tcp", "tcp"));
        assert!(provider_allowed("udp,,shm", "shm"));
        assert!(!provider_allowed("^tcp", "tcp"));
        assert!(provider_allowed("^tcp", "udp"));
        assert!(!provider_allowed("^udp,tcp", "tcp"));
        assert!(!provider_allowed("^udp,tcp", "udp"));
        assert!(provider_allowed("^udp,tcp", "shm"));
        assert!(provider_allowed("tcp", "tcp;ofi_rxm"));
        assert!(provider_allowed("tcp;ofi_rxm", "tcp;ofi_rxm"));
        assert!(!provider_allowed("tc", "tcp"));
    }

    struct Fake {
        name: &'static str,
        ep_type: EpType,
    }

    impl Provider for Fake {
        fn name(&self) -> &'static str {
            self.name
        }
        fn version(&self) -> u32 {
            1
        }
        fn params(&self) -> Vec<Param> {
            vec![Param {
                prov: self.name,
                name: "knob",
                kind: fabric_core::ParamType::Int,
                help: "a knob",
                default: "1",
            }]
        }
        fn getinfo(&self, _hints: &Hints) -> Result<Vec<Info>> {
            let mut i = Info { caps: Caps::MSG | Caps::SEND | Caps::RECV, ..Default::default() };
            i.ep_attr.ep_type = self.ep_type;
            i.fabric_attr.prov_name = self.name.into();
            Ok(vec![i])
        }
        fn fabric(&self, _info: &Info) -> Result<Arc<dyn FabricOps>> {
            Err(Error::NoSys)
        }
    }

    fn fakes() -> Vec<Arc<dyn Provider>> {
        vec![
            Arc::new(Fake { name: "alpha", ep_type: EpType::Rdm }),
            Arc::new(Fake { name: "beta", ep_type: EpType::Msg }),
            Arc::new(Fake { name: "gamma", ep_type: EpType::Rdm }),
        ]
    }

    fn names(v: &[Info]) -> Vec<&str> {
        v.iter().map(|i| i.fabric_attr.prov_name.as_str()).collect()
    }

    #[test]
    fn getinfo_filters_in_provider_order() {
        let p = fakes();
        assert_eq!(names(&getinfo_from(&p, "", &Hints::new()).unwrap()), ["alpha", "beta", "gamma"]);
        assert_eq!(names(&getinfo_from(&p, "^beta", &Hints::new()).unwrap()), ["alpha", "gamma"]);
        assert_eq!(names(&getinfo_from(&p, "gamma,beta", &Hints::new()).unwrap()), ["beta", "gamma"]);
        let h = Hints::new().ep_type(EpType::Rdm);
        assert_eq!(names(&getinfo_from(&p, "", &h).unwrap()), ["alpha", "gamma"]);
        let h = Hints::new().provider("^alpha");
        assert_eq!(names(&getinfo_from(&p, "^gamma", &h).unwrap()), ["beta"]);
        let h = Hints::new().provider("alpha").ep_type(EpType::Rdm);
        assert_eq!(names(&getinfo_from(&p, "", &h).unwrap()), ["alpha"]);
    }

    #[test]
    fn getinfo_nodata_when_nothing_fits() {
        let p = fakes();
        assert_eq!(getinfo_from(&p, "nosuch", &Hints::new()).unwrap_err(), Error::NoData);
        let h = Hints::new().provider("beta").ep_type(EpType::Rdm);
        assert_eq!(getinfo_from(&p, "", &h).unwrap_err(), Error::NoData);
        let h = Hints::new().caps(Caps::TAGGED);
        assert_eq!(getinfo_from(&p, "", &h).unwrap_err(), Error::NoData);
        assert_eq!(getinfo_from(&[], "", &Hints::new()).unwrap_err(), Error::NoData);
    }

    #[test]
    fn getinfo_narrows() {
        let p = fakes();
        let v = getinfo_from(&p, "alpha", &Hints::new().caps(Caps::MSG | Caps::SEND)).unwrap();
        assert_eq!(v[0].caps, Caps::MSG | Caps::SEND);
    }

    #[test]
    fn registration_replaces_by_name() {
        register_provider(Arc::new(Fake { name: "unit-reg", ep_type: EpType::Rdm }));
        register_provider(Arc::new(Fake { name: "unit-reg", ep_type: EpType::Msg }));
        let all = all_providers();
        let mine: Vec<_> = all.iter().filter(|p| p.name() == "unit-reg").collect();
        assert_eq!(mine.len(), 1);
        let i = mine[0].getinfo(&Hints::new()).unwrap();
        assert_eq!(i[0].ep_attr.ep_type, EpType::Msg);
        assert!(params().iter().any(|p| p.prov == "unit-reg" && p.name == "knob"));
        assert_eq!(params()[0].env_name(), "FI_PROVIDER");
    }
}
