//! The wire types of the `selftest` line the harness writes (harness/selftest.py): what the
//! runner and the judge of the sandbox's start-up self-test found. They live with the rest of
//! the pipe's parsing, below the self-test that judges them (`crate::task::sandbox_selftest`), so
//! that the protocol never reaches up into it.

use serde::Deserialize;
use std::collections::BTreeMap;

/// `/proc/<pid>/status` fields as the harness reports them.
pub type StatusFields = BTreeMap<String, Vec<String>>;

/// Who a process is, as the kernel says (the judge's part of the report).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeReport {
    /// Its pid as it sees itself (1 inside a pid namespace).
    pub pid: i64,
    /// Its `Uid`, `Gid`, `NoNewPrivs`, `Seccomp`, `Seccomp_filters`, `CapEff` and `NSpid`.
    pub status: StatusFields,
}

/// The file system of the task directory, as `statvfs` gives it to the runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpaceReport {
    /// Its size in bytes (`f_blocks * f_frsize`).
    pub bytes: u64,
    /// Its inodes (`f_files`).
    pub inodes: u64,
}

/// What the runner's probes found (each attempt: `ok` or the errno's name).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerReport {
    /// The runner's pid as it sees itself.
    pub pid: i64,
    /// The runner's status fields (as [`JudgeReport::status`]).
    pub status: StatusFields,
    /// Its parent's pid: the judge, pid 1 in a pid namespace.
    pub ppid: i64,
    /// Connecting to the worker's listening port (absent when no port was given).
    #[serde(default)]
    pub tcp_worker: Option<String>,
    /// Opening an inet socket at all.
    pub tcp_socket: String,
    /// Reading the canary file outside the task directory.
    #[serde(default)]
    pub read_canary: Option<String>,
    /// Writing a file beside the canary, outside the task directory.
    #[serde(default)]
    pub write_outside: Option<String>,
    /// The pids in its /proc (at most 64): few in a pid namespace of its own.
    pub visible_pids: Vec<i64>,
    /// `kill(-1, 0)`: `ESRCH` when no other process can be signalled.
    pub kill_all: String,
    /// `ptrace(PTRACE_ATTACH)` of the judge.
    pub ptrace_judge: String,
    /// `unshare(CLONE_NEWUSER)`: refused by the seccomp filter.
    pub unshare_user: String,
    /// SIGKILL sent to a child of its own: refused by the runner's filter.
    pub sigkill: String,
    /// The cores it may run on (its affinity), sorted.
    pub cores: Vec<usize>,
    /// `sched_setaffinity` to every core of the host: refused by the seccomp filter.
    pub widen_cores: String,
    /// Its /proc/self/cgroup (at most 4096 characters).
    pub cgroup: String,
    /// The file system type at /tmp, /dev/shm and /proc.
    pub mounts: BTreeMap<String, String>,
    /// The size and inodes of the file system of its working directory (the task's).
    pub space: SpaceReport,
    /// Entries it could list under /sys/fs/cgroup (`-1`: listing refused): none where the
    /// mount layer masks them.
    pub cgroups_listed: i64,
    /// The sum of the CUDA tensor the judge shared (1024 ones when IPC works); absent on a CPU
    /// worker.
    #[serde(default)]
    pub ipc_sum: Option<f64>,
}

/// The `selftest` line of the harness.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelftestReport {
    /// What the runner's probes found.
    pub runner: RunnerReport,
    /// Who the judge is.
    pub judge: JudgeReport,
}
