//! Link the cdylib as libfabric's `libfabric.so.1`: GNU ld (`-fuse-ld=bfd`, not
//! the rust-lld rustc picks by default, which drops named version nodes), found
//! first in `link/` (`-B`), whose `ld.bfd` wrapper swaps rustc's anonymous
//! version script for `libfabric.map` (libfabric's version nodes) and leaves a
//! copy named `libfabric.so.1` beside cargo's output; the SONAME is libfabric's.
//! Only the cdylib is linked this way (`rustc-link-arg-cdylib`). The variadic
//! exports are C (`src/shim.c`), compiled here with the system's C compiler.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed=libfabric.map");
    println!("cargo:rerun-if-changed=link/ld.bfd");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rustc-link-arg-cdylib=-fuse-ld=bfd");
    println!("cargo:rustc-link-arg-cdylib=-B{dir}/link");
    println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,libfabric.so.1");

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("shim.o");
    let lib = out.join("libfabric_capi_shim.a");
    let ok = Command::new(&cc)
        .args(["-c", "-O2", "-fPIC", "-Wall", "-o"])
        .arg(&obj)
        .arg(format!("{dir}/src/shim.c"))
        .status()
        .unwrap_or_else(|e| panic!("fabric-capi: cannot run the C compiler {cc:?}: {e}"));
    assert!(ok.success(), "fabric-capi: {cc} failed on src/shim.c");
    let _ = std::fs::remove_file(&lib);
    let ok = Command::new("ar").arg("crs").arg(&lib).arg(&obj).status().expect("fabric-capi: cannot run ar");
    assert!(ok.success(), "fabric-capi: ar failed");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static:+whole-archive=fabric_capi_shim");
}
