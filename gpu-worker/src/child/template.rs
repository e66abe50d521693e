//! The warm template: a long-lived Python that has imported torch, triton and the harness
//! (never CUDA) and forks one fresh child per task, so a task starts in milliseconds instead of
//! paying 3-5 s of `import torch`. The child is never reused; isolation is the same as for a
//! directly spawned child (session, rlimits, environment, private dir, fds). See
//! `harness/template.py` for the other side of the control socket.

use crate::child::harness::{
    HARNESS_FILE, HARNESS_MODULES, HARNESS_SOURCE, TEMPLATE_FILE, TEMPLATE_SOURCE,
};
use crate::child::protocol::SoftwareReport;
use crate::process::dir_owner::DirOwner;
use crate::process::isolation::{self, ChildStart, StartLimits};
use crate::process::limits::ChildLimits;
use crate::process::task_dir::TaskDir;
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, recv, sendmsg, socketpair,
};
use serde::Deserialize;
use std::collections::HashMap;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The fd number the template expects its control socket on.
const CONTROL_FD: i32 = 4;
/// How long a template may take to import torch and triton.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Most descriptors a child is handed (1, 2, 3, the gate, the ruleset).
const MAX_FDS: usize = 5;

#[derive(Debug, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event {
    Ready {
        pid: i32,
        import_ms: f64,
        cuda_initialized: bool,
        #[serde(default)]
        software: Option<SoftwareReport>,
    },
    Spawned {
        id: u64,
        pid: i32,
    },
    SpawnFailed {
        id: u64,
        error: String,
    },
    Exited {
        pid: i32,
        status: i32,
    },
}

/// A child forked by the template: its pid and, later, its raw wait status (an error if the
/// template died first, which kills the child too).
pub(crate) struct ForkedChild {
    /// The child's pid.
    pub pid: i32,
    /// Its raw wait status, sent by the template when it reaps the child.
    pub exit: oneshot::Receiver<i32>,
}

type SpawnReply = Result<ForkedChild, String>;
type ReadyReport = (i32, f64, Option<SoftwareReport>);

#[derive(Default)]
struct Routing {
    ready: Option<oneshot::Sender<Result<ReadyReport, String>>>,
    spawns: HashMap<u64, oneshot::Sender<SpawnReply>>,
    exits: HashMap<i32, oneshot::Sender<i32>>,
}

/// How a task child comes to exist: `fork`+`exec` by the supervisor or a fork of a warm
/// template.
#[derive(Clone, Copy)]
pub enum Launcher<'a> {
    /// `fork`+`exec` of `ChildSpec::program` by the worker (pays the interpreter's start-up).
    Direct,
    /// Forked by the warm template, which has already imported torch and triton.
    Template(&'a Template),
}

/// Shared by the stages of a worker (the CPU stage of the next task forks from it while the
/// GPU stage of the current one runs), hence the interior mutability.
pub struct Template {
    process: Mutex<tokio::process::Child>,
    control: Arc<OwnedFd>,
    routing: Arc<Mutex<Routing>>,
    alive: Arc<AtomicBool>,
    next_id: AtomicU64,
    forks: AtomicU32,
    /// How long the template took to import torch and triton, in milliseconds.
    pub import_ms: f64,
    /// The versions the template imported (those of every child it forks).
    pub software: Option<SoftwareReport>,
    _dir: TaskDir,
}

impl Template {
    /// Starts a template and waits until it has imported everything.
    pub async fn start(
        python: &Path,
        work_root: &Path,
        owner: &DirOwner,
        env_for: impl FnOnce(&Path) -> Vec<(String, String)>,
        limits: &ChildLimits,
    ) -> std::io::Result<Template> {
        let dir = TaskDir::create(work_root, "template", owner, None)?;
        dir.subdir("tmp")?;
        dir.subdir("cache")?;
        let env = env_for(dir.path());
        dir.write_new(HARNESS_FILE, HARNESS_SOURCE.as_bytes())?;
        for (file, source) in HARNESS_MODULES {
            dir.write_new(file, source.as_bytes())?;
        }
        dir.write_new(TEMPLATE_FILE, TEMPLATE_SOURCE.as_bytes())?;
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let mut cmd = tokio::process::Command::new(python);
        cmd.arg("-I")
            .arg("-B")
            .arg(dir.path().join(TEMPLATE_FILE))
            .arg(dir.path().join(HARNESS_FILE))
            .current_dir(dir.path())
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        // The template dies with the worker, and its children die with it.
        isolation::arrange(
            &mut cmd,
            ChildStart {
                parent: std::process::id() as i32,
                fds: vec![(theirs.as_raw_fd(), CONTROL_FD)],
                limits: StartLimits::Template {
                    max_open_files: limits.max_open_files,
                },
            },
        );
        let process = cmd.spawn()?;
        drop(theirs);

        let control = Arc::new(ours);
        let routing = Arc::new(Mutex::new(Routing::default()));
        let alive = Arc::new(AtomicBool::new(true));
        let (ready_tx, ready_rx) = oneshot::channel();
        routing.lock().expect("routing lock").ready = Some(ready_tx);
        {
            let control = control.clone();
            let routing = routing.clone();
            let alive = alive.clone();
            std::thread::Builder::new()
                .name("crucible-template-reader".into())
                .spawn(move || read_events(&control, &routing, &alive))?;
        }
        let started = Instant::now();
        let (pid, import_ms, software) = match tokio::time::timeout(READY_TIMEOUT, ready_rx).await {
            Ok(Ok(Ok(ready))) => ready,
            Ok(Ok(Err(why))) => return Err(std::io::Error::other(why)),
            Ok(Err(_)) => return Err(std::io::Error::other("template exited before it was ready")),
            Err(_) => return Err(std::io::Error::other("template not ready in time")),
        };
        tracing::info!(
            template_pid = pid,
            import_ms = import_ms as u64,
            ready_ms = started.elapsed().as_millis() as u64,
            "template ready"
        );
        Ok(Template {
            process: Mutex::new(process),
            control,
            routing,
            alive,
            next_id: AtomicU64::new(0),
            forks: AtomicU32::new(0),
            import_ms,
            software,
            _dir: dir,
        })
    }

    /// Whether the template process still runs and its control channel has not failed.
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
            && matches!(
                self.process
                    .lock()
                    .expect("template process lock")
                    .try_wait(),
                Ok(None)
            )
    }

    /// The template process's pid.
    pub fn pid(&self) -> i32 {
        self.process
            .lock()
            .expect("template process lock")
            .id()
            .map(|p| p as i32)
            .unwrap_or(-1)
    }

    /// How many children it has forked.
    pub fn forks(&self) -> u32 {
        self.forks.load(Ordering::SeqCst)
    }

    /// Forks a child for `taskdir` with the given environment and limits; each descriptor
    /// becomes the number paired with it in the child (1, 2, 3 always; 4 the gate, 5 the
    /// sandbox's ruleset when given); they are closed here once handed over.
    pub(crate) async fn fork(
        &self,
        taskdir: &Path,
        env: &[(String, String)],
        limits: &ChildLimits,
        fds: Vec<(OwnedFd, i32)>,
    ) -> std::io::Result<ForkedChild> {
        let targets: Vec<i32> = fds.iter().map(|(_, t)| *t).collect();
        if !targets.starts_with(&[1, 2, 3]) || targets.len() > MAX_FDS {
            return Err(std::io::Error::other(
                "a child takes stdout, stderr, fd 3 and optional extras",
            ));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst) + 1;
        let request = serde_json::json!({
            "op": "spawn",
            "id": id,
            "taskdir": taskdir,
            "env": env.iter().cloned().collect::<HashMap<_, _>>(),
            "fds": targets,
            "rlimits": {
                "NOFILE": limits.max_open_files,
                // null: the template's own (the task's cgroup caps its processes).
                "NPROC": limits.nproc_rlimit(),
                "FSIZE": limits.max_file_bytes,
                "CORE": 0,
            },
        })
        .to_string();
        let (tx, rx) = oneshot::channel();
        self.routing
            .lock()
            .expect("routing lock")
            .spawns
            .insert(id, tx);
        let raw: Vec<i32> = fds.iter().map(|(fd, _)| fd.as_raw_fd()).collect();
        sendmsg::<()>(
            self.control.as_raw_fd(),
            &[IoSlice::new(request.as_bytes())],
            &[ControlMessage::ScmRights(&raw)],
            MsgFlags::empty(),
            None,
        )?;
        drop(fds);
        self.forks.fetch_add(1, Ordering::SeqCst);
        match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(Ok(child))) => Ok(child),
            Ok(Ok(Err(why))) => Err(std::io::Error::other(format!(
                "template could not fork: {why}"
            ))),
            Ok(Err(_)) => Err(std::io::Error::other("template died before forking")),
            Err(_) => Err(std::io::Error::other(
                "template did not answer a fork request",
            )),
        }
    }
}

impl Drop for Template {
    fn drop(&mut self) {
        // Closing our end tells the template to exit; kill_on_drop makes sure.
        if let Ok(process) = self.process.get_mut() {
            let _ = process.start_kill();
        }
    }
}

/// Reads the template's messages on a plain thread (the socket is blocking) and routes them.
fn read_events(control: &OwnedFd, routing: &Mutex<Routing>, alive: &AtomicBool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match recv(control.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let event = match serde_json::from_slice::<Event>(&buf[..n]) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "template sent an unreadable message");
                continue;
            }
        };
        let mut r = routing.lock().expect("routing lock");
        match event {
            Event::Ready {
                pid,
                import_ms,
                cuda_initialized,
                software,
            } => {
                if let Some(tx) = r.ready.take() {
                    let _ = tx.send(if cuda_initialized {
                        // A process that initialised CUDA must never be forked from.
                        Err("template initialised CUDA while importing".to_owned())
                    } else {
                        Ok((pid, import_ms, software))
                    });
                }
            }
            Event::Spawned { id, pid } => {
                let (exit_tx, exit_rx) = oneshot::channel();
                r.exits.insert(pid, exit_tx);
                if let Some(tx) = r.spawns.remove(&id) {
                    let _ = tx.send(Ok(ForkedChild { pid, exit: exit_rx }));
                }
            }
            Event::SpawnFailed { id, error } => {
                if let Some(tx) = r.spawns.remove(&id) {
                    let _ = tx.send(Err(error));
                }
            }
            Event::Exited { pid, status } => {
                if let Some(tx) = r.exits.remove(&pid) {
                    let _ = tx.send(status);
                }
            }
        }
    }
    alive.store(false, Ordering::SeqCst);
    // Dropping every sender wakes whoever waits on this template with an error.
    let mut r = routing.lock().expect("routing lock");
    r.ready = None;
    r.spawns.clear();
    r.exits.clear();
}

/// Consecutive template failures after which a worker stops using templates for a while.
const FAILURES_BEFORE_COOLDOWN: u32 = 3;
const COOLDOWN: Duration = Duration::from_secs(600);

/// Where a worker's template lives between tasks.
#[derive(Default)]
pub struct TemplateSlot {
    current: Option<Arc<Template>>,
    /// The successor, importing in the background while `current` serves its last forks.
    next: Option<tokio::task::JoinHandle<std::io::Result<Template>>>,
    failures: u32,
    cooldown_until: Option<Instant>,
}

impl TemplateSlot {
    /// A live template with forks left, starting a new one when needed; `None` when one
    /// cannot be started (the caller then spawns the child directly).
    pub async fn ready(
        &mut self,
        python: &Path,
        work_root: &Path,
        owner: &DirOwner,
        env_for: impl Fn(&Path) -> Vec<(String, String)> + Clone + Send + 'static,
        limits: &ChildLimits,
        max_forks: u32,
    ) -> Option<Arc<Template>> {
        if self.cooldown_until.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        let usable = match self.current.as_ref() {
            Some(t) => t.is_alive() && t.forks() < max_forks,
            None => false,
        };
        if !usable {
            if let Some(old) = self.current.take() {
                tracing::info!(forks = old.forks(), "replacing template");
            }
            let started = match self.next.take() {
                Some(warming) => match warming.await {
                    Ok(Ok(t)) if t.is_alive() => Ok(t),
                    // A successor that failed or died: one fresh try.
                    _ => Template::start(python, work_root, owner, env_for.clone(), limits).await,
                },
                None => Template::start(python, work_root, owner, env_for.clone(), limits).await,
            };
            match started {
                Ok(t) => self.current = Some(Arc::new(t)),
                Err(e) => {
                    tracing::warn!(error = %e, "template unavailable, spawning directly");
                    self.note_failure();
                    return None;
                }
            }
        }
        // The successor imports while this one serves its last quarter of forks, so a
        // replacement costs no task its 3-5 s of imports.
        if let Some(t) = &self.current
            && self.next.is_none()
            && max_forks >= 4
            && t.forks() >= max_forks - max_forks / 4
        {
            let (python, work_root, owner, limits) = (
                python.to_owned(),
                work_root.to_owned(),
                owner.clone(),
                limits.clone(),
            );
            self.next = Some(tokio::spawn(async move {
                Template::start(&python, &work_root, &owner, env_for, &limits).await
            }));
        }
        self.current.clone()
    }

    /// Whether a successor template is being warmed.
    pub fn warming(&self) -> bool {
        self.next.is_some()
    }

    /// Drops `template` after a sign of trouble around one of its children (unless it was
    /// replaced already); the next task starts a new one, unless templates keep failing, in
    /// which case children are spawned directly for a while (a slower worker beats one that
    /// turns every task into a retry). Children forked before keep running: the template
    /// process lives until its last user lets go of it.
    pub fn discard(&mut self, template: &Arc<Template>) {
        if self
            .current
            .as_ref()
            .is_some_and(|t| Arc::ptr_eq(t, template))
        {
            self.current = None;
            self.note_failure();
        }
    }

    /// A task forked from the template ended normally.
    pub fn note_success(&mut self) {
        self.failures = 0;
    }

    fn note_failure(&mut self) {
        self.failures += 1;
        if self.failures >= FAILURES_BEFORE_COOLDOWN {
            tracing::warn!(
                failures = self.failures,
                cooldown_s = COOLDOWN.as_secs(),
                "templates keep failing, spawning children directly for a while"
            );
            self.cooldown_until = Some(Instant::now() + COOLDOWN);
            self.failures = 0;
        }
    }
}
