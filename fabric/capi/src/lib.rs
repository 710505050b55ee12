//! libfabric's C ABI over fabric's providers: this crate builds `libfabric.so.1`
//! (SONAME `libfabric.so.1`, libfabric 1.17's exports at its symbol versions), so
//! that C programs and MPI libraries linked against libfabric run on fabric with
//! `LD_LIBRARY_PATH` pointing at it, unchanged.
//!
//! - `abi`: libfabric 1.17's structs and constants, `#[repr(C)]`, named as in C.
//! - `exports`: the functions the library exports, at libfabric's symbol
//!   versions (`libfabric.map`, and `.symver` for the names with several).
//! - the objects, one module per class as libfabric's providers have them:
//!   `fabric`, `domain`, `cq`, `eq`, `av`, `cntr`, `mr`, `ep` (with `ep_msg`,
//!   `ep_tagged`, `ep_rma`, `ep_atomic`, `ep_cm`), `wait`, `poll`. Each C object is a
//!   `#[repr(C)]` Rust struct whose first field is its C `fid_*` struct (so the
//!   pointer C holds is the object's), followed by the provider's object; its ops
//!   tables are statics; it is boxed and leaked at open and reclaimed by
//!   `fi_close` (`fid`: class-checked casts). Data-transfer calls post the
//!   caller's buffers straight to the provider's raw entry points and
//!   completions are read straight into the caller's entries: nothing is
//!   allocated per operation.
//! - `shim.c`: the two variadic exports (`fi_log`, `fi_param_define`), which
//!   stable Rust cannot define; they format their arguments and call into Rust.
//!
//! Every entry point catches panics (none may cross into C: it becomes an error
//! return and a log line) and checks its pointers as libfabric documents.

#![allow(clippy::missing_safety_doc)]

pub mod abi;
mod addr;
mod av;
mod cntr;
mod cq;
mod domain;
mod ep;
mod ep_atomic;
mod ep_cm;
mod ep_msg;
mod ep_rma;
mod ep_tagged;
mod eq;
pub mod exports;
mod fabric;
mod fid;
pub mod info;
mod infoconv;
mod mc;
mod mr;
pub mod params;
mod poll;
pub mod tostr;
mod wait;
