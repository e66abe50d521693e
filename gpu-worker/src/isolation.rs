//! The steps a freshly forked child takes before exec to stand apart from the worker: its own
//! session, death with the worker (PDEATHSIG), the descriptors it inherits placed at their
//! agreed numbers, and its rlimits. Both ways a child is started use them: the supervisor's
//! direct spawn of a task child and the warm template's own start. They live here, apart from
//! both, so that neither has to import the other for them.
//!
//! The one place a child's start needs `unsafe` (the crate denies it elsewhere): the raw
//! system calls below, which nix does not wrap as async-signal-safe.
//!
//! Everything here runs between fork and exec, so it makes async-signal-safe system calls
//! only (setsid, prctl, getppid, dup2, fcntl, setrlimit) and allocates nothing.

#![allow(unsafe_code)]

use crate::limits::ChildLimits;
use nix::sys::resource::{Resource, setrlimit};

/// The rlimits a child starts with.
pub(crate) enum StartLimits {
    /// A task child's, all of them at once.
    Task(ChildLimits),
    /// The template's: only what may bind the template itself.
    Template { max_open_files: u64 },
}

/// What a child does between fork and exec to stand apart from the worker.
pub(crate) struct ChildStart {
    /// The worker's pid: a child whose parent is already another process gives up.
    pub parent: i32,
    /// Descriptors (opened close-on-exec) to keep across exec, each at its agreed number:
    /// `(fd, target)`. Built before the fork, so the child only reads it.
    pub fds: Vec<(i32, i32)>,
    pub limits: StartLimits,
}

/// Registers `start` to run in `cmd`'s child between fork and exec: the only way the
/// supervisor and the template start a process.
pub(crate) fn arrange(cmd: &mut tokio::process::Command, start: ChildStart) {
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed; it makes exactly those of this module (setsid, prctl, getppid, dup2,
    // fcntl, setrlimit) and allocates nothing (it reads `start`, built before the fork).
    unsafe {
        cmd.pre_exec(move || {
            detach_from_worker(start.parent)?;
            for &(fd, target) in &start.fds {
                place_fd(fd, target)?;
            }
            match &start.limits {
                StartLimits::Task(limits) => task_rlimits(limits),
                StartLimits::Template { max_open_files } => template_rlimits(*max_open_files),
            }
        });
    }
}

/// A session and process group of its own, and death with the worker. PDEATHSIG follows the
/// *thread* that forked us, so children must be spawned from long-lived runtime threads,
/// never from spawn_blocking.
fn detach_from_worker(parent: i32) -> std::io::Result<()> {
    nix::unistd::setsid().map_err(std::io::Error::from)?;
    // SAFETY: prctl and getppid take no pointers and are async-signal-safe.
    let (pdeathsig, ppid) = unsafe {
        (
            nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL),
            nix::libc::getppid(),
        )
    };
    if pdeathsig != 0 || ppid != parent {
        return Err(std::io::Error::other("parent gone before exec"));
    }
    Ok(())
}

/// Makes `fd` (opened close-on-exec) survive exec as `target`.
fn place_fd(fd: i32, target: i32) -> std::io::Result<()> {
    // SAFETY: fcntl and dup2 on descriptor numbers only; both are async-signal-safe.
    let ok = unsafe {
        if fd == target {
            nix::libc::fcntl(target, nix::libc::F_SETFD, 0) == 0
        } else {
            nix::libc::dup2(fd, target) == target
        }
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn set(resource: Resource, value: u64) -> std::io::Result<()> {
    setrlimit(resource, value, value).map_err(std::io::Error::from)
}

/// The rlimits of a task child: open files, processes, file size, and no core dumps.
fn task_rlimits(limits: &ChildLimits) -> std::io::Result<()> {
    set(Resource::RLIMIT_NOFILE, limits.max_open_files)?;
    // None: left as the worker's (raising a hard limit needs a privilege the child may
    // not have); the task's cgroup caps its processes.
    if let Some(nproc) = limits.nproc_rlimit() {
        set(Resource::RLIMIT_NPROC, nproc)?;
    }
    set(Resource::RLIMIT_FSIZE, limits.max_file_bytes)?;
    set(Resource::RLIMIT_CORE, 0)
}

/// The rlimits of the template: open files and no core dumps. Its forks set the rest of a
/// task child's limits themselves (`harness/template.py`), since processes and file size
/// would otherwise bind the template too.
fn template_rlimits(max_open_files: u64) -> std::io::Result<()> {
    set(Resource::RLIMIT_NOFILE, max_open_files)?;
    set(Resource::RLIMIT_CORE, 0)
}
