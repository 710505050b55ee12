//! Removal of the segments that processes of our user left when they died without
//! closing ([`cleanup_stale`]), and the test of one file (`stale`) that
//! [`Segment::create`](super::Segment::create) also uses to take over the name of a
//! stale segment.

use super::liveness::{alive, same_pidns};
use super::{euid, path_of, valid_name, Header, LAYOUT_VERSION, MAGIC, PREFIX, SEGMENT_SIZE, SHM_DIR};
use std::fs::OpenOptions;
use std::mem::{offset_of, size_of};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::time::Duration;

/// How old an incomplete segment file (too short, no magic) must be before
/// [`cleanup_stale`] takes its creator for dead.
const STALE_GRACE: Duration = Duration::from_secs(5);

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
pub(super) fn remove_if_same(path: &std::path::Path, (dev, ino): (u64, u64)) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
        && std::fs::remove_file(path).is_ok()
}

/// Whether the file at `path` is a stale segment of user `uid`; if so its device and inode.
pub(super) fn stale(path: &std::path::Path, uid: u32) -> Option<(u64, u64)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::testutil::{dead_pid, fs_lock, TempFile};
    use crate::segment::{new_name, start_time, Error, Segment, HEADER_SIZE};
    use std::fs::File;
    use std::sync::atomic::Ordering;
    use std::time::SystemTime;

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
}
