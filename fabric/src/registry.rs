//! The provider registry and discovery (`fi_getinfo`).

use fabric_core::fi_log;
use fabric_core::log::Level;
use fabric_core::param::{core_params, Param};
use fabric_core::prov::Provider;
use fabric_core::{EpType, Error, Hints, Info, Protocol, Result};
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
            // is the best; where none does, verbs offers nothing. (The entries
            // are then put in libfabric's order: see `discovery_rank`.)
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

/// The providers in use: [`all_providers`] minus those `FI_PROVIDER` excludes
/// (a provider stays when the filter allows any of its entries, so
/// `FI_PROVIDER=ofi_rxm` keeps tcp for its RDM entries).
pub fn providers() -> Vec<Arc<dyn Provider>> {
    let filter = std::env::var("FI_PROVIDER").unwrap_or_default();
    let all = all_providers();
    check_env(&all);
    all.into_iter().filter(|p| provider_may_match(&filter, p.name())).collect()
}

/// The utility provider libfabric 1.x layers over a core provider for its RDM
/// endpoints: `ofi_rxm` over connected endpoints (`FI_PROTO_RXM`), `ofi_rxd`
/// over datagram ones (`FI_PROTO_RXD`); `None` for the others.
pub fn layer_of(protocol: Protocol) -> Option<&'static str> {
    match protocol {
        Protocol::Rxm => Some("ofi_rxm"),
        Protocol::Rxd => Some("ofi_rxd"),
        _ => None,
    }
}

/// The name libfabric 1.x gives an entry: its provider's, followed by the
/// utility provider for RDM entries built over connected or datagram endpoints
/// (`tcp;ofi_rxm`, `udp;ofi_rxd`, `verbs;ofi_rxm`); the provider's alone
/// otherwise. fabric's own [`Info`] keeps the provider's name in
/// `fabric_attr.prov_name` (what [`crate::Fabric::open`] looks up); the C ABI
/// reports this one, as libfabric does, and `FI_PROVIDER` and
/// `Hints::prov_name` select entries by it.
pub fn layered_name(info: &Info) -> String {
    let prov = &info.fabric_attr.prov_name;
    match layer_of(info.ep_attr.protocol) {
        Some(layer) if info.ep_attr.ep_type == EpType::Rdm => format!("{prov};{layer}"),
        _ => prov.clone(),
    }
}

/// The provider part of a name [`layered_name`] gives (`tcp` of `tcp;ofi_rxm`).
pub fn core_name(name: &str) -> &str {
    name.split(';').next().unwrap_or(name).trim()
}

/// The layered names a provider's entries may carry (for checking filters
/// without asking it): tcp and verbs layer `ofi_rxm`, udp `ofi_rxd`.
fn layered_names(prov: &str) -> Vec<String> {
    let layer = match prov {
        "tcp" | "verbs" => "ofi_rxm",
        "udp" => "ofi_rxd",
        _ => return Vec::new(),
    };
    vec![format!("{prov};{layer}")]
}

/// Whether a filter may allow some entry of provider `prov`: the provider's own
/// name or one of its layered names ([`layered_names`]).
fn provider_may_match(filter: &str, prov: &str) -> bool {
    provider_allowed(filter, prov) || layered_names(prov).iter().any(|n| provider_allowed(filter, n))
}

/// Report (once per process, whatever `FI_LOG_LEVEL` says) the core's variables
/// set to values that cannot be used: `FI_PROVIDER` naming a provider that is
/// not among `provs`, `FI_LOG_PROV` naming none of them, `FI_LOG_LEVEL` naming
/// no level.
fn check_env(provs: &[Arc<dyn Provider>]) {
    fabric_core::log::level();
    let layered: Vec<String> = provs.iter().flat_map(|p| layered_names(p.name())).collect();
    let names: Vec<&str> = provs.iter().map(|p| p.name()).chain(layered.iter().map(String::as_str)).collect();
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

/// The order libfabric (1.17 to 2.x) asks its providers in, which is the order of
/// the entries `fi_getinfo` returns: hardware first, then the utility providers
/// (`ofi_rxm`, `ofi_rxd`: the RDM entries layered over a core provider), then shm,
/// then the socket providers last. A provider not listed comes after them all.
const LIBFABRIC_ORDER: &[&str] = &[
    "efa", "psm2", "opx", "usnic", "verbs", "cxi", "psm3", "ucx", "ofi_rxm", "ofi_rxd", "shm", "udp", "tcp", "sockets",
    "net",
];

/// Where an entry falls in libfabric's order: the place of the provider that
/// would return it in libfabric ([`LIBFABRIC_ORDER`]: `ofi_rxm` for
/// `tcp;ofi_rxm`, the core provider for the others), then the place of its core
/// provider (`ofi_rxm` asks verbs before tcp). Entries of equal rank keep the
/// order their providers return them in.
pub fn discovery_rank(info: &Info) -> (usize, usize) {
    let place =
        |name: &str| LIBFABRIC_ORDER.iter().position(|n| n.eq_ignore_ascii_case(name)).unwrap_or(LIBFABRIC_ORDER.len());
    let core = place(&info.fabric_attr.prov_name);
    match layer_of(info.ep_attr.protocol) {
        Some(layer) if info.ep_attr.ep_type == EpType::Rdm => (place(layer), core),
        _ => (core, core),
    }
}

/// Discover what the enabled providers offer for `hints` (`fi_getinfo`).
///
/// Every provider allowed by `FI_PROVIDER` and by `hints.prov_name` (same syntax)
/// is asked; its entries whose [`layered_name`] the filters refuse are dropped
/// (`tcp;ofi_rxm` and `ofi_rxm` keep tcp's RDM entries only), those that fail [`Info::check`] are dropped, each refusal
/// logged at info level (`FI_LOG_LEVEL=info`) with the provider and the reason;
/// the rest are narrowed to the hints ([`Info::narrow`]) and returned in
/// libfabric's order ([`discovery_rank`]): `verbs`'s own entries, the RDM entries
/// libfabric's `ofi_rxm` and `ofi_rxd` would give (`verbs;ofi_rxm`,
/// `tcp;ofi_rxm`, `udp;ofi_rxd`), `shm`, `udp`'s DGRAM, `tcp`'s MSG, then
/// providers libfabric does not know, in registration order. So with no endpoint
/// type in the hints and no RDMA device, the first entry is RDM (`tcp;ofi_rxm`),
/// as libfabric's. `Err(NoData)` when nothing is left.
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
        if !provider_may_match(filter, name) {
            fi_log!(Level::Info, name, "core", "provider {} excluded by FI_PROVIDER={}", name, filter);
            reasons += 1;
            continue;
        }
        if let Some(want) = &hints.prov_name {
            if !provider_may_match(want, name) {
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
            let entry = layered_name(&info);
            let wanted = hints.prov_name.as_deref().map_or(true, |w| provider_allowed(w, &entry));
            if !provider_allowed(filter, &entry) || !wanted {
                fi_log!(
                    Level::Info,
                    name,
                    "core",
                    "entry {} ({}) excluded by the provider filter",
                    entry,
                    info.domain_attr.name
                );
                reasons += 1;
                continue;
            }
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
    // Stable: entries of one rank keep their provider's order (its domains).
    out.sort_by_key(discovery_rank);
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
    use fabric_core::Caps;

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

    /// A provider offering what tcp or udp does: a connected or datagram entry
    /// and an RDM one layered over it.
    struct Layered {
        name: &'static str,
        base: EpType,
        rdm: Protocol,
    }

    impl Provider for Layered {
        fn name(&self) -> &'static str {
            self.name
        }
        fn version(&self) -> u32 {
            1
        }
        fn params(&self) -> Vec<Param> {
            Vec::new()
        }
        fn getinfo(&self, _hints: &Hints) -> Result<Vec<Info>> {
            let mut base = Info::default();
            base.ep_attr.ep_type = self.base;
            base.fabric_attr.prov_name = self.name.into();
            let mut rdm = base.clone();
            rdm.ep_attr.ep_type = EpType::Rdm;
            rdm.ep_attr.protocol = self.rdm;
            Ok(vec![base, rdm])
        }
        fn fabric(&self, _info: &Info) -> Result<Arc<dyn FabricOps>> {
            Err(Error::NoSys)
        }
    }

    fn layered() -> Vec<Arc<dyn Provider>> {
        vec![
            Arc::new(Layered { name: "tcp", base: EpType::Msg, rdm: Protocol::Rxm }),
            Arc::new(Layered { name: "udp", base: EpType::Dgram, rdm: Protocol::Rxd }),
            Arc::new(Fake { name: "shm", ep_type: EpType::Rdm }),
        ]
    }

    fn entries(filter: &str, hints: &Hints) -> Vec<(String, EpType)> {
        match getinfo_from(&layered(), filter, hints) {
            Ok(v) => v.iter().map(|i| (layered_name(i), i.ep_attr.ep_type)).collect(),
            Err(_) => Vec::new(),
        }
    }

    #[test]
    fn libfabric_layered_names_select_rdm_entries() {
        let all = entries("", &Hints::new());
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["tcp;ofi_rxm", "udp;ofi_rxd", "shm", "udp", "tcp"]);
        let rxm = vec![("tcp;ofi_rxm".to_string(), EpType::Rdm)];
        let rxd = vec![("udp;ofi_rxd".to_string(), EpType::Rdm)];
        // In FI_PROVIDER and in hints alike, case and spaces aside.
        assert_eq!(entries("tcp;ofi_rxm", &Hints::new()), rxm);
        assert_eq!(entries("", &Hints::new().provider("TCP;OFI_RXM")), rxm);
        assert_eq!(entries("ofi_rxm", &Hints::new()), rxm);
        assert_eq!(entries("", &Hints::new().provider("ofi_rxm")), rxm);
        assert_eq!(entries("udp;ofi_rxd", &Hints::new()), rxd);
        assert_eq!(entries("", &Hints::new().provider(" ofi_rxd ")), rxd);
        // The core provider's name keeps every entry of it, layered or not.
        assert_eq!(entries("tcp", &Hints::new()).len(), 2);
        // Exclusions: of the layer, or of the whole provider.
        let n: Vec<String> = entries("^ofi_rxm,ofi_rxd", &Hints::new()).into_iter().map(|e| e.0).collect();
        assert_eq!(n, ["shm", "udp", "tcp"]);
        let n: Vec<String> = entries("^tcp", &Hints::new()).into_iter().map(|e| e.0).collect();
        assert_eq!(n, ["udp;ofi_rxd", "shm", "udp"]);
        // Both filters apply.
        assert!(entries("udp", &Hints::new().provider("tcp;ofi_rxm")).is_empty());
        assert_eq!(getinfo_from(&layered(), "verbs;ofi_rxm", &Hints::new()).unwrap_err(), Error::NoData);
        assert_eq!(core_name("tcp;ofi_rxm"), "tcp");
        assert_eq!(core_name("shm"), "shm");
    }

    #[test]
    fn entries_in_libfabric_order() {
        // Providers handed over in any order: the entries come in libfabric's,
        // the first of them RDM when no endpoint type is asked.
        let mut p = layered();
        p.reverse();
        p.push(Arc::new(Fake { name: "zeta", ep_type: EpType::Rdm }));
        p.push(Arc::new(Layered { name: "verbs", base: EpType::Msg, rdm: Protocol::Rxm }));
        let v = getinfo_from(&p, "", &Hints::new()).unwrap();
        let got: Vec<(String, EpType)> = v.iter().map(|i| (layered_name(i), i.ep_attr.ep_type)).collect();
        let want = [
            ("verbs", EpType::Msg),
            ("verbs;ofi_rxm", EpType::Rdm),
            ("tcp;ofi_rxm", EpType::Rdm),
            ("udp;ofi_rxd", EpType::Rdm),
            ("shm", EpType::Rdm),
            ("udp", EpType::Dgram),
            ("tcp", EpType::Msg),
            ("zeta", EpType::Rdm),
        ];
        assert_eq!(got, want.map(|(n, t)| (n.to_string(), t)));
        // Without verbs (no RDMA device), the first entry is RDM, as libfabric's.
        assert_eq!(entries("", &Hints::new())[0], ("tcp;ofi_rxm".to_string(), EpType::Rdm));
        // Entries of one rank keep the order their provider gave them in.
        assert_eq!(names(&getinfo_from(&fakes(), "", &Hints::new()).unwrap()), ["alpha", "beta", "gamma"]);
    }

    #[test]
    fn layered_names_are_known_to_the_filter_check() {
        let names = ["tcp", "udp", "tcp;ofi_rxm", "udp;ofi_rxd"];
        assert_eq!(unknown_providers("tcp;ofi_rxm", &names), None);
        assert_eq!(unknown_providers("ofi_rxd", &names), None);
        assert!(provider_may_match("ofi_rxm", "tcp"));
        assert!(!provider_may_match("ofi_rxm", "shm"));
        assert!(provider_may_match("^ofi_rxm", "tcp"));
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
