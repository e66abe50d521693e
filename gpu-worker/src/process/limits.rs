//! The limits every task child runs under (rlimits, the watchdog's caps, the task cgroup's).
//! A file of their own at the bottom of the crate: the worker's configuration holds them, and
//! the supervisor, the template and the sandbox read them without reaching the configuration.

use std::time::Duration;

/// Limits applied to every task child.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildLimits {
    /// RLIMIT_NOFILE.
    pub max_open_files: u64,
    /// The watchdog's cap on processes in the child's group (and, with threads, the task
    /// cgroup's `pids.max`); RLIMIT_NPROC is a per-user backstop above it
    /// ([`ChildLimits::nproc_rlimit`]).
    pub max_processes: u64,
    /// RLIMIT_FSIZE: largest file the child may write.
    pub max_file_bytes: u64,
    /// Memory of the child's whole process group, enforced by the watchdog (not RLIMIT_AS:
    /// CUDA reserves huge virtual ranges): resident, with pages forks share counted once
    /// ([`crate::process::watchdog::charged_bytes`]).
    pub max_memory_bytes: u64,
    /// stdout + stderr bytes before the child is killed for flooding.
    pub max_output_bytes: u64,
    /// How often the watchdog samples the group.
    pub watchdog_interval: Duration,
    /// The size of a task's directory where the sandbox's `storage` layer gives it a tmpfs of
    /// its own (`crate::process::task_dir::space`); its /tmp and /dev/shm have their own sizes
    /// (`crate::sandbox::config`).
    pub max_space_bytes: u64,
    /// The files, directories and links each of its task directory, /tmp and /dev/shm holds at
    /// most.
    pub max_space_inodes: u64,
    /// Set per child whose own cgroup holds its threads and processes (`pids.max`): the cap is
    /// then the task's alone, and RLIMIT_NPROC, which counts the processes of a whole user
    /// that children of several tasks may share, is not lowered for it (the worker's own
    /// stays), so that one task at its cap never fails another ([`ChildLimits::nproc_rlimit`]).
    pub processes_per_task: bool,
}

/// The most host memory one task is given, however large the node (`CRUCIBLE_CHILD_MEMORY_MB`
/// sets it outright).
pub const MAX_TASK_MEMORY: u64 = 32 << 30;
/// The least: a task's judge and runner each import torch (and a CUDA context).
pub const MIN_TASK_MEMORY: u64 = 2 << 30;
/// The size of a task's writable space by default: a CUDA extension's build (objects of
/// torch's headers) takes tens of MiB, Triton's cache less; its pages are memory.
pub const DEFAULT_SPACE_BYTES: u64 = 2 << 30;
/// The inodes of a task's writable space by default: a build and a Triton cache make hundreds.
pub const DEFAULT_SPACE_INODES: u64 = 1 << 17;

/// Pure: the host memory one task may use on a node of `node_memory` bytes running at most
/// `children` task children at once (every worker's): together they stay under three quarters
/// of the node, which leaves the rest to the worker, the API and the system, so that no task's
/// allocation can take the node's memory from them; within [`MIN_TASK_MEMORY`] and
/// [`MAX_TASK_MEMORY`].
pub fn task_memory_bound(node_memory: u64, children: u64) -> u64 {
    (node_memory / 4 * 3 / children.max(1)).clamp(MIN_TASK_MEMORY, MAX_TASK_MEMORY)
}

/// The node's memory (`MemTotal` of /proc/meminfo); `None` where it cannot be read.
pub fn node_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

impl ChildLimits {
    /// The limits of a task's writable space.
    pub fn space(&self) -> crate::process::task_dir::space::SpaceLimits {
        crate::process::task_dir::space::SpaceLimits {
            bytes: self.max_space_bytes,
            inodes: self.max_space_inodes,
        }
    }

    /// RLIMIT_NPROC: none set (the worker's stays) where the task's cgroup caps its processes
    /// (`processes_per_task`); else, since it counts every process and thread of the child's
    /// user on the host and children of several tasks may share a user, far above one task's
    /// cap, against a fork storm only (several tasks' bombs together can still reach it: the
    /// deploy unit gives each GPU users of its own).
    pub fn nproc_rlimit(&self) -> Option<u64> {
        (!self.processes_per_task).then(|| self.max_processes.saturating_mul(16))
    }
}

impl Default for ChildLimits {
    fn default() -> Self {
        Self {
            max_open_files: 4096,
            max_processes: 256,
            max_file_bytes: 1 << 30,
            max_memory_bytes: MAX_TASK_MEMORY,
            max_output_bytes: 4 << 20,
            watchdog_interval: Duration::from_millis(100),
            max_space_bytes: DEFAULT_SPACE_BYTES,
            max_space_inodes: DEFAULT_SPACE_INODES,
            processes_per_task: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_gets_its_share_of_three_quarters_of_the_node_within_bounds() {
        const GIB: u64 = 1 << 30;
        assert_eq!(task_memory_bound(128 * GIB, 12), 8 * GIB);
        assert_eq!(task_memory_bound(24 * GIB, 3), 6 * GIB);
        assert_eq!(task_memory_bound(24 * GIB, 100), MIN_TASK_MEMORY);
        assert_eq!(task_memory_bound(2048 * GIB, 2), MAX_TASK_MEMORY);
        assert_eq!(task_memory_bound(16 * GIB, 0), 12 * GIB);
    }
}
