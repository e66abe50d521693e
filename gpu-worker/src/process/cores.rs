//! Which CPU cores a worker's task children run on. A timing is only as good as the core its
//! launching process gets: a compiler of another task on that core stretches every launch.
//! So the node's cores are split in two pools:
//! - the **device cores**, cut into one disjoint slice per GPU worker: its device-stage
//!   children (the judge and runner that check and time) run there and nowhere else, and
//!   while one of them times, the worker has stopped every other child on its device;
//! - the **stage cores**, shared by the CPU stages of every worker (syntax, screening,
//!   imports, CUDA and Triton builds), which never run on a device core.
//!
//! The child pins itself to its cores first thing (harness/sandbox.py, the plan's `cpus`,
//! before any thread exists), and the seccomp filter then refuses `sched_setaffinity`, so the
//! candidate cannot move back. This holds on every host, cgroups or not: the GPU machines'
//! unified hierarchy delegates no `cpuset` controller to the worker, and a v1 `cpuset` would
//! add nothing the pinning does not already enforce.
//!
//! A compile-bound node (CUDA candidates' builds) leaves the device cores idle while the stage
//! cores are full: 36 cold load_inline builds on a 1×H200 kept its 16 cores 52 % busy, all of
//! it the stage half. So a worker lends its device cores (unless `CRUCIBLE_LEND_DEVICE_CORES=0`)
//! to CPU stages, which then run there too, but at idle priority (`SCHED_IDLE`, [`Placement`]): a
//! device child's thread that wakes always preempts them, and a core is theirs only while no
//! device child wants it. The child cannot raise itself back: it sets its `RLIMIT_NICE` to 0
//! and has no `CAP_SYS_NICE` in the host's namespace, which leaving `SCHED_IDLE` needs. What
//! idle priority still shares is a core's caches and its hyperthread sibling, so while a
//! device child of the worker times, the worker moves its lent CPU stages back onto the stage
//! cores ([`super::lending`]). A lent stage starts on the stage cores, and only the worker
//! lends it the device cores, where its cgroup lists its threads.
//!
//! Where the node is too small to split (fewer than [`MIN_CORES_TO_SPLIT`] cores, or fewer
//! than two per GPU worker) and on CPU workers (their "device" is the cores themselves),
//! every child gets all of the worker's cores, as before, and [`Cores::isolated`] is false.
//! Workers in separate processes on one node split nothing between them by themselves: give
//! each its own `CRUCIBLE_DEVICE_CPUS` (docs/OPERATIONS.md).
//!
//! Everything but [`available`] is pure.

use std::collections::BTreeSet;
use std::fmt;

/// Below this many cores nothing is split: one pool would be left with nothing.
pub const MIN_CORES_TO_SPLIT: usize = 4;
/// Whether a split worker lends its device cores to CPU stages unless told
/// (`CRUCIBLE_LEND_DEVICE_CORES`): on, since the worker takes them back for every timing
/// ([`super::lending`]), and a compile-bound node gains 1.58x by it on a 1×H200
/// (docs/BENCHMARKS.md, "Lending the device cores").
pub const DEFAULT_LEND_DEVICE_CORES: bool = true;

/// The cores of one worker's children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cores {
    /// Where its device-stage children run (sorted, never empty).
    pub device: Vec<usize>,
    /// Where its CPU-stage children run (sorted, never empty).
    pub cpu_stage: Vec<usize>,
    /// Whether the two pools are disjoint; when not, why (for the start-up log).
    pub isolation: Isolation,
    /// Whether CPU stages may also run on `device`, at idle priority (only when split).
    pub lent: bool,
}

/// Where one child runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The cores it pins itself to (sorted; empty: left as inherited).
    pub cpus: Vec<usize>,
    /// Whether it runs at `SCHED_IDLE`, below every other thread on those cores.
    pub idle_priority: bool,
}

/// Whether device children have cores of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// Device and CPU-stage children never share a core.
    Split,
    /// Every child may use every core of the worker, for the reason given.
    Shared(String),
}

impl Cores {
    /// Whether a device child's cores are free of CPU stages.
    pub fn isolated(&self) -> bool {
        self.isolation == Isolation::Split
    }

    /// Every core for every child (tests, and hosts where nothing is split).
    pub fn shared(all: &[usize], why: impl Into<String>) -> Self {
        Cores {
            device: all.to_vec(),
            cpu_stage: all.to_vec(),
            isolation: Isolation::Shared(why.into()),
            lent: false,
        }
    }

    /// The worker's lending of its device cores ([`super::lending`]), where they are lent.
    pub fn lent_cores(&self) -> Option<std::sync::Arc<super::lending::LentCores>> {
        self.lent
            .then(|| super::lending::LentCores::new(&self.cpu_stage, &self.device))
            .flatten()
    }

    /// Where a device-stage child runs: the worker's device cores, at normal priority.
    pub fn device_placement(&self) -> Placement {
        Placement {
            cpus: self.device.clone(),
            idle_priority: false,
        }
    }

    /// Where a CPU-stage child starts: the stage pool; where the device cores are lent and
    /// the child `trackable` (its threads can be found), at idle priority, for the worker to
    /// lend it the device cores outside timings ([`super::lending`]: only the worker does).
    pub fn cpu_stage_placement(&self, trackable: bool) -> Placement {
        Placement {
            cpus: self.cpu_stage.clone(),
            idle_priority: self.lent && trackable,
        }
    }
}

impl fmt::Display for Cores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.isolation {
            Isolation::Split => {
                write!(
                    f,
                    "device children on {}, CPU stages on {}",
                    format_list(&self.device),
                    format_list(&self.cpu_stage)
                )?;
                if self.lent {
                    write!(
                        f,
                        " (and on {} at idle priority)",
                        format_list(&self.device)
                    )?;
                }
                Ok(())
            }
            Isolation::Shared(why) => {
                write!(f, "every child on {} ({why})", format_list(&self.device))
            }
        }
    }
}

/// What the split is made from.
#[derive(Debug, Clone, Default)]
pub struct CoreSettings {
    /// The cores this process may use (its affinity, or `CRUCIBLE_CPUS`).
    pub available: Vec<usize>,
    /// `CRUCIBLE_DEVICE_CPUS`: the device pool, cut among the GPU workers of this process.
    pub device: Option<Vec<usize>>,
    /// `CRUCIBLE_STAGE_CPUS`: the CPU-stage pool.
    pub cpu_stage: Option<Vec<usize>>,
    /// `CRUCIBLE_LEND_DEVICE_CORES` (default [`DEFAULT_LEND_DEVICE_CORES`]): CPU stages may use
    /// the device cores at idle priority, and leave them while the device times.
    pub lend_device_cores: bool,
}

impl CoreSettings {
    /// Reads `CRUCIBLE_CPUS`, `CRUCIBLE_DEVICE_CPUS` and `CRUCIBLE_STAGE_CPUS` (lists such as
    /// `0-3,8`) and `CRUCIBLE_LEND_DEVICE_CORES` (`1`/`0`); the process's own affinity is
    /// `affinity`. A list naming a core outside it, or a switch that is neither, is refused.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        affinity: Vec<usize>,
    ) -> Result<Self, String> {
        let list = |key: &str| -> Result<Option<Vec<usize>>, String> {
            lookup(key)
                .filter(|v| !v.trim().is_empty())
                .map(|v| parse_list(&v).map_err(|e| format!("{key}: {e}")))
                .transpose()
        };
        let available = match list("CRUCIBLE_CPUS")? {
            Some(cpus) => within(cpus, &affinity, "CRUCIBLE_CPUS", "this process's affinity")?,
            None => affinity,
        };
        if available.is_empty() {
            return Err("no CPU core is available to this process".into());
        }
        let inside = |cpus: Option<Vec<usize>>, key: &str| {
            cpus.map(|c| within(c, &available, key, "the worker's cores"))
                .transpose()
        };
        let lend_device_cores = match lookup("CRUCIBLE_LEND_DEVICE_CORES")
            .as_deref()
            .map(str::trim)
        {
            None | Some("") => DEFAULT_LEND_DEVICE_CORES,
            Some("0" | "false" | "off" | "no") => false,
            Some("1" | "true" | "on" | "yes") => true,
            Some(other) => {
                return Err(format!(
                    "CRUCIBLE_LEND_DEVICE_CORES: {other:?} is not 1 or 0"
                ));
            }
        };
        Ok(CoreSettings {
            device: inside(list("CRUCIBLE_DEVICE_CPUS")?, "CRUCIBLE_DEVICE_CPUS")?,
            cpu_stage: inside(list("CRUCIBLE_STAGE_CPUS")?, "CRUCIBLE_STAGE_CPUS")?,
            available,
            lend_device_cores,
        })
    }

    /// The cores of GPU worker `index` of `gpu_workers` in this process, or of a CPU worker
    /// (`index` `None`).
    pub fn cores_for(&self, index: Option<usize>, gpu_workers: usize) -> Cores {
        let all = &self.available;
        let Some(index) = index else {
            return Cores::shared(all, "a CPU worker times on the cores themselves");
        };
        let gpu_workers = gpu_workers.max(1);
        let explicit = self.device.is_some() || self.cpu_stage.is_some();
        if !explicit && all.len() < MIN_CORES_TO_SPLIT.max(2 * gpu_workers) {
            return Cores::shared(all, format!("{} cores are too few to split", all.len()));
        }
        // By default the upper half is the device pool: the lowest cores carry most of the
        // host's own housekeeping and interrupts.
        let (default_stage, default_device) = all.split_at(all.len() / 2);
        let device_pool: Vec<usize> = match (&self.device, &self.cpu_stage) {
            (Some(device), _) => device.clone(),
            (None, Some(stage)) => difference(all, stage),
            (None, None) => default_device.to_vec(),
        };
        let stage_pool: Vec<usize> = match (&self.cpu_stage, &self.device) {
            (Some(stage), _) => stage.clone(),
            (None, Some(device)) => difference(all, device),
            (None, None) => default_stage.to_vec(),
        };
        let device = slice(&device_pool, index, gpu_workers);
        if device.is_empty() || stage_pool.is_empty() {
            return Cores::shared(
                all,
                format!(
                    "the lists leave device pool {} and stage pool {}",
                    format_list(&device_pool),
                    format_list(&stage_pool)
                ),
            );
        }
        let isolation = if device.iter().any(|c| stage_pool.contains(c)) {
            Isolation::Shared("CRUCIBLE_DEVICE_CPUS and CRUCIBLE_STAGE_CPUS overlap".into())
        } else {
            Isolation::Split
        };
        let lent = self.lend_device_cores && isolation == Isolation::Split;
        Cores {
            device,
            cpu_stage: stage_pool,
            isolation,
            lent,
        }
    }
}

/// Part `index` of `of` contiguous, near-equal parts of `pool` (the first parts take the
/// remainder); a part is never empty while `pool` has at least `of` cores, and when it has
/// fewer, workers share a core round robin.
fn slice(pool: &[usize], index: usize, of: usize) -> Vec<usize> {
    if pool.is_empty() {
        return Vec::new();
    }
    if pool.len() < of {
        return vec![pool[index % pool.len()]];
    }
    let base = pool.len() / of;
    let extra = pool.len() % of;
    let start = index * base + index.min(extra);
    let len = base + usize::from(index < extra);
    pool[start..start + len].to_vec()
}

fn difference(all: &[usize], minus: &[usize]) -> Vec<usize> {
    all.iter().copied().filter(|c| !minus.contains(c)).collect()
}

fn within(
    cpus: Vec<usize>,
    allowed: &[usize],
    key: &str,
    what: &str,
) -> Result<Vec<usize>, String> {
    match cpus.iter().find(|c| !allowed.contains(c)) {
        Some(c) => Err(format!(
            "{key}: core {c} is not among {what} ({})",
            format_list(allowed)
        )),
        None => Ok(cpus),
    }
}

/// Parses a CPU list as the kernel writes them (`0-3,8,10-11`): sorted, without repeats.
pub fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = BTreeSet::new();
    for part in text.trim().split(',').map(str::trim) {
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{s:?} in {text:?} is not a core number"))
        };
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (number(first)?, number(last)?);
                if first > last {
                    return Err(format!("{part:?} in {text:?} runs backwards"));
                }
                if last - first >= 4096 {
                    return Err(format!("{part:?} in {text:?} is too long a range"));
                }
                cpus.extend(first..=last);
            }
            None => {
                cpus.insert(number(part)?);
            }
        }
    }
    Ok(cpus.into_iter().collect())
}

/// Writes a sorted CPU list as the kernel does (`0-3,8`).
pub fn format_list(cpus: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The cores this process may run on (its affinity mask); every online core when the kernel
/// does not say.
pub fn available() -> Vec<usize> {
    let from_mask = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map(|set| {
            (0..nix::sched::CpuSet::count())
                .filter(|&c| set.is_set(c).unwrap_or(false))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if !from_mask.is_empty() {
        return from_mask;
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n).collect()
}

#[cfg(test)]
mod tests;
