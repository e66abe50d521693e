//! Runs one task child and watches it until it is gone: spawn with isolation (the sandbox's
//! ruleset on fd 5, its plan in spec.json), read the result pipe and the capped output, check
//! the judge's sandbox from /proc once it says it is in, enforce the deadline and the
//! watchdog's limits, obey cancellation, and kill the whole group (and the task's cgroup) at
//! the end whatever happened.

use crate::child::protocol::Transcript;
use crate::process::isolation::{self, ChildStart, StartLimits};
use crate::process::limits::ChildLimits;
use crate::sandbox::plan::RULESET_FD;
use crate::sandbox::{ChildSandbox, verify};
// Defined beside the template so that the sandbox (whose self-test takes one) need not
// import this file, which imports the sandbox.
pub use crate::child::template::Launcher;
use crate::process::watchdog;
mod gate;
mod streams;
pub use gate::{ChildEvent, Gate, GateChild, gate};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use streams::{OutputCapture, read_output, read_transcript};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// How long readers may take to drain after the group is dead.
const DRAIN_DEADLINE: Duration = Duration::from_secs(2);

/// What to run.
pub struct ChildSpec {
    /// The executable (the Python interpreter).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The working directory: the task directory.
    pub cwd: PathBuf,
    /// The complete environment of the child (nothing else is inherited).
    pub env: Vec<(String, String)>,
    /// Its rlimits, and the output, memory and process bounds enforced while it runs.
    pub limits: ChildLimits,
    /// Counted from the gate's first opening when there is a gate, else from the spawn.
    pub deadline: Duration,
    /// A gate on fd 4 (see [`gate`]); without one the child runs straight through.
    pub gate: Option<GateChild>,
    /// The sandbox the child enters (`None`: the worker runs unsandboxed).
    pub sandbox: Option<ChildSandbox>,
}

/// Why the supervisor killed the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// It ran past its deadline.
    Timeout,
    /// It wrote more than `max_output_bytes` to stdout and stderr.
    OutputLimit,
    /// Its processes' resident memory went over `max_memory_bytes`.
    Memory,
    /// It had more than `max_processes` processes.
    Processes,
    /// The task was cancelled.
    Cancelled,
    /// The judge was not in the sandbox its plan promised (`sandbox::verify`).
    SandboxBroken,
}

/// How the child's main process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

/// Everything known of a child once its whole process group is gone: what the verdict is
/// classified from.
#[derive(Debug, Clone)]
pub struct ChildOutcome {
    /// How its main process ended.
    pub exit: ExitKind,
    /// Why the supervisor killed it, if it did.
    pub killed_for: Option<KillReason>,
    /// What it said on fd 3.
    pub transcript: Transcript,
    /// The last bytes of stdout and stderr, interleaved as they arrived.
    pub output_tail: String,
    /// Bytes it wrote to stdout and stderr in all.
    pub output_bytes: u64,
    /// How long it ran, from the spawn to its end.
    pub wall: Duration,
    /// Largest memory charged to its processes together, as the watchdog sampled it
    /// ([`watchdog::charged_bytes`]: resident, or proportional where the resident sum is over).
    pub peak_rss_bytes: u64,
    /// Most processes it had at once, as the watchdog sampled them.
    pub peak_processes: u64,
    /// OOM kills the kernel made in the task's cgroup: evidence that a SIGKILL from outside
    /// was the task's own memory use.
    pub oom_kills: u64,
    /// OOM kills the kernel made anywhere on the host while the child ran (`/proc/vmstat`):
    /// where the task has no cgroup of its own, a SIGKILL then may have been the OOM killer
    /// choosing it for another process's memory, and is not blamed on the candidate.
    pub host_oom_kills: u64,
    /// Why the worker found the judge outside its sandbox, if it did.
    pub sandbox_broken: Option<String>,
}

type ExitFuture = Pin<Box<dyn Future<Output = std::io::Result<ExitKind>> + Send>>;

/// Spawns the child and supervises it to the end. An `Err` means the child could not be
/// started or its template died under it: a fault of this node, not of the candidate.
pub async fn run_child(
    mut spec: ChildSpec,
    launcher: Launcher<'_>,
    cancel: CancellationToken,
) -> std::io::Result<ChildOutcome> {
    let started = Instant::now();
    let host_oom_before = watchdog::host_oom_kills();
    let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
    let (out_read, out_write) = nix::unistd::pipe2(cloexec)?;
    let (err_read, err_write) = nix::unistd::pipe2(cloexec)?;
    let (pipe_read, pipe_write) = nix::unistd::pipe2(cloexec)?;
    let (gate_fd, events, running) = match spec.gate.take() {
        Some(GateChild {
            rx,
            events,
            running,
        }) => (Some(rx), Some(events), Some(running)),
        None => (None, None, None),
    };
    let mut sandbox = spec.sandbox.take();
    let ruleset = sandbox.as_mut().and_then(ChildSandbox::take_ruleset);
    let (pid, wait): (i32, ExitFuture) = match launcher {
        Launcher::Direct => {
            let mut child = spawn(
                &spec,
                out_write,
                err_write,
                &pipe_write,
                gate_fd.as_ref(),
                ruleset.as_ref(),
            )?;
            // Our copies must go, or the pipe never reaches EOF.
            drop(pipe_write);
            drop(gate_fd);
            drop(ruleset);
            let pid = child.id().map(|p| p as i32).unwrap_or(-1);
            (
                pid,
                Box::pin(async move { Ok(exit_kind(child.wait().await?)) }),
            )
        }
        Launcher::Template(template) => {
            let mut fds = vec![(out_write, 1), (err_write, 2), (pipe_write, 3)];
            fds.extend(gate_fd.map(|fd| (fd, 4)));
            fds.extend(ruleset.map(|fd| (fd, RULESET_FD)));
            let forked = template
                .fork(&spec.cwd, &spec.env, &spec.limits, fds)
                .await?;
            let exit = forked.exit;
            (
                forked.pid,
                Box::pin(async move {
                    let raw = exit
                        .await
                        .map_err(|_| std::io::Error::other("the template died during the task"))?;
                    Ok(decode_wait_status(raw))
                }),
            )
        }
    };
    let mut wait = wait;

    let capture = Arc::new(Mutex::new(OutputCapture::default()));
    let flooded = Arc::new(Notify::new());
    let max_output = spec.limits.max_output_bytes;
    let mut readers = Vec::new();
    for fd in [out_read, err_read] {
        let stream = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?;
        readers.push(tokio::spawn(read_output(
            stream,
            capture.clone(),
            flooded.clone(),
            max_output,
        )));
    }
    let (entered_tx, mut entered) = tokio::sync::oneshot::channel();
    let transcript_task = tokio::spawn(read_transcript(pipe_read, events, entered_tx));
    let expect = sandbox.as_ref().map(|s| s.expect.clone());
    let mut entered_open = true;
    let mut sandbox_broken = None;

    let deadline = deadline(spec.deadline, running);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(spec.limits.watchdog_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let page = watchdog::page_size();
    let mut killed_for = None;
    let mut peak_rss = 0u64;
    let mut peak_procs = 0u64;

    let status = loop {
        let reason = tokio::select! {
            status = &mut wait => break status,
            _ = &mut deadline, if killed_for.is_none() => Some(KillReason::Timeout),
            _ = flooded.notified(), if killed_for.is_none() => Some(KillReason::OutputLimit),
            () = cancel.cancelled(), if killed_for.is_none() => Some(KillReason::Cancelled),
            said = &mut entered, if entered_open => {
                entered_open = false;
                match (said, expect.clone()) {
                    (Ok(()), Some(expect)) if killed_for.is_none() => {
                        let checked =
                            tokio::task::spawn_blocking(move || check_judge(pid, &expect))
                                .await
                                .unwrap_or_else(|e| Err(e.to_string()));
                        match checked {
                            Ok(()) => None,
                            Err(why) => {
                                tracing::error!(pid, why, "task child outside its sandbox, killing it");
                                sandbox_broken = Some(why);
                                Some(KillReason::SandboxBroken)
                            }
                        }
                    }
                    _ => None,
                }
            }
            _ = tick.tick() => {
                let limits = spec.limits.clone();
                let limit = limits.max_memory_bytes;
                let (usage, charged) = tokio::task::spawn_blocking(move || {
                    let members = watchdog::members(&watchdog::read_table(), pid);
                    let usage = watchdog::usage(&members, page);
                    (usage, watchdog::charged_bytes(&members, usage, limit))
                }).await.unwrap_or_default();
                peak_rss = peak_rss.max(charged);
                peak_procs = peak_procs.max(usage.processes);
                if killed_for.is_some() {
                    None
                } else if usage.processes > limits.max_processes {
                    Some(KillReason::Processes)
                } else if charged > limits.max_memory_bytes {
                    Some(KillReason::Memory)
                } else {
                    None
                }
            }
        };
        if let Some(reason) = reason {
            killed_for.get_or_insert(reason);
            tracing::debug!(pid, ?reason, "killing task child");
            kill_everything(pid, true).await;
        }
    };
    // Whatever the main process did, nothing it started may outlive it.
    kill_everything(pid, false).await;
    // Its cgroup too, as the sandbox goes (dropping it kills what is left in the cgroup, a
    // process that left the group and the parent chain included, removes it and gives the
    // user back); the OOM record is read first.
    let oom_kills = match sandbox {
        Some(sandbox) => tokio::task::spawn_blocking(move || {
            let oom = sandbox.cgroup.as_ref().map_or(0, |c| c.oom_kills());
            drop(sandbox);
            oom
        })
        .await
        .unwrap_or(0),
        None => 0,
    };

    for reader in readers {
        let _ = tokio::time::timeout(DRAIN_DEADLINE, reader).await;
    }
    let transcript = match tokio::time::timeout(DRAIN_DEADLINE, transcript_task).await {
        Ok(Ok(t)) => t,
        _ => Transcript {
            violation: Some("result pipe did not close".to_owned()),
            ..Transcript::default()
        },
    };
    let exit = status?;
    let capture = capture.lock().expect("output capture lock");
    Ok(ChildOutcome {
        exit,
        killed_for,
        transcript,
        output_tail: String::from_utf8_lossy(&capture.tail).into_owned(),
        output_bytes: capture.total,
        wall: started.elapsed(),
        peak_rss_bytes: peak_rss,
        peak_processes: peak_procs,
        oom_kills,
        host_oom_kills: watchdog::host_oom_kills().saturating_sub(host_oom_before),
        sandbox_broken,
    })
}

/// Resolves when the child has used up `budget`. A gated child's clock runs only while it is
/// let through: not on standby, not parked while a neighbour times. Once the worker drops the
/// gate (it has forgotten the child) the clock runs to the end.
async fn deadline(budget: Duration, running: Option<watch::Receiver<bool>>) {
    let mut left = budget;
    if let Some(mut running) = running {
        loop {
            if running.wait_for(|r| *r).await.is_err() {
                break;
            }
            let since = Instant::now();
            tokio::select! {
                () = tokio::time::sleep(left) => return,
                stopped = running.wait_for(|r| !*r) => {
                    left = left.saturating_sub(since.elapsed());
                    if stopped.is_err() {
                        break;
                    }
                }
            }
        }
    }
    tokio::time::sleep(left).await;
}

/// The worker's own check of the judge (the shim's child) against the plan; a judge already
/// gone has nothing left to check.
fn check_judge(shim: i32, expect: &verify::Expectation) -> Result<(), String> {
    let Some(judge) = verify::judge_of(&watchdog::read_table(), shim) else {
        return Ok(());
    };
    match std::fs::read_to_string(format!("/proc/{judge}/status")) {
        Ok(status) => verify::check_status(&status, expect),
        Err(_) => Ok(()),
    }
}

fn spawn(
    spec: &ChildSpec,
    stdout: OwnedFd,
    stderr: OwnedFd,
    result_pipe: &OwnedFd,
    gate: Option<&OwnedFd>,
    ruleset: Option<&OwnedFd>,
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .kill_on_drop(true);
    let mut fds = vec![(result_pipe.as_raw_fd(), 3)];
    fds.extend(gate.map(|g| (g.as_raw_fd(), 4)));
    fds.extend(ruleset.map(|r| (r.as_raw_fd(), RULESET_FD)));
    isolation::arrange(
        &mut cmd,
        ChildStart {
            parent: std::process::id() as i32,
            fds,
            limits: StartLimits::Task(spec.limits.clone()),
        },
    );
    cmd.spawn()
}

fn exit_kind(status: std::process::ExitStatus) -> ExitKind {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitKind::Code(code),
        (None, Some(sig)) => ExitKind::Signal(sig),
        (None, None) => ExitKind::Code(-1),
    }
}

/// A raw `waitpid` status, as the template reports it.
pub fn decode_wait_status(raw: i32) -> ExitKind {
    if nix::libc::WIFSIGNALED(raw) {
        ExitKind::Signal(nix::libc::WTERMSIG(raw))
    } else {
        ExitKind::Code(nix::libc::WEXITSTATUS(raw))
    }
}

/// Kills the child's group and every process found to belong to it, until none is left (a
/// fork storm may still be forking while we kill); the child itself too while `running` (its
/// exit not seen yet).
async fn kill_everything(pid: i32, running: bool) {
    if pid <= 0 {
        return;
    }
    for _ in 0..20 {
        // Killed right after it was forked, the child may not have called setsid yet: its
        // group does not exist and the group kill alone would miss it. Before its exit is seen
        // the pid is still its own (unreaped), so it is safe to name directly.
        if running {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        let members =
            tokio::task::spawn_blocking(move || watchdog::members(&watchdog::read_table(), pid))
                .await
                .unwrap_or_default();
        // The main process stays as a zombie until we reap it; it does not count.
        let alive: Vec<_> = members.iter().filter(|p| p.pid != pid).collect();
        if alive.is_empty() {
            return;
        }
        for p in alive {
            let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::warn!(pid, "task child processes survived repeated kills");
}
