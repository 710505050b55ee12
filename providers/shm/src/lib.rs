//! The shm provider of fabric: RDM endpoints between processes on one host.
//!
//! Every endpoint owns a segment, a file in `/dev/shm` that only its user may open.
//! A peer that sends to it claims one of the segment's 256 slots; the slot holds a
//! lock-free single-producer single-consumer ring (sender to receiver) and the
//! sender's bounce buffers. Small messages travel inline in a ring entry, medium
//! ones through a bounce buffer, and large messages and RMA with one copy across
//! address spaces (`process_vm_readv`/`process_vm_writev`), or, when cross-memory
//! attach is not allowed (or `FI_SHM_DISABLE_CMA=1`), as a stream of bounce-buffer
//! chunks. Replies travel through the slot the receiver claims in the sender's
//! segment. The data path makes no system call; a blocking wait sleeps on a
//! datagram socket that senders write to only while the receiver sleeps.
//!
//! Files are named after the objects they implement, as in libfabric's
//! `prov/<name>/src` (and as in the tcp provider): `attr` (what `getinfo` offers),
//! `fabric`, `domain`, `ep` (endpoints and their progress), plus `proto` (the ring
//! entries), `ring` (the queue) and `segment` (shared memory and the OS glue).

mod attr;
mod domain;
mod ep;
mod fabric;
pub mod proto;
pub mod ring;
pub mod segment;
pub(crate) mod sync;

use fabric_core::param::{Param, ParamType};
use fabric_core::prov::Provider;
use std::sync::{Arc, OnceLock};

/// The provider's name.
pub const NAME: &str = "shm";
/// The provider's version (`FI_VERSION(0, 1)`).
pub const VERSION: u32 = fabric_core::info::version(0, 1);

/// The shm provider.
pub fn provider() -> Arc<dyn Provider> {
    Arc::new(ShmProvider)
}

struct ShmProvider;

/// Parameters, read once from the environment.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// `FI_SHM_DISABLE_CMA`: never use cross-memory attach.
    pub disable_cma: bool,
}

pub(crate) fn params() -> Vec<Param> {
    vec![Param {
        prov: NAME,
        name: "disable_cma",
        kind: ParamType::Bool,
        help: "Disable use of CMA (Cross Memory Attach) for copying data directly between processes: large messages and RMA then go as segmented copies through the shared segment",
        default: "0",
    }]
}

pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let p = params();
        let get = |n: &str| p.iter().find(|x| x.name == n).expect("declared parameter");
        Config { disable_cma: get("disable_cma").get_bool() }
    })
}

fabric_util::provider_ops!(ShmProvider {
    name: NAME,
    version: VERSION,
    params: params(),
    getinfo: attr::getinfo,
    fabric: fabric::ShmFabric::new,
});
