//! The wire types of the `selftest` line the harness writes (harness/selftest.py): what the
//! runner and the judge of the sandbox's start-up self-test found. They live with the rest of
//! the pipe's parsing, below the self-test that judges them (`crate::sandbox_selftest`), so
//! that the protocol never reaches up into it.

use serde::Deserialize;
use std::collections::BTreeMap;

/// `/proc/<pid>/status` fields as the harness reports them.
pub type StatusFields = BTreeMap<String, Vec<String>>;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    pub pid: i64,
    pub status: StatusFields,
}

/// What the runner's probes found (each attempt: `ok` or the errno's name).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerReport {
    pub pid: i64,
    pub status: StatusFields,
    pub ppid: i64,
    #[serde(default)]
    pub tcp_worker: Option<String>,
    pub tcp_socket: String,
    #[serde(default)]
    pub read_canary: Option<String>,
    #[serde(default)]
    pub write_outside: Option<String>,
    pub visible_pids: Vec<i64>,
    pub kill_all: String,
    pub ptrace_judge: String,
    pub unshare_user: String,
    pub sigkill: String,
    pub cgroup: String,
    pub mounts: BTreeMap<String, String>,
    #[serde(default)]
    pub ipc_sum: Option<f64>,
}

/// The `selftest` line of the harness.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelftestReport {
    pub runner: RunnerReport,
    pub judge: Identity,
}
