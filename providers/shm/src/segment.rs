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

use crate::ring::Ring;
use fabric_core::prov::IoVec;
use fabric_core::{Error, Result};
use std::cell::UnsafeCell;
use std::fmt;
use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::mem::{self, offset_of, size_of};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::ptr::{self, NonNull};
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

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
/// from `aux` to `data`.
const LAYOUT_VERSION: u32 = 3;
/// Words of the claim bitmap.
const CLAIM_WORDS: usize = SLOTS / 64;
/// How old an incomplete segment file (too short, no magic) must be before
/// [`cleanup_stale`] takes its creator for dead.
const STALE_GRACE: Duration = Duration::from_secs(5);
/// Most iovec elements one `process_vm_readv`/`process_vm_writev` call takes (`IOV_MAX`).
const IOV_MAX: usize = 1024;

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
    /// Bit `i % 64` of word `i / 64` is set while slot `i` is claimed.
    claim: Line<[AtomicU64; CLAIM_WORDS]>,
}

/// The bounce buffers of a slot, page aligned. Reached only through raw pointers.
#[repr(C, align(4096))]
struct Bounce(UnsafeCell<[[u8; BOUNCE_SIZE]; BOUNCE_COUNT]>);

/// Jobs per slot: large messages from one sender that its receiver can be copying
/// together with it at one time.
pub const JOBS: usize = 4;

/// A large message copied by both processes at once (cross-memory attach), in chunks
/// that either claims: the receiver reads chunks (`process_vm_readv`) while the sender,
/// asked by a `Help` entry, writes chunks (`process_vm_writev`), so the copy runs on two
/// cores. A sender that never looks at its rings costs nothing: the receiver claims
/// every chunk itself.
///
/// Only the receiver (the segment's owner) starts a job, and only once the previous use
/// of it is finished (`done` equals its chunk count). A claim names the job's
/// generation, so a late claimer of an earlier use finds a different generation and
/// claims nothing. Every bit pattern is a value; a broken peer can stall or corrupt
/// the message it sends, nothing else.
#[repr(C, align(64))]
pub struct Job {
    /// `generation << 32 | next chunk to claim`. Claimed with compare-and-swap; the
    /// receiver stores a new generation with chunk 0 when it starts a use.
    claim: AtomicU64,
    /// Chunks copied (or failed) under the current generation: each claimer adds one
    /// after its copy returned (Release), so the receiver that reads the count of
    /// chunks (Acquire) sees every byte of them.
    done: AtomicU64,
    /// Non-zero when a claimer's copy failed (an errno).
    err: AtomicU32,
}

impl Job {
    /// Receiver: begin a use under generation `gen` (chunk 0, none done).
    pub fn start(&self, gen: u32) {
        self.done.store(0, Ordering::Relaxed);
        self.err.store(0, Ordering::Relaxed);
        // Release: whoever claims under `gen` (Acquire) sees `done` and `err` reset.
        self.claim.store((gen as u64) << 32, Ordering::Release);
    }

    /// Claim the next of `chunks` chunks under generation `gen`: its index, or `None`
    /// when every chunk is claimed or the job is in another generation.
    pub fn claim(&self, gen: u32, chunks: u32) -> Option<u32> {
        let mut cur = self.claim.load(Ordering::Acquire);
        loop {
            if (cur >> 32) as u32 != gen || (cur as u32) >= chunks {
                return None;
            }
            match self.claim.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(cur as u32),
                Err(now) => cur = now,
            }
        }
    }

    /// Claim chunks of `chunk` bytes (of `total`) under `gen` until none is left,
    /// copying each with `copy(offset, len)`, which returns the chunk's errno (0 when
    /// all of it moved).
    pub fn work(&self, gen: u32, chunks: u32, chunk: u64, total: u64, mut copy: impl FnMut(u64, u64) -> u32) {
        while let Some(k) = self.claim(gen, chunks) {
            let off = k as u64 * chunk;
            let len = chunk.min(total.saturating_sub(off));
            self.finish(copy(off, len));
        }
    }

    /// Claim every chunk left under `gen`: how many that was (the caller counts them as
    /// done with [`Job::finish_many`], having copied none).
    pub fn claim_rest(&self, gen: u32, chunks: u32) -> u32 {
        let mut n = 0;
        while self.claim(gen, chunks).is_some() {
            n += 1;
        }
        n
    }

    /// A claimed chunk is copied (`err` 0) or failed.
    pub fn finish(&self, err: u32) {
        self.finish_many(1, err);
    }

    /// `n` claimed chunks are copied (`err` 0) or failed.
    pub fn finish_many(&self, n: u32, err: u32) {
        if err != 0 {
            self.err.store(err, Ordering::Relaxed);
        }
        // Release: our copy (and `err`) happen before the receiver's Acquire load.
        self.done.fetch_add(n as u64, Ordering::Release);
    }

    /// Chunks finished so far, and the error recorded, if any.
    pub fn progress(&self) -> (u64, u32) {
        let done = self.done.load(Ordering::Acquire);
        (done, self.err.load(Ordering::Relaxed))
    }
}

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
        for (w, word) in h.claim.0.iter().enumerate() {
            let mut cur = word.load(Ordering::Relaxed);
            while cur != u64::MAX {
                let bit = (!cur).trailing_zeros() as usize;
                let mask = 1u64 << bit;
                // Acquire: the owner's accesses to a released slot happen before ours
                // (its Release in `release_slot`).
                let prev = word.fetch_or(mask, Ordering::AcqRel);
                if prev & mask == 0 {
                    let i = w * 64 + bit;
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

    /// Owner: a snapshot of the claim bitmap (bit `i % 64` of word `i / 64` set while slot
    /// `i` is claimed). A claimed slot becomes usable only once its state is
    /// [`SLOT_ACTIVE`]; until then its claimer is still setting it up.
    pub fn claimed_slots(&self, out: &mut [u64; SLOTS / 64]) {
        for (o, word) in out.iter_mut().zip(&self.header().claim.0) {
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
        self.header().claim.0[i / 64].fetch_and(!(1u64 << (i % 64)), Ordering::Release);
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

// ---------------------------------------------------------------------------------------
// Liveness
// ---------------------------------------------------------------------------------------

/// A pid as the kernel takes it: `None` for 0 (our process group to `kill`) and for
/// values that would be negative (groups, or every process).
fn to_pid(pid: i32) -> Option<libc::pid_t> {
    Some(pid).filter(|&p| p > 0)
}

/// Parse `/proc/<pid>/stat`: the state letter (field 3) and the start time (field 22).
fn proc_stat(pid: i32) -> Option<(u8, u64)> {
    let text = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // Field 2, the command, is in parentheses and may hold anything, ')' included.
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    // Fields 4..=21 come between the state and the start time.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The start time of process `pid` (`/proc/<pid>/stat` field 22, in clock ticks since
/// boot): with the pid it names one process, whatever pids are reused later. `None` when
/// there is no such process (or no `/proc`).
pub fn start_time(pid: i32) -> Option<u64> {
    to_pid(pid)?;
    proc_stat(pid).map(|(_, start)| start)
}

/// Whether process `pid`, started at `start` ([`start_time`]; 0 when unknown, which
/// checks the pid alone), still runs: it exists (`kill(pid, 0)` succeeds or says
/// `EPERM`), is not a zombie, and has that start time. Without `/proc` only the pid is
/// checked.
pub fn alive(pid: i32, start: u64) -> bool {
    let Some(p) = to_pid(pid) else { return false };
    // SAFETY: signal 0 sends nothing; `p > 0` names a single process.
    if unsafe { libc::kill(p, 0) } != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    match proc_stat(pid) {
        Some((state, st)) => !matches!(state, b'Z' | b'X' | b'x') && (start == 0 || st == start),
        // Gone meanwhile, unless there is no /proc to ask.
        None => std::fs::metadata("/proc/self/stat").is_err(),
    }
}

/// A pid file descriptor for `pid` (`pidfd_open`): it becomes readable when the process
/// exits. `None` where unsupported or when there is no such process. The pid may have been
/// reused: confirm with [`alive`] after opening.
pub fn pidfd(pid: i32) -> Option<OwnedFd> {
    let p = to_pid(pid)?;
    // SAFETY: pidfd_open takes a pid and flags and touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p, 0) };
    let fd = RawFd::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: the kernel just gave us this descriptor (close-on-exec); nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The inode of our pid namespace, 0 when unknown.
fn pidns() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).unwrap_or(0))
}

/// Whether a process whose pid namespace is `ns` shares ours (so that its pid means
/// something here). False when either is unknown.
fn same_pidns(ns: u64) -> bool {
    ns != 0 && ns == pidns()
}

// ---------------------------------------------------------------------------------------
// Stale segments
// ---------------------------------------------------------------------------------------

/// Remove the segments that processes of our user left when they died without closing:
/// files of [`SHM_DIR`] named [`PREFIX`]`<our euid>-…`, owned by us, whose owner (pid and
/// start time, in our pid namespace) no longer runs, and incomplete ones (too short, no
/// magic) more than a few seconds old (a creator killed half-way). Never touches other
/// names, other users' files, live owners, owners in other pid namespaces or segments of
/// other layout versions. The number removed.
pub fn cleanup_stale() -> usize {
    let uid = euid();
    let prefix = format!("{PREFIX}{uid}-");
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else { return 0 };
    let mut removed = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(&prefix) || !valid_name(name) {
            continue;
        }
        let path = path_of(name);
        if stale(&path, uid).is_some_and(|id| remove_if_same(&path, id)) {
            removed += 1;
        }
    }
    removed
}

/// Remove the file at `path` if it still is the file `(device, inode)` (not replaced since
/// it was judged); whether it was removed (by us).
fn remove_if_same(path: &std::path::Path, (dev, ino): (u64, u64)) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
        && std::fs::remove_file(path).is_ok()
}

/// Whether the file at `path` is a stale segment of user `uid`; if so its device and inode.
fn stale(path: &std::path::Path, uid: u32) -> Option<(u64, u64)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_file() || meta.uid() != uid {
        return None;
    }
    let id = Some((meta.dev(), meta.ino()));
    let old = meta.modified().ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age > STALE_GRACE);
    let mut buf = [0u8; size_of::<Header>()];
    if meta.len() < buf.len() as u64 || file.read_exact_at(&mut buf, 0).is_err() {
        return if old { id } else { None };
    }
    let u32_at = |off: usize| u32::from_ne_bytes(buf[off..off + 4].try_into().expect("4 bytes"));
    let u64_at = |off: usize| u64::from_ne_bytes(buf[off..off + 8].try_into().expect("8 bytes"));
    if u64_at(offset_of!(Header, magic)) != MAGIC {
        return if old { id } else { None };
    }
    if u32_at(offset_of!(Header, version)) != LAYOUT_VERSION {
        // Another layout: its fields may mean other things. Not ours to judge.
        return None;
    }
    if u64_at(offset_of!(Header, size)) != SEGMENT_SIZE as u64 || meta.len() != SEGMENT_SIZE as u64 {
        return if old { id } else { None };
    }
    if u32_at(offset_of!(Header, owner_uid)) != uid || !same_pidns(u64_at(offset_of!(Header, owner_pidns))) {
        return None;
    }
    let (pid, start) = (u32_at(offset_of!(Header, owner_pid)) as i32, u64_at(offset_of!(Header, owner_start)));
    if alive(pid, start) {
        None
    } else {
        id
    }
}

// ---------------------------------------------------------------------------------------
// Wake-ups
// ---------------------------------------------------------------------------------------

/// The abstract unix socket address of endpoint `name`: `"\0" + name`.
fn abstract_addr(name: &str) -> Option<(libc::sockaddr_un, libc::socklen_t)> {
    if !valid_name(name) {
        return None;
    }
    // SAFETY: sockaddr_un is plain integers and bytes, for which all zeroes is valid.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace. NAME_MAX + 1 < 108 bytes.
    for (dst, &b) in addr.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *dst = b as libc::c_char;
    }
    let len = offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
    Some((addr, len as libc::socklen_t))
}

/// A new non-blocking, close-on-exec unix datagram socket.
fn dgram_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket touches no memory of ours.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The receiving end of an endpoint's wake-ups: a non-blocking unix datagram socket bound
/// to the abstract address `"\0" + name`. Poll [`fd`](Waker::fd) for reading to sleep,
/// and [`drain`](Waker::drain) it after waking.
///
/// Abstract addresses have no permissions: any process (of the network namespace) may
/// wake us, which costs a spurious wake-up at worst.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// Bind the wake-up socket of endpoint `name`. [`Error::AddrInUse`] when another
    /// socket has the address, [`Error::Inval`] for an invalid name.
    pub fn bind(name: &str) -> Result<Waker> {
        let (addr, len) = abstract_addr(name).ok_or(Error::Inval)?;
        let fd = dgram_socket()?;
        // SAFETY: `addr` is a valid sockaddr_un of which `len` bytes are initialised; bind
        // only reads it.
        let r = unsafe { libc::bind(fd.as_raw_fd(), ptr::addr_of!(addr).cast(), len) };
        if r != 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(Waker { fd })
    }

    /// The socket, to poll for reading.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Read every pending wake-up; how many there were.
    pub fn drain(&self) -> usize {
        let mut n = 0;
        let mut buf = [0u8; 16];
        loop {
            // SAFETY: receives at most buf.len() bytes into `buf`, which is ours.
            let r = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if r >= 0 {
                n += 1;
                continue;
            }
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return n;
        }
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Waker {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Wake endpoint `name`: send a one-byte datagram to its [`Waker`]. Best effort, never
/// blocks: errors are ignored (nobody bound, or a full queue, which means wake-ups are
/// pending already).
pub fn wake(name: &str) {
    static SENDER: OnceLock<Option<OwnedFd>> = OnceLock::new();
    let Some((addr, len)) = abstract_addr(name) else { return };
    let Some(fd) = SENDER.get_or_init(|| dgram_socket().ok()) else { return };
    let byte = 1u8;
    // SAFETY: sends one byte from `byte`; `addr` is a valid sockaddr_un of which `len`
    // bytes are initialised. Both are only read.
    unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            ptr::addr_of!(byte).cast(),
            1,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            ptr::addr_of!(addr).cast(),
            len,
        )
    };
}

// ---------------------------------------------------------------------------------------
// Cross-memory attach
// ---------------------------------------------------------------------------------------

/// The value of every process's probe (see [`cma_probe`]).
pub const PROBE_VALUE: u64 = u64::from_le_bytes(*b"fab-CMA!");

/// Where our probe lies: the address of a static `u64` holding [`PROBE_VALUE`]. A
/// segment's header publishes it, so that a peer can check with [`cma_probe`] that it may
/// read our memory.
pub fn local_probe_addr() -> u64 {
    static PROBE: u64 = PROBE_VALUE;
    ptr::addr_of!(PROBE) as u64
}

/// Whether we can read process `pid`'s memory with `process_vm_readv` and the 8 bytes at
/// `remote_addr` there hold [`PROBE_VALUE`] (`remote_addr` being that process's
/// [`local_probe_addr`]). False where cross-memory attach is not allowed (ptrace rules,
/// Yama's `ptrace_scope`, seccomp) and for a process that is not one of us.
pub fn cma_probe(pid: i32, remote_addr: u64) -> bool {
    let mut value = 0u64;
    let local = [IoVec { base: ptr::addr_of_mut!(value).cast(), len: 8 }];
    // SAFETY: the one local piece is `value`, ours, 8 bytes, and no reference to it exists
    // during the call.
    matches!(unsafe { cma_read(pid, &local, &[(remote_addr, 8)]) }, Ok(8)) && value == PROBE_VALUE
}

/// A cross-memory transfer that stopped: how many bytes had moved, and why.
#[derive(Debug)]
pub struct CmaError {
    /// Bytes moved before the error (a prefix of the transfer).
    pub done: usize,
    /// The error: `ESRCH` (no such process), `EPERM` (not allowed), `EFAULT` (a remote
    /// range not mapped), ...
    pub error: io::Error,
}

impl fmt::Display for CmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cross-memory transfer failed after {} bytes: {}", self.done, self.error)
    }
}

impl std::error::Error for CmaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<CmaError> for Error {
    fn from(e: CmaError) -> Error {
        e.error.into()
    }
}

/// Copy from process `pid`'s memory (`remote`: address and length pairs, in order) into
/// ours (`local`, in order): `min(total local, total remote)` bytes, over as many system
/// calls as it takes (partial transfers, at most 1024 pieces a call). The bytes moved.
///
/// Remote lengths may come from a hostile peer: they only bound what is read over there
/// (the kernel checks those addresses); what is written here is bounded by `local`.
///
/// # Safety
///
/// Every local piece is valid for writes of `len` bytes for the whole call, and nothing
/// reads or writes those bytes meanwhile (the kernel writes them behind Rust's back).
pub unsafe fn cma_read(pid: i32, local: &[IoVec], remote: &[(u64, u64)]) -> std::result::Result<usize, CmaError> {
    // SAFETY: forwarded contract (the kernel writes only to the local pieces).
    unsafe { cma_transfer(false, pid, local, remote) }
}

/// Copy from our memory (`local`, in order) into process `pid`'s (`remote`: address and
/// length pairs, in order): `min(total local, total remote)` bytes, over as many system
/// calls as it takes. The bytes moved. See [`cma_read`].
///
/// # Safety
///
/// Every local piece is valid for reads of `len` bytes for the whole call, and nothing
/// writes those bytes meanwhile.
pub unsafe fn cma_write(pid: i32, local: &[IoVec], remote: &[(u64, u64)]) -> std::result::Result<usize, CmaError> {
    // SAFETY: forwarded contract (the kernel only reads the local pieces).
    unsafe { cma_transfer(true, pid, local, remote) }
}

/// Largest transfer of one call: the kernel refuses totals beyond `ssize_t`.
const MAX_CALL: usize = isize::MAX as usize;

/// The body of [`cma_read`] (`write` false) and [`cma_write`] (`write` true).
///
/// # Safety
///
/// That of `cma_read` or `cma_write`.
unsafe fn cma_transfer(
    write: bool,
    pid: i32,
    local: &[IoVec],
    remote: &[(u64, u64)],
) -> std::result::Result<usize, CmaError> {
    let fail = |done: usize, errno: i32| CmaError { done, error: io::Error::from_raw_os_error(errno) };
    let Some(p) = to_pid(pid) else { return Err(fail(0, libc::ESRCH)) };
    // Cursors: the next byte is at offset `loff` of local piece `li` (`loff` < its length
    // unless it is past the end), and at offset `roff` of remote piece `ri`.
    let (mut li, mut loff) = (0usize, 0usize);
    let (mut ri, mut roff) = (0usize, 0u64);
    let mut done = 0usize;
    let mut lv: Vec<libc::iovec> = Vec::with_capacity(local.len().min(IOV_MAX));
    let mut rv: Vec<libc::iovec> = Vec::with_capacity(remote.len().min(IOV_MAX));
    loop {
        // The next local pieces: at most IOV_MAX of them, at most MAX_CALL bytes.
        lv.clear();
        let mut ltotal = 0usize;
        let (mut i, mut off) = (li, loff);
        while lv.len() < IOV_MAX && i < local.len() && ltotal < MAX_CALL {
            let rem = local[i].len.saturating_sub(off);
            let take = rem.min(MAX_CALL - ltotal);
            if take > 0 {
                lv.push(libc::iovec { iov_base: local[i].base.wrapping_add(off).cast(), iov_len: take });
                ltotal += take;
            }
            i += 1;
            off = 0;
        }
        // The remote pieces for as many bytes (at most).
        rv.clear();
        let mut rtotal = 0usize;
        let (mut j, mut off) = (ri, roff);
        while rv.len() < IOV_MAX && j < remote.len() && rtotal < ltotal {
            let (addr, len) = remote[j];
            let rem = len.saturating_sub(off);
            let take = rem.min((ltotal - rtotal) as u64) as usize;
            if take > 0 {
                // An address past the end of the address space: nothing there to reach.
                let Some(a) = addr.checked_add(off).and_then(|a| usize::try_from(a).ok()) else {
                    if rtotal == 0 {
                        return Err(fail(done, libc::EFAULT));
                    }
                    break;
                };
                rv.push(libc::iovec { iov_base: a as *mut libc::c_void, iov_len: take });
                rtotal += take;
            }
            j += 1;
            off = 0;
        }
        if rtotal == 0 {
            // One side is exhausted.
            return Ok(done);
        }
        // Trim the local pieces to the remote bytes.
        let mut keep = rtotal;
        let mut count = 0;
        for v in lv.iter_mut() {
            if keep == 0 {
                break;
            }
            v.iov_len = v.iov_len.min(keep);
            keep -= v.iov_len;
            count += 1;
        }
        lv.truncate(count);
        let n = {
            let args = (p, lv.as_ptr(), lv.len() as libc::c_ulong, rv.as_ptr(), rv.len() as libc::c_ulong, 0);
            if write {
                // SAFETY: the local pieces lie within the caller's pieces, which are valid
                // for reads (contract of cma_write); remote addresses are checked by the
                // kernel; both arrays are valid for their lengths during the call.
                unsafe { libc::process_vm_writev(args.0, args.1, args.2, args.3, args.4, args.5) }
            } else {
                // SAFETY: the local pieces lie within the caller's pieces, which are valid
                // for writes and unaliased (contract of cma_read); the kernel writes at
                // most their lengths; both arrays are valid for their lengths.
                unsafe { libc::process_vm_readv(args.0, args.1, args.2, args.3, args.4, args.5) }
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(CmaError { done, error: e });
        }
        let n = n as usize;
        if n == 0 {
            // A remote piece that is not mapped (the kernel stops at the first one).
            return Err(fail(done, libc::EFAULT));
        }
        done += n;
        // Advance both cursors by n bytes (n <= rtotal: within the pieces just used).
        let mut k = n;
        while k > 0 && li < local.len() {
            let rem = local[li].len.saturating_sub(loff);
            if k < rem {
                loff += k;
                k = 0;
            } else {
                k -= rem;
                li += 1;
                loff = 0;
            }
        }
        let mut k = n as u64;
        while k > 0 && ri < remote.len() {
            let rem = remote[ri].1.saturating_sub(roff);
            if k < rem {
                roff += k;
                k = 0;
            } else {
                k -= rem;
                ri += 1;
                roff = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};
    use std::sync::{Arc, Mutex};
    use std::time::SystemTime;

    /// Held by the tests that change the umask or make files by hand (the umask is
    /// process-wide).
    static FS_LOCK: Mutex<()> = Mutex::new(());

    fn fs_lock() -> std::sync::MutexGuard<'static, ()> {
        FS_LOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A file made by hand in /dev/shm, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, mode: u32, len: u64, head: &[u8]) -> TempFile {
            let path = path_of(name);
            let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(&path).unwrap();
            f.set_permissions(Permissions::from_mode(mode)).unwrap();
            f.set_len(len).unwrap();
            f.write_all(head).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// The pid of a child that has exited and been reaped, and its start time.
    fn dead_pid() -> (i32, u64) {
        let mut child = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let pid = child.id() as i32;
        let start = start_time(pid).expect("a running child has a start time");
        drop(child.stdin.take());
        child.wait().unwrap();
        (pid, start)
    }

    fn poll_in(fd: RawFd, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, ours.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        assert!(r >= 0, "poll: {}", io::Error::last_os_error());
        r == 1 && p.revents & libc::POLLIN != 0
    }

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
    fn job_chunks_are_claimed_once_and_only_in_their_generation() {
        let name = new_name();
        let seg = Segment::create(&name).unwrap();
        let slot = seg.claim_slot("fabric-shm-test-job", 1, 1).unwrap();
        let job = seg.slot(slot).job(0).unwrap();
        assert!(seg.slot(slot).job(JOBS).is_none(), "an index from a peer is checked");
        job.start(7);
        let chunks = 5000u32;
        let claimed: Vec<Vec<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        while let Some(k) = job.claim(7, chunks) {
                            mine.push(k);
                            job.finish(0);
                        }
                        mine
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<u32> = claimed.into_iter().flatten().collect();
        all.sort_unstable();
        assert_eq!(all, (0..chunks).collect::<Vec<_>>(), "every chunk claimed exactly once");
        assert_eq!(job.progress(), (chunks as u64, 0));
        // A late claimer of that use, or of an earlier generation, gets nothing.
        assert_eq!(job.claim(7, chunks), None);
        job.start(8);
        assert_eq!(job.claim(7, chunks), None);
        assert_eq!(job.claim(8, 3), Some(0));
        job.finish(5);
        assert_eq!(job.claim_rest(8, 3), 2);
        job.finish_many(2, 0);
        assert_eq!(job.progress(), (3, 5), "the failed chunk's errno stays");
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

    #[test]
    fn stale_segments_are_removed_and_only_they() {
        let _g = fs_lock();
        let uid = euid();
        let (pid, start) = dead_pid();
        // A segment whose owner died without closing (header names a dead process).
        let dead_name = new_name();
        let mut dead = Segment::create(&dead_name).unwrap();
        dead.header().owner_pid.store(pid, Ordering::Relaxed);
        dead.header().owner_start.store(start, Ordering::Relaxed);
        dead.owner = false; // as if its process had died: nobody unlinks it
        let mut head = vec![0u8; HEADER_SIZE];
        dead.file.read_exact_at(&mut head, 0).unwrap();
        drop(dead);
        // A pid that was reused: alive, but started at another time.
        let reused_name = new_name();
        let mut reused = Segment::create(&reused_name).unwrap();
        reused.header().owner_start.store(start_time(std::process::id() as i32).unwrap() + 1, Ordering::Relaxed);
        reused.owner = false;
        drop(reused);
        // Ours, alive.
        let live = Segment::create(&new_name()).unwrap();
        // The same stale header under names that are not ours to judge.
        let other_uid = TempFile::new(
            &format!("{PREFIX}{}-1-{:016x}", uid.wrapping_add(1), fabric_util::random::u64_or_fallback()),
            0o600,
            SEGMENT_SIZE as u64,
            &head,
        );
        let other_prefix = TempFile::new(
            &format!("other-{:016x}", fabric_util::random::u64_or_fallback()),
            0o600,
            SEGMENT_SIZE as u64,
            &head,
        );
        // Incomplete files: fresh ones may be a creator at work; old ones are dead.
        let fresh_empty = TempFile::new(&new_name(), 0o600, 0, &[]);
        let fresh_nomagic = TempFile::new(&new_name(), 0o600, SEGMENT_SIZE as u64, &[]);
        let old_empty = TempFile::new(&new_name(), 0o600, 0, &[]);
        let old_nomagic = TempFile::new(&new_name(), 0o600, SEGMENT_SIZE as u64, &[]);
        let long_ago = SystemTime::now() - Duration::from_secs(60);
        for f in [&old_empty, &old_nomagic] {
            File::options().write(true).open(&f.0).unwrap().set_modified(long_ago).unwrap();
        }
        // Another layout version, owner dead: not ours to judge either.
        let mut other_version = head.clone();
        other_version[offset_of!(Header, version)..][..4].copy_from_slice(&(LAYOUT_VERSION + 1).to_ne_bytes());
        let other_version = TempFile::new(&new_name(), 0o600, SEGMENT_SIZE as u64, &other_version);

        // (Another test run of this user may clean up concurrently: count nothing.)
        cleanup_stale();
        assert!(!path_of(&dead_name).exists());
        assert!(!path_of(&reused_name).exists());
        assert!(!old_empty.0.exists());
        assert!(!old_nomagic.0.exists());
        assert!(path_of(live.name()).exists());
        for f in [&other_uid, &other_prefix, &fresh_empty, &fresh_nomagic, &other_version] {
            assert!(f.0.exists(), "{} removed", f.0.display());
        }
        Segment::attach(live.name()).unwrap();
    }

    #[test]
    fn create_takes_over_the_name_of_a_stale_segment() {
        let name = new_name();
        let mut seg = Segment::create(&name).unwrap();
        // Alive (ours): the name is taken.
        assert_eq!(Segment::create(&name).unwrap_err(), Error::AddrInUse);
        let (pid, start) = dead_pid();
        seg.header().owner_pid.store(pid, Ordering::Relaxed);
        seg.header().owner_start.store(start, Ordering::Relaxed);
        seg.owner = false;
        drop(seg);
        let seg = Segment::create(&name).unwrap();
        assert_eq!(seg.owner(), (std::process::id() as i32, start_time(std::process::id() as i32).unwrap()));
        // Not a segment, but fresh: maybe a creator at work.
        let _g = fs_lock();
        let n = new_name();
        let _f = TempFile::new(&n, 0o600, 0, &[]);
        assert_eq!(Segment::create(&n).unwrap_err(), Error::AddrInUse);
    }

    #[test]
    fn wake_makes_the_waker_readable() {
        let name = new_name();
        let w = Waker::bind(&name).unwrap();
        assert_eq!(Waker::bind(&name).unwrap_err(), Error::AddrInUse);
        assert_eq!(Waker::bind("a/b").unwrap_err(), Error::Inval);
        assert!(!poll_in(w.fd(), 0));
        assert_eq!(w.drain(), 0);
        wake(&name);
        assert!(poll_in(w.fd(), 1000));
        assert_eq!(w.drain(), 1);
        assert!(!poll_in(w.fd(), 0));
        // Many wake-ups never block, whatever the queue holds.
        for _ in 0..10_000 {
            wake(&name);
        }
        assert!(poll_in(w.fd(), 1000));
        assert!(w.drain() >= 1);
        assert!(!poll_in(w.fd(), 0));
        // Nobody there, or no valid name: ignored.
        wake(&new_name());
        wake("../bad");
        drop(w);
        wake(&name);
    }

    #[test]
    fn alive_tells_the_living_from_the_dead() {
        let me = std::process::id() as i32;
        let start = start_time(me).unwrap();
        // Field 22, counted naively (our command name has no spaces or parentheses).
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(stat.split_whitespace().nth(21).unwrap().parse::<u64>().unwrap(), start);
        assert!(alive(me, start));
        assert!(alive(me, 0));
        assert!(!alive(me, start + 1));
        let (pid, start) = dead_pid();
        assert!(!alive(pid, start));
        assert_eq!(start_time(pid), None);
        assert!(!alive(0, 0));
        assert!(!alive(-1, 0));
        assert!(!alive(i32::MIN, 0));
        assert_eq!(start_time(0), None);
    }

    #[test]
    fn pidfd_becomes_readable_at_exit() {
        let mut child = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let Some(fd) = pidfd(child.id() as i32) else {
            child.kill().unwrap();
            child.wait().unwrap();
            fabric_testkit::skip("pidfd", "no pidfd_open here");
            return;
        };
        assert!(!poll_in(fd.as_raw_fd(), 0));
        drop(child.stdin.take());
        assert!(poll_in(fd.as_raw_fd(), 2000));
        child.wait().unwrap();
        assert!(pidfd(0).is_none());
    }

    #[test]
    fn cma_probe_finds_ourselves() {
        let me = std::process::id() as i32;
        let addr = local_probe_addr();
        assert_eq!(local_probe_addr(), addr);
        assert!(cma_probe(me, addr));
        // Readable, but not the probe.
        let other = PROBE_VALUE ^ 1;
        assert!(!cma_probe(me, ptr::addr_of!(other) as u64));
        assert!(!cma_probe(me, 8));
        assert!(!cma_probe(me, u64::MAX - 3));
        let (pid, _) = dead_pid();
        assert!(!cma_probe(pid, addr));
        assert!(!cma_probe(0, addr));
        assert!(!cma_probe(-1, addr));
    }

    /// Split `buf` into pieces of the given lengths (cycled), the last one cut short.
    fn split(buf: &mut [u8], lens: &[usize]) -> Vec<IoVec> {
        let mut out = Vec::new();
        let mut at = 0;
        for &l in lens.iter().cycle() {
            if at >= buf.len() {
                break;
            }
            let l = l.min(buf.len() - at);
            out.push(IoVec { base: buf[at..].as_mut_ptr(), len: l });
            at += l;
        }
        out
    }

    fn remote_of(v: &[IoVec]) -> Vec<(u64, u64)> {
        v.iter().map(|p| (p.base as u64, p.len as u64)).collect()
    }

    #[test]
    fn cma_moves_data_across_many_pieces() {
        let me = std::process::id() as i32;
        const N: usize = 100_000;
        let mut src: Vec<u8> = (0..N).map(|i| (i * 7 + i / 251) as u8).collect();
        // Remote: 4000+ pieces (several calls' worth), some empty.
        let remote = remote_of(&split(&mut src, &[1, 0, 17, 3, 40, 0, 2]));
        assert!(remote.len() > 3 * IOV_MAX);
        // Local: other cuts, 500 bytes more than the remote total: the last piece is
        // partly filled.
        let mut dst = vec![0xeeu8; N + 500];
        let local = split(&mut dst, &[5, 31, 0, 9, 64]);
        assert!(local.len() > IOV_MAX);
        // SAFETY: the local pieces lie in `dst`, ours, not otherwise accessed meanwhile.
        let n = unsafe { cma_read(me, &local, &remote) }.unwrap();
        assert_eq!(n, N);
        assert_eq!(&dst[..N], &src[..]);
        assert!(dst[N..].iter().all(|&b| b == 0xee));

        // And back, by writing: local pieces of `src2` into the remote pieces of `out`.
        let mut src2: Vec<u8> = (0..N).map(|i| (i * 13) as u8).collect();
        let mut out = vec![0u8; N];
        let remote = remote_of(&split(&mut out, &[3, 1000, 0, 1]));
        let local = split(&mut src2[..N - 10], &[2, 0, 77]);
        // SAFETY: the local pieces lie in `src2`, ours; the remote ones in `out`, ours,
        // which nothing references during the call.
        let n = unsafe { cma_write(me, &local, &remote) }.unwrap();
        assert_eq!(n, N - 10);
        assert_eq!(&out[..N - 10], &src2[..N - 10]);
        assert!(out[N - 10..].iter().all(|&b| b == 0));
    }

    #[test]
    fn cma_never_trusts_remote_lengths() {
        let me = std::process::id() as i32;
        let src = [9u8; 64];
        let mut dst = [0u8; 100];
        let local = [IoVec { base: dst.as_mut_ptr(), len: 10 }];
        // SAFETY: the local piece is 10 bytes of `dst`, ours.
        let n = unsafe { cma_read(me, &local, &[(src.as_ptr() as u64, u64::MAX)]) }.unwrap();
        assert_eq!(n, 10);
        assert_eq!(&dst[..10], &[9; 10]);
        assert!(dst[10..].iter().all(|&b| b == 0));
        // Nothing to move.
        // SAFETY: as above.
        assert_eq!(unsafe { cma_read(me, &local, &[]) }.unwrap(), 0);
        // SAFETY: no local piece.
        assert_eq!(unsafe { cma_read(me, &[], &[(src.as_ptr() as u64, 64)]) }.unwrap(), 0);
    }

    #[test]
    fn cma_errors_say_how_far_they_got() {
        let me = std::process::id() as i32;
        let src = [5u8; 100];
        let mut dst = [0u8; 300];
        let local = [IoVec { base: dst.as_mut_ptr(), len: 300 }];
        // A hole after the first 100 bytes.
        let remote = [(src.as_ptr() as u64, 100), (8, 100), (src.as_ptr() as u64, 100)];
        // SAFETY: the local piece is `dst`, ours.
        let e = unsafe { cma_read(me, &local, &remote) }.unwrap_err();
        assert_eq!(e.done, 100);
        assert_eq!(e.error.raw_os_error(), Some(libc::EFAULT));
        assert_eq!(&dst[..100], &[5; 100]);
        assert_eq!(Error::from(e), Error::Fault);
        // An address past the end of the address space.
        // SAFETY: as above.
        let e = unsafe { cma_read(me, &local, &[(u64::MAX, 10)]) }.unwrap_err();
        assert_eq!(e.done, 0);
        // No such process.
        let (pid, _) = dead_pid();
        // SAFETY: as above.
        let e = unsafe { cma_read(pid, &local, &[(src.as_ptr() as u64, 100)]) }.unwrap_err();
        assert_eq!((e.done, e.error.raw_os_error()), (0, Some(libc::ESRCH)));
        // SAFETY: as above.
        let e = unsafe { cma_write(0, &local, &[(src.as_ptr() as u64, 100)]) }.unwrap_err();
        assert_eq!(e.error.raw_os_error(), Some(libc::ESRCH));
    }
}
