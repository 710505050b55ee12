//! `libfabric.so.1`'s identity: its file name and SONAME, every name libfabric
//! 1.17 exports at the same symbol versions with the same default version (read
//! from the system's `libfabric.so.1` when it is installed, and from the table of
//! `../shared/CABI.md` in any case), and a program linked against libfabric (Debian's
//! own `fi_strerror`) binding to ours without a word from the dynamic linker.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory cargo put this profile's artifacts in (`target/<profile>`): the
/// test binary runs from its `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// Our library, which `cargo test -p fabric-capi` builds with the crate.
fn ours() -> PathBuf {
    let p = profile_dir().join("libfabric.so.1");
    assert!(p.is_file(), "{} was not built (fabric/capi/link/ld.bfd leaves it there)", p.display());
    p
}

/// libfabric 1.17's exports: (name, version, default?).
const EXPORTS: &[(&str, &str, bool)] = &[
    ("fi_version", "FABRIC_1.0", true),
    ("fi_strerror", "FABRIC_1.0", true),
    ("fi_tostr", "FABRIC_1.0", true),
    ("fi_log", "FABRIC_1.0", true),
    ("fi_log_enabled", "FABRIC_1.0", true),
    ("fi_param_define", "FABRIC_1.0", true),
    ("fi_param_get", "FABRIC_1.0", true),
    ("fi_getparams", "FABRIC_1.0", true),
    ("fi_freeparams", "FABRIC_1.0", true),
    ("fi_getinfo", "FABRIC_1.0", false),
    ("fi_freeinfo", "FABRIC_1.0", false),
    ("fi_dupinfo", "FABRIC_1.0", false),
    ("fi_fabric", "FABRIC_1.0", false),
    ("fi_fabric", "FABRIC_1.1", true),
    ("fi_getinfo", "FABRIC_1.1", false),
    ("fi_freeinfo", "FABRIC_1.1", false),
    ("fi_dupinfo", "FABRIC_1.1", false),
    ("fi_getinfo", "FABRIC_1.2", false),
    ("fi_freeinfo", "FABRIC_1.2", false),
    ("fi_dupinfo", "FABRIC_1.2", false),
    ("fi_getinfo", "FABRIC_1.3", true),
    ("fi_freeinfo", "FABRIC_1.3", true),
    ("fi_dupinfo", "FABRIC_1.3", true),
    ("fi_tostr_r", "FABRIC_1.4", true),
    ("fi_open", "FABRIC_1.5", true),
    ("fi_log_ready", "FABRIC_1.6", true),
];

/// The defined function symbols of a shared object with their versions, as
/// `readelf --dyn-syms -W` prints them: `name@VER` (compat) or `name@@VER`
/// (default), sorted.
fn versioned_functions(lib: &Path) -> Option<Vec<String>> {
    let out = Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib).output().ok()?;
    assert!(out.status.success(), "readelf {}: {}", lib.display(), String::from_utf8_lossy(&out.stderr));
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            (f.len() >= 8 && f[3] == "FUNC" && f[4] == "GLOBAL" && f[6] != "UND").then(|| f[7].to_string())
        })
        // readelf may print a compat version in parentheses after the name.
        .map(|n| n.replace(" (", "@").replace(')', ""))
        .collect();
    v.sort();
    v.dedup();
    Some(v)
}

fn expected() -> Vec<String> {
    let mut v: Vec<String> =
        EXPORTS.iter().map(|(n, ver, default)| format!("{n}{}{ver}", if *default { "@@" } else { "@" })).collect();
    v.sort();
    v
}

#[test]
fn soname_and_file_name_are_libfabrics() {
    let lib = ours();
    let Ok(out) = Command::new("readelf").arg("-d").arg(&lib).output() else {
        fabric_testkit::skip("binutils", "no readelf to read the library's dynamic section");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Library soname: [libfabric.so.1]"), "{text}");
}

#[test]
fn exports_every_name_at_libfabrics_versions() {
    let Some(got) = versioned_functions(&ours()) else {
        fabric_testkit::skip("binutils", "no readelf to list the library's symbols");
        return;
    };
    assert_eq!(got, expected(), "our exports differ from libfabric 1.17's table");
}

#[test]
fn exports_match_the_installed_libfabric() {
    let system = Path::new("/usr/lib/x86_64-linux-gnu/libfabric.so.1");
    if !system.exists() {
        fabric_testkit::skip("libfabric", "no system libfabric.so.1 to compare with (apt-get install libfabric1)");
        return;
    }
    let (Some(theirs), Some(ours)) = (versioned_functions(system), versioned_functions(&ours())) else {
        fabric_testkit::skip("binutils", "no readelf");
        return;
    };
    assert_eq!(ours, theirs, "our exports differ from the installed libfabric's");
}

#[test]
fn debians_fi_strerror_binds_to_ours_silently() {
    let tool = Path::new("/usr/bin/fi_strerror");
    if !tool.exists() {
        fabric_testkit::skip("libfabric", "no /usr/bin/fi_strerror (apt-get install libfabric-bin)");
        return;
    }
    let dir = ours().parent().unwrap().to_path_buf();
    // Every libc and libfabric error number, and some beyond: the same text over
    // ours as over the system's libfabric.
    let nums: Vec<String> = (0..140).chain(256..280).chain([300, 1000, 100_000]).map(|n| n.to_string()).collect();
    let run = |lib: Option<&Path>| -> String {
        nums.iter()
            .map(|n| {
                let mut c = Command::new(tool);
                c.arg(n).env_remove("LD_PRELOAD");
                if let Some(d) = lib {
                    c.env("LD_LIBRARY_PATH", d);
                } else {
                    c.env_remove("LD_LIBRARY_PATH");
                }
                let out = c.output().unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success(), "fi_strerror {n}: {stdout}{stderr}");
                assert!(!stderr.contains("version"), "the dynamic linker complained: {stderr}");
                stdout
            })
            .collect()
    };
    let over_ours = run(Some(&dir));
    assert_eq!(over_ours.lines().count(), nums.len(), "{over_ours}");
    assert_eq!(over_ours.lines().nth(11), Some("Resource temporarily unavailable"));
    assert_eq!(over_ours.lines().nth(140 + 9), Some("Truncation error"));
    assert_eq!(over_ours, run(None), "texts differ from the system libfabric's");
    // The library it ran with was ours.
    let out = Command::new("ldd").arg(tool).env("LD_LIBRARY_PATH", &dir).output().unwrap();
    let ldd = String::from_utf8_lossy(&out.stdout);
    assert!(ldd.lines().any(|l| l.contains("libfabric.so.1") && l.contains(&*dir.to_string_lossy())), "{ldd}");
}
