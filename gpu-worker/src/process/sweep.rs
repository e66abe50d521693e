//! The start-up sweep: a worker killed with `kill -9` leaves its task and template
//! directories behind (nothing of a task may outlive it), so a worker starting removes those
//! under its work root whose owner file (`dir_owner.rs`) names its own identity and a process
//! that is gone. It never touches another worker's directories, a live process's (its own
//! included), nor a directory without an owner file it can parse: those are left and logged.
//! Nothing is followed: entries are examined by `symlink_metadata`, owner files opened with
//! `O_NOFOLLOW`, directories removed by [`remove_tree`].

use crate::process::dir_owner::{
    DirOwner, Judgement, MAX_OWNER_FILE_BYTES, OWNER_SUFFIX, judge, process_start_time,
};
use crate::process::task_dir::remove_tree;
use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What one sweep of a root did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Directories of dead processes of this identity, removed.
    pub removed: Vec<PathBuf>,
    /// Left alone: an owner file that is not ours to read (not a plain file, unparseable), a
    /// directory with no owner file, or one we could not remove.
    pub left: Vec<PathBuf>,
}

/// Sweeps `root` for `me` (a worker identity, `{node}/{device}`). A missing root has nothing
/// to sweep.
pub fn sweep(root: &Path, me: &str) -> io::Result<SweepReport> {
    sweep_with(root, me, process_start_time)
}

/// [`sweep`] with the process lookup given (tests judge owners without processes).
fn sweep_with(
    root: &Path,
    me: &str,
    running_start_time: impl Fn(u32) -> Option<u64>,
) -> io::Result<SweepReport> {
    let mut report = SweepReport::default();
    let entries = match fs::read_dir(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
        other => other?,
    };
    let mut owned = HashSet::new();
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        // Not followed: the type of the entry itself.
        let kind = entry.file_type()?;
        let Some(dir_name) = name.strip_suffix(OWNER_SUFFIX) else {
            if kind.is_dir() {
                dirs.push((name.to_owned(), path));
            }
            continue;
        };
        owned.insert(dir_name.to_owned());
        let owner = if kind.is_file() {
            read_owner(&path)
        } else {
            None
        };
        let Some(owner) = owner else {
            tracing::warn!(path = %path.display(), "left alone: not an owner file this worker can read");
            report.left.push(path);
            continue;
        };
        if judge(&owner, me, running_start_time(owner.pid)) != Judgement::Dead {
            continue;
        }
        let dir = root.join(dir_name);
        // Gone already is fine: workers of one identity in one process (`crucible up`'s CPU
        // workers) sweep the same root side by side.
        let owner_file_gone = || match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        match remove_tree(&dir).and_then(|()| owner_file_gone()) {
            Ok(()) => {
                tracing::info!(path = %dir.display(), pid = owner.pid, "swept a directory left by a dead worker process");
                report.removed.push(dir);
            }
            Err(e) => {
                tracing::warn!(path = %dir.display(), error = %e, "could not sweep a directory left by a dead worker process");
                report.left.push(dir);
            }
        }
    }
    for (name, path) in dirs {
        if !owned.contains(&name) {
            tracing::info!(path = %path.display(), "left alone: a directory without an owner file");
            report.left.push(path);
        }
    }
    Ok(report)
}

/// An owner file's record, read without following a link and up to its size bound.
fn read_owner(path: &Path) -> Option<DirOwner> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let mut text = String::new();
    file.take(MAX_OWNER_FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    DirOwner::from_file(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::task_dir::TaskDir;

    const ME: &str = "node-a/cpu";
    const DEAD_PID: u32 = 1_000_001;
    const LIVE_PID: u32 = 1_000_002;

    fn running(pid: u32) -> Option<u64> {
        (pid == LIVE_PID).then_some(5)
    }

    /// A directory with a file in it, as a worker of `worker` (process `pid`) leaves it.
    fn leave(root: &Path, name: &str, worker: &str, pid: u32) -> PathBuf {
        let dir = root.join(name);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("candidate.py"), b"x").unwrap();
        let owner = DirOwner {
            worker: worker.to_owned(),
            pid,
            start_time: 5,
        };
        fs::write(root.join(format!("{name}{OWNER_SUFFIX}")), owner.to_file()).unwrap();
        dir
    }

    #[test]
    fn sweeps_only_dead_processes_of_its_own_identity() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let dead = leave(r, "task-dead", ME, DEAD_PID);
        let alive = leave(r, "task-alive", ME, LIVE_PID);
        let other = leave(r, "task-other", "node-a/gpu0", DEAD_PID);
        let unowned = r.join("task-unowned");
        fs::create_dir(&unowned).unwrap();
        fs::write(r.join("task-garbled.owner"), b"{not json").unwrap();
        // An owner file that is a link is not read, whatever it points to.
        let target = r.join("elsewhere");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("record"), leave_record(DEAD_PID)).unwrap();
        std::os::unix::fs::symlink(target.join("record"), r.join("task-linked.owner")).unwrap();
        std::os::unix::fs::symlink(&target, r.join("task-linked")).unwrap();

        let report = sweep_with(r, ME, running).unwrap();
        assert_eq!(report.removed, vec![dead.clone()]);
        assert!(!dead.exists() && !r.join("task-dead.owner").exists());
        for kept in [&alive, &other, &unowned, &target] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        assert!(target.join("record").exists());
        let mut left = report.left;
        left.sort();
        assert_eq!(
            left,
            vec![
                r.join("elsewhere"),
                r.join("task-garbled.owner"),
                r.join("task-linked.owner"),
                unowned,
            ]
        );
    }

    fn leave_record(pid: u32) -> String {
        DirOwner {
            worker: ME.to_owned(),
            pid,
            start_time: 5,
        }
        .to_file()
    }

    #[test]
    fn a_dead_owners_link_in_place_of_its_directory_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let target = tempfile::tempdir().unwrap();
        fs::write(target.path().join("keep"), b"k").unwrap();
        fs::write(r.join("task-x.owner"), leave_record(DEAD_PID)).unwrap();
        std::os::unix::fs::symlink(target.path(), r.join("task-x")).unwrap();
        let report = sweep_with(r, ME, running).unwrap();
        assert!(report.removed.is_empty());
        assert_eq!(report.left, vec![r.join("task-x")]);
        assert!(target.path().join("keep").exists());
    }

    #[test]
    fn a_dead_owners_fifty_thousand_deep_chain_is_swept_on_a_small_stack() {
        use crate::process::task_dir::removal::hostile::{chain_bottom_up, on_a_small_stack};
        let root = tempfile::tempdir().unwrap();
        let r = root.path().to_owned();
        let dir = leave(&r, "task-deep", ME, DEAD_PID);
        chain_bottom_up(&dir);
        let report = on_a_small_stack(move || sweep_with(&r, ME, running).unwrap());
        assert_eq!(report.removed, vec![dir.clone()]);
        assert!(!dir.exists());
    }

    /// Where this process may mount (root, as CI runs): a dead worker's task space, still
    /// mounted with what its task filled it with, is detached and removed.
    #[test]
    fn a_dead_owners_mounted_space_is_detached_and_swept() {
        use crate::process::task_dir::space::{SpaceLimits, available, is_mount_root, mount_space};
        let root = tempfile::tempdir().unwrap();
        if let Err(why) = available(root.path()) {
            eprintln!("skipped: {why}");
            return;
        }
        let r = root.path().to_owned();
        let dir = r.join("task-mounted");
        fs::create_dir(&dir).unwrap();
        let limits = SpaceLimits {
            bytes: 8 << 20,
            inodes: 20_000,
        };
        mount_space(&dir, limits).unwrap();
        let owner = DirOwner {
            worker: ME.to_owned(),
            pid: DEAD_PID,
            start_time: 5,
        };
        fs::write(
            r.join(format!("task-mounted{OWNER_SUFFIX}")),
            owner.to_file(),
        )
        .unwrap();
        for i in 0..10_000 {
            fs::write(dir.join(format!("f{i}")), b"").unwrap();
        }
        let report = sweep_with(&r, ME, running).unwrap();
        assert_eq!(report.removed, vec![dir.clone()]);
        assert!(!dir.exists() && !is_mount_root(&dir));
    }

    #[test]
    fn a_live_workers_own_directories_survive_its_sweep() {
        let root = tempfile::tempdir().unwrap();
        let me = DirOwner::this_process(ME.to_owned()).unwrap();
        let dir = TaskDir::create(root.path(), "t_1", &me, None).unwrap();
        let report = sweep(root.path(), ME).unwrap();
        assert_eq!(report, SweepReport::default());
        assert!(dir.path().exists());
        assert_eq!(sweep(&root.path().join("missing"), ME).unwrap(), report);
    }
}
