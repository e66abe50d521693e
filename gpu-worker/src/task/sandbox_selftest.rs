//! The start-up proof that the sandbox holds on this host. A child is run exactly as a task's
//! would be (same launcher, same plan, same harness), with the `selftest` stage: its runner
//! tries what each layer must refuse (harness/selftest.py) while the worker listens on a TCP
//! port and keeps a canary file the child must not reach. The answer decides each layer:
//! a layer the host refuses, or that does not stop its probe, is dropped when it is optional
//! and makes the worker refuse to serve when it is required.
//!
//! It sits above the sandbox, the stage directory and the supervisor (it runs a whole child),
//! so the sandbox does not run it: [`ready`] hands [`establish`] to the sandbox's lazy
//! initialisation, and every path that starts a child goes through [`ready`] first.

use crate::child::protocol::SelftestReport;
use crate::child::supervisor::run_child;
use crate::child::template::Launcher;
use crate::config::WorkerConfig;
use crate::process::task_dir::space::SpaceLimits;
use crate::sandbox::config::SandboxSettings;
use crate::sandbox::{Host, SandboxError, SandboxInForce, landlock};
use crate::task::stage::{child_env, harness_child, stage_dir};
use crucible_shared::{LayerState, LayerStatus, SandboxLayer, SandboxStatus};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

/// Self-test runs before giving up: each may drop one optional layer the host refused.
const MAX_ROUNDS: usize = SandboxLayer::ALL.len() + 1;
/// Where the canary file goes when it exists: world-writable on Debian and Ubuntu, outside
/// everything a child may reach.
const CANARY_DIR: &str = "/var/tmp";
/// Long enough for a child started without a template to import torch and start CUDA.
const SELFTEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(180);

/// What the worker set up to be found, and what it expects of the child.
pub struct Targets {
    /// A port the worker listens on: the runner must not reach it.
    pub tcp_port: u16,
    /// A file outside the task directory the runner must not read.
    pub canary_file: std::path::PathBuf,
    /// A directory outside the task directory the runner must not write into.
    pub canary_dir: std::path::PathBuf,
    /// The uid children take (root worker), to be seen in the runner.
    pub uid: Option<u32>,
    /// The worker's own uid: in a user namespace the runner must see it mapped, not root.
    pub worker_uid: u32,
    /// The name of the task's cgroup directory, to be seen in the runner's /proc/self/cgroup.
    pub cgroup_name: Option<String>,
    /// A GPU worker: the runner must have mapped the judge's tensor (1024 ones).
    pub gpu: bool,
    /// The cores the child was pinned to: the runner must be on exactly these.
    pub cpus: Vec<usize>,
    /// The bounded space the task directory was given (storage layer on trial).
    pub space: Option<SpaceLimits>,
    /// The plan masks the host's cgroup hierarchies: the runner must list nothing there.
    pub cgroups_masked: bool,
}

/// How far a tmpfs's size may be from the one asked: it is rounded to whole pages.
const SPACE_ROUNDING: u64 = 64 << 10;

/// How a self-test child ended.
pub(crate) enum Outcome {
    /// The harness's `selftest` line.
    Report(Box<SelftestReport>),
    /// A layer of the plan could not be entered (the harness's `sandbox_failed`).
    LayerFailed {
        /// The layer that failed.
        layer: String,
        /// What the judge caught entering it.
        error: String,
    },
    /// Anything else: the child's own words.
    Broken(String),
}

/// Whether the runner runs on exactly the cores it was pinned to (pure). Not a layer: a child
/// that cannot pin itself fails before it reports, and one on other cores means the plan was
/// not entered, so the worker refuses to serve either way.
pub fn check_cores(report: &SelftestReport, targets: &Targets) -> Result<(), String> {
    if targets.cpus.is_empty() || report.runner.cores == targets.cpus {
        return Ok(());
    }
    Err(format!(
        "the runner runs on cores {} instead of {}",
        crate::process::cores::format_list(&report.runner.cores),
        crate::process::cores::format_list(&targets.cpus)
    ))
}

/// Decides each active layer from the report (pure): `Ok(how it holds)` or `Err(why not)`.
pub fn judge_layers(
    report: &SelftestReport,
    active: &BTreeSet<SandboxLayer>,
    targets: &Targets,
) -> BTreeMap<SandboxLayer, Result<String, String>> {
    let r = &report.runner;
    let field = |name: &str| r.status.get(name).cloned().unwrap_or_default();
    let refused = |outcome: &Option<String>| outcome.as_deref().is_some_and(|o| o != "ok");
    let mut out = BTreeMap::new();
    for &layer in active {
        let verdict = match layer {
            SandboxLayer::Network => match refused(&r.tcp_worker) {
                true => Ok(format!(
                    "own network namespace, loopback only (the worker's port: {})",
                    r.tcp_worker.as_deref().unwrap_or("-")
                )),
                false => Err("a child reached the worker's TCP port".into()),
            },
            SandboxLayer::Pid => {
                if r.ppid == 1 && r.kill_all == "ESRCH" && r.visible_pids.len() <= 4 {
                    Ok(format!(
                        "own pid namespace (runner pid {}, sees {:?})",
                        r.pid, r.visible_pids
                    ))
                } else {
                    Err(format!(
                        "the runner sees pids {:?} (parent {}, kill(-1): {})",
                        r.visible_pids, r.ppid, r.kill_all
                    ))
                }
            }
            SandboxLayer::Mount => {
                let tmpfs = |p: &str| r.mounts.get(p).map(String::as_str) == Some("tmpfs");
                let hidden = !targets.cgroups_masked || r.cgroups_listed == 0;
                if tmpfs("/tmp") && tmpfs("/dev/shm") && hidden {
                    Ok("private /proc, bounded /tmp and /dev/shm; private homes and the host's cgroups masked".into())
                } else {
                    Err(format!(
                        "mounts seen by the runner: {:?}; entries it lists under /sys/fs/cgroup: {}",
                        r.mounts, r.cgroups_listed
                    ))
                }
            }
            SandboxLayer::Storage => match targets.space {
                Some(limits)
                    if r.space.bytes.abs_diff(limits.bytes) < SPACE_ROUNDING
                        && r.space.inodes == limits.inodes =>
                {
                    Ok(format!(
                        "the task directory on a tmpfs of its own: {} MiB, {} inodes",
                        limits.bytes >> 20,
                        limits.inodes
                    ))
                }
                _ => Err(format!(
                    "the runner's task directory holds {} bytes and {} inodes, not the {:?} asked",
                    r.space.bytes, r.space.inodes, targets.space
                )),
            },
            SandboxLayer::User => {
                let uids = field("Uid");
                let caps_clear = field("CapEff")
                    .iter()
                    .all(|c| u64::from_str_radix(c, 16) == Ok(0));
                let uid_ok = match targets.uid {
                    Some(uid) => uids.iter().all(|u| u.parse() == Ok(uid)) && uids.len() == 4,
                    None => true,
                };
                let not_worker = targets.uid.is_none()
                    || !uids.iter().any(|u| u.parse() == Ok(targets.worker_uid));
                if uid_ok && not_worker && caps_clear {
                    Ok(format!("uids {uids:?}, no capabilities"))
                } else {
                    Err(format!(
                        "runner uids {uids:?}, capabilities {:?}",
                        field("CapEff")
                    ))
                }
            }
            SandboxLayer::Landlock => {
                let read = r.read_canary.as_deref().unwrap_or("-");
                let write = r.write_outside.as_deref().unwrap_or("-");
                if read == "EACCES" && write != "ok" {
                    Ok(format!(
                        "ABI {}: a file outside the task ({read}), writing beside it ({write})",
                        landlock::TARGET_ABI as i32
                    ))
                } else {
                    Err(format!(
                        "reading a file outside the task: {read}, writing there: {write}"
                    ))
                }
            }
            SandboxLayer::Seccomp => {
                if field("Seccomp") == ["2"]
                    && r.unshare_user == "EPERM"
                    && r.sigkill == "EPERM"
                    && r.widen_cores == "EPERM"
                {
                    Ok(format!(
                        "{} filters on the runner (unshare: {}, sending SIGKILL: {}, ptrace: {}, \
                         leaving its cores: {})",
                        field("Seccomp_filters").join(""),
                        r.unshare_user,
                        r.sigkill,
                        r.ptrace_judge,
                        r.widen_cores
                    ))
                } else {
                    Err(format!(
                        "seccomp {:?}, unshare {}, SIGKILL {}, leaving its cores {}",
                        field("Seccomp"),
                        r.unshare_user,
                        r.sigkill,
                        r.widen_cores
                    ))
                }
            }
            SandboxLayer::Cgroup => match &targets.cgroup_name {
                Some(name) if r.cgroup.contains(name.as_str()) => {
                    Ok("the task in a cgroup of its own".into())
                }
                _ => Err(format!("the runner's cgroups: {}", r.cgroup.trim())),
            },
        };
        out.insert(layer, verdict);
    }
    out
}

/// The layers in force in `cfg`'s sandbox, finding them with [`establish`] on first use
/// (`None`: off); later calls return what the first found. An error means the worker must not
/// serve: a required layer is missing or the host could not be examined.
pub async fn ready<'c>(
    cfg: &'c WorkerConfig,
    launcher: Launcher<'_>,
) -> Result<Option<&'c SandboxInForce>, SandboxError> {
    cfg.sandbox
        .ready_with(|| establish(cfg, cfg.sandbox.settings(), launcher))
        .await
}

/// Finds the layers in force: detects the host, then runs self-tests until every layer that
/// is left holds (see the module documentation).
pub async fn establish(
    cfg: &WorkerConfig,
    settings: &SandboxSettings,
    launcher: Launcher<'_>,
) -> Result<SandboxInForce, SandboxError> {
    let started = Instant::now();
    let host = Host::detect(
        settings,
        &cfg.python,
        &cfg.work_root,
        cfg.device.index().is_some(),
        cfg.pch_dir().into_iter().collect(),
    )
    .await?;
    let mut notes: BTreeMap<SandboxLayer, String> = host.unavailable.clone();
    let required = &settings.required;
    let refuse = |layer: SandboxLayer, why: &str| SandboxError::Refused {
        layer: layer.name(),
        why: why.to_owned(),
    };
    if let Some((layer, why)) = notes.iter().find(|(l, _)| required.contains(l)) {
        return Err(refuse(*layer, why));
    }
    let mut active: BTreeSet<SandboxLayer> = SandboxLayer::ALL
        .into_iter()
        .filter(|l| !notes.contains_key(l))
        .collect();
    let mut held = BTreeMap::new();
    for round in 0.. {
        if round == MAX_ROUNDS {
            return Err(SandboxError::Selftest(format!(
                "no stable set of layers after {MAX_ROUNDS} rounds"
            )));
        }
        // A pid namespace needs the mount namespace for its /proc.
        if !active.contains(&SandboxLayer::Mount) && active.remove(&SandboxLayer::Pid) {
            notes.insert(
                SandboxLayer::Pid,
                "needs the mount layer for its /proc".into(),
            );
            if required.contains(&SandboxLayer::Pid) {
                return Err(refuse(SandboxLayer::Pid, &notes[&SandboxLayer::Pid]));
            }
        }
        let (outcome, targets) = run_selftest(cfg, &host, &active, launcher).await?;
        let report = match outcome {
            Outcome::LayerFailed { layer, error } => {
                let Some(layer) = SandboxLayer::from_name(&layer).filter(|l| active.contains(l))
                else {
                    return Err(SandboxError::Selftest(format!("{layer}: {error}")));
                };
                tracing::warn!(
                    layer = layer.name(),
                    error,
                    "sandbox layer refused by this host"
                );
                if required.contains(&layer) {
                    return Err(refuse(layer, &error));
                }
                active.remove(&layer);
                notes.insert(layer, error);
                continue;
            }
            Outcome::Broken(why) => return Err(SandboxError::Selftest(why)),
            Outcome::Report(report) => report,
        };
        if targets.gpu && report.runner.ipc_sum != Some(1024.0) {
            return Err(SandboxError::Selftest(format!(
                "CUDA IPC through the sandbox failed (the runner mapped {:?})",
                report.runner.ipc_sum
            )));
        }
        check_cores(&report, &targets).map_err(SandboxError::Selftest)?;
        let mut failed = false;
        for (layer, verdict) in judge_layers(&report, &active, &targets) {
            match verdict {
                Ok(how) => {
                    held.insert(layer, how);
                }
                Err(why) => {
                    tracing::warn!(layer = layer.name(), why, "sandbox layer did not hold");
                    if required.contains(&layer) {
                        return Err(refuse(layer, &why));
                    }
                    active.remove(&layer);
                    notes.insert(layer, why);
                    failed = true;
                }
            }
        }
        if !failed {
            break;
        }
    }
    let identity = host.identities().describe();
    let layers = SandboxLayer::ALL
        .into_iter()
        .map(|layer| LayerStatus {
            layer,
            state: if active.contains(&layer) {
                LayerState::Active
            } else {
                LayerState::Unavailable
            },
            required: required.contains(&layer),
            detail: match (active.contains(&layer), layer) {
                (true, SandboxLayer::Cgroup) => format!(
                    "{} ({})",
                    held.get(&layer).cloned().unwrap_or_default(),
                    host.cgroups().map(|c| c.describe()).unwrap_or_default()
                ),
                (true, _) => held.get(&layer).cloned().unwrap_or_default(),
                (false, _) => notes.get(&layer).cloned().unwrap_or_default(),
            },
        })
        .collect();
    let status = SandboxStatus {
        layers,
        identity,
        selftest_ms: started.elapsed().as_secs_f64() * 1e3,
    };
    tracing::info!(
        active = ?active.iter().map(|l| l.name()).collect::<Vec<_>>(),
        unavailable = ?notes.keys().map(|l| l.name()).collect::<Vec<_>>(),
        selftest_ms = status.selftest_ms as u64,
        "sandbox in force"
    );
    Ok(SandboxInForce {
        host,
        active,
        status,
    })
}

/// One self-test child with `active` layers.
async fn run_selftest(
    cfg: &WorkerConfig,
    host: &Host,
    active: &BTreeSet<SandboxLayer>,
    launcher: Launcher<'_>,
) -> Result<(Outcome, Targets), SandboxError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| SandboxError::Host(format!("self-test listener: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| SandboxError::Host(e.to_string()))?
        .port();
    std::fs::create_dir_all(&cfg.work_root)
        .map_err(|e| SandboxError::Host(format!("{}: {e}", cfg.work_root.display())))?;
    // Somewhere the child's mounts leave visible (not /tmp, private to it), so that only
    // Landlock stands between it and the file.
    let canary_dir = [Path::new(CANARY_DIR), cfg.work_root.as_path()]
        .into_iter()
        .find(|d| d.is_dir())
        .unwrap_or(cfg.work_root.as_path())
        .to_path_buf();
    let canary = tempfile::Builder::new()
        .prefix("crucible-selftest-canary-")
        .tempfile_in(&canary_dir)
        .map_err(|e| SandboxError::Host(format!("self-test canary: {e}")))?;
    std::fs::write(canary.path(), b"a child must not read this")
        .map_err(|e| SandboxError::Host(e.to_string()))?;
    // Readable by anyone: only Landlock stands between the child and this file.
    std::fs::set_permissions(
        canary.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .map_err(|e| SandboxError::Host(e.to_string()))?;
    let mut targets = Targets {
        tcp_port: port,
        canary_file: canary.path().to_path_buf(),
        canary_dir,
        uid: None,
        worker_uid: nix::unistd::geteuid().as_raw(),
        cgroup_name: None,
        gpu: cfg.device.index().is_some(),
        cpus: cfg.cores.device.clone(),
        space: active
            .contains(&SandboxLayer::Storage)
            .then(|| cfg.limits.space()),
        cgroups_masked: active.contains(&SandboxLayer::Mount)
            && Path::new(crate::sandbox::paths::CGROUP_ROOT).is_dir(),
    };
    let spec = serde_json::json!({
        "stage": "selftest",
        "device": if targets.gpu { "cuda" } else { "cpu" },
        "backend": "triton",
        "selftest": {
            "tcp": ["127.0.0.1", port],
            "canary_file": targets.canary_file,
            "canary_dir": targets.canary_dir,
        },
    });
    let mut stage = stage_dir(
        cfg,
        "selftest",
        targets.space,
        |_| Ok(spec),
        |path| {
            host.child(
                active,
                &cfg.limits,
                &cfg.cores.device_placement(),
                path,
                "selftest",
            )
            .map(Some)
        },
    )
    .map_err(|e| SandboxError::Selftest(format!("self-test directory: {e}")))?;
    if let Some(child) = &stage.sandbox {
        targets.uid = child.expect.uid;
        targets.cgroup_name = child.cgroup_name();
    }
    let env = child_env(cfg, stage.dir.path(), |k| std::env::var(k).ok());
    let child = harness_child(cfg, &mut stage, env, None, SELFTEST_DEADLINE);
    // Nothing cancels the self-test.
    let outcome = run_child(child, launcher, tokio_util::sync::CancellationToken::new())
        .await
        .map_err(|e| SandboxError::Selftest(format!("could not run the self-test child: {e}")))?;
    drop(listener);
    let t = &outcome.transcript;
    let result = if let Some(failed) = &t.sandbox_failed {
        Outcome::LayerFailed {
            layer: failed.layer.clone(),
            error: failed.error.clone(),
        }
    } else if let Some(report) = &t.selftest {
        Outcome::Report(Box::new(report.clone()))
    } else {
        Outcome::Broken(format!(
            "the self-test child ended {:?} without a report{}; its output: {}",
            outcome.exit,
            t.violation
                .as_ref()
                .map(|v| format!(" (protocol: {v})"))
                .unwrap_or_default(),
            outcome.output_tail.trim()
        ))
    };
    Ok((result, targets))
}

#[cfg(test)]
mod tests;
