//! The steps a freshly forked child takes before exec to stand apart from the worker: its own
//! session, death with the worker (PDEATHSIG), the descriptors it inherits placed at their
//! agreed numbers and every other one closed at exec, the OOM killer's first choice, and its
//! rlimits. Both ways a child is started use them: the supervisor's
//! direct spawn of a task child and the warm template's own start. They live here, apart from
//! both, so that neither has to import the other for them.
//!
//! The one place a child's start needs `unsafe` (the crate denies it elsewhere): the raw
//! system calls below, which nix does not wrap as async-signal-safe.
//!
//! Everything here runs between fork and exec, so it makes async-signal-safe system calls
//! only (setsid, prctl, getppid, dup2, fcntl, close_range, open/write, setrlimit) and
//! allocates nothing.

#![allow(unsafe_code)]

use crate::process::limits::ChildLimits;
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
    // Sorted before the fork: the child only reads it.
    let mut kept: Vec<i32> = start.fds.iter().map(|&(_, target)| target).collect();
    kept.sort_unstable();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed; it makes exactly those of this module (setsid, prctl, getppid, dup2,
    // fcntl, close_range, setrlimit) and allocates nothing (it reads `start` and `kept`,
    // built before the fork).
    unsafe {
        cmd.pre_exec(move || {
            detach_from_worker(start.parent)?;
            for &(fd, target) in &start.fds {
                place_fd(fd, target)?;
            }
            close_others_at_exec(&kept)?;
            first_for_the_oom_killer();
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

/// What a child's `oom_score_adj` is: the OOM killer's first choice, before the worker and the
/// API (`crucible_runtime::shield_from_oom_killer`) and before the rest of the host. Set by the
/// worker's own (privileged) hand, it is also the floor the task cannot lower it below.
const CHILD_OOM_SCORE_ADJ: &[u8] = b"1000";

/// Makes this child the OOM killer's first choice ([`CHILD_OOM_SCORE_ADJ`]); where /proc does
/// not let it (a hardened host), the child starts anyway: its cgroup and the watchdog bound it.
fn first_for_the_oom_killer() {
    // SAFETY: open, write and close on a static path and buffer; all async-signal-safe.
    unsafe {
        let fd = nix::libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            nix::libc::O_WRONLY | nix::libc::O_CLOEXEC,
        );
        if fd >= 0 {
            nix::libc::write(
                fd,
                CHILD_OOM_SCORE_ADJ.as_ptr().cast(),
                CHILD_OOM_SCORE_ADJ.len(),
            );
            nix::libc::close(fd);
        }
    }
}

/// The descriptor numbers a child may be handed: the protocol's few (fd 3 to 5), far below.
const HIGHEST_CHECKED_FD: u32 = 1 << 16;

/// Marks every descriptor from 3 up that is not one of `kept` (sorted) close-on-exec: whatever
/// the worker itself inherited without it (a shell's fd 10, a supervisor's 251) never reaches a
/// task. Marked, not closed: the spawn's own error pipe must live until the exec.
fn close_others_at_exec(kept: &[i32]) -> std::io::Result<()> {
    let mut from: u32 = 3;
    for &fd in kept {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd > from {
            cloexec_range(from, fd - 1)?;
        }
        from = from.max(fd + 1);
    }
    cloexec_range(from, u32::MAX)
}

/// `close_range(first, last, CLOSE_RANGE_CLOEXEC)`; on a kernel without it (before 5.11), the
/// flag set one descriptor at a time up to [`HIGHEST_CHECKED_FD`] (the open-files rlimit is far
/// below).
fn cloexec_range(first: u32, last: u32) -> std::io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: nix::libc::c_uint = 1 << 2;
    // SAFETY: close_range and fcntl take descriptor numbers only; both are async-signal-safe.
    unsafe {
        if nix::libc::syscall(nix::libc::SYS_close_range, first, last, CLOSE_RANGE_CLOEXEC) == 0 {
            return Ok(());
        }
        for fd in first..=last.min(HIGHEST_CHECKED_FD) {
            // EBADF (not open) is the common answer and fine.
            nix::libc::fcntl(fd as i32, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC);
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A descriptor the worker inherited without close-on-exec (as a shell or a supervisor
    /// leaves them) does not reach the child; the one the protocol names does, at its number;
    /// and the child is the OOM killer's first choice.
    #[tokio::test]
    async fn a_child_gets_only_the_descriptors_it_is_handed() {
        let file = tempfile::tempfile().unwrap();
        let stray = nix::unistd::dup(&file).unwrap();
        let handed = nix::unistd::dup(&file).unwrap();
        let stray_fd = stray.as_raw_fd();
        let flags = nix::fcntl::fcntl(&stray, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_eq!(flags & nix::libc::FD_CLOEXEC, 0, "the stray is inheritable");
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c").arg(format!(
            "for fd in {stray_fd} 7; do if [ -e /proc/self/fd/$fd ]; then echo \"$fd open\"; else echo \"$fd closed\"; fi; done; cat /proc/self/oom_score_adj"
        ));
        cmd.stdout(std::process::Stdio::piped());
        arrange(
            &mut cmd,
            ChildStart {
                parent: std::process::id() as i32,
                fds: vec![(handed.as_raw_fd(), 7)],
                limits: StartLimits::Template {
                    max_open_files: 1024,
                },
            },
        );
        let out = cmd.output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text,
            format!("{stray_fd} closed\n7 open\n1000\n"),
            "{out:?}"
        );
        drop((stray, handed));
    }
}
