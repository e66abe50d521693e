//! Who owns a directory the worker made under its work root (a task's, a template's): an
//! owner file beside it, `<dir>.owner`, names the worker (node and device) and its process
//! (pid and start time). Beside, not inside: the directory is handed to the child's sandbox
//! user, who could rewrite anything in it, while the work root is the worker's alone. After a
//! `kill -9` nothing removes those directories; the next worker with the same identity finds
//! them by their owner files and sweeps them (`sweep.rs`). The judgement is a pure function
//! ([`judge`]), the process lookup one read of `/proc/<pid>/stat`.

use serde::{Deserialize, Serialize};
use std::io;

/// What ends the name of an owner file: `<dir>.owner`.
pub const OWNER_SUFFIX: &str = ".owner";

/// An owner file is a line of JSON; anything longer is not one of ours.
pub const MAX_OWNER_FILE_BYTES: u64 = 4096;

/// The owner of a directory, as its owner file records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirOwner {
    /// The worker's identity, `{node}/{device}` (e.g. `node-a/gpu0`, `node-a/cpu`): a worker
    /// sweeps only what a process of its own identity left.
    pub worker: String,
    /// The process that made the directory.
    pub pid: u32,
    /// That process's start time (clock ticks after boot, field 22 of `/proc/<pid>/stat`): a
    /// pid reused by another process has another start time, so it is not taken for the owner.
    pub start_time: u64,
}

/// What to do with a directory, from its owner file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// Another worker identity's: never touched.
    NotMine,
    /// Ours, and its process is still running (this process, or a live twin): kept.
    Alive,
    /// Ours, and its process is gone: swept.
    Dead,
}

impl DirOwner {
    /// This process, as the worker `worker` (`{node}/{device}`).
    pub fn this_process(worker: String) -> io::Result<Self> {
        let pid = std::process::id();
        let start_time = process_start_time(pid).ok_or_else(|| {
            io::Error::other(format!(
                "no start time for this process in /proc/{pid}/stat"
            ))
        })?;
        Ok(Self {
            worker,
            pid,
            start_time,
        })
    }

    /// The owner file's contents.
    pub fn to_file(&self) -> String {
        let mut line = serde_json::to_string(self).expect("an owner serializes");
        line.push('\n');
        line
    }

    /// An owner file's contents; `None` for anything else (left alone by the sweep).
    pub fn from_file(text: &str) -> Option<Self> {
        serde_json::from_str(text.trim()).ok()
    }
}

/// Whether the directory `owner` made is `me`'s to sweep: of `me`'s identity, and made by a
/// process that is gone. `running_start_time` is the start time of whatever process has
/// `owner.pid` now (`None`: no such process).
pub fn judge(owner: &DirOwner, me: &str, running_start_time: Option<u64>) -> Judgement {
    if owner.worker != me {
        return Judgement::NotMine;
    }
    match running_start_time {
        Some(started) if started == owner.start_time => Judgement::Alive,
        // No process with that pid, or one that started at another time: a reused pid.
        _ => Judgement::Dead,
    }
}

/// The start time of the running process `pid`, from `/proc/<pid>/stat`; `None` when there
/// is no such process (a zombie still has one: it has not been reaped, its pid is not reused).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    start_time_from_stat(&stat)
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so fields are counted after its
/// last `)`.
pub fn start_time_from_stat(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is the first, so starttime is the 20th.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(worker: &str, start_time: u64) -> DirOwner {
        DirOwner {
            worker: worker.to_owned(),
            pid: 4242,
            start_time,
        }
    }

    #[test]
    fn only_a_dead_process_of_my_identity_is_mine_to_sweep() {
        let mine = owner("node-a/gpu0", 100);
        assert_eq!(judge(&mine, "node-a/gpu0", None), Judgement::Dead);
        assert_eq!(judge(&mine, "node-a/gpu0", Some(100)), Judgement::Alive);
        // The pid runs again, but as another process (it started later): the owner is dead.
        assert_eq!(judge(&mine, "node-a/gpu0", Some(7000)), Judgement::Dead);
        // Another worker's, dead or alive, is never touched.
        assert_eq!(judge(&mine, "node-a/gpu1", None), Judgement::NotMine);
        assert_eq!(judge(&mine, "node-b/gpu0", Some(100)), Judgement::NotMine);
    }

    #[test]
    fn owner_files_round_trip_and_anything_else_is_refused() {
        let o = owner("node-a/cpu", 12345);
        assert_eq!(DirOwner::from_file(&o.to_file()), Some(o));
        for bad in [
            "",
            "not json",
            r#"{"worker":"node-a/cpu","pid":1}"#,
            r#"{"worker":"node-a/cpu","pid":1,"start_time":2,"extra":3}"#,
            r#"{"worker":"node-a/cpu","pid":-1,"start_time":2}"#,
        ] {
            assert_eq!(DirOwner::from_file(bad), None, "{bad}");
        }
    }

    #[test]
    fn start_time_is_read_after_the_command_name_whatever_it_holds() {
        let stat = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 \
                    987654 12345678 100 18446744073709551615";
        assert_eq!(start_time_from_stat(stat), Some(987654));
        assert_eq!(start_time_from_stat("1234 (truncated) S 1"), None);
        assert_eq!(start_time_from_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_by_its_own_record() {
        let me = DirOwner::this_process("node/cpu".to_owned()).unwrap();
        assert_eq!(
            judge(&me, "node/cpu", process_start_time(me.pid)),
            Judgement::Alive
        );
    }
}
