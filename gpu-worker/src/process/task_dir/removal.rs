//! Removing a tree a candidate shaped. The task's processes are gone by then, but what they
//! left is hostile: a chain of 40,000 nested directories overflowed the stack of a recursive
//! removal (std's `remove_dir_all` recurses once per level) and took the worker down, at every
//! start again; millions of files took seconds of a runtime thread. So the walk here:
//! - is iterative: one directory descriptor open at a time, the names of the levels above on
//!   the heap, `..` to climb (nothing moves in the tree any more), whatever the depth;
//! - never follows a link (`O_NOFOLLOW` on every open; links, FIFOs, sockets and devices are
//!   unlinked, never opened);
//! - gives back permissions the child took off its own directories;
//! - stops at a deadline, leaving the rest for the caller to set aside ([`Removal::Unfinished`]).

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FchmodatFlags, Mode, SFlag, fchmodat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Instant;

/// Names read from a directory before they are removed (then the directory is read again).
const BATCH: usize = 1024;

/// How a removal ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Removal {
    /// The tree is gone (or was never there).
    Done,
    /// The deadline came first: this many entries were removed, the rest is still there.
    Unfinished { removed: u64 },
}

/// Removes the directory `path` and everything in it by the rules above, by `deadline`.
/// `path` itself must be a directory, not a link to one.
pub fn remove_tree_by(path: &Path, deadline: Instant) -> std::io::Result<Removal> {
    let root = match open_dir(nix::fcntl::AT_FDCWD, path.as_os_str()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Removal::Done),
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            return Err(std::io::Error::other(format!(
                "{} is not a directory; not following it",
                path.display()
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let mut removed = 0u64;
    // The directory being emptied, and the names of the levels between it and the root.
    let mut current = root;
    let mut above: Vec<OsString> = Vec::new();
    loop {
        if Instant::now() >= deadline {
            return Ok(Removal::Unfinished { removed });
        }
        let entries = first_entries(&current)?;
        if entries.is_empty() {
            let Some(name) = above.pop() else {
                break;
            };
            let parent = openat(&current, "..", dir_flags(), Mode::empty())?;
            current = parent;
            match unlinkat(&current, name.as_os_str(), UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => removed += 1,
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        for (name, kind) in entries {
            if is_dir(&current, &name, kind)? {
                let child = match open_dir(&current, &name) {
                    Err(Errno::EACCES) => {
                        // The child took its own rights away: give them back, then enter.
                        fchmodat(
                            &current,
                            name.as_os_str(),
                            Mode::S_IRWXU,
                            FchmodatFlags::FollowSymlink,
                        )?;
                        open_dir(&current, &name)?
                    }
                    other => other?,
                };
                above.push(name);
                current = child;
                break;
            }
            match unlinkat(&current, name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => removed += 1,
                Err(e) => return Err(e.into()),
            }
            if Instant::now() >= deadline {
                return Ok(Removal::Unfinished { removed });
            }
        }
    }
    drop(current);
    match std::fs::remove_dir(path) {
        Ok(()) => Ok(Removal::Done),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Removal::Done),
        Err(e) => Err(e),
    }
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn open_dir<Fd: AsFd>(at: Fd, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(at, name, dir_flags(), Mode::empty())
}

/// Up to BATCH names in the directory `dir` (never `.` or `..`), with their type when the
/// file system says it.
fn first_entries(dir: &OwnedFd) -> nix::Result<Vec<(OsString, Option<Type>)>> {
    let mut stream = Dir::openat(dir, ".", dir_flags(), Mode::empty())?;
    let mut out = Vec::new();
    for entry in stream.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push((OsStr::from_bytes(name).to_owned(), entry.file_type()));
        if out.len() == BATCH {
            break;
        }
    }
    Ok(out)
}

/// Whether `name` in `dir` is a directory (not a link to one).
fn is_dir(dir: &OwnedFd, name: &OsStr, kind: Option<Type>) -> nix::Result<bool> {
    match kind {
        Some(kind) => Ok(kind == Type::Directory),
        None => match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(e),
        },
    }
}

/// Hostile trees for the tests of the removal and of the sweep.
#[cfg(test)]
pub(crate) mod hostile {
    use super::*;
    use nix::sys::stat::mkdirat;

    /// Deeper than any recursion on a small stack survives (40,000 crashed the worker).
    pub(crate) const DEPTH: usize = 50_000;

    /// A chain of DEPTH directories built top-down, one level at a time through descriptors,
    /// a file at the bottom.
    pub(crate) fn chain_top_down(root: &Path) {
        let mut fd = open_dir(nix::fcntl::AT_FDCWD, root.as_os_str()).unwrap();
        for _ in 0..DEPTH {
            mkdirat(&fd, "d", Mode::S_IRWXU).unwrap();
            fd = open_dir(&fd, OsStr::new("d")).unwrap();
        }
        let file = openat(
            &fd,
            "f",
            OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .unwrap();
        nix::unistd::write(file, b"deep").unwrap();
    }

    /// A chain of DEPTH directories built bottom-up by renames, as the hostile candidate did.
    pub(crate) fn chain_bottom_up(root: &Path) {
        let base = open_dir(nix::fcntl::AT_FDCWD, root.as_os_str()).unwrap();
        mkdirat(&base, "d", Mode::S_IRWXU).unwrap();
        for _ in 0..DEPTH {
            mkdirat(&base, "n", Mode::S_IRWXU).unwrap();
            nix::fcntl::renameat(&base, "d", &base, "n/d").unwrap();
            nix::fcntl::renameat(&base, "n", &base, "d").unwrap();
        }
    }

    /// Runs `f` on a thread with a stack far too small for a recursion of DEPTH levels.
    pub(crate) fn on_a_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(128 << 10)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::hostile::*;
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(120)
    }

    #[test]
    fn chains_fifty_thousand_deep_built_either_way_are_removed_without_recursion() {
        for build in [chain_top_down as fn(&Path), chain_bottom_up] {
            let root = tempfile::tempdir().unwrap();
            let tree = root.path().join("task");
            fs::create_dir(&tree).unwrap();
            build(&tree);
            let t = tree.clone();
            let outcome = on_a_small_stack(move || remove_tree_by(&t, far()).unwrap());
            assert_eq!(outcome, Removal::Done);
            assert!(!tree.exists());
        }
    }

    #[test]
    fn links_fifos_and_locked_directories_are_removed_and_nothing_outside_is_touched() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), b"k").unwrap();
        let tree = root.path().join("task");
        fs::create_dir_all(tree.join("a/b")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/link")).unwrap();
        nix::unistd::mkfifo(&tree.join("a/b/fifo"), Mode::S_IRWXU).unwrap();
        fs::write(tree.join("a/b/file"), b"x").unwrap();
        fs::set_permissions(tree.join("a/b"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(tree.join("a"), fs::Permissions::from_mode(0o000)).unwrap();
        assert_eq!(remove_tree_by(&tree, far()).unwrap(), Removal::Done);
        assert!(!tree.exists());
        assert!(
            outside.join("keep").exists(),
            "a link is unlinked, not followed"
        );
        let link = root.path().join("to-outside");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        assert!(
            remove_tree_by(&link, far()).is_err(),
            "a link is not a tree"
        );
        assert_eq!(
            remove_tree_by(&root.path().join("gone"), far()).unwrap(),
            Removal::Done
        );
    }

    #[test]
    fn a_deadline_leaves_the_rest_and_a_second_call_finishes_it() {
        let root = tempfile::tempdir().unwrap();
        let tree = root.path().join("task");
        fs::create_dir(&tree).unwrap();
        for i in 0..3000 {
            fs::write(tree.join(format!("f{i}")), b"").unwrap();
        }
        assert_eq!(
            remove_tree_by(&tree, Instant::now()).unwrap(),
            Removal::Unfinished { removed: 0 }
        );
        assert!(tree.exists());
        assert_eq!(remove_tree_by(&tree, far()).unwrap(), Removal::Done);
        assert!(!tree.exists());
    }
}
