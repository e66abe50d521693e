//! Readings for the table: percentiles and cells, the host (CPU model, load, a process's
//! CPU time) and Redis (its pid, memory, one task key's size).

use anyhow::Context;
use std::time::Duration;

pub(crate) fn pct<T: Copy + Ord>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

pub(crate) fn ms_signed(us: i64) -> String {
    format!("{:.2}", us as f64 / 1e3)
}

pub(crate) fn latency_cells(mut lat: Vec<Duration>) -> [String; 3] {
    lat.sort_unstable();
    [50.0, 95.0, 99.0].map(|p| pct(&lat, p).map_or("-".into(), ms))
}

pub(crate) fn command_output(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat`.
pub(crate) fn cpu_seconds(pid: u32, clk_tck: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clk_tck)
}

/// The pid of the redis-server behind `conn`.
pub(crate) async fn redis_pid(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u32> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .context("INFO server has no process_id")?
        .trim()
        .parse()
        .context("process_id")
}

pub(crate) async fn used_memory(
    conn: &mut redis::aio::MultiplexedConnection,
) -> anyhow::Result<i64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .context("INFO memory has no used_memory")?
        .trim()
        .parse()
        .context("used_memory")
}

/// `MEMORY USAGE` of one task hash (all samples), as a cross-check of the `used_memory` delta.
pub(crate) async fn task_key_usage(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    id: &str,
) -> anyhow::Result<i64> {
    let bytes: Option<i64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(format!("{prefix}:task:{id}"))
        .arg("SAMPLES")
        .arg(0)
        .query_async(conn)
        .await?;
    bytes.with_context(|| format!("task key {prefix}:task:{id} not found"))
}
