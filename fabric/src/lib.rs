//! fabric: a provider-agnostic fabric framework in the model of libfabric
//! (OpenFabrics Interfaces), with a safe API.
//!
//! An application asks [`getinfo`] what the enabled providers offer for its
//! [`Hints`], opens a [`Fabric`], a [`Domain`], queues and an [`Endpoint`] for one
//! of the entries, and posts operations whose outcomes it reads from a
//! [`CompletionQueue`]. The same program runs over every provider; `FI_PROVIDER`
//! (`tcp`, `^tcp`, `tcp,udp`) picks among them without a rebuild.
//!
//! This crate re-exports `fabric-core` (the types and the provider contract in
//! [`prov`]) and adds the provider registry ([`getinfo`], [`register_provider`],
//! [`providers`], [`params`]) and the safe object API. Built-in providers come with
//! cargo features (`tcp`, `udp`, `shm`, on by default); out-of-tree ones register at run time
//! with [`register_provider`].
//!
//! # Example
//!
//! Two RDM endpoints exchanging one message:
//!
//! ```no_run
//! use fabric::{Buf, Caps, CqAttr, AvAttr, BindFlags, EpType, FiAddr, Hints};
//!
//! # fn main() -> fabric::Result<()> {
//! let hints = Hints::new().ep_type(EpType::Rdm).caps(Caps::MSG);
//! let info = fabric::getinfo(&hints)?.remove(0);
//! let fabric = fabric::Fabric::open(&info)?;
//! let domain = fabric.domain(&info)?;
//! let cq = domain.cq(CqAttr::default())?;
//! let av = domain.av(AvAttr::default())?;
//! let ep = domain.endpoint(&info)?;
//! ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
//! ep.bind_av(&av)?;
//! ep.enable()?;
//!
//! // Talk to ourselves: the peer's address goes into the address vector.
//! let me = av.insert_one(&ep.name()?)?;
//! ep.recv(Buf::new(4096), FiAddr::UNSPEC, 1)?;
//! ep.send(Buf::from(&b"hello"[..]), me, 2)?;
//!
//! let mut done = 0;
//! while done < 2 {
//!     let c = cq.sread(None)?;
//!     // The buffer of each operation comes back with its completion.
//!     let buf = c.buffers.into_buf().expect("one buffer per operation");
//!     if c.context == 1 {
//!         assert_eq!(&buf[..], b"hello"); // its length is the bytes received
//!     }
//!     done += 1;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Memory safety
//!
//! A provider reads and writes an operation's buffers after the call that posted
//! it has returned, until the operation completes. The provider traits say so
//! through `unsafe` methods ([`prov::EndpointOps::post_send`],
//! [`prov::EndpointOps::post_recv`]); this crate makes the public API safe the way
//! io_uring libraries do: **an operation owns its buffers until its completion is
//! read.**
//!
//! - Data lives in [`Buf`]s: owned heap buffers whose bytes never move and are
//!   always initialized. Posting takes the `Buf`s by value.
//! - Each [`CompletionQueue`] owns a table of the operations in flight whose
//!   completions it will carry: a slab (slots plus a free list, sized from the
//!   queue's depth, so the data path allocates nothing) of records holding the
//!   application's context and the operation's buffers (or the shared handle of a
//!   multi-receive buffer), under generation-checked keys.
//! - Posting inserts a record into the table of the queue bound for that direction
//!   (transmit for sends, receive for receives; none bound: `Err(NoCq)`), builds
//!   the `IoVec` list pointing into the buffers' heap allocations, and calls the
//!   provider with the record's key as the operation context (the application's
//!   own context travels as `user_context`, for `cancel` and `CLAIM`). If the
//!   provider refuses the post, the record is removed and the buffers come back in
//!   the [`PostError`].
//! - Reading a completion looks the key up, removes the record and returns the
//!   application's context and the buffers in the [`Completion`] (or
//!   [`CompletionError`]). A key the table does not know is logged and skipped;
//!   nothing panics on a provider's word.
//! - A record leaves the table only through its completion (when the provider is
//!   done with the buffers), a failed post, or when the table is dropped. Every
//!   [`Endpoint`] holds the queues it posts into, and closing it (explicitly or by
//!   drop) first closes the provider's endpoint, which cancels what is posted,
//!   flushes it as `Canceled` completions (still readable, with their buffers) and
//!   touches no buffer afterwards. So no buffer is freed while a provider may use
//!   it, whatever the application drops or forgets. (If a provider fails to close,
//!   the tables are leaked rather than freed.)
//! - Multi-receive buffers (`OpFlags::MULTI_RECV`) are shared between their record
//!   and [`RecvView`]s: each message completion carries a view of its bytes, which
//!   the provider never writes again once reported (the `post_recv` contract). The
//!   buffer comes back on the completion flagged `MULTI_RECV` when no view is
//!   alive; a provider entry that both ends the last message and releases the
//!   buffer is delivered as two completions, the message then the release.
//! - `inject` copies the data before returning and needs no record.
//! - Selective completion (`BindFlags::SELECTIVE_COMPLETION`) is not offered:
//!   buffers come back through completions, so every operation needs one.
//! - Registered memory ([`MemoryRegion`]) owns its `Buf` until deregistered; since
//!   peers may write it at any time, the safe API gives no slice of it.
//!
//! # Completions, not panics
//!
//! Calls return `Err(Again)` for back-pressure; a failed operation is an error
//! completion with libfabric's error number ([`Error::errno`]) and
//! `fi_strerror`'s text: [`CompletionQueue::next`] (or
//! [`CompletionQueue::wait_next`]) returns the next entry, completion or error
//! completion, in one call; at a lower level, [`CompletionQueue::readerr`] reads
//! the error completion after a read said `Err(Avail)`.
//!
//! # Progress and waiting
//!
//! **What drives progress.** Progress is manual (libfabric's
//! `FI_PROGRESS_MANUAL`, the default of every built-in provider): nothing
//! moves data behind the application's back. Reading a queue
//! ([`CompletionQueue::read_one`], [`CompletionQueue::next`],
//! [`EventQueue::read`], [`Counter::read`]) drives the progress of the
//! endpoints bound to *that* queue: it reads their sockets or shared-memory
//! rings, sends what was queued, answers peers (acknowledgements,
//! rendezvous, RMA requests a peer addressed to them), runs their timers
//! (retransmissions), and turns what finished into completions. Posting an
//! operation starts it but does not promise to finish it. An endpoint whose
//! queues nobody reads makes no progress, and neither do the peers that wait
//! for it: a peer's RMA into its memory, or the acknowledgement a peer's send
//! needs to complete.
//!
//! **What a blocking wait drives.** [`CompletionQueue::sread`] (and
//! [`CompletionQueue::wait_next`], [`EventQueue::sread`], [`Counter::wait`])
//! drives the endpoints bound to the queue it waits on, and only those: it
//! spins briefly, then sleeps in `epoll` on their descriptors, so a message
//! for one of them wakes it. A thread that owns two endpoints with separate
//! queues and blocks in `sread` on one of them starves the other: if the
//! answer it waits for needs the other endpoint to move first, the wait ends
//! at its time-out with [`Error::WaitTimedOut`] ("Timed out waiting"). Drive
//! both instead: read each queue in turn (below), or wait on all of them at
//! once with a [`WaitSet`], which drives every member's progress while it
//! waits and sleeps without losing a wake-up; a [`PollSet`] says which
//! have something. An application with an event loop of its own sleeps on
//! [`CompletionQueue::wait_fd`] after [`CompletionQueue::trywait`] or
//! [`CompletionQueue::begin_sleep`] (libfabric's `fi_trywait` protocol); from
//! async code, the `fabric-tokio` crate awaits completions, events and
//! counters that way, without a thread per queue.
//!
//! **What automatic progress costs.** [`Hints::progress`] with
//! [`Progress::Auto`] asks for a domain whose operations complete without the
//! application reading its queues (tcp, udp and shm offer it): the domain runs
//! one progress thread that sleeps in `epoll` on its endpoints' descriptors and
//! drives them when something arrives. The price is that thread (a core's
//! share when traffic is busy), a kernel wake-up and a hand-over between
//! threads for each burst of arrivals (the application's read takes
//! completions another thread produced, through the queue's lock), and
//! descriptors that stay in an epoll set for good, so that the kernel runs the
//! set's callback on every packet. Manual progress, driven by the thread that
//! reads the completions, stays the fastest path; automatic progress suits
//! an application that cannot read its queues often (long computations between
//! calls, one-sided RMA targets that never look at their queues).
//!
//! Several endpoints from one thread, each with its own queue, driven in
//! turn; no blocking read on one starves another:
//!
//! ```
//! use fabric::{AvAttr, BindFlags, Buf, CqAttr, EpType, Fabric, FiAddr, Hints};
//!
//! # fn main() -> fabric::Result<()> {
//! let hints = Hints::new().ep_type(EpType::Rdm).node("127.0.0.1").source(true);
//! let info = fabric::getinfo(&hints)?.remove(0);
//! let fabric = Fabric::open(&info)?;
//! let mut nodes = Vec::new();
//! for _ in 0..3 {
//!     let domain = fabric.domain(&info)?;
//!     let cq = domain.cq(CqAttr::default())?;
//!     let av = domain.av(AvAttr::default())?;
//!     let ep = domain.endpoint(&info)?;
//!     ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
//!     ep.bind_av(&av)?;
//!     ep.enable()?;
//!     nodes.push((ep, cq, av));
//! }
//! // A ring: endpoint i sends to endpoint i + 1.
//! for i in 0..3 {
//!     let next = &nodes[(i + 1) % 3].0;
//!     let to = nodes[i].2.insert_one(&next.name()?)?;
//!     nodes[i].0.recv(Buf::new(64), FiAddr::UNSPEC, 10 + i as u64)?;
//!     nodes[i].0.send(Buf::from(format!("from {i}").as_bytes()), to, 20 + i as u64)?;
//! }
//! // One thread reads every queue in turn: each read drives its endpoint.
//! let (mut done, start) = (0, std::time::Instant::now());
//! while done < 6 {
//!     for (i, (_, cq, _)) in nodes.iter().enumerate() {
//!         if let Some(entry) = cq.next()? {
//!             let c = entry?;
//!             if c.context == 10 + i as u64 {
//!                 let from = (i + 2) % 3;
//!                 assert_eq!(c.bytes(), format!("from {from}").as_bytes());
//!             }
//!             done += 1;
//!         }
//!     }
//!     assert!(start.elapsed().as_secs() < 30, "no progress");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! A blocking wait that ends at its time-out says so: `Err(WaitTimedOut)`,
//! "Timed out waiting" (libfabric's C calls return `-FI_EAGAIN` from
//! `fi_cq_sread`, which the C ABI keeps), while `Err(Again)` means
//! back-pressure or a read that found nothing.
//!
//! # Configuration
//!
//! `FI_PROVIDER` (comma list, `^` to exclude), `FI_LOG_LEVEL` (`warn`, `info`,
//! `debug`, `trace`; `info` says why each provider refused the hints),
//! `FI_LOG_PROV`, and the providers' own `FI_<PROV>_<NAME>` parameters, all listed
//! by [`params`].

pub use fabric_core::*;

mod av;
mod buf;
mod cntr;
mod cq;
mod domain;
mod ep;
mod eq;
mod fabric;
mod mc;
mod mr;
mod registry;
mod rma;
mod sleep;
mod table;
mod waitset;

pub use crate::av::AddressVector;
pub use crate::buf::{Buf, OpBuffers};
pub use crate::cntr::Counter;
pub use crate::cq::{Completion, CompletionError, CompletionQueue, RecvView};
pub use crate::domain::Domain;
pub use crate::ep::{Endpoint, PassiveEndpoint, PostError, PostResult, RecvMsg, SendMsg};
pub use crate::eq::EventQueue;
pub use crate::fabric::Fabric;
pub use crate::mc::Multicast;
pub use crate::mr::{MemoryRegion, RegisteredBuf};
pub use crate::registry::{
    all_providers, core_name, discovery_rank, getinfo, getinfo_from, layer_of, layered_name, not_built_hint, params,
    provider_allowed, providers, register_provider,
};
pub use crate::rma::{Remote, RmaMsg};
pub use crate::sleep::Sleep;
pub use crate::waitset::{PollSet, SetMember, WaitSet};

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        send_sync::<Buf>();
        send_sync::<OpBuffers>();
        send_sync::<Fabric>();
        send_sync::<Domain>();
        send_sync::<CompletionQueue>();
        send_sync::<Completion>();
        send_sync::<CompletionError>();
        send_sync::<RecvView>();
        send_sync::<EventQueue>();
        send_sync::<Counter>();
        send_sync::<AddressVector>();
        send_sync::<MemoryRegion>();
        send_sync::<Endpoint>();
        send_sync::<PassiveEndpoint>();
        send_sync::<PostError>();
        send_sync::<Multicast>();
        send_sync::<WaitSet>();
        send_sync::<PollSet>();
        send_sync::<Sleep>();
    }
}
