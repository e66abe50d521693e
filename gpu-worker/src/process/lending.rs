//! Lent device cores are taken back while the device times. A split worker lends its device
//! cores to its CPU stages (`CRUCIBLE_LEND_DEVICE_CORES`, on by default; [`super::cores`]):
//! they also run there, at idle priority. Idle priority keeps them off a core a device child's
//! thread wants, but not off that core's hyperthread sibling, its caches or its memory
//! bandwidth. So while one of the worker's device children times, the worker moves every
//! thread of its lent CPU stages onto the stage cores ([`LentCores::vacate`]), and lends the
//! device cores again once the timing is over ([`LentCores::restore`]): during a timing its
//! device cores hold what they hold without lending. Builds go on meanwhile, on the stage cores.
//!
//! Only the worker lends: a lent stage's child pins itself to the stage cores (its plan's),
//! *before* it joins its cgroup (harness/sandbox.py), and cannot pin itself again (seccomp
//! refuses `sched_setaffinity`). The worker finds its threads among the cgroup's members
//! (`cgroup.threads` in the unified hierarchy, `tasks` in v1; a CPU stage is lent nothing
//! where the cgroup layer is not in force) and lends them the device cores once they are
//! there ([`LentCores::sweep`], every [`SWEEP_INTERVAL`] outside timings). A thread started
//! while the worker moves the others inherits its parent's cores, so the worker lists the
//! members again until a listing holds nobody new ([`repin_until_stable`]). So no thread of a
//! lent stage may run on a device core during a timing: one there before it was moved off,
//! one that starts or joins after is where its parent or its plan put it, on the stage cores,
//! and the worker lends nothing until the timing is over. A stage that starts in a timing
//! waits for its end to be lent the device cores.
//!
//! Moving a thread is one `sched_setaffinity` by the worker (root, or the children's own user);
//! a vacate of eight building stages (a few hundred threads) takes a fraction of a millisecond.

use nix::errno::Errno;
use nix::sched::CpuSet;
use nix::unistd::Pid;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often, outside timings, the worker looks for threads of its lent stages it has not lent
/// the device cores yet (a CPU stage that has just started): a stage waits this long at most,
/// on the stage cores, before it may use them.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(50);
/// Listings of one stage's members per move: a stage that keeps starting threads faster than
/// they can be moved (its `pids.max` bounds it) is left after this many, its failure counted.
const MAX_PASSES: usize = 16;

/// The CPU stages of one worker that run on its lent device cores, and whether they are off
/// those cores now (a timing is under way).
#[derive(Debug)]
pub struct LentCores {
    /// Where a lent stage runs while the device times: the stage cores.
    stage: CpuSet,
    /// Where it runs otherwise: the stage cores and the worker's device cores.
    lent: CpuSet,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The stages are on the stage cores only (between a vacate and a restore).
    vacated: bool,
    next_id: u64,
    stages: BTreeMap<u64, LentStageThreads>,
}

#[derive(Debug)]
struct LentStageThreads {
    /// The file that lists its cgroup's threads.
    threads_file: PathBuf,
    /// The threads placed where lent threads are now, since the last vacate or restore.
    placed: HashSet<i32>,
}

/// What one move did, for the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Threads moved now (not counting those already where they were to go: a thread a
    /// stage started inherits its parent's cores).
    pub threads: usize,
    /// Threads that could not be moved (not counting those that ended meanwhile), and stages
    /// left still starting threads after [`MAX_PASSES`] listings.
    pub failed: usize,
}

impl Moved {
    fn add(&mut self, other: Moved) {
        self.threads += other.threads;
        self.failed += other.failed;
    }
}

/// A CPU stage registered with [`LentCores::register`]; forgotten when dropped (its child is
/// gone).
#[derive(Debug)]
pub struct LentStage {
    lent: Arc<LentCores>,
    id: u64,
}

impl Drop for LentStage {
    fn drop(&mut self) {
        self.lent.lock().stages.remove(&self.id);
    }
}

impl LentCores {
    /// Lending between `stage` cores and a worker's `device` cores; `None` when either is
    /// empty or a core is beyond what a CPU set holds.
    pub fn new(stage: &[usize], device: &[usize]) -> Option<Arc<Self>> {
        if stage.is_empty() || device.is_empty() {
            return None;
        }
        let set = |cpus: &mut dyn Iterator<Item = &usize>| -> Option<CpuSet> {
            let mut set = CpuSet::new();
            for &cpu in cpus {
                set.set(cpu).ok()?;
            }
            Some(set)
        };
        Some(Arc::new(LentCores {
            stage: set(&mut stage.iter())?,
            lent: set(&mut stage.iter().chain(device))?,
            state: Mutex::new(State::default()),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it leaves nothing half-done that matters: the next move lists
        // every member again.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a lent stage's threads go now: the stage cores while the device times, else
    /// the stage and device cores.
    fn target(&self, vacated: bool) -> &CpuSet {
        if vacated { &self.stage } else { &self.lent }
    }

    /// Registers a lent CPU stage by the file listing its cgroup's threads, for as long as
    /// the returned guard lives. Its child starts on the stage cores (its plan's), before it
    /// is listed there; the worker lends it the device cores at the next [`Self::sweep`]
    /// outside a timing.
    pub fn register(self: &Arc<Self>, threads_file: PathBuf) -> LentStage {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        let threads = LentStageThreads {
            threads_file,
            placed: HashSet::new(),
        };
        state.stages.insert(id, threads);
        LentStage {
            lent: self.clone(),
            id,
        }
    }

    /// Moves every lent stage onto the stage cores, before a device child times. Called again
    /// while vacated, moves only the threads not placed yet.
    pub fn vacate(&self) -> Moved {
        let started = Instant::now();
        let mut state = self.lock();
        let first = !std::mem::replace(&mut state.vacated, true);
        let moved = place_all(&mut state, &self.stage, first);
        if first {
            tracing::debug!(
                stages = state.stages.len(),
                threads = moved.threads,
                failed = moved.failed,
                took_us = started.elapsed().as_micros() as u64,
                "lent cores vacated for a timing"
            );
        }
        moved
    }

    /// Lends the device cores again once no device child times; nothing when not vacated.
    pub fn restore(&self) -> Moved {
        let mut state = self.lock();
        if !std::mem::take(&mut state.vacated) {
            return Moved::default();
        }
        place_all(&mut state, &self.lent, true)
    }

    /// Places the threads that joined a lent stage since the last look where lent threads are
    /// now: outside timings, the device cores are lent to a stage that has just started.
    pub fn sweep(&self) -> Moved {
        let mut state = self.lock();
        let to = self.target(state.vacated);
        place_all(&mut state, to, false)
    }

    /// Whether the lent stages are off the device cores now.
    pub fn vacated(&self) -> bool {
        self.lock().vacated
    }
}

/// Places every registered stage's threads on `to`: all of them again when `anew` (the
/// state changed), else only those not placed yet.
fn place_all(state: &mut State, to: &CpuSet, anew: bool) -> Moved {
    let mut moved = Moved::default();
    for threads in state.stages.values_mut() {
        if anew {
            threads.placed.clear();
        }
        moved.add(place(threads, to));
    }
    moved
}

fn place(threads: &mut LentStageThreads, to: &CpuSet) -> Moved {
    let file = &threads.threads_file;
    repin_until_stable(
        &mut threads.placed,
        || list_threads(file),
        |tid| move_thread(tid, to),
    )
}

/// Pins every thread `list` names that is not in `done` yet with `pin` (true: it was moved,
/// false: it was there already), and lists again, until
/// a listing names nobody new (a thread started meanwhile inherits its parent's cores: once
/// every parent is pinned, so is every thread they start) or [`MAX_PASSES`] listings were
/// made (counted as a failure). A thread that ended before it was pinned (`ESRCH`) is no
/// failure. Pure but for what `list` and `pin` do.
pub(crate) fn repin_until_stable(
    done: &mut HashSet<i32>,
    mut list: impl FnMut() -> Vec<i32>,
    mut pin: impl FnMut(i32) -> Result<bool, Errno>,
) -> Moved {
    let mut moved = Moved::default();
    for _ in 0..MAX_PASSES {
        let fresh: Vec<i32> = list().into_iter().filter(|t| !done.contains(t)).collect();
        if fresh.is_empty() {
            return moved;
        }
        for tid in fresh {
            done.insert(tid);
            match pin(tid) {
                Ok(true) => moved.threads += 1,
                Ok(false) => {}
                Err(Errno::ESRCH) => {}
                Err(_) => moved.failed += 1,
            }
        }
    }
    moved.failed += 1;
    moved
}

/// The thread ids the file lists (a cgroup gone, or unreadable, lists none).
fn list_threads(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .map(|text| parse_threads(&text).collect())
        .unwrap_or_default()
}

/// Pure: the ids of a `cgroup.threads` or `tasks` file, one a line.
pub(crate) fn parse_threads(text: &str) -> impl Iterator<Item = i32> + '_ {
    text.lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .filter(|&t| t > 0)
}

/// Pins thread `tid` to `cpus`; false when it was pinned there already.
fn move_thread(tid: i32, cpus: &CpuSet) -> Result<bool, Errno> {
    let pid = Pid::from_raw(tid);
    if nix::sched::sched_getaffinity(pid)? == *cpus {
        return Ok(false);
    }
    nix::sched::sched_setaffinity(pid, cpus).map(|()| true)
}

#[cfg(test)]
mod tests;
