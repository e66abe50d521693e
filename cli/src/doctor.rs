//! `crucible doctor`: checks that this node can serve its role, one line per check (`ok`,
//! `warn` or `FAIL`, and what to do), and exits non-zero when a required one fails.
//!
//! - [`facts`] gathers (the worker's own settings and code paths: its Python and directories,
//!   its GPU report and probe, the broker connection as a process makes it);
//! - [`node`] and [`services`] judge, purely: this node's means to run workers, and the
//!   broker and API it talks to or is; [`report`] is a line, its level and the role that decides
//!   which checks exist and which fail.
//!
//! Settings come from `--env-file` files (the units' `/etc/crucible/*.env`), then this
//! process's environment, so an operator checks exactly what a unit will run with.

mod facts;
mod node;
mod report;
mod services;

use report::{Check, Level, Role};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `crucible doctor`'s arguments.
#[derive(clap::Args)]
pub struct DoctorArgs {
    /// What this node runs: standalone workers, an API replica, or everything (`crucible up`).
    #[arg(long, value_enum, default_value = "all")]
    role: Role,
    /// Also check an API replica: `GET <URL>/health`.
    #[arg(long, value_name = "URL")]
    api: Option<String>,
    /// Read settings from this file first (KEY=VALUE lines, as systemd's EnvironmentFile=);
    /// later files win, and the environment fills in the rest. E.g. /etc/crucible/crucible.env
    /// then /etc/crucible/worker.env.
    #[arg(long = "env-file", value_name = "FILE")]
    env_files: Vec<PathBuf>,
}

/// Runs every check of the role and prints them; `Ok(false)` when one failed.
pub async fn run(args: DoctorArgs) -> anyhow::Result<bool> {
    let mut files = BTreeMap::new();
    for path in &args.env_files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--env-file {}: {e}", path.display()))?;
        files.extend(parse_env_file(&text));
    }
    let lookup = move |k: &str| files.get(k).cloned().or_else(|| std::env::var(k).ok());
    let checks = gather_and_check(args.role, args.api.as_deref(), &lookup).await;
    for check in &checks {
        println!("{check}");
    }
    let count = |level| checks.iter().filter(|c| c.level == level).count();
    println!(
        "doctor (role {}): {} ok, {} warn, {} FAIL",
        args.role.name(),
        count(Level::Ok),
        count(Level::Warn),
        count(Level::Fail)
    );
    Ok(!report::any_failed(&checks))
}

async fn gather_and_check(role: Role, api: Option<&str>, lookup: facts::Lookup<'_>) -> Vec<Check> {
    let mut out = Vec::new();
    if role.runs_workers() {
        match facts::worker_config(lookup) {
            Ok(cfg) => out.extend(worker_checks(role, &cfg, lookup).await),
            Err(e) => out.push(Check::fail(
                "settings",
                format!("the worker would refuse its settings: {e}"),
                "fix that variable (.env.example documents each)",
            )),
        }
    }
    if role.runs_api() {
        let bind = lookup("CRUCIBLE_BIND").filter(|b| !b.trim().is_empty());
        let verdict = bind.as_deref().map(|b| {
            b.trim().parse::<SocketAddr>().ok().map(|addr| {
                crucible_api_server::Auth::from_lookup(addr, lookup)
                    .map(|a| a.mode())
                    .map_err(|e| e.to_string())
            })
        });
        out.push(services::auth_check(bind.as_deref(), verdict.flatten()));
    }
    out.extend(services::redis_checks(role, &facts::redis(lookup).await));
    if let Some(url) = api {
        out.push(services::api_check(url, &facts::api_health(url).await));
    }
    out
}

async fn worker_checks(
    role: Role,
    cfg: &crucible_gpu_worker::WorkerConfig,
    lookup: facts::Lookup<'_>,
) -> Vec<Check> {
    let python = facts::python_report(cfg, lookup).await;
    let mut out = node::python_checks(role, &cfg.python, &python);
    let nvml = facts::nvml().await;
    let gpu = nvml.as_ref().is_ok_and(|r| !r.gpus.is_empty());
    // Before the probes: a CUDA probe run as root here would make the node itself.
    let uvm = facts::uvm_node();
    let probes = match &nvml {
        Ok(report) => facts::probes(report).await,
        Err(_) => Vec::new(),
    };
    out.extend(node::gpu_checks(&nvml, python.as_ref().ok(), &probes, uvm));
    out.extend(node::toolchain_checks(&facts::toolchain(cfg, lookup), gpu));
    for (name, variable, dir) in [
        ("work dir", "CRUCIBLE_WORK_DIR", &cfg.work_root),
        ("build cache", "CRUCIBLE_BUILD_CACHE", &cfg.build_cache_dir),
    ] {
        out.push(node::disk_check(name, variable, &facts::disk_space(dir)));
    }
    out
}

/// Pure: the `KEY=VALUE` lines of an environment file as systemd's `EnvironmentFile=` reads
/// the ones Crucible's files hold: comments and blank lines skipped, a value in matching
/// single or double quotes unquoted, anything else taken as it is.
pub fn parse_env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let unquoted = ['"', '\'']
                .iter()
                .find_map(|q| v.strip_prefix(*q).and_then(|rest| rest.strip_suffix(*q)))
                .unwrap_or(v);
            (k.trim().to_owned(), unquoted.to_owned())
        })
        .filter(|(k, _)| !k.is_empty() && !k.contains(char::is_whitespace))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_env_file;

    #[test]
    fn env_files_read_as_systemd_reads_ours() {
        let text = "# comment\n\nREDIS_URL=rediss://crucible-worker:pw@q:6379\n; also a comment\n\
                    CRUCIBLE_PYTHON=\"/opt/crucible/venv/bin/python\"\nEMPTY=\nTOKEN='a b'\nnot a setting\n";
        assert_eq!(
            parse_env_file(text),
            vec![
                (
                    "REDIS_URL".to_owned(),
                    "rediss://crucible-worker:pw@q:6379".to_owned()
                ),
                (
                    "CRUCIBLE_PYTHON".to_owned(),
                    "/opt/crucible/venv/bin/python".to_owned()
                ),
                ("EMPTY".to_owned(), String::new()),
                ("TOKEN".to_owned(), "a b".to_owned()),
            ]
        );
    }
}
