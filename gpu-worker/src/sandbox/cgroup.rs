//! A cgroup per task child: it joins it first thing, so everything the task starts is
//! counted, limited (memory, processes) and killed together, and the kernel's OOM kills are
//! on record as the task's own.
//!
//! Hosts differ, and each is used as far as it goes:
//! - cgroup v2 (the unified hierarchy): a task cgroup under the worker's own for membership
//!   and `cgroup.kill`; memory and pids limits only where those controllers can be delegated
//!   to it (the worker alone in its cgroup, as a systemd unit with `Delegate=yes`);
//! - cgroup v1 memory and pids hierarchies (also beside an empty unified one, "hybrid"):
//!   limits there, and a kill by their member lists;
//! - neither writable: no cgroup layer; the pid namespace still ends every process of a task
//!   and the watchdog caps memory and processes.

use super::SandboxError;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a kill may take to empty a task's cgroups.
const KILL_DEADLINE: Duration = Duration::from_secs(5);

/// What this host offers, found once at worker start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    /// The worker's directory in the unified hierarchy under which task cgroups are made.
    v2: Option<PathBuf>,
    /// Whether `memory` and `pids` are enabled for the children of `v2`.
    v2_limits: bool,
    v1_memory: Option<PathBuf>,
    v1_pids: Option<PathBuf>,
}

/// Where each hierarchy is mounted and where this process sits in it (from
/// /proc/self/mountinfo and /proc/self/cgroup; pure).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    /// This process's directory in the unified (v2) hierarchy.
    pub v2: Option<PathBuf>,
    /// This process's directory in the v1 `memory` hierarchy.
    pub v1_memory: Option<PathBuf>,
    /// This process's directory in the v1 `pids` hierarchy.
    pub v1_pids: Option<PathBuf>,
}

/// The directory of this process in each hierarchy.
pub(crate) fn placement(mountinfo: &str, cgroup: &str) -> Placement {
    let mut own_v2 = None;
    let mut own = std::collections::HashMap::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            own_v2 = Some(path.to_owned());
        }
        for c in controllers.split(',') {
            own.insert(c.to_owned(), path.to_owned());
        }
    }
    let mut out = Placement::default();
    for line in mountinfo.lines() {
        // id parent major:minor root mount-point options ... - fstype source super-options
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(point), Some(fstype)) = (fields.get(3), fields.get(4), right.first())
        else {
            continue;
        };
        let under = |path: &str| {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(path)
                .trim_start_matches('/');
            Path::new(point).join(rel)
        };
        match *fstype {
            "cgroup2" => {
                if let Some(p) = &own_v2 {
                    out.v2.get_or_insert_with(|| under(p));
                }
            }
            "cgroup" => {
                let options = right.get(2).copied().unwrap_or_default();
                for (controller, slot) in
                    [("memory", &mut out.v1_memory), ("pids", &mut out.v1_pids)]
                {
                    if options.split(',').any(|o| o == controller)
                        && let Some(p) = own.get(controller)
                    {
                        slot.get_or_insert_with(|| under(p));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

impl Cgroups {
    /// Finds what this host lets the worker use, making the worker's base directories
    /// (`crucible-w<pid>`) in each writable hierarchy. `None` when none is writable.
    pub fn detect() -> Option<Cgroups> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let found = placement(&mountinfo, &cgroup);
        let base = format!("{BASE_PREFIX}{}", std::process::id());
        let make = |own: Option<PathBuf>| {
            let own = own?;
            remove_stale(&own);
            let dir = own.join(&base);
            match std::fs::create_dir(&dir) {
                Ok(()) => Some(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Some(dir),
                Err(_) => None,
            }
        };
        let v2_own = found.v2.clone();
        let v2 = make(found.v2);
        let v2_limits = match (&v2, &v2_own) {
            (Some(base), Some(own)) => delegate_controllers(own, base),
            _ => false,
        };
        let cgroups = Cgroups {
            v2,
            v2_limits,
            v1_memory: make(found.v1_memory),
            v1_pids: make(found.v1_pids),
        };
        (cgroups.v2.is_some() || cgroups.v1_memory.is_some() || cgroups.v1_pids.is_some())
            .then_some(cgroups)
    }

    /// How reports describe it.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(v2) = &self.v2 {
            parts.push(format!(
                "v2 {} ({})",
                v2.display(),
                if self.v2_limits {
                    "kill, memory and pids limits"
                } else {
                    "kill only: memory and pids not delegated here"
                }
            ));
        }
        for (name, dir) in [("memory", &self.v1_memory), ("pids", &self.v1_pids)] {
            if let Some(d) = dir {
                parts.push(format!("v1 {name} {}", d.display()));
            }
        }
        parts.join("; ")
    }

    /// A fresh cgroup (per hierarchy) for one task child, with its limits set.
    pub fn for_task(
        &self,
        name: &str,
        memory_bytes: u64,
        max_tasks: u64,
    ) -> Result<TaskCgroup, SandboxError> {
        let mut task = TaskCgroup::default();
        let make = |base: &Path| -> Result<PathBuf, SandboxError> {
            let dir = base.join(name);
            std::fs::create_dir(&dir).map_err(|e| host(&dir, e))?;
            Ok(dir)
        };
        if let Some(base) = &self.v2 {
            let dir = make(base)?;
            if self.v2_limits {
                write(&dir.join("memory.max"), &memory_bytes.to_string())?;
                write(&dir.join("memory.swap.max"), "0").ok();
                write(&dir.join("pids.max"), &max_tasks.to_string())?;
            }
            task.v2 = Some(dir);
            task.v2_memory = self.v2_limits;
        }
        if let Some(base) = &self.v1_memory {
            let dir = make(base)?;
            write(
                &dir.join("memory.limit_in_bytes"),
                &memory_bytes.to_string(),
            )?;
            task.v1_memory = Some(dir);
        }
        if let Some(base) = &self.v1_pids {
            let dir = make(base)?;
            write(&dir.join("pids.max"), &max_tasks.to_string())?;
            task.v1_pids = Some(dir);
        }
        Ok(task)
    }

    /// Removes the worker's base directories (at shutdown; task cgroups are gone by then).
    pub fn remove(&self) {
        for dir in [&self.v2, &self.v1_memory, &self.v1_pids]
            .into_iter()
            .flatten()
        {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Base directories are `crucible-w<worker pid>`.
const BASE_PREFIX: &str = "crucible-w";

/// Removes the base directories (and their emptied task cgroups) of workers that are gone: a
/// worker killed before it could clean up leaves them behind.
fn remove_stale(own: &Path) {
    let Ok(entries) = std::fs::read_dir(own) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(BASE_PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let base = entry.path();
        if let Ok(tasks) = std::fs::read_dir(&base) {
            for task in tasks.flatten().filter(|t| t.path().is_dir()) {
                let _ = std::fs::write(task.path().join("cgroup.kill"), "1");
                let _ = std::fs::remove_dir(task.path());
            }
        }
        if std::fs::remove_dir(&base).is_ok() {
            tracing::info!(dir = %base.display(), "removed a gone worker's cgroup");
        }
    }
}

/// Enables `memory` and `pids` for the children of `base`. v2 lets a cgroup hand controllers
/// to its children only while it holds no process itself: possible when the worker is alone in
/// its cgroup (a systemd unit with `Delegate=yes`), by moving itself into a leaf beside the
/// tasks. Processes of others sharing the cgroup are never moved: then there are no limits.
fn delegate_controllers(own: &Path, base: &Path) -> bool {
    let me = std::process::id().to_string();
    let procs = std::fs::read_to_string(own.join("cgroup.procs")).unwrap_or_default();
    if procs.lines().any(|p| p.trim() != me) {
        return false;
    }
    let leaf = own.join("crucible-supervisor");
    if !(leaf.is_dir() || std::fs::create_dir(&leaf).is_ok())
        || write(&leaf.join("cgroup.procs"), &me).is_err()
    {
        return false;
    }
    write(&own.join("cgroup.subtree_control"), "+memory +pids").is_ok()
        && write(&base.join("cgroup.subtree_control"), "+memory +pids").is_ok()
}

fn write(path: &Path, value: &str) -> Result<(), SandboxError> {
    std::fs::write(path, value).map_err(|e| host(path, e))
}

fn host(path: &Path, e: std::io::Error) -> SandboxError {
    SandboxError::Host(format!("{}: {e}", path.display()))
}

/// The cgroups of one task child.
#[derive(Debug, Default)]
pub struct TaskCgroup {
    v2: Option<PathBuf>,
    /// `memory` is enabled on `v2` (its memory.events counts OOM kills).
    v2_memory: bool,
    v1_memory: Option<PathBuf>,
    v1_pids: Option<PathBuf>,
}

impl TaskCgroup {
    /// Whether `pids.max` caps this cgroup (v1's pids hierarchy, or v2 with its limits).
    pub fn limits_processes(&self) -> bool {
        self.v1_pids.is_some() || (self.v2.is_some() && self.v2_memory)
    }

    fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.v2, &self.v1_memory, &self.v1_pids]
            .into_iter()
            .flatten()
    }

    /// The directory name of the task's cgroup (the same in every hierarchy).
    pub fn name(&self) -> Option<String> {
        self.dirs()
            .next()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
    }

    /// The file that lists the ids of every thread in the task's cgroup (each hierarchy has
    /// the same members: the first one's), for the worker to move them
    /// ([`crate::process::lending`]).
    pub fn threads_file(&self) -> Option<PathBuf> {
        match (&self.v2, self.dirs().next()) {
            (Some(v2), _) => Some(v2.join("cgroup.threads")),
            (None, Some(v1)) => Some(v1.join("tasks")),
            (None, None) => None,
        }
    }

    /// The files the child writes "0" into to join (it must, before it drops privileges).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Kills every process in the task's cgroups and waits (bounded) until they are empty.
    pub fn kill_all(&self) -> bool {
        let started = Instant::now();
        if let Some(v2) = &self.v2 {
            let _ = std::fs::write(v2.join("cgroup.kill"), "1");
        }
        loop {
            let pids: Vec<i32> = self
                .dirs()
                .flat_map(|d| {
                    std::fs::read_to_string(d.join("cgroup.procs"))
                        .unwrap_or_default()
                        .lines()
                        .filter_map(|l| l.trim().parse().ok())
                        .collect::<Vec<i32>>()
                })
                .collect();
            if pids.is_empty() {
                return true;
            }
            if started.elapsed() > KILL_DEADLINE {
                tracing::warn!(pids = ?pids, "task cgroup not empty after its kill");
                return false;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// OOM kills the kernel made in this task's cgroup (0 when no memory controller counts).
    pub fn oom_kills(&self) -> u64 {
        let v2 = self
            .v2
            .as_ref()
            .filter(|_| self.v2_memory)
            .map(|d| d.join("memory.events"));
        let v1 = self
            .v1_memory
            .as_ref()
            .map(|d| d.join("memory.oom_control"));
        [v2, v1]
            .into_iter()
            .flatten()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .map(|text| counter(&text, "oom_kill"))
            .max()
            .unwrap_or(0)
    }
}

impl Drop for TaskCgroup {
    fn drop(&mut self) {
        self.kill_all();
        for dir in self.dirs() {
            if let Err(e) = std::fs::remove_dir(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove a task cgroup");
            }
        }
    }
}

/// A `key value` line's value in a cgroup stats file.
pub fn counter(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/pids rw,relatime shared:12 - cgroup cgroup rw,pids
35 25 0:31 / /sys/fs/cgroup/unified rw,relatime shared:14 - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "8:pids:/\n4:memory:/process_api/0d72\n0::/\n";

    #[test]
    fn a_hybrid_host_gives_the_unified_dir_and_the_v1_limits() {
        let p = placement(HYBRID_MOUNTS, HYBRID_CGROUP);
        assert_eq!(p.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(
            p.v1_memory,
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/0d72"))
        );
        assert_eq!(p.v1_pids, Some(PathBuf::from("/sys/fs/cgroup/pids")));
    }

    #[test]
    fn a_pure_v2_host_inside_a_cgroup_namespace_root() {
        let mounts = "40 30 0:35 /process_api/x /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        let p = placement(mounts, "0::/process_api/x/worker\n");
        assert_eq!(p.v2, Some(PathBuf::from("/sys/fs/cgroup/worker")));
        assert_eq!(p.v1_memory, None);
        let p = placement(
            "40 30 0:35 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            "0::/process_api/673\n",
        );
        assert_eq!(p.v2, Some(PathBuf::from("/sys/fs/cgroup/process_api/673")));
    }

    #[test]
    fn counters_are_read_by_key() {
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n";
        assert_eq!(counter(events, "oom_kill"), 2);
        assert_eq!(counter(events, "oom_group_kill"), 0);
        assert_eq!(
            counter("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n", "oom_kill"),
            5
        );
    }
}
