//! Finds every process that belongs to a task child and measures it, from /proc. A child may
//! leave its process group or session (setsid), so membership also follows the parent chain
//! back to the child; only a double fork that is re-parented away escapes, which is why a
//! deployment should also give each worker a cgroup (see deploy/).

use std::collections::HashMap;

/// One line of `/proc/<pid>/stat`, the fields we need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The process.
    pub pid: i32,
    /// Its parent.
    pub ppid: i32,
    /// Its process group.
    pub pgrp: i32,
    /// Its session.
    pub session: i32,
    /// Resident set size, in pages.
    pub rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name is in parentheses and may itself contain
/// spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<ProcStat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let pid = line[..open].trim().parse().ok()?;
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is the state (field 3); field n is rest[n - 3].
    Some(ProcStat {
        pid,
        ppid: rest.get(1)?.parse().ok()?,
        pgrp: rest.get(2)?.parse().ok()?,
        session: rest.get(3)?.parse().ok()?,
        rss_pages: rest.get(21)?.parse().ok()?,
    })
}

/// The processes of `root` (a child that called setsid, so its pid is its session and group):
/// same session, same group, or descended from it.
pub fn members(table: &[ProcStat], root: i32) -> Vec<ProcStat> {
    let parent: HashMap<i32, i32> = table.iter().map(|p| (p.pid, p.ppid)).collect();
    let descends = |mut pid: i32| {
        for _ in 0..64 {
            if pid == root {
                return true;
            }
            match parent.get(&pid) {
                Some(&pp) if pp > 1 => pid = pp,
                _ => return false,
            }
        }
        false
    };
    table
        .iter()
        .filter(|p| p.session == root || p.pgrp == root || descends(p.pid))
        .copied()
        .collect()
}

/// Usage of one child's processes at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GroupUsage {
    /// Processes alive.
    pub processes: u64,
    /// Their resident memory together.
    pub rss_bytes: u64,
}

/// The usage of `members` (from [`members`]) with pages of `page_size` bytes.
pub(crate) fn usage(members: &[ProcStat], page_size: u64) -> GroupUsage {
    GroupUsage {
        processes: members.len() as u64,
        rss_bytes: members.iter().map(|p| p.rss_pages * page_size).sum(),
    }
}

/// The memory charged to a group: its resident sum where that is within `limit` (cheap:
/// `stat`), else its proportional set size (`smaps_rollup`, slower), in which a page shared by
/// several processes counts its share in each. A fork shares its parent's pages copy-on-write,
/// so a resident sum counts them once per fork: a candidate that forks a few helpers from a
/// process that imported torch would be charged gigabytes it never used. The proportional
/// size is what they add; where it cannot be read, the resident sum stands.
pub(crate) fn charged_bytes(members: &[ProcStat], usage: GroupUsage, limit: u64) -> u64 {
    if usage.rss_bytes <= limit {
        return usage.rss_bytes;
    }
    let mut total = 0u64;
    for p in members {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", p.pid)) else {
            continue; // gone since the scan: it holds nothing now
        };
        match parse_pss(&text) {
            Some(bytes) => total += bytes,
            None => return usage.rss_bytes,
        }
    }
    total
}

/// The `Pss:` line of a `/proc/<pid>/smaps_rollup` text, in bytes.
fn parse_pss(smaps_rollup: &str) -> Option<u64> {
    let kib: u64 = smaps_rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// Reads the whole process table. Processes that vanish mid-scan are skipped.
pub fn read_table() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_stat(&s))
        .collect()
}

/// OOM kills the kernel has made since boot, anywhere on the host (`oom_kill` of
/// `/proc/vmstat`; 0 when the kernel does not say).
pub fn host_oom_kills() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .ok()
        .and_then(|text| parse_oom_kills(&text))
        .unwrap_or(0)
}

/// `oom_kill` of a `/proc/vmstat` text.
fn parse_oom_kills(vmstat: &str) -> Option<u64> {
    vmstat
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}

/// The system's page size in bytes (4096 when sysconf does not say).
pub(crate) fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map(|v| v as u64)
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, ppid: i32, pgrp: i32, session: i32, rss: u64) -> ProcStat {
        ProcStat {
            pid,
            ppid,
            pgrp,
            session,
            rss_pages: rss,
        }
    }

    #[test]
    fn parses_a_name_with_spaces_and_parentheses() {
        let line = "4242 (py (evil) x) S 4000 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 1 100000 321 18446744073709551615";
        let p = parse_stat(line).unwrap();
        assert_eq!(p, stat(4242, 4000, 4242, 4242, 321));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn membership_follows_session_group_and_ancestry() {
        let table = vec![
            stat(1, 0, 1, 1, 10),
            stat(100, 1, 100, 100, 10),     // the worker
            stat(200, 100, 200, 200, 1000), // the child (setsid)
            stat(201, 200, 200, 200, 50),   // its fork
            stat(202, 201, 202, 202, 70),   // a grandchild that called setsid
            stat(300, 100, 300, 300, 99),   // another task's child
            stat(400, 1, 400, 400, 5),      // re-parented away: not found
        ];
        let m = members(&table, 200);
        let pids: Vec<i32> = m.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![200, 201, 202]);
        assert_eq!(
            usage(&m, 4096),
            GroupUsage {
                processes: 3,
                rss_bytes: 1120 * 4096
            }
        );
    }

    #[test]
    fn the_proportional_size_is_read_from_smaps_rollup() {
        let text = "55d0a000-7ffd1000 ---p 00000000 00:00 0 [rollup]\nRss: 1200 kB\nPss: 300 kB\nPss_Anon: 100 kB\n";
        assert_eq!(parse_pss(text), Some(300 << 10));
        assert_eq!(parse_pss("Rss: 1 kB\n"), None);
    }

    #[test]
    fn a_group_within_its_limit_is_charged_its_resident_sum_and_one_over_it_its_share() {
        let me = std::process::id() as i32;
        let m: Vec<ProcStat> = read_table().into_iter().filter(|p| p.pid == me).collect();
        let u = usage(&m, page_size());
        assert_eq!(charged_bytes(&m, u, u64::MAX), u.rss_bytes);
        // Over the limit the share is read: never more than the resident size, and this
        // process holds pages of its own.
        let share = charged_bytes(&m, u, 0);
        assert!(
            share > 0 && share <= u.rss_bytes + (64 << 10),
            "{share} vs {}",
            u.rss_bytes
        );
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id() as i32;
        assert!(read_table().iter().any(|p| p.pid == me));
    }

    #[test]
    fn the_host_oom_count_is_read_from_vmstat() {
        let text = "nr_free_pages 12\noom_kill 3\nnr_foo 1\n";
        assert_eq!(parse_oom_kills(text), Some(3));
        assert_eq!(parse_oom_kills("nr_free_pages 12\n"), None);
    }
}
