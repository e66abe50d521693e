//! The private directory of one task child (or of the warm template): created 0700, filled
//! without following links, removed afterwards whatever the child did to it. Its owner file
//! (`dir_owner.rs`) is written beside it first, so that a directory left by a killed worker is
//! always found and swept by the next one (`sweep.rs`).

use crate::process::dir_owner::{DirOwner, OWNER_SUFFIX};
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) mod removal;
pub mod space;
use removal::Removal;
use space::SpaceLimits;

/// Task directories this process could not remove (past [`REMOVAL_BUDGET`], or refused): each
/// stays with its owner file for the next start's sweep. A Prometheus counter
/// (`crucible_worker_task_dirs_left_total`, registered by `crate::metrics`).
pub static LEFT_FOR_SWEEP: std::sync::LazyLock<prometheus::IntCounter> = std::sync::LazyLock::new(
    || {
        prometheus::IntCounter::new(
            "crucible_worker_task_dirs_left_total",
            "Task directories this process could not remove when their task ended (left, with their owner file, for the next start's sweep)",
        )
        .expect("a valid counter")
    },
);

/// Tries at a fresh random name before giving up (a clash is already one in 2^64).
const NAME_ATTEMPTS: u32 = 8;

/// A task child's private directory; removed, with its owner file, when dropped.
pub struct TaskDir {
    path: PathBuf,
    owner_file: PathBuf,
    /// The limits of its own bounded tmpfs, when it has one.
    space: Option<SpaceLimits>,
}

impl TaskDir {
    /// A fresh private directory under `root` (created if missing), `task-{label}-{random}`,
    /// with its owner file `task-{label}-{random}.owner` written before it; with `space`, on a
    /// bounded tmpfs of its own ([`space`]).
    pub fn create(
        root: &Path,
        label: &str,
        owner: &DirOwner,
        space: Option<SpaceLimits>,
    ) -> io::Result<Self> {
        fs::create_dir_all(root)?;
        let safe_label: String = label
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(40)
            .collect();
        let record = owner.to_file();
        for _ in 0..NAME_ATTEMPTS {
            let random = uuid::Uuid::new_v4().simple().to_string();
            let name = format!("task-{safe_label}-{}", &random[..16]);
            let owner_file = root.join(format!("{name}{OWNER_SUFFIX}"));
            match write_new_file(&owner_file, record.as_bytes()) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                other => other?,
            }
            let path = root.join(&name);
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // Dropped on an error below: removed with its owner file.
                    let dir = Self {
                        path,
                        owner_file,
                        space,
                    };
                    if let Some(limits) = space {
                        space::mount_space(&dir.path, limits)?;
                    }
                    // Exactly 0700, whatever the umask.
                    fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o700))?;
                    return Ok(dir);
                }
                Err(e) => {
                    let _ = fs::remove_file(&owner_file);
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("no free directory name under {}", root.display()),
        ))
    }

    /// Where the directory is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The limit of its bounded space the task reached, if it has one and reached it: read
    /// from the file system once the task's processes are gone.
    pub fn exhausted(&self) -> Option<space::Exhausted> {
        let limits = self.space?;
        space::exhausted(space::usage(&self.path)?, limits)
    }

    /// Writes a new file; fails if anything (a file or a symlink) already has that name.
    pub fn write_new(&self, name: &str, contents: &[u8]) -> io::Result<PathBuf> {
        debug_assert!(!name.contains('/'), "task dir files are flat");
        let path = self.path().join(name);
        write_new_file(&path, contents)?;
        Ok(path)
    }

    /// Makes a subdirectory (for caches and temp files the child owns).
    pub fn subdir(&self, name: &str) -> io::Result<PathBuf> {
        let path = self.path().join(name);
        fs::create_dir(&path)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
        Ok(path)
    }
}

impl Drop for TaskDir {
    /// Removes the directory, then its owner file, before it returns (a stopping worker
    /// leaves nothing behind): on a multi-threaded runtime's worker thread through
    /// `block_in_place`, so that what a task left (seconds of it) stalls no other task.
    fn drop(&mut self) {
        let remove = || remove_with_owner(&self.path, &self.owner_file);
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(remove),
            _ => remove(),
        }
    }
}

fn remove_with_owner(path: &Path, owner_file: &Path) {
    match remove_tree(path) {
        // The owner file goes last: while it stays, a later worker sweeps what is left.
        Ok(()) => {
            if let Err(e) = fs::remove_file(owner_file) {
                tracing::warn!(path = %owner_file.display(), error = %e, "could not remove owner file");
            }
        }
        Err(e) => {
            LEFT_FOR_SWEEP.inc();
            tracing::warn!(path = %path.display(), error = %e, "task directory left for the next sweep");
        }
    }
}

/// A new file, 0600, refused if anything (a file or a symlink) has that name already.
fn write_new_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(contents)?;
    file.sync_data().ok();
    Ok(())
}

/// How long one removal may take before what is left waits for the next sweep: a task may
/// leave millions of files (400,000 in 23 s were seen); a removal never stalls the runtime's
/// other tasks (`block_in_place`).
pub const REMOVAL_BUDGET: Duration = Duration::from_secs(60);

/// Removes the directory `path` and everything in it without following a link: a task's
/// bounded space (or anything else mounted there) detached first, at once whatever is inside;
/// then what is left the way [`removal`] does (iterative whatever the depth, permissions given
/// back, a link unlinked and never followed), within [`REMOVAL_BUDGET`]. `path` itself must be
/// a directory, not a link to one. Already gone is success; what the budget did not reach is an
/// error (`TimedOut`), and stays for the next sweep.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    space::detach(path)?;
    match removal::remove_tree_by(path, Instant::now() + REMOVAL_BUDGET)? {
        Removal::Done => Ok(()),
        Removal::Unfinished { removed } => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{} not removed within {REMOVAL_BUDGET:?} ({removed} entries removed so far)",
                path.display()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> DirOwner {
        DirOwner::this_process("node/cpu".to_owned()).unwrap()
    }

    #[test]
    fn refuses_to_write_through_a_symlink_and_cleans_up() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside.txt");
        fs::write(&outside, b"secret").unwrap();
        let path;
        let owner_file;
        {
            let dir = TaskDir::create(root.path(), "t_1", &owner(), None).unwrap();
            path = dir.path().to_owned();
            owner_file = PathBuf::from(format!("{}{OWNER_SUFFIX}", path.display()));
            assert_eq!(
                DirOwner::from_file(&fs::read_to_string(&owner_file).unwrap()),
                Some(owner())
            );
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700);
            std::os::unix::fs::symlink(&outside, path.join("candidate.py")).unwrap();
            assert!(dir.write_new("candidate.py", b"x").is_err());
            assert_eq!(fs::read(&outside).unwrap(), b"secret");
            dir.write_new("reference.py", b"y").unwrap();
            let sub = dir.subdir("locked").unwrap();
            fs::write(sub.join("f"), b"z").unwrap();
            fs::set_permissions(&sub, fs::Permissions::from_mode(0o000)).unwrap();
        }
        assert!(!path.exists());
        assert!(!owner_file.exists());
        assert!(outside.exists());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_directory_dropped_on_a_runtime_is_gone_when_the_drop_returns() {
        let root = tempfile::tempdir().unwrap();
        let dir = TaskDir::create(root.path(), "t_1", &owner(), None).unwrap();
        let path = dir.path().to_owned();
        dir.write_new("candidate.py", b"x").unwrap();
        drop(dir);
        assert!(!path.exists());
        assert_eq!(
            fs::read_dir(root.path()).unwrap().count(),
            0,
            "owner file left"
        );
    }

    #[test]
    fn removal_never_follows_a_link() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("target");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep"), b"k").unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(
            remove_tree(&link).is_err(),
            "a link to a directory is refused"
        );
        let tree = root.path().join("tree");
        fs::create_dir(&tree).unwrap();
        std::os::unix::fs::symlink(&target, tree.join("inner")).unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert!(
            target.join("keep").exists(),
            "a link inside is unlinked, not followed"
        );
        remove_tree(&tree).unwrap();
    }
}
