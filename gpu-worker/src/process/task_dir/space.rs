//! A task's directory on a tmpfs of its own, with a size and an inode limit (its /tmp and
//! /dev/shm are tmpfs mounts of its mount namespace, bounded the same way: `sandbox::paths`).
//! A candidate that fallocates gigabytes or floods the disk with files meets ENOSPC at the
//! limit instead of filling the node's disk; its pages are memory, charged to the task's
//! memory cgroup; and removing it is one detach, whatever the candidate built inside (a
//! 50,000-level chain, millions of files).
//!
//! Mounting needs `CAP_SYS_ADMIN` in the host's mount namespace (a worker running as root, as
//! deployed): elsewhere [`available`] says why not, and the sandbox's `storage` layer is off.

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::statvfs::statvfs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The limits of one task's writable space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceLimits {
    /// Bytes in the task directory.
    pub bytes: u64,
    /// Files, directories and links in it.
    pub inodes: u64,
}

/// The tmpfs options of a task's space (pure): owned by root and private (0700) until the
/// sandbox hands it to the task's user.
pub fn mount_options(limits: SpaceLimits) -> String {
    format!(
        "size={},nr_inodes={},mode=0700",
        limits.bytes.max(1 << 20),
        limits.inodes.max(64)
    )
}

/// Mounts a fresh bounded tmpfs on the (empty, just created) directory `path`: no set-uid
/// programs, no device nodes, nothing of it visible to another task (each has its own).
pub fn mount_space(path: &Path, limits: SpaceLimits) -> std::io::Result<()> {
    mount(
        Some("crucible-task"),
        path,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(mount_options(limits).as_str()),
    )
    .map_err(|e| std::io::Error::other(format!("mounting {}: {e}", path.display())))
}

/// Whether `path` (not followed) is the root of a mount other than its parent's: a task's
/// space, or anything mounted there since.
pub fn is_mount_root(path: &Path) -> bool {
    let (Ok(own), Some(Ok(parent))) = (
        std::fs::symlink_metadata(path),
        path.parent().map(std::fs::symlink_metadata),
    ) else {
        return false;
    };
    own.is_dir() && own.dev() != parent.dev()
}

/// Detaches whatever is mounted on `path` (never following a link): its contents vanish for
/// every new lookup at once, and their memory is freed when the last process holding one of
/// its files lets go. `Ok(false)`: nothing was mounted there.
pub fn detach(path: &Path) -> std::io::Result<bool> {
    if !is_mount_root(path) {
        return Ok(false);
    }
    match umount2(path, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
        Ok(()) => Ok(true),
        Err(Errno::EINVAL) => Ok(false),
        Err(e) => Err(std::io::Error::other(format!(
            "detaching {}: {e}",
            path.display()
        ))),
    }
}

/// Whether this process may give tasks spaces of their own: it mounts and detaches a small
/// bounded tmpfs under `root` (created if missing). `Err`: why not.
pub fn available(root: &Path) -> Result<(), String> {
    std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let probe = tempfile::Builder::new()
        .prefix(".space-probe-")
        .tempdir_in(root)
        .map_err(|e| format!("{}: {e}", root.display()))?;
    let limits = SpaceLimits {
        bytes: 1 << 20,
        inodes: 64,
    };
    mount_space(probe.path(), limits).map_err(|e| {
        format!("{e} (a task's bounded space is a tmpfs the worker mounts: it needs CAP_SYS_ADMIN, i.e. a worker running as root)")
    })?;
    detach(probe.path()).map_err(|e| e.to_string())?;
    Ok(())
}

/// What a task used of its space, from the file system's own count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceUse {
    /// Bytes still free.
    pub free_bytes: u64,
    /// Inodes still free.
    pub free_inodes: u64,
}

/// The use of the space mounted on `path`; `None` when it cannot be read.
pub fn usage(path: &Path) -> Option<SpaceUse> {
    let stat = statvfs(path).ok()?;
    Some(SpaceUse {
        free_bytes: stat.blocks_available().saturating_mul(stat.fragment_size()),
        free_inodes: stat.files_available(),
    })
}

/// The limit a space reached, if it reached one (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// No room left for another page of data.
    Bytes(u64),
    /// No inode left for another file.
    Inodes(u64),
}

/// Less than this free means the size limit was reached: a write that failed for want of room
/// left less than a page or two (a partial last page, tmpfs's own rounding).
const FULL_BELOW_BYTES: u64 = 64 << 10;

/// Which limit of `limits` the use `seen` shows was reached, if any (pure).
pub fn exhausted(seen: SpaceUse, limits: SpaceLimits) -> Option<Exhausted> {
    if seen.free_inodes == 0 {
        return Some(Exhausted::Inodes(limits.inodes));
    }
    (seen.free_bytes < FULL_BELOW_BYTES).then_some(Exhausted::Bytes(limits.bytes))
}

impl Exhausted {
    /// What a result says of it: which limit of which space.
    pub fn describe(self) -> String {
        match self {
            Exhausted::Bytes(bytes) => format!(
                "filled its task directory to the {} MiB size limit of its writable space",
                bytes >> 20
            ),
            Exhausted::Inodes(inodes) => format!(
                "created as many files as its task directory holds: the {inodes}-inode limit of its writable space"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: SpaceLimits = SpaceLimits {
        bytes: 2 << 30,
        inodes: 1000,
    };

    #[test]
    fn options_bound_size_and_inodes_and_keep_the_space_private() {
        assert_eq!(
            mount_options(LIMITS),
            "size=2147483648,nr_inodes=1000,mode=0700"
        );
    }

    #[test]
    fn a_full_space_names_the_limit_it_reached() {
        let room = SpaceUse {
            free_bytes: 1 << 30,
            free_inodes: 10,
        };
        assert_eq!(exhausted(room, LIMITS), None);
        let no_inode = SpaceUse {
            free_inodes: 0,
            ..room
        };
        assert_eq!(exhausted(no_inode, LIMITS), Some(Exhausted::Inodes(1000)));
        assert!(
            Exhausted::Inodes(1000)
                .describe()
                .contains("1000-inode limit")
        );
        let no_room = SpaceUse {
            free_bytes: 4096,
            ..room
        };
        assert_eq!(exhausted(no_room, LIMITS), Some(Exhausted::Bytes(2 << 30)));
        assert!(
            Exhausted::Bytes(2 << 30)
                .describe()
                .contains("2048 MiB size limit")
        );
    }

    /// Only where this process may mount (root, as CI runs): a bounded space refuses what is
    /// past its limits, and detaching it removes a tree of any depth at once.
    #[test]
    fn a_mounted_space_stops_at_its_limits_and_detaches_whole() {
        let root = tempfile::tempdir().unwrap();
        if let Err(why) = available(root.path()) {
            eprintln!("skipped: {why}");
            return;
        }
        let dir = root.path().join("task");
        std::fs::create_dir(&dir).unwrap();
        let limits = SpaceLimits {
            bytes: 4 << 20,
            inodes: 200,
        };
        mount_space(&dir, limits).unwrap();
        assert!(is_mount_root(&dir));
        let big = std::fs::write(dir.join("big"), vec![7u8; 8 << 20]).unwrap_err();
        assert_eq!(big.raw_os_error(), Some(nix::libc::ENOSPC), "{big}");
        assert!(matches!(
            exhausted(usage(&dir).unwrap(), limits),
            Some(Exhausted::Bytes(_))
        ));
        std::fs::remove_file(dir.join("big")).unwrap();
        let flood = (0..1000)
            .map(|i| std::fs::write(dir.join(format!("f{i}")), b""))
            .find_map(Result::err)
            .expect("the inode limit stops the flood");
        assert_eq!(flood.raw_os_error(), Some(nix::libc::ENOSPC), "{flood}");
        assert!(matches!(
            exhausted(usage(&dir).unwrap(), limits),
            Some(Exhausted::Inodes(200))
        ));
        assert!(detach(&dir).unwrap());
        assert!(!is_mount_root(&dir));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(!detach(&dir).unwrap(), "nothing mounted any more");
    }
}
