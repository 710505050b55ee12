//! Shared segments and the operating-system glue of the shm provider.
//!
//! # Segments
//!
//! Every endpoint owns one segment: a file `/dev/shm/<name>` of [`SEGMENT_SIZE`] bytes,
//! mode `0600`, that other endpoints of the same user map in order to send to it. It holds
//! a header (one page) and [`SLOTS`] sender [`Slot`]s of [`SLOT_SIZE`] bytes each:
//!
//! ```text
//! offset 0                       header: magic, version, size, owner (uid, pid, start
//!                                time, pid namespace), CMA probe, closed, sleepers, and
//!                                the bitmap of claimed slots
//! HEADER_SIZE + i * SLOT_SIZE    slot i: state, the sender's identity, bounce_busy[8]
//!                                (one cache line or two), the ring (16 KiB), the jobs of
//!                                shared large copies (4 cache lines), the bounce
//!                                buffers (8 x 16 KiB, page aligned)
//! ```
//!
//! A sender claims a slot of the receiver's segment ([`Segment::claim_slot`]) and from then
//! on is the only producer of the slot's ring and the only writer of its bounce buffers
//! (a buffer it hands to the receiver is the receiver's until `bounce_busy` says it was
//! copied out). The receiver is the ring's only consumer. Replies travel the other way,
//! through a slot the receiver claims in the sender's segment.
//!
//! The file is sparse: creating a segment allocates one page (the header); claiming a slot
//! allocates that slot's [`SLOT_SIZE`] bytes (with `fallocate`, so that a full `/dev/shm`
//! fails the claim with [`Error::NoSpc`] instead of killing a process with `SIGBUS` later).
//! The owner must not read slots nobody claimed (reading a hole of a shared tmpfs mapping
//! allocates a page): it walks the bitmap ([`Segment::claimed_slots`]) instead.
//!
//! # Trust
//!
//! Only processes of the same user can open a segment (mode `0600`, and [`Segment::attach`]
//! checks the owner and mode), but any of them may be buggy or killed half-way through an
//! update. So everything in the mapping is an atomic or raw bytes (every bit pattern is a
//! valid value), every value read from it is validated before use (lengths, indices, names,
//! states), and bounce buffers are only ever reached through raw pointers and copied.
//! A peer can stall or confuse its own conversation; it cannot make this process index
//! out of bounds or panic. (It can still truncate the file, which makes accesses to the
//! mapping fault with `SIGBUS`: a process of the same user can also just kill us.)
//!
//! # OS glue
//!
//! Endpoint names ([`new_name`]), liveness of a peer ([`start_time`], [`alive`],
//! [`pidfd`]), removal of segments left by dead processes ([`cleanup_stale`]), wake-ups
//! through abstract unix datagram sockets ([`Waker`], [`wake`]) and cross-memory attach
//! ([`cma_probe`], [`cma_read`], [`cma_write`]).
//!
//! # Files
//!
//! This file holds the layout (constants, header, [`Slot`], [`Segment`]: create, attach,
//! map, claim and release slots) and names; `job` the [`Job`]s of shared copies;
//! `liveness` the checks on a process's pid, start time and pid namespace; `cleanup`
//! the removal of stale segments; `wakeup` the wake-up sockets; `cma` cross-memory
//! attach. Everything public is re-exported here.

mod cleanup;
mod cma;
mod job;
mod liveness;
#[cfg(test)]
mod testutil;
mod wakeup;

pub use cleanup::cleanup_stale;
use cleanup::{remove_if_same, stale};
pub use cma::{cma_probe, cma_read, cma_write, local_probe_addr, CmaError, PROBE_VALUE};
pub use job::{Job, JOBS};
pub use liveness::{alive, pidfd, start_time};
use liveness::{pidns, same_pidns};
pub use wakeup::{wake, Waker};

use crate::ring::Ring;
use fabric_core::{Error, Result};
use std::cell::UnsafeCell;
use std::fmt;
use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::mem::{self, offset_of, size_of};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::ptr::{self, NonNull};
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Sender slots in one segment.
pub const SLOTS: usize = 256;
/// Bytes of one bounce buffer.
pub const BOUNCE_SIZE: usize = 16 << 10;
/// Bounce buffers per slot.
pub const BOUNCE_COUNT: usize = 8;
/// Longest endpoint name, in bytes.
pub const NAME_MAX: usize = 64;
/// The prefix of the names [`new_name`] makes (and the only files [`cleanup_stale`] looks at).
pub const PREFIX: &str = "fabric-shm-";
/// Where segments live.
pub const SHM_DIR: &str = "/dev/shm";

/// [`Slot::state`]: nobody uses the slot (or its claimer has not finished setting it up).
pub const SLOT_FREE: u32 = 0;
/// [`Slot::state`]: its sender set it up; its identity, ring and bounce buffers are valid.
pub const SLOT_ACTIVE: u32 = 1;
/// [`Slot::state`]: its sender is done with it; the owner drains it, then releases it.
pub const SLOT_CLOSED: u32 = 2;

/// Bytes of the header, before slot 0.
pub const HEADER_SIZE: usize = 4096;
/// Bytes of one slot (page aligned): memory a claimed slot costs.
pub const SLOT_SIZE: usize = size_of::<Slot>();
/// Bytes of a whole segment file (mostly never allocated: see the module documentation).
pub const SEGMENT_SIZE: usize = HEADER_SIZE + SLOTS * SLOT_SIZE;

/// The header's first eight bytes once the segment is initialised.
const MAGIC: u64 = u64::from_le_bytes(*b"FABSHM\x00\x01");
/// The version of this layout; bumped with any change of it, and of the entries'
/// (`proto::VERSION`), so that processes of builds that speak differently do not
/// attach to each other. 3: an atomic's operation and its answer's errno moved
/// from `aux` to `data`. 4: the claim bitmap's `high` flag.
const LAYOUT_VERSION: u32 = 4;
/// Words of the claim bitmap.
const CLAIM_WORDS: usize = SLOTS / 64;

const _: () = assert!(SLOTS & 63 == 0);
const _: () = assert!(size_of::<Header>() <= HEADER_SIZE && HEADER_SIZE & 4095 == 0);
const _: () = assert!(mem::align_of::<Slot>() == 4096 && SLOT_SIZE & 4095 == 0);
const _: () = assert!(offset_of!(Slot, bounce) & 4095 == 0);
// A name from `new_name`: prefix, two 10-digit numbers, 16 hex digits, two dashes.
const _: () = assert!(PREFIX.len() + 10 + 1 + 10 + 1 + 16 <= NAME_MAX);

/// A value on a cache line of its own.
#[repr(C, align(64))]
struct Line<T>(T);

/// The segment header, at offset 0. All atomics: any bit pattern is a value, and a peer
/// writing to it concurrently is no data race. The owner writes every field before it
/// stores [`MAGIC`] (Release); who finds the magic (Acquire) may read them.
#[repr(C)]
struct Header {
    /// [`MAGIC`] once everything else is initialised.
    magic: AtomicU64,
    /// [`LAYOUT_VERSION`].
    version: AtomicU32,
    /// The owner's effective uid.
    owner_uid: AtomicU32,
    /// [`SEGMENT_SIZE`].
    size: AtomicU64,
    /// The owner's pid.
    owner_pid: AtomicI32,
    /// Nonzero once the owner has closed its endpoint.
    closed: AtomicU32,
    /// The owner's start time (`/proc/<pid>/stat` field 22), 0 when unknown: tells the
    /// owner from a later process with the same pid.
    owner_start: AtomicU64,
    /// The inode of the owner's pid namespace (`/proc/self/ns/pid`), 0 when unknown: pids
    /// mean nothing to a process of another namespace.
    owner_pidns: AtomicU64,
    /// The address, in the owner, of a `u64` holding [`PROBE_VALUE`].
    probe_addr: AtomicU64,
    /// Nonzero while the owner sleeps or is about to: senders then wake it.
    sleepers: Line<AtomicU32>,
    /// The claim bitmap, and whether it ever went past its first word.
    claim: Line<Claims>,
}

/// The claim bitmap of a segment's slots ([`Header::claim`]).
#[repr(C)]
struct Claims {
    /// Bit `i % 64` of word `i / 64` is set while slot `i` is claimed.
    words: [AtomicU64; CLAIM_WORDS],
    /// Nonzero once a slot past the first 64 was claimed (never cleared): until
    /// then the owner's progress looks at the first word only.
    high: AtomicU64,
}

/// The bounce buffers of a slot, page aligned. Reached only through raw pointers.
#[repr(C, align(4096))]
struct Bounce(UnsafeCell<[[u8; BOUNCE_SIZE]; BOUNCE_COUNT]>);

/// One sender's slot in a receiver's segment.
///
/// Lives only in a mapping (get it from [`Segment::slot`]). Every field may be written by
/// the other process at any time, so all accessors validate what they read.
#[repr(C, align(4096))]
pub struct Slot {
    /// [`SLOT_FREE`], [`SLOT_ACTIVE`] or [`SLOT_CLOSED`] (or garbage from a broken peer).
    state: AtomicU32,
    /// Bytes of the sender's name in `name`.
    name_len: AtomicU32,
    /// The sender's pid.
    pid: AtomicI32,
    /// 1 while the sender sleeps waiting for room (ring entries or bounce buffers) in
    /// this slot: the receiver that frees some wakes it ([`Slot::take_sender_waits`]).
    /// Both sides store, fence (SeqCst), then look at the other's side.
    sender_waits: AtomicU32,
    /// The sender's start time, 0 when unknown.
    start: AtomicU64,
    /// The sender's pid namespace (inode), 0 when unknown.
    pidns: AtomicU64,
    /// The sender's endpoint name (first `name_len` bytes).
    name: [AtomicU8; NAME_MAX],
    /// 1 while bounce buffer `i` is the receiver's (until it has copied it out), 0 while
    /// it is the sender's. The sender stores 1 before publishing the entry that names the
    /// buffer; the receiver stores 0 (Release) after its last read of the buffer, and the
    /// sender loads it with Acquire before writing the buffer again. (An index taken from
    /// a ring entry must be checked against [`BOUNCE_COUNT`] first.)
    pub bounce_busy: [AtomicU32; BOUNCE_COUNT],
    /// Sender to receiver.
    ring: Ring,
    /// Shared copies of large messages from this slot's sender (see [`Job`]); the
    /// receiver hands them out.
    jobs: [Job; JOBS],
    /// The sender's bounce buffers.
    bounce: Bounce,
}

// SAFETY: every field but `bounce` is an atomic or a `Ring`, whose only non-atomic parts
// (payloads) are reached through the producer/consumer protocol whose unsafe constructors
// carry the contract; `bounce` is never read or written through a Rust reference, only
// through the raw pointers of `bounce_ptr`, whose users follow the `bounce_busy` hand-over.
// Sharing `&Slot` between threads therefore adds nothing a second process could not do.
unsafe impl Sync for Slot {}

impl Slot {
    /// The slot's state (Acquire): [`SLOT_FREE`], [`SLOT_ACTIVE`], [`SLOT_CLOSED`], or
    /// anything else when the peer is broken (treat as closed).
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Store a state (Release): the sender stores [`SLOT_CLOSED`] when it is done.
    pub fn set_state(&self, state: u32) {
        self.state.store(state, Ordering::Release);
    }

    /// The sender's endpoint name, if it is a valid one ([`valid_name`]). Read it after
    /// seeing [`SLOT_ACTIVE`].
    pub fn peer_name(&self) -> Option<String> {
        let len = self.name_len.load(Ordering::Relaxed) as usize;
        if len == 0 || len > NAME_MAX {
            return None;
        }
        let bytes: Vec<u8> = self.name[..len].iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let name = String::from_utf8(bytes).ok()?;
        valid_name(&name).then_some(name)
    }

    /// The sender's pid and start time (0 when unknown), as it wrote them: check with
    /// [`Slot::peer_alive`] (or [`alive`]) before trusting them.
    pub fn peer_id(&self) -> (i32, u64) {
        (self.pid.load(Ordering::Relaxed), self.start.load(Ordering::Relaxed))
    }

    /// Whether the sender still runs: [`alive`] on its pid and start time. True when it
    /// is in another pid namespace (its pid means nothing here, so nothing can be told).
    pub fn peer_alive(&self) -> bool {
        let (pid, start) = self.peer_id();
        !same_pidns(self.pidns.load(Ordering::Relaxed)) || alive(pid, start)
    }

    /// The first byte of bounce buffer `i` ([`BOUNCE_SIZE`] bytes, valid while the segment
    /// is mapped).
    ///
    /// The peer may write these bytes at any time: only copy them with raw-pointer copies
    /// (`ptr::copy_nonoverlapping`), never make a Rust reference to them, and never trust
    /// what they say (lengths, offsets) without validating it.
    ///
    /// # Panics
    ///
    /// When `i >= BOUNCE_COUNT`: check an index taken from a ring entry first.
    pub fn bounce_ptr(&self, i: usize) -> *mut u8 {
        assert!(i < BOUNCE_COUNT, "bounce buffer {i} of {BOUNCE_COUNT}");
        // In bounds: `i < BOUNCE_COUNT` buffers of `BOUNCE_SIZE` bytes.
        self.bounce.0.get().cast::<u8>().wrapping_add(i * BOUNCE_SIZE)
    }

    /// Sender: say whether we sleep waiting for room in this slot (then fence and look
    /// for room once more before sleeping).
    pub fn set_sender_waits(&self, waits: bool) {
        self.sender_waits.store(waits as u32, Ordering::SeqCst);
    }

    /// Receiver, after freeing room: whether the sender sleeps waiting for it (the
    /// flag is cleared; wake the sender when true).
    pub fn take_sender_waits(&self) -> bool {
        fence(Ordering::SeqCst);
        self.sender_waits.load(Ordering::Relaxed) != 0 && self.sender_waits.swap(0, Ordering::AcqRel) != 0
    }

    /// Job `i` of the slot, if `i` names one (an index from a ring entry may not).
    pub fn job(&self, i: usize) -> Option<&Job> {
        self.jobs.get(i)
    }

    /// The slot's ring (sender to receiver), valid while the segment is mapped. It is
    /// initialised by [`Segment::claim_slot`] before the state becomes [`SLOT_ACTIVE`].
    pub fn ring_ptr(&self) -> NonNull<Ring> {
        NonNull::from(&self.ring)
    }

    /// The slot's ring, for [`Ring::free_at`] (its ends are made from
    /// [`ring_ptr`](Slot::ring_ptr)).
    pub fn ring(&self) -> &Ring {
        &self.ring
    }
}

/// One mapping of a segment: the owner's (from [`Segment::create`]) or a sender's (from
/// [`Segment::attach`]).
pub struct Segment {
    /// The mapping: [`SEGMENT_SIZE`] bytes, page aligned, shared, read-write, until drop.
    base: NonNull<u8>,
    /// The open file (for `fallocate` when a slot is claimed).
    file: File,
    name: String,
    /// Created by us: we unlink it (at the latest on drop).
    owner: bool,
    /// Whether we have unlinked it.
    unlinked: AtomicBool,
}

// SAFETY: `Segment` is a handle to a process-wide shared mapping: `base` is valid in every
// thread, everything reached through it is atomic (header, slot control, rings) or raw
// bytes reached only by raw pointer (bounce buffers), and the mapping stays until drop;
// the other fields are `File`, `String` and `AtomicBool`, which are Send and Sync.
unsafe impl Send for Segment {}
// SAFETY: as above: every `&self` method only does atomic accesses or system calls.
unsafe impl Sync for Segment {}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment").field("name", &self.name).field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl Segment {
    /// Create the segment `name` (a [`valid_name`]) as its owner: a new file in
    /// [`SHM_DIR`], mode `0600` whatever the umask, with an initialised header and all
    /// slots free.
    ///
    /// A file of that name that is a stale segment (see [`cleanup_stale`]: its owner is
    /// dead) is replaced. Errors: [`Error::Inval`] for an invalid name,
    /// [`Error::AddrInUse`] when the file exists otherwise, [`Error::NoSpc`] when
    /// `/dev/shm` is full, others from the system.
    pub fn create(name: &str) -> Result<Segment> {
        if !valid_name(name) {
            return Err(Error::Inval);
        }
        let path = path_of(name);
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
        };
        let file = match open() {
            // A segment that a dead process left under this name (a fixed name reused
            // after a crash): remove it as `cleanup_stale` would, and take the name.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => match stale(&path, euid()) {
                Some(id) if remove_if_same(&path, id) => open(),
                _ => Err(e),
            },
            r => r,
        }
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EEXIST) => Error::AddrInUse,
            _ => open_error(e),
        })?;
        let setup = || -> Result<NonNull<u8>> {
            // The umask may have taken bits away (or, for a strange umask, not): be exact.
            file.set_permissions(Permissions::from_mode(0o600))?;
            file.set_len(SEGMENT_SIZE as u64)?;
            allocate(&file, 0, HEADER_SIZE)?;
            Ok(map(&file)?)
        };
        let base = match setup() {
            Ok(base) => base,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        let seg = Segment { base, file, name: name.to_string(), owner: true, unlinked: AtomicBool::new(false) };
        let h = seg.header();
        let pid = std::process::id() as i32;
        h.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        h.owner_uid.store(euid(), Ordering::Relaxed);
        h.size.store(SEGMENT_SIZE as u64, Ordering::Relaxed);
        h.owner_pid.store(pid, Ordering::Relaxed);
        h.closed.store(0, Ordering::Relaxed);
        h.owner_start.store(start_time(pid).unwrap_or(0), Ordering::Relaxed);
        h.owner_pidns.store(pidns(), Ordering::Relaxed);
        h.probe_addr.store(local_probe_addr(), Ordering::Relaxed);
        h.sleepers.0.store(0, Ordering::Relaxed);
        // The claim bitmap and all slots are zero: a new file reads as zeroes.
        // Release: whoever sees the magic (Acquire) sees all of the above.
        h.magic.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Map the segment `name` of another endpoint (or our own) to send to it.
    ///
    /// Refuses, with [`Error::Access`], a file that is not owned by our effective uid,
    /// that the group or others may access, or that is a symbolic link; with
    /// [`Error::Inval`] an invalid name or a file that is not a segment of this layout
    /// (not a regular file, wrong size, bad magic or version); with [`Error::NoEnt`] a
    /// name with no file; with [`Error::ConnRefused`] a segment whose owner closed it or
    /// is dead.
    pub fn attach(name: &str) -> Result<Segment> {
        if !valid_name(name) {
            return Err(Error::Inval);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path_of(name))
            .map_err(open_error)?;
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(Error::Inval);
        }
        if meta.uid() != euid() || meta.mode() & 0o077 != 0 {
            return Err(Error::Access);
        }
        if meta.len() != SEGMENT_SIZE as u64 {
            return Err(Error::Inval);
        }
        let base = map(&file)?;
        let seg = Segment { base, file, name: name.to_string(), owner: false, unlinked: AtomicBool::new(false) };
        let h = seg.header();
        // Acquire: pairs with the owner's Release store of the magic.
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.version.load(Ordering::Relaxed) != LAYOUT_VERSION
            || h.size.load(Ordering::Relaxed) != SEGMENT_SIZE as u64
        {
            return Err(Error::Inval);
        }
        if h.owner_uid.load(Ordering::Relaxed) != euid() {
            return Err(Error::Access);
        }
        if seg.is_closed() || !seg.owner_alive() {
            return Err(Error::ConnRefused);
        }
        Ok(seg)
    }

    /// The header. All atomics: a shared reference is fine although other processes write.
    fn header(&self) -> &Header {
        // SAFETY: the mapping is SEGMENT_SIZE >= size_of::<Header>() bytes, page aligned
        // (more than Header needs), and lives as long as `self`; Header is made of atomics
        // only, for which every bit pattern (zero included) is valid, and whose interior
        // mutability allows the concurrent writes of other processes.
        unsafe { self.base.cast::<Header>().as_ref() }
    }

    /// The segment's (endpoint's) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this mapping created the segment (and will unlink it).
    pub fn is_owner(&self) -> bool {
        self.owner
    }

    /// The owner's pid and start time (0 when unknown), as the header says.
    pub fn owner(&self) -> (i32, u64) {
        let h = self.header();
        (h.owner_pid.load(Ordering::Relaxed), h.owner_start.load(Ordering::Relaxed))
    }

    /// Whether the owner still runs ([`alive`]); true when it is in another pid namespace
    /// (nothing can be told from here).
    pub fn owner_alive(&self) -> bool {
        let h = self.header();
        let (pid, start) = self.owner();
        !same_pidns(h.owner_pidns.load(Ordering::Relaxed)) || alive(pid, start)
    }

    /// The address, in the owner, of its [`PROBE_VALUE`] (see [`cma_probe`]).
    pub fn probe_addr(&self) -> u64 {
        self.header().probe_addr.load(Ordering::Relaxed)
    }

    /// Whether cross-memory attach to the owner works: it is in our pid namespace (so
    /// that its pid names it here) and [`cma_probe`] reads its probe. Prefer this to
    /// calling [`cma_probe`] with [`owner`](Segment::owner) and
    /// [`probe_addr`](Segment::probe_addr), which cannot tell a process of another pid
    /// namespace that has the same pid.
    pub fn probe_cma(&self) -> bool {
        let h = self.header();
        same_pidns(h.owner_pidns.load(Ordering::Relaxed))
            && cma_probe(h.owner_pid.load(Ordering::Relaxed), self.probe_addr())
    }

    /// Whether the owner has closed the segment (Acquire).
    pub fn is_closed(&self) -> bool {
        self.header().closed.load(Ordering::Acquire) != 0
    }

    /// Owner: say that the endpoint is closed (Release); [`attach`](Segment::attach)
    /// refuses it from then on. (Done on drop too.)
    pub fn mark_closed(&self) {
        self.header().closed.store(1, Ordering::Release);
    }

    /// Nonzero while the owner sleeps or is about to: a sender that sees it after
    /// publishing calls [`wake`] with the segment's name.
    pub fn sleepers(&self) -> &AtomicU32 {
        &self.header().sleepers.0
    }

    /// Slot `i`.
    ///
    /// # Panics
    ///
    /// When `i >= SLOTS` (a bug of the caller: indices come from [`claim_slot`] or
    /// [`claimed_slots`]).
    ///
    /// [`claim_slot`]: Segment::claim_slot
    /// [`claimed_slots`]: Segment::claimed_slots
    pub fn slot(&self, i: usize) -> &Slot {
        assert!(i < SLOTS, "slot {i} of a segment of {SLOTS}");
        // SAFETY: slot i lies at HEADER_SIZE + i * SLOT_SIZE, within the SEGMENT_SIZE bytes
        // of the mapping (i < SLOTS), which stays as long as `self`; the mapping is page
        // aligned and so is that offset, as Slot needs. Every field of Slot is an atomic, a
        // Ring (atomics and cells of bytes) or a cell of bytes: every bit pattern is valid
        // and interior mutability allows other processes' writes.
        unsafe { self.base.add(HEADER_SIZE + i * SLOT_SIZE).cast::<Slot>().as_ref() }
    }

    /// Sender: claim a free slot, set it up (ring initialised, bounce buffers all the
    /// sender's, our identity) and make it [`SLOT_ACTIVE`]; its index.
    ///
    /// `my_name` is our endpoint's name (the receiver replies through our segment),
    /// `my_pid` and `my_start` our pid and [`start_time`]. Errors: [`Error::Again`] when all
    /// [`SLOTS`] are taken (one may be released later), [`Error::Inval`] for an invalid
    /// name, [`Error::NoSpc`] when `/dev/shm` has no room for the slot's memory.
    pub fn claim_slot(&self, my_name: &str, my_pid: i32, my_start: u64) -> Result<usize> {
        if !valid_name(my_name) {
            return Err(Error::Inval);
        }
        let h = self.header();
        for (w, word) in h.claim.0.words.iter().enumerate() {
            let mut cur = word.load(Ordering::Relaxed);
            while cur != u64::MAX {
                let bit = (!cur).trailing_zeros() as usize;
                let mask = 1u64 << bit;
                // Acquire: the owner's accesses to a released slot happen before ours
                // (its Release in `release_slot`).
                let prev = word.fetch_or(mask, Ordering::AcqRel);
                if prev & mask == 0 {
                    let i = w * 64 + bit;
                    if w > 0 {
                        // Before the slot becomes active, so before any entry in it
                        // (see `claimed_after_first_word`).
                        h.claim.0.high.store(1, Ordering::Release);
                    }
                    return match self.set_up_slot(i, my_name, my_pid, my_start) {
                        Ok(()) => Ok(i),
                        Err(e) => {
                            word.fetch_and(!mask, Ordering::Release);
                            Err(e)
                        }
                    };
                }
                cur = prev | mask;
            }
        }
        Err(Error::Again)
    }

    /// Set up slot `i`, just claimed by us.
    fn set_up_slot(&self, i: usize, name: &str, pid: i32, start: u64) -> Result<()> {
        allocate(&self.file, HEADER_SIZE + i * SLOT_SIZE, SLOT_SIZE)?;
        let slot = self.slot(i);
        slot.ring.init();
        for b in &slot.bounce_busy {
            b.store(0, Ordering::Relaxed);
        }
        slot.sender_waits.store(0, Ordering::Relaxed);
        slot.name_len.store(name.len() as u32, Ordering::Relaxed);
        for (dst, &b) in slot.name.iter().zip(name.as_bytes()) {
            dst.store(b, Ordering::Relaxed);
        }
        slot.pid.store(pid, Ordering::Relaxed);
        slot.start.store(start, Ordering::Relaxed);
        slot.pidns.store(pidns(), Ordering::Relaxed);
        // Release: the owner, seeing ACTIVE (Acquire), sees the ring and identity above.
        slot.set_state(SLOT_ACTIVE);
        Ok(())
    }

    /// Word `w` (below `SLOTS / 64`: a larger `w` panics) of
    /// [`claimed_slots`](Segment::claimed_slots):
    /// slots `64 * w` to `64 * w + 63`.
    #[inline]
    pub fn claim_word(&self, w: usize) -> u64 {
        self.header().claim.0.words[w].load(Ordering::Acquire)
    }

    /// Owner: whether any slot of words 1 and up of the claim bitmap (all but the first
    /// 64 slots) may be claimed: once one was, always true. One load, where reading
    /// the words would be three.
    ///
    /// A claimer stores the flag before its slot becomes active, hence before it
    /// publishes any entry there and before the fence that precedes its look for a
    /// sleeping owner: an owner that fenced after that fence (a sleep's last poll)
    /// sees the flag.
    #[inline]
    pub fn claimed_after_first_word(&self) -> bool {
        self.header().claim.0.high.load(Ordering::Acquire) != 0
    }

    /// Owner: a snapshot of the claim bitmap (bit `i % 64` of word `i / 64` set while slot
    /// `i` is claimed). A claimed slot becomes usable only once its state is
    /// [`SLOT_ACTIVE`]; until then its claimer is still setting it up.
    pub fn claimed_slots(&self, out: &mut [u64; SLOTS / 64]) {
        for (o, word) in out.iter_mut().zip(&self.header().claim.0.words) {
            *o = word.load(Ordering::Acquire);
        }
    }

    /// Owner: make slot `i` free again, once its sender has closed it (or died) and the
    /// owner has drained its ring and has no bounce buffer of it left. Its next claimer
    /// sets it up anew.
    ///
    /// # Panics
    ///
    /// When `i >= SLOTS`.
    pub fn release_slot(&self, i: usize) {
        let slot = self.slot(i);
        slot.name_len.store(0, Ordering::Relaxed);
        slot.pid.store(0, Ordering::Relaxed);
        slot.start.store(0, Ordering::Relaxed);
        slot.state.store(SLOT_FREE, Ordering::Relaxed);
        // Release: everything we did with the slot happens before the next claimer's
        // fetch_or (Acquire) that finds the bit clear.
        self.header().claim.0.words[i / 64].fetch_and(!(1u64 << (i % 64)), Ordering::Release);
    }

    /// Owner: remove the file, so that nobody attaches any more (mappings stay valid).
    /// Done on drop at the latest; a second call does nothing. [`Error::Perm`] when this
    /// mapping is not the owner's.
    pub fn unlink(&self) -> Result<()> {
        if !self.owner {
            return Err(Error::Perm);
        }
        if self.unlinked.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match std::fs::remove_file(path_of(&self.name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.owner {
            self.mark_closed();
            let _ = self.unlink();
        }
        // SAFETY: `base` is our mapping of SEGMENT_SIZE bytes; every reference into it
        // borrows `self`, so none is left, and pointers handed out (`ring_ptr`,
        // `bounce_ptr`) are valid only while the segment lives, as documented.
        unsafe { libc::munmap(self.base.as_ptr().cast(), SEGMENT_SIZE) };
    }
}

/// Whether `name` may name an endpoint (a segment file, a wake-up socket): 1 to
/// [`NAME_MAX`] bytes of `A-Z a-z 0-9 . _ -`, not starting with a dot.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= NAME_MAX
        && b[0] != b'.'
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// A new, unique endpoint name: [`PREFIX`]`<euid>-<pid>-<16 random hex digits>`.
pub fn new_name() -> String {
    format!("{PREFIX}{}-{}-{:016x}", euid(), std::process::id(), fabric_util::random::u64_or_fallback())
}

/// The path of segment `name`.
fn path_of(name: &str) -> PathBuf {
    PathBuf::from(SHM_DIR).join(name)
}

/// Our effective uid.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The error of opening a segment: a symbolic link (`O_NOFOLLOW`) is refused access.
fn open_error(e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) => Error::Access,
        _ => e.into(),
    }
}

/// Map a whole segment file, shared and read-write.
fn map(file: &File) -> io::Result<NonNull<u8>> {
    // SAFETY: a new mapping at an address of the kernel's choice (no MAP_FIXED), so no
    // existing memory changes; the file descriptor is open for reading and writing.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            SEGMENT_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

/// Give bytes `offset..offset + len` of the file memory now, so that touching them later
/// cannot fault for want of room; nothing where the file system cannot.
fn allocate(file: &File, offset: usize, len: usize) -> Result<()> {
    loop {
        // SAFETY: fallocate touches no memory of ours; the descriptor is open for writing.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset as libc::off_t, len as libc::off_t) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => return Ok(()),
            _ => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::testutil::{dead_pid, fs_lock, TempFile};
    use std::sync::Arc;

    fn mode_of(name: &str) -> u32 {
        std::fs::symlink_metadata(path_of(name)).unwrap().mode() & 0o7777
    }

    #[test]
    fn layout() {
        assert_eq!(size_of::<Ring>(), crate::ring::RING_ENTRIES * 256);
        assert_eq!(SLOT_SIZE, 37 * 4096);
        assert_eq!(offset_of!(Slot, ring), 128);
        assert_eq!(offset_of!(Slot, jobs), 128 + size_of::<Ring>());
        assert_eq!(offset_of!(Slot, bounce), 5 * 4096);
        assert!(size_of::<Header>() <= HEADER_SIZE);
        assert_eq!(SEGMENT_SIZE, 4096 + 256 * 37 * 4096);
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Segment>();
        send_sync::<Slot>();
        send_sync::<Waker>();
    }

    #[test]
    fn names() {
        let a = new_name();
        let b = new_name();
        assert_ne!(a, b);
        assert!(valid_name(&a), "{a}");
        assert!(a.starts_with(&format!("{PREFIX}{}-{}-", euid(), std::process::id())), "{a}");
        assert!(a.len() <= NAME_MAX);
        for bad in ["", ".", "..", ".hidden", "a/b", "../x", "a\0b", "a b", "é", &"x".repeat(NAME_MAX + 1)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(valid_name(&"x".repeat(NAME_MAX)));
    }

    #[test]
    fn create_then_attach() {
        let name = new_name();
        let owner = Segment::create(&name).unwrap();
        assert_eq!(mode_of(&name), 0o600);
        assert_eq!(std::fs::metadata(path_of(&name)).unwrap().len(), SEGMENT_SIZE as u64);
        let peer = Segment::attach(&name).unwrap();
        let me = std::process::id() as i32;
        assert_eq!(peer.name(), name);
        assert!(owner.is_owner() && !peer.is_owner());
        assert_eq!(peer.owner(), (me, start_time(me).unwrap()));
        assert_eq!(owner.owner(), peer.owner());
        assert_eq!(peer.probe_addr(), local_probe_addr());
        assert!(peer.owner_alive());
        assert!(peer.probe_cma());
        assert!(!peer.is_closed());
        let h = peer.header();
        assert_eq!(h.version.load(Ordering::Relaxed), LAYOUT_VERSION);
        assert_eq!(h.size.load(Ordering::Relaxed), SEGMENT_SIZE as u64);
        assert_eq!(h.owner_uid.load(Ordering::Relaxed), euid());
        // Both mappings see the same memory.
        owner.sleepers().store(7, Ordering::SeqCst);
        assert_eq!(peer.sleepers().load(Ordering::SeqCst), 7);
        assert_eq!(peer.unlink(), Err(Error::Perm));
        assert_eq!(Segment::create(&name).unwrap_err(), Error::AddrInUse);
        // Closed: attached mappings see it, new ones are refused.
        owner.mark_closed();
        assert!(peer.is_closed());
        assert_eq!(Segment::attach(&name).unwrap_err(), Error::ConnRefused);
        drop(owner);
        assert!(!path_of(&name).exists(), "the owner unlinks on drop");
        // The peer's mapping stays usable.
        assert_eq!(peer.sleepers().load(Ordering::SeqCst), 7);
    }

    #[test]
    fn mode_is_0600_whatever_the_umask() {
        let _g = fs_lock();
        for mask in [0, 0o022, 0o277, 0o777] {
            // SAFETY: umask has no preconditions.
            let old = unsafe { libc::umask(mask) };
            let name = new_name();
            let seg = Segment::create(&name);
            // SAFETY: as above.
            unsafe { libc::umask(old) };
            let _seg = seg.unwrap();
            assert_eq!(mode_of(&name), 0o600, "umask {mask:o}");
            Segment::attach(&name).unwrap();
        }
    }

    #[test]
    fn attach_refuses_what_is_not_a_segment_of_ours() {
        let _g = fs_lock();
        assert_eq!(Segment::attach(&new_name()).unwrap_err(), Error::NoEnt);
        for bad in ["", "../etc/passwd", "a/b", ".x", &"x".repeat(NAME_MAX + 1)] {
            assert_eq!(Segment::attach(bad).unwrap_err(), Error::Inval, "{bad:?}");
            assert_eq!(Segment::create(bad).unwrap_err(), Error::Inval, "{bad:?}");
        }
        // Right size, no magic (a creator that died before writing it), or a wrong one.
        let n = new_name();
        let _f = TempFile::new(&n, 0o600, SEGMENT_SIZE as u64, &[]);
        assert_eq!(Segment::attach(&n).unwrap_err(), Error::Inval);
        let n = new_name();
        let _f = TempFile::new(&n, 0o600, SEGMENT_SIZE as u64, b"NOTMAGIC");
        assert_eq!(Segment::attach(&n).unwrap_err(), Error::Inval);
        // Wrong size.
        let n = new_name();
        let _f = TempFile::new(&n, 0o600, 4096, &MAGIC.to_ne_bytes());
        assert_eq!(Segment::attach(&n).unwrap_err(), Error::Inval);
        // A directory.
        let n = new_name();
        std::fs::create_dir(path_of(&n)).unwrap();
        let r = Segment::attach(&n);
        std::fs::remove_dir(path_of(&n)).unwrap();
        assert!(matches!(r.unwrap_err(), Error::Inval | Error::Other(libc::EISDIR)));
        // A real segment that the group or others may read.
        let n = new_name();
        let seg = Segment::create(&n).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o601] {
            std::fs::set_permissions(path_of(&n), Permissions::from_mode(mode)).unwrap();
            assert_eq!(Segment::attach(&n).unwrap_err(), Error::Access, "mode {mode:o}");
        }
        std::fs::set_permissions(path_of(&n), Permissions::from_mode(0o600)).unwrap();
        Segment::attach(&n).unwrap();
        // A symbolic link to it.
        let link = new_name();
        std::os::unix::fs::symlink(path_of(&n), path_of(&link)).unwrap();
        let r = Segment::attach(&link);
        std::fs::remove_file(path_of(&link)).unwrap();
        assert_eq!(r.unwrap_err(), Error::Access);
        // Another version of the layout.
        seg.header().version.store(LAYOUT_VERSION + 1, Ordering::Relaxed);
        assert_eq!(Segment::attach(&n).unwrap_err(), Error::Inval);
        seg.header().version.store(LAYOUT_VERSION, Ordering::Relaxed);
        // Another uid in the header (the file's owner is checked first, and is us).
        seg.header().owner_uid.store(euid().wrapping_add(1), Ordering::Relaxed);
        assert_eq!(Segment::attach(&n).unwrap_err(), Error::Access);
        seg.header().owner_uid.store(euid(), Ordering::Relaxed);
        // An owner that is dead. (Which makes the segment stale: a `cleanup_stale` of a
        // concurrent test run may remove it first.)
        let (pid, start) = dead_pid();
        seg.header().owner_pid.store(pid, Ordering::Relaxed);
        seg.header().owner_start.store(start, Ordering::Relaxed);
        match Segment::attach(&n) {
            Err(Error::ConnRefused) => {}
            Err(Error::NoEnt) => eprintln!("dead owner: segment removed by a concurrent cleanup"),
            other => panic!("attach to a segment of a dead owner: {other:?}"),
        }
    }

    #[test]
    fn another_user_cannot_open() {
        if euid() != 0 {
            fabric_testkit::skip("root", "not root, so cannot become another user");
            return;
        }
        let name = new_name();
        let _seg = Segment::create(&name).unwrap();
        let path = std::ffi::CString::new(path_of(&name).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: the child (one thread, copy of a multithreaded parent) calls only
        // async-signal-safe functions: raw setuid, open, errno, _exit. No allocation.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", io::Error::last_os_error());
        if child == 0 {
            // SAFETY: see above; `path` was made before the fork and is valid here.
            unsafe {
                // The raw system call changes this (only) thread's credentials, without
                // glibc's cross-thread machinery.
                if libc::syscall(libc::SYS_setuid, 65534) != 0 {
                    libc::_exit(3);
                }
                let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC);
                if fd >= 0 {
                    libc::_exit(1);
                }
                libc::_exit(if *libc::__errno_location() == libc::EACCES { 0 } else { 2 });
            }
        }
        let mut status = 0;
        // SAFETY: waits for our own child; writes only `status`.
        let r = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(r, child);
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        match libc::WEXITSTATUS(status) {
            0 => {}
            3 => fabric_testkit::skip("root", "setuid(65534) refused here"),
            1 => panic!("uid 65534 opened a segment of uid 0"),
            c => panic!("uid 65534 could not open the segment, but not with EACCES (exit {c})"),
        }
    }

    #[test]
    fn claim_from_many_threads() {
        let name = new_name();
        let owner = Arc::new(Segment::create(&name).unwrap());
        let peer = Arc::new(Segment::attach(&name).unwrap());
        let me = std::process::id() as i32;
        let start = start_time(me).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let peer = peer.clone();
                std::thread::spawn(move || {
                    (0..SLOTS / 8)
                        .map(|_| peer.claim_slot(&format!("sender-{t}"), me, start).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut got: Vec<usize> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..SLOTS).collect::<Vec<_>>());
        assert_eq!(peer.claim_slot("late", me, start), Err(Error::Again));
        let mut bits = [0u64; SLOTS / 64];
        owner.claimed_slots(&mut bits);
        assert_eq!(bits, [u64::MAX; SLOTS / 64]);
        for i in 0..SLOTS {
            let s = owner.slot(i);
            assert_eq!(s.state(), SLOT_ACTIVE);
            let n = s.peer_name().unwrap();
            assert!(n.starts_with("sender-"), "{n}");
            assert_eq!(s.peer_id(), (me, start));
            assert!(s.peer_alive());
            assert!(s.bounce_busy.iter().all(|b| b.load(Ordering::Relaxed) == 0));
        }
        // The sender closes slot 77; the owner drains and releases it; it is claimable again.
        peer.slot(77).set_state(SLOT_CLOSED);
        assert_eq!(owner.slot(77).state(), SLOT_CLOSED);
        owner.release_slot(77);
        owner.claimed_slots(&mut bits);
        assert_eq!(bits[1], !(1 << (77 - 64)));
        assert_eq!(owner.slot(77).state(), SLOT_FREE);
        assert_eq!(peer.claim_slot("again", me, start), Ok(77));
        assert_eq!(owner.slot(77).peer_name().as_deref(), Some("again"));
        assert_eq!(peer.claim_slot("late", me, start), Err(Error::Again));
        assert_eq!(peer.claim_slot("bad/name", me, start), Err(Error::Inval));
    }

    #[test]
    fn claims_past_the_first_word_are_flagged_for_good() {
        let name = new_name();
        let owner = Segment::create(&name).unwrap();
        let peer = Segment::attach(&name).unwrap();
        let me = std::process::id() as i32;
        let start = start_time(me).unwrap();
        assert!(!owner.claimed_after_first_word());
        for i in 0..64 {
            assert_eq!(peer.claim_slot("low", me, start), Ok(i));
        }
        assert!(!owner.claimed_after_first_word(), "only the first word is claimed");
        assert_eq!(peer.claim_slot("high", me, start), Ok(64));
        assert!(owner.claimed_after_first_word());
        // Released, the flag stays: progress looks at the words for nothing then.
        peer.slot(64).set_state(SLOT_CLOSED);
        owner.release_slot(64);
        let mut bits = [0u64; SLOTS / 64];
        owner.claimed_slots(&mut bits);
        assert_eq!(bits[1..], [0; SLOTS / 64 - 1]);
        assert!(owner.claimed_after_first_word());
    }

    #[test]
    fn a_claimed_slot_is_usable() {
        let name = new_name();
        let owner = Segment::create(&name).unwrap();
        let peer = Segment::attach(&name).unwrap();
        let i = peer.claim_slot("me", 1, 2).unwrap();
        assert_eq!(i, 0);
        let (ps, os) = (peer.slot(i), owner.slot(i));
        // The ring is initialised and shared: a producer in one mapping, a consumer in the
        // other.
        // SAFETY: initialised by claim_slot; both segments outlive the ends; one end each.
        let (mut p, mut c) =
            unsafe { (crate::ring::Producer::new(ps.ring_ptr()), crate::ring::Consumer::new(os.ring_ptr())) };
        assert!(p.try_push(|e| e[0] = 42));
        assert_eq!(c.peek(|e| e[0]), Some(42));
        c.advance();
        // Bounce buffers: same bytes through both mappings, only by raw pointer.
        let (src, dst) = (ps.bounce_ptr(BOUNCE_COUNT - 1), os.bounce_ptr(BOUNCE_COUNT - 1));
        let data: Vec<u8> = (0..BOUNCE_SIZE).map(|x| x as u8).collect();
        let mut out = vec![0u8; BOUNCE_SIZE];
        // SAFETY: each buffer is BOUNCE_SIZE bytes of the live mappings; no reference to
        // them exists; `data` and `out` are ours.
        unsafe {
            ptr::copy_nonoverlapping(data.as_ptr(), src, BOUNCE_SIZE);
            ptr::copy_nonoverlapping(dst, out.as_mut_ptr(), BOUNCE_SIZE);
        }
        assert_eq!(out, data);
        assert_eq!(os.bounce_ptr(0).wrapping_add(BOUNCE_COUNT * BOUNCE_SIZE), dst.wrapping_add(BOUNCE_SIZE));
        // Only that slot's memory was allocated: header + one slot (exactly, with 4 KiB
        // pages; a 2 MiB page or two where tmpfs uses huge pages), not the whole file.
        let bytes = std::fs::metadata(path_of(&name)).unwrap().blocks() * 512;
        assert!(bytes >= (HEADER_SIZE + SLOT_SIZE) as u64 && bytes <= 4 << 20, "{bytes} bytes allocated");
    }

    #[test]
    fn hostile_identities_are_refused() {
        let name = new_name();
        let seg = Segment::create(&name).unwrap();
        let i = seg.claim_slot("fine", 1, 2).unwrap();
        let s = seg.slot(i);
        assert_eq!(s.peer_name().as_deref(), Some("fine"));
        for len in [0, NAME_MAX as u32 + 1, u32::MAX] {
            s.name_len.store(len, Ordering::Relaxed);
            assert_eq!(s.peer_name(), None, "length {len}");
        }
        s.name_len.store(4, Ordering::Relaxed);
        s.name[1].store(0xff, Ordering::Relaxed);
        assert_eq!(s.peer_name(), None, "not UTF-8");
        s.name[1].store(b'/', Ordering::Relaxed);
        assert_eq!(s.peer_name(), None, "not a valid name");
        s.name_len.store(NAME_MAX as u32, Ordering::Relaxed);
        for b in &s.name {
            b.store(b'z', Ordering::Relaxed);
        }
        assert_eq!(s.peer_name(), Some("z".repeat(NAME_MAX)));
        s.pid.store(0, Ordering::Relaxed);
        assert!(!s.peer_alive());
        s.pid.store(-1, Ordering::Relaxed);
        assert!(!s.peer_alive());
        s.state.store(12345, Ordering::Relaxed);
        assert_eq!(s.state(), 12345);
    }

    #[test]
    #[should_panic(expected = "bounce buffer 8")]
    fn bounce_index_out_of_range_panics() {
        let seg = Segment::create(&new_name()).unwrap();
        seg.slot(0).bounce_ptr(BOUNCE_COUNT);
    }

    #[test]
    #[should_panic(expected = "slot 256")]
    fn slot_index_out_of_range_panics() {
        let seg = Segment::create(&new_name()).unwrap();
        seg.slot(SLOTS);
    }
}
