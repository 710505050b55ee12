//! libfabric's C ABI over fabric's providers: this crate builds `libfabric.so.1`
//! (SONAME `libfabric.so.1`, libfabric 1.17's exports at its symbol versions), so
//! that C programs and MPI libraries linked against libfabric run on fabric with
//! `LD_LIBRARY_PATH` pointing at it, unchanged.
//!
//! - `abi`: libfabric 1.17's structs and constants, `#[repr(C)]`, named as in C.
//! - `exports`: the functions the library exports, at libfabric's symbol
//!   versions (`libfabric.map`, and `.symver` for the names with several).
//! - `shim.c`: the two variadic exports (`fi_log`, `fi_param_define`), which
//!   stable Rust cannot define; they format their arguments and call into Rust.
//!
//! Every entry point catches panics (none may cross into C: it becomes an error
//! return and a log line) and checks its pointers as libfabric documents.

#![allow(clippy::missing_safety_doc)]

pub mod abi;
pub mod exports;
pub mod info;
pub mod params;
mod pending;
pub mod tostr;
