//! The OS boundary around every process that runs a task's code: the CPU-stage child that
//! imports the candidate and builds its extensions, the judge (which runs the problem's
//! reference) and the runner (the candidate), and anything they start. The code is hostile
//! model output; static screening is a reward-hacking signal, this is the security boundary.
//!
//! The worker decides and builds the policy; the child enters it (harness/sandbox.py) before
//! any untrusted line runs. One module per step:
//!
//! - [`config`]: what the operator asks (layers required, sandbox users, tmpfs sizes);
//! - [`identity`]: who a child becomes (a sandbox user, or a user namespace);
//! - [`paths`]: what it may see (system and Python read-only, its task directory, private
//!   /tmp and /dev/shm, masked homes);
//! - [`landlock`]: the ruleset, handed over as a descriptor;
//! - [`seccomp`]: the filters, compiled here;
//! - [`cgroup`]: a cgroup per task (limits, kill, OOM evidence) where the host allows;
//! - [`plan`]: the plan the child enters, in spec.json;
//! - the start-up proof, `crate::task::sandbox_selftest`: a child enters every layer and tries
//!   what each must refuse; a layer that fails is dropped if optional, and the worker refuses
//!   to serve if it was required. It runs a whole child, so it lives above this module and
//!   hands its findings in through [`Sandbox::ready_with`];
//! - [`verify`]: the worker's own check of a judge's identity and filters from /proc.
//!
//! May import: `process` (`scripts/check_layout.py` checks every folder's rule).

pub mod cgroup;
pub mod config;
pub mod identity;
pub mod landlock;
pub mod paths;
pub mod plan;
pub mod seccomp;
pub mod verify;

use crate::process::cores::Placement;
use crate::process::limits::ChildLimits;
use base64::Engine;
use cgroup::{Cgroups, TaskCgroup};
use config::SandboxSettings;
use crucible_shared::{LayerState, LayerStatus, SandboxLayer, SandboxStatus};
use identity::{Identities, Identity, IdentityLease};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Why the sandbox could not be set up or entered: every one is a fault of this node, never
/// of a candidate.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A sandbox setting the host cannot honour (a user that does not exist, or is root).
    #[error("sandbox configuration: {0}")]
    Config(String),
    /// A fact of the host that could not be read, or a per-child resource that could not be made.
    #[error("sandbox: {0}")]
    Host(String),
    /// Landlock is unavailable, or the ruleset could not be built.
    #[error("landlock: {0}")]
    Landlock(String),
    /// Seccomp is unavailable, or its programs could not be built.
    #[error("seccomp: {0}")]
    Seccomp(String),
    /// A layer the worker must have is not in force on this host: it refuses to serve.
    #[error(
        "required sandbox layer `{layer}` is not available on this host: {why} (fix the host, or drop it from CRUCIBLE_SANDBOX_REQUIRE knowing what that layer stops: docs/SECURITY.md)"
    )]
    Refused {
        /// The layer's name.
        layer: &'static str,
        /// Why it is not in force (the host's lack, or what the self-test saw).
        why: String,
    },
    /// The start-up self-test could not run, or found the sandbox broken.
    #[error("sandbox self-test: {0}")]
    Selftest(String),
}

impl From<SandboxError> for std::io::Error {
    fn from(e: SandboxError) -> Self {
        std::io::Error::other(e.to_string())
    }
}

/// The sandbox of one worker: its settings and, once the start-up self-test has run, what is
/// in force. Shared by every child the worker starts.
#[derive(Debug)]
pub struct Sandbox {
    settings: SandboxSettings,
    ready: tokio::sync::OnceCell<SandboxInForce>,
}

/// The host's facts and the layers proven in force on it.
#[derive(Debug)]
pub struct SandboxInForce {
    /// What the host offers (identities, cgroups, paths) for each child's sandbox.
    pub host: Host,
    /// The layers the self-test proved in force: those every child enters.
    pub active: BTreeSet<SandboxLayer>,
    /// What the registry and results report of the sandbox.
    pub status: SandboxStatus,
}

impl Sandbox {
    /// A sandbox with `settings`, nothing yet checked of the host.
    pub fn new(settings: SandboxSettings) -> Self {
        Self {
            settings,
            ready: tokio::sync::OnceCell::new(),
        }
    }

    /// The settings it was made with.
    pub fn settings(&self) -> &SandboxSettings {
        &self.settings
    }

    /// What a report says about this worker's sandbox (`None` until the self-test ran).
    pub fn status(&self) -> Option<SandboxStatus> {
        if !self.settings.enabled {
            return Some(SandboxStatus {
                layers: SandboxLayer::ALL
                    .iter()
                    .map(|&layer| LayerStatus {
                        layer,
                        state: LayerState::Off,
                        required: false,
                        detail: "CRUCIBLE_SANDBOX=off".into(),
                    })
                    .collect(),
                identity: "the worker's own".into(),
                selftest_ms: 0.0,
            });
        }
        self.ready.get().map(|r| r.status.clone())
    }

    /// The layers in force (`None`: off), found by `establish` (the start-up self-test,
    /// `crate::task::sandbox_selftest::ready`) on first use, at most once however many callers
    /// race; later calls return what it found. An error means the worker must not serve: a
    /// required layer is missing or the host could not be examined (a later call tries again).
    pub async fn ready_with<F, Fut>(
        &self,
        establish: F,
    ) -> Result<Option<&SandboxInForce>, SandboxError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<SandboxInForce, SandboxError>>,
    {
        if !self.settings.enabled {
            return Ok(None);
        }
        self.ready.get_or_try_init(establish).await.map(Some)
    }

    /// Removes what the sandbox made on the host for this worker (its cgroup directories);
    /// a worker that dies first leaves them to the next one's clean-up.
    pub fn release(&self) {
        if let Some(cgroups) = self.ready.get().and_then(|r| r.host.cgroups()) {
            cgroups.remove();
        }
    }
}

/// What the worker found on its host, once, before any child.
#[derive(Debug)]
pub struct Host {
    identities: Identities,
    cgroups: Option<Cgroups>,
    /// Directories every child may read: the system, the Python, the CUDA toolkit.
    read_only: Vec<PathBuf>,
    devices: Vec<PathBuf>,
    /// The sizes of a child's private /dev/shm and /tmp (from the settings).
    shm_bytes: u64,
    tmp_bytes: u64,
    /// The host has cgroup hierarchies under [`paths::CGROUP_ROOT`]: masked in every task.
    cgroup_root: bool,
    judge_programs: Vec<String>,
    runner_programs_netns: Vec<String>,
    runner_programs_no_netns: Vec<String>,
    /// Layers this host cannot give at all, and why (before any self-test).
    pub unavailable: BTreeMap<SandboxLayer, String>,
}

fn b64(programs: Vec<Vec<u8>>) -> Vec<String> {
    programs
        .iter()
        .map(|p| base64::engine::general_purpose::STANDARD.encode(p))
        .collect()
}

impl Host {
    /// Examines the host: users, cgroups, the directories of `python` (the children's
    /// interpreter), Landlock and seccomp, whether it may mount bounded task spaces under
    /// `work_root`; `gpu`: children get the GPU's device files; `shared_read_only`: the
    /// worker's own directories every child may read (the node's precompiled headers).
    pub async fn detect(
        settings: &SandboxSettings,
        python: &Path,
        work_root: &Path,
        gpu: bool,
        shared_read_only: Vec<PathBuf>,
    ) -> Result<Host, SandboxError> {
        let root = nix::unistd::geteuid().is_root();
        let identities = if root {
            Identities::users(&settings.users)?
        } else {
            Identities::own_namespace()
        };
        let mut unavailable = BTreeMap::new();
        if let Err(e) = landlock::available() {
            unavailable.insert(SandboxLayer::Landlock, e.to_string());
        }
        if let Err(e) = seccomp::available() {
            unavailable.insert(SandboxLayer::Seccomp, e.to_string());
        }
        let cgroups = Cgroups::detect();
        if cgroups.is_none() {
            unavailable.insert(
                SandboxLayer::Cgroup,
                "no cgroup hierarchy this worker may write (delegate one, e.g. systemd Delegate=yes)"
                    .into(),
            );
        }
        if let Err(why) = crate::process::task_dir::space::available(work_root) {
            unavailable.insert(SandboxLayer::Storage, why);
        }
        let mut read_only: Vec<PathBuf> =
            paths::SYSTEM_READ_ONLY.iter().map(PathBuf::from).collect();
        read_only.extend(paths::python_dirs(python).await?);
        read_only.extend(paths::toolchain_dirs(|k| std::env::var(k).ok()));
        read_only.extend(shared_read_only);
        let mut devices: Vec<PathBuf> = paths::COMMON_DEVICES.iter().map(PathBuf::from).collect();
        if gpu {
            devices.extend(paths::gpu_devices());
        }
        Ok(Host {
            identities,
            cgroups,
            read_only: paths::existing_dirs(read_only),
            devices,
            shm_bytes: settings.shm_bytes,
            tmp_bytes: settings.tmp_bytes,
            cgroup_root: Path::new(paths::CGROUP_ROOT).is_dir(),
            judge_programs: b64(seccomp::judge_programs()?),
            runner_programs_netns: b64(seccomp::runner_programs(true)?),
            runner_programs_no_netns: b64(seccomp::runner_programs(false)?),
            unavailable,
        })
    }

    /// The identities children take.
    pub(crate) fn identities(&self) -> &Identities {
        &self.identities
    }

    /// The cgroup hierarchies this worker may write; `None` when there are none.
    pub(crate) fn cgroups(&self) -> Option<&Cgroups> {
        self.cgroups.as_ref()
    }

    /// The sandbox of one child with `active` layers under `limits`, at `placement` (its cores
    /// and priority): its identity, cgroup, ruleset and plan; the task directory is handed to
    /// the child's user.
    pub fn child(
        &self,
        active: &BTreeSet<SandboxLayer>,
        limits: &ChildLimits,
        placement: &Placement,
        task_dir: &Path,
        label: &str,
    ) -> Result<ChildSandbox, SandboxError> {
        let on = |l| active.contains(&l);
        let lease = self.identities.acquire();
        let (uid, gid) = lease.identity.ids();
        let setuid = on(SandboxLayer::User) && matches!(lease.identity, Identity::User { .. });
        if setuid {
            chown_tree(task_dir, uid, gid)?;
        }
        let cgroup = match (&self.cgroups, on(SandboxLayer::Cgroup)) {
            (Some(cgroups), true) => Some(cgroups.for_task(
                &format!("{label}-{}", uuid::Uuid::new_v4().simple()),
                limits.max_memory_bytes.saturating_mul(5) / 4,
                // Threads count: a task's torch and CUDA start dozens.
                limits.max_processes.saturating_mul(8).max(1024),
            )?),
            _ => None,
        };
        let fresh_mounts = on(SandboxLayer::Mount);
        let private_mounts = if fresh_mounts {
            paths::private_mounts(
                task_dir,
                &self.read_only,
                |p| paths::traversable_by(p, uid, gid),
                paths::MountSizes {
                    shm_bytes: self.shm_bytes,
                    tmp_bytes: self.tmp_bytes,
                    inodes: limits.max_space_inodes,
                },
                self.cgroup_root,
            )
        } else {
            Vec::new()
        };
        let ruleset = if on(SandboxLayer::Landlock) {
            let mut rules: Vec<_> = self
                .read_only
                .iter()
                .map(|p| (p.clone(), landlock::read_only_access()))
                .collect();
            rules.push((task_dir.to_path_buf(), landlock::read_write_access()));
            rules.extend(
                self.devices
                    .iter()
                    .map(|p| (p.clone(), landlock::device_access())),
            );
            if !fresh_mounts {
                // No private mounts: the host's /dev/shm (CUDA IPC) and /proc it is.
                rules.push(("/dev/shm".into(), landlock::read_write_access()));
                rules.push(("/proc".into(), landlock::proc_access()));
            } else if !on(SandboxLayer::Pid) {
                rules.push(("/proc".into(), landlock::proc_access()));
            }
            Some(landlock::ruleset(&rules)?)
        } else {
            None
        };
        let plan = plan::build(plan::PlanInputs {
            active,
            identity: &lease.identity,
            cgroup_procs: cgroup
                .as_ref()
                .map(TaskCgroup::procs_files)
                .unwrap_or_default(),
            cpus: placement.cpus.clone(),
            idle_priority: placement.idle_priority,
            private_mounts,
            landlock: ruleset.as_ref().map(|_| plan::LandlockPlan {
                fd: plan::RULESET_FD,
                rw_access: landlock::read_write_access().bits(),
                proc_access: landlock::proc_access().bits(),
            }),
            seccomp: Some(plan::SeccompPlan {
                judge: self.judge_programs.clone(),
                runner: if on(SandboxLayer::Network) {
                    self.runner_programs_netns.clone()
                } else {
                    self.runner_programs_no_netns.clone()
                },
            }),
        });
        Ok(ChildSandbox {
            expect: verify::Expectation {
                uid: setuid.then_some(uid),
                seccomp: plan.seccomp.is_some(),
                pid_namespace: plan.namespaces.contains(&"pid"),
            },
            owner: setuid.then_some((uid, gid)),
            prepared_ms: 0.0,
            plan,
            ruleset,
            cgroup,
            _identity: lease,
        })
    }
}

/// Everything one child's sandbox holds until the child is gone: the plan it enters, the
/// ruleset descriptor it inherits, its cgroup (killed and removed when dropped) and its user.
#[derive(Debug)]
pub struct ChildSandbox {
    /// The plan written to the child's `spec.json`.
    pub plan: plan::Plan,
    ruleset: Option<OwnedFd>,
    /// The child's own cgroup, when the cgroup layer is in force.
    pub cgroup: Option<TaskCgroup>,
    /// What the worker checks of the judge from /proc once it says it is in.
    pub expect: verify::Expectation,
    /// The task directory's owner, for files the worker adds after the plan was made.
    owner: Option<(u32, u32)>,
    /// How long the worker took to make it (milliseconds), for the result's `stage_ms`.
    pub prepared_ms: f64,
    _identity: IdentityLease,
}

impl ChildSandbox {
    /// The ruleset, to be placed at [`plan::RULESET_FD`] in the child.
    pub fn take_ruleset(&mut self) -> Option<OwnedFd> {
        self.ruleset.take()
    }

    /// Whether the task's own cgroup caps its threads and processes (`pids.max`).
    pub fn limits_processes(&self) -> bool {
        self.cgroup
            .as_ref()
            .is_some_and(TaskCgroup::limits_processes)
    }

    /// The name of the task's cgroup directory, when it has one.
    pub fn cgroup_name(&self) -> Option<String> {
        self.cgroup.as_ref().and_then(TaskCgroup::name)
    }

    /// Hands a file the worker wrote into the task directory to the child's user.
    pub fn own(&self, path: &Path) -> Result<(), SandboxError> {
        match self.owner {
            Some((uid, gid)) => chown_tree(path, uid, gid),
            None => Ok(()),
        }
    }
}

/// Gives `path` and everything under it to `uid:gid`, never following a link.
pub fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), SandboxError> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| SandboxError::Host(format!("{}: {e}", path.display())))?;
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .map_err(|e| SandboxError::Host(format!("chown {}: {e}", path.display())))?;
    if meta.is_dir() {
        let entries = std::fs::read_dir(path)
            .map_err(|e| SandboxError::Host(format!("{}: {e}", path.display())))?;
        for entry in entries.flatten() {
            chown_tree(&entry.path(), uid, gid)?;
        }
    }
    Ok(())
}
