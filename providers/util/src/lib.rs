//! The shared provider layer of fabric: everything that is not moving bytes, once,
//! transport-independent and free of I/O where it can be (as quinn-proto and
//! rustls keep protocol logic): the wire header, tag matching, completion and event
//! queue storage, address vectors, counters, the memory-key registry, the target
//! side of RMA ([`rma_target`]), and the progress/wait machinery the queues share;
//! plus, for the sockets providers, the interface list and name resolution
//! ([`iface`]).

pub mod atomic;
pub mod av;
pub mod bind;
pub mod cntr;
pub mod cq;
pub mod domain;
pub mod eq;
pub mod iface;
pub mod iov;
pub mod matcher;
pub mod mr;
pub mod progress;
pub mod random;
pub mod rdm;
pub mod reliable;
pub mod rma_target;
pub mod rndv;
pub mod rx;
pub mod scaffold;
pub mod slab;
pub mod verbs_wire;
pub mod wire;
