//! What a worker reports about the OS boundary around the code it runs: each sandbox layer,
//! whether it is in force on that worker's host, and why not when it is not. The worker
//! decides this at start from a self-test run through the real sandbox (gpu-worker's
//! `sandbox_selftest`), not from configuration alone.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One layer of the sandbox around every process that runs a task's code.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SandboxLayer {
    /// A network namespace with nothing but its own loopback: no broker, API or other host.
    Network,
    /// A pid namespace per task whose end kills every process of the task; nothing outside
    /// it can be seen or signalled from inside.
    Pid,
    /// A mount and IPC namespace: a fresh /proc, private /tmp and /dev/shm, private homes
    /// masked.
    Mount,
    /// An unprivileged identity distinct from the worker's (a sandbox user when the worker
    /// is root, else a user namespace without capabilities).
    User,
    /// Landlock: read-only system and Python, read-write only the task's own directory; no
    /// signals to, tracing of or abstract sockets of processes outside the task; no TCP.
    Landlock,
    /// seccomp filters: no ptrace, process_vm_*, mount, kexec, bpf, perf_event_open, keyctl,
    /// namespaces, ...; the candidate's process sends no SIGKILL.
    Seccomp,
    /// A cgroup per task: memory and process limits, a kill of the whole task, OOM evidence.
    Cgroup,
    /// A bounded writable space per task: its directory, /tmp and /dev/shm on one tmpfs of
    /// its own with a size and an inode limit (memory, charged to the task), removed whole.
    Storage,
}

impl SandboxLayer {
    /// Every layer, in the order reports list them.
    pub const ALL: [SandboxLayer; 8] = [
        SandboxLayer::Network,
        SandboxLayer::Pid,
        SandboxLayer::Mount,
        SandboxLayer::User,
        SandboxLayer::Landlock,
        SandboxLayer::Seccomp,
        SandboxLayer::Cgroup,
        SandboxLayer::Storage,
    ];

    /// The name used in configuration and reports (`network`, `pid`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SandboxLayer::Network => "network",
            SandboxLayer::Pid => "pid",
            SandboxLayer::Mount => "mount",
            SandboxLayer::User => "user",
            SandboxLayer::Landlock => "landlock",
            SandboxLayer::Seccomp => "seccomp",
            SandboxLayer::Cgroup => "cgroup",
            SandboxLayer::Storage => "storage",
        }
    }

    /// The layer [`SandboxLayer::name`] gives `name`, if any.
    pub fn from_name(name: &str) -> Option<SandboxLayer> {
        SandboxLayer::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// Whether one layer protects this worker's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LayerState {
    /// In force for every task child, and proven by the start-up self-test.
    Active,
    /// Wanted but this host refused it (the detail says how); only possible for a layer the
    /// worker is not configured to require.
    Unavailable,
    /// Turned off by configuration (`CRUCIBLE_SANDBOX=off`).
    Off,
}

/// One layer of one worker's sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LayerStatus {
    /// Which layer.
    pub layer: SandboxLayer,
    /// Whether it is in force, and if not, whether by choice.
    pub state: LayerState,
    /// Whether the worker refuses to serve without this layer.
    pub required: bool,
    /// How the layer is realised here, or why it is not.
    pub detail: String,
}

/// The sandbox of one worker, as its start-up self-test found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SandboxStatus {
    /// Every layer, each once, in a fixed order (network, pid, mount, user, landlock,
    /// seccomp, cgroup, storage).
    pub layers: Vec<LayerStatus>,
    /// Who task children run as (`nobody (uid 65534)`, `user namespace of uid 1000`).
    pub identity: String,
    /// How long the self-test took, in milliseconds.
    pub selftest_ms: f64,
}
