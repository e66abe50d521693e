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
    /// Resident memory of the child's whole process group, enforced by the watchdog (not
    /// RLIMIT_AS: CUDA reserves huge virtual ranges).
    pub max_memory_bytes: u64,
    /// stdout + stderr bytes before the child is killed for flooding.
    pub max_output_bytes: u64,
    /// How often the watchdog samples the group.
    pub watchdog_interval: Duration,
    /// Set per child whose own cgroup holds its threads and processes (`pids.max`): the cap is
    /// then the task's alone, and RLIMIT_NPROC, which counts the processes of a whole user
    /// that children of several tasks may share, is not lowered for it (the worker's own
    /// stays), so that one task at its cap never fails another ([`ChildLimits::nproc_rlimit`]).
    pub processes_per_task: bool,
}

impl ChildLimits {
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
            max_memory_bytes: 32 << 30,
            max_output_bytes: 4 << 20,
            watchdog_interval: Duration::from_millis(100),
            processes_per_task: false,
        }
    }
}
