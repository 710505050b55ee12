//! libfabric's own clients over this crate's `libfabric.so.1`: Debian's
//! unmodified `/usr/bin/fi_info` (package libfabric-bin), and a C program
//! (`tests/c/getinfo.c`) compiled against the system's libfabric headers
//! (libfabric-dev). Either missing is a skip (`fabric_testkit::skip`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>`: where cargo leaves `libfabric.so.1` (and fi-tools'
/// binaries); the test binary itself is in its `deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/...").to_path_buf()
}

/// The directory holding our `libfabric.so.1`, building it if it is not there.
fn lib_dir() -> PathBuf {
    let dir = target_dir();
    if !dir.join("libfabric.so.1").exists() {
        let ok = Command::new(env!("CARGO")).args(["build", "-p", "fabric-capi"]).status().expect("cargo build");
        assert!(ok.success(), "cargo build -p fabric-capi failed");
    }
    assert!(dir.join("libfabric.so.1").exists(), "no libfabric.so.1 in {}", dir.display());
    dir
}

/// Run `prog args` over our library; assert it succeeded and the dynamic
/// linker found every symbol version.
fn run_over_ours(prog: &Path, args: &[&str]) -> Output {
    let out = Command::new(prog)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env_remove("FI_PROVIDER")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", prog.display()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("no version information"), "{} {args:?}: {err}", prog.display());
    assert!(!(err.contains("version") && err.contains("not found")), "{} {args:?}: {err}", prog.display());
    assert!(
        out.status.success(),
        "{} {args:?}: {}\nstdout:\n{}\nstderr:\n{err}",
        prog.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// The entries of `fi_info`'s default output: (provider, fabric, domain, type),
/// the provider named as libfabric does (`tcp;ofi_rxm` for an RDM entry whose
/// protocol is `FI_PROTO_RXM`; fabric's own fi_info prints the provider's).
fn entries(text: &str) -> BTreeSet<(String, String, String, String)> {
    let mut v = BTreeSet::new();
    let mut cur: Vec<(String, String)> = Vec::new();
    let mut flush = |cur: &mut Vec<(String, String)>| {
        let get = |k: &str| cur.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone()).unwrap_or_default();
        if !cur.is_empty() {
            let (prov, ty, proto) = (get("provider"), get("type"), get("protocol"));
            let prov = match (prov.contains(';'), ty.as_str(), proto.as_str()) {
                (false, "FI_EP_RDM", "FI_PROTO_RXM") => format!("{prov};ofi_rxm"),
                (false, "FI_EP_RDM", "FI_PROTO_RXD") => format!("{prov};ofi_rxd"),
                _ => prov,
            };
            v.insert((prov, get("fabric"), get("domain"), ty));
        }
        cur.clear();
    };
    for line in text.lines() {
        let Some((k, val)) = line.trim().split_once(": ") else { continue };
        if k == "provider" {
            flush(&mut cur);
        }
        cur.push((k.to_string(), val.to_string()));
    }
    flush(&mut cur);
    v
}

/// Provider names of `fi_info -l`.
fn provider_list(text: &str) -> Vec<String> {
    text.lines().filter(|l| !l.starts_with(' ') && l.ends_with(':')).map(|l| l.trim_end_matches(':').into()).collect()
}

#[test]
fn debian_fi_info_runs_over_fabric() {
    let debian = Path::new("/usr/bin/fi_info");
    if !debian.exists() {
        fabric_testkit::skip("libfabric", "no /usr/bin/fi_info (Debian package libfabric-bin)");
        return;
    }
    let ours = target_dir().join("fi_info");
    let ours_out = |args: &[&str]| -> Option<String> {
        if !ours.exists() {
            return None;
        }
        let out = Command::new(&ours).args(args).env_remove("FI_PROVIDER").output().ok()?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    if !ours.exists() {
        fabric_testkit::skip("fi-tools", "fabric's fi_info is not built (cargo build -p fi-tools): not compared");
    }
    let text = |o: Output| String::from_utf8_lossy(&o.stdout).into_owned();

    let list = text(run_over_ours(debian, &["-l"]));
    assert!(provider_list(&list).contains(&"tcp".to_string()), "{list}");
    if let Some(o) = ours_out(&["-l"]) {
        assert_eq!(provider_list(&list), provider_list(&o));
    }

    for args in
        [&[][..], &["-p", "tcp"][..], &["-t", "FI_EP_RDM"][..], &["-c", "FI_TAGGED"][..], &["-p", "tcp;ofi_rxm"][..]]
    {
        let got = entries(&text(run_over_ours(debian, args)));
        assert!(!got.is_empty(), "fi_info {args:?} listed nothing");
        if let Some(o) = ours_out(args) {
            assert_eq!(got, entries(&o), "fi_info {args:?}: Debian's over our library vs fabric's own");
        }
        if args == ["-p", "tcp;ofi_rxm"] || args == ["-t", "FI_EP_RDM"] {
            assert!(got.iter().all(|e| e.3 == "FI_EP_RDM"), "{args:?}: {got:?}");
        }
        if args == ["-p", "tcp;ofi_rxm"] {
            assert!(got.iter().all(|e| e.0 == "tcp;ofi_rxm"), "{got:?}");
        }
    }

    let verbose = text(run_over_ours(debian, &["-p", "tcp", "-v"]));
    assert!(verbose.contains("fi_info:\n    caps: [ "), "{verbose}");
    assert!(verbose.contains("        prov_name: tcp;ofi_rxm\n"), "{verbose}");
    assert!(verbose.contains("        prov_name: tcp\n"), "{verbose}");
    if let Some(o) = ours_out(&["-p", "tcp", "-v"]) {
        // fi_tostr's text is fabric's own, the layered provider name included
        // (fabric's fi_info names RDM entries as the C ABI does).
        let norm = verbose.clone();
        let count = |s: &str| s.matches("fi_info:").count();
        assert_eq!(count(&norm), count(&o));
        for line in o.lines().filter(|l| l.contains("type:") || l.contains("name:")) {
            assert!(norm.contains(line), "{line:?} missing from Debian's fi_info -v over ours");
        }
    }

    let env = text(run_over_ours(debian, &["-e"]));
    assert!(env.contains("# FI_PROVIDER: String\n"), "{env}");
    assert!(env.contains("# FI_TCP_IFACE: String\n"), "{env}");
}

#[test]
fn c_program_uses_getinfo_dupinfo_tostr_params() {
    if !Path::new("/usr/include/rdma/fabric.h").exists() {
        fabric_testkit::skip("libfabric", "no /usr/include/rdma/fabric.h (Debian package libfabric-dev)");
        return;
    }
    let dir = lib_dir();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/getinfo.c");
    let exe = dir.join("capi-test-getinfo");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", dir.display()))
        .arg("-l:libfabric.so.1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(out.status.success(), "{cc} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let out = run_over_ours(&exe, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("entry tcp;ofi_rxm "), "{stdout}");
    assert!(stdout.contains("delivery complete 1: "), "{stdout}");
    assert!(stdout.contains("tostr ok") && stdout.contains("params ok"), "{stdout}");
}
