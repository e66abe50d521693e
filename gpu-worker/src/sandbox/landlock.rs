//! The Landlock ruleset of a task child, built by the worker with the `landlock` crate and
//! handed to the child as an inherited descriptor: the child adds rules for the mounts it makes
//! itself (/proc, /tmp, /dev/shm: new inodes no rule here can name) and then enters it, once as
//! the judge and once more, nested, as the runner.
//!
//! Handled (denied unless a rule allows): every filesystem access of ABI 6, TCP bind and
//! connect (no rule allows any), and the scopes: signals and abstract Unix sockets cannot reach
//! a process outside the caller's domain. Landlock also refuses ptrace of processes outside the
//! domain, which keeps the judge's memory and descriptors out of the runner's reach.

use super::SandboxError;
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// The ABI every rule is written for: scopes need 6 (Linux 6.12); an older kernel has no
/// Landlock layer rather than a weaker one.
pub const TARGET_ABI: ABI = ABI::V6;

/// Execute, read files, list directories.
pub fn read_only_access() -> BitFlags<AccessFs> {
    AccessFs::from_read(TARGET_ABI)
}

/// Everything, inside the task's own directory and its private tmpfs mounts.
pub fn read_write_access() -> BitFlags<AccessFs> {
    AccessFs::from_all(TARGET_ABI)
}

/// Device nodes: read, write, truncate and ioctl (CUDA drives the GPU by ioctl).
pub fn device_access() -> BitFlags<AccessFs> {
    AccessFs::from_file(TARGET_ABI)
}

/// The task's own /proc: read, and write too, because libcuda names its threads through
/// /proc/self/task/*/comm (CUDA fails to start without it, measured on the H100).
pub fn proc_access() -> BitFlags<AccessFs> {
    read_only_access() | AccessFs::WriteFile | AccessFs::Truncate
}

fn err(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Landlock(e.to_string())
}

fn base() -> Result<RulesetCreated, SandboxError> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .and_then(|r| r.handle_access(AccessNet::from_all(TARGET_ABI)))
        .and_then(|r| r.scope(Scope::from_all(TARGET_ABI)))
        .and_then(|r| r.create())
        .map_err(err)
}

/// Whether this kernel enforces everything the ruleset asks (an error says why not).
pub fn available() -> Result<(), SandboxError> {
    base().map(drop)
}

/// The ruleset of one task child: each path with its rights; paths that do not exist are
/// skipped.
pub fn ruleset(rules: &[(PathBuf, BitFlags<AccessFs>)]) -> Result<OwnedFd, SandboxError> {
    let mut created = base()?;
    for (path, access) in rules {
        let Ok(fd) = PathFd::new(path) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, *access))
            .map_err(|e| SandboxError::Landlock(format!("{}: {e}", path.display())))?;
    }
    Option::<OwnedFd>::from(created)
        .ok_or_else(|| SandboxError::Landlock("the kernel gave no ruleset descriptor".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_masks_nest_as_the_child_expects() {
        let rw = read_write_access().bits();
        assert_eq!(
            proc_access().bits() & !rw,
            0,
            "proc rights are handled rights"
        );
        assert_ne!(device_access().bits() & AccessFs::IoctlDev as u64, 0);
        assert_eq!(read_only_access().bits() & AccessFs::WriteFile as u64, 0);
    }

    #[test]
    fn a_ruleset_is_built_where_the_kernel_has_landlock() {
        if available().is_err() {
            return; // a kernel without Landlock ABI 6: the layer is reported unavailable
        }
        let dir = tempfile::tempdir().unwrap();
        let fd = ruleset(&[
            (PathBuf::from("/usr"), read_only_access()),
            (PathBuf::from("/no/such/dir"), read_only_access()),
            (dir.path().to_path_buf(), read_write_access()),
            (PathBuf::from("/dev/null"), device_access()),
        ])
        .unwrap();
        assert!(std::os::fd::AsRawFd::as_raw_fd(&fd) > 2);
    }
}
