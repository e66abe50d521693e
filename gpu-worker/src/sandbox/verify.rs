//! The worker's own look at a judge once it says it has entered its sandbox: what the kernel
//! shows in /proc/<pid>/status, not what the child claims. A judge that is not where the plan
//! put it is killed and its task given back (a fault of this node, never a verdict).

use crate::process::watchdog::ProcStat;

/// What the plan promises about the judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    /// Its uid (and every one of real, effective, saved, filesystem), when it changed user.
    pub uid: Option<u32>,
    /// A seccomp filter is installed.
    pub seccomp: bool,
    /// It lives in a pid namespace of its own (two levels in `NSpid` as the worker sees it).
    pub pid_namespace: bool,
}

/// The judge: the only child of the process the worker started (the shim).
pub fn judge_of(table: &[ProcStat], shim: i32) -> Option<i32> {
    table.iter().find(|p| p.ppid == shim).map(|p| p.pid)
}

/// Checks the text of /proc/<judge>/status against the plan (pure).
pub fn check_status(status: &str, expect: &Expectation) -> Result<(), String> {
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let mut problems = Vec::new();
    if let Some(uid) = expect.uid {
        let uids = field("Uid");
        if uids.len() != 4 || uids.iter().any(|u| u.parse() != Ok(uid)) {
            problems.push(format!("uids {uids:?}, expected {uid}"));
        }
    }
    if field("NoNewPrivs") != ["1"] {
        problems.push("no_new_privs is off".to_owned());
    }
    if expect.seccomp && field("Seccomp") != ["2"] {
        problems.push(format!("seccomp mode {:?}", field("Seccomp")));
    }
    if field("CapEff")
        .iter()
        .any(|c| u64::from_str_radix(c, 16) != Ok(0))
    {
        problems.push(format!("capabilities {:?}", field("CapEff")));
    }
    if expect.pid_namespace && field("NSpid").len() < 2 {
        problems.push("not in a pid namespace of its own".to_owned());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JUDGE: &str = "Name:\tpython3\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nNSpid:\t4412\t1\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t2\n";

    fn expect() -> Expectation {
        Expectation {
            uid: Some(65534),
            seccomp: true,
            pid_namespace: true,
        }
    }

    #[test]
    fn a_judge_in_every_layer_passes() {
        assert_eq!(check_status(JUDGE, &expect()), Ok(()));
    }

    #[test]
    fn each_missing_layer_is_named() {
        let root = JUDGE.replace("Uid:\t65534\t65534\t65534\t65534", "Uid:\t0\t0\t0\t0");
        assert!(check_status(&root, &expect()).unwrap_err().contains("uids"));
        let unfiltered = JUDGE.replace("Seccomp:\t2", "Seccomp:\t0");
        assert!(
            check_status(&unfiltered, &expect())
                .unwrap_err()
                .contains("seccomp")
        );
        let host_pid = JUDGE.replace("NSpid:\t4412\t1", "NSpid:\t4412");
        assert!(
            check_status(&host_pid, &expect())
                .unwrap_err()
                .contains("pid namespace")
        );
        let caps = JUDGE.replace("CapEff:\t0000000000000000", "CapEff:\t000001ffffffffff");
        assert!(
            check_status(&caps, &expect())
                .unwrap_err()
                .contains("capabilities")
        );
        let privs = JUDGE.replace("NoNewPrivs:\t1", "NoNewPrivs:\t0");
        assert!(
            check_status(&privs, &expect())
                .unwrap_err()
                .contains("no_new_privs")
        );
    }

    #[test]
    fn the_judge_is_the_shims_child() {
        let row = |pid, ppid| ProcStat {
            pid,
            ppid,
            pgrp: 10,
            session: 10,
            rss_pages: 0,
        };
        let table = [row(10, 1), row(11, 10), row(12, 11)];
        assert_eq!(judge_of(&table, 10), Some(11));
        assert_eq!(judge_of(&table, 12), None);
    }
}
