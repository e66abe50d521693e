//! What the operator asks of the sandbox, parsed from environment-style lookups (pure).

use crucible_shared::SandboxLayer;
use std::collections::BTreeSet;

/// Layers a worker refuses to serve without, unless told otherwise: all but the cgroup, which
/// needs a delegated hierarchy many hosts do not give (the pid namespace already ends every
/// process of a task, and the watchdog caps memory and processes), and the storage, which
/// needs a worker running as root (a task's directory is then a plain one, its removal
/// bounded by `crate::process::task_dir::REMOVAL_BUDGET`; its /tmp and /dev/shm stay bounded).
pub const DEFAULT_REQUIRED: [SandboxLayer; 6] = [
    SandboxLayer::Network,
    SandboxLayer::Pid,
    SandboxLayer::Mount,
    SandboxLayer::User,
    SandboxLayer::Landlock,
    SandboxLayer::Seccomp,
];

/// Who task children run as when the worker is root, unless told otherwise.
pub const DEFAULT_USER: &str = "nobody";

/// Size of each task's private /dev/shm (CUDA IPC events and torch's shared tensors live
/// there) and of its private /tmp; tmpfs pages count as the task's memory.
pub const DEFAULT_SHM_BYTES: u64 = 8 << 30;
/// Size of each task's private /tmp (see [`DEFAULT_SHM_BYTES`]).
pub const DEFAULT_TMP_BYTES: u64 = 4 << 30;

/// How the sandbox is to be set up, from `CRUCIBLE_SANDBOX*` (what the operator asks; the
/// self-test decides what is in force).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxSettings {
    /// `CRUCIBLE_SANDBOX=off` runs children with none of the layers: for a development host
    /// that cannot give them; every report then says `off`.
    pub enabled: bool,
    /// Layers without which the worker refuses to serve (`CRUCIBLE_SANDBOX_REQUIRE`).
    pub required: BTreeSet<SandboxLayer>,
    /// Users task children run as when the worker is root (`CRUCIBLE_SANDBOX_USERS`, names
    /// or numeric uids): each child takes the least used one, so with as many users as
    /// children at once no two tasks share a uid.
    pub users: Vec<String>,
    /// Size of each task's private /dev/shm (`CRUCIBLE_SANDBOX_SHM_MB`).
    pub shm_bytes: u64,
    /// Size of each task's private /tmp (`CRUCIBLE_SANDBOX_TMP_MB`).
    pub tmp_bytes: u64,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            required: DEFAULT_REQUIRED.into_iter().collect(),
            users: vec![DEFAULT_USER.to_owned()],
            shm_bytes: DEFAULT_SHM_BYTES,
            tmp_bytes: DEFAULT_TMP_BYTES,
        }
    }
}

impl SandboxSettings {
    /// Reads `CRUCIBLE_SANDBOX` (`on`/`off`), `CRUCIBLE_SANDBOX_REQUIRE` (`all`, `none` or a
    /// comma list of layers), `CRUCIBLE_SANDBOX_USERS`, `CRUCIBLE_SANDBOX_SHM_MB`,
    /// `CRUCIBLE_SANDBOX_TMP_MB`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut s = Self::default();
        if let Some(v) = lookup("CRUCIBLE_SANDBOX") {
            s.enabled = match v.trim() {
                "" | "on" | "1" | "true" | "yes" => true,
                "off" | "0" | "false" | "no" => false,
                other => return Err(format!("CRUCIBLE_SANDBOX: {other:?} is neither on nor off")),
            };
        }
        if let Some(v) = lookup("CRUCIBLE_SANDBOX_REQUIRE") {
            s.required = parse_layers(&v)?;
        }
        if let Some(v) = lookup("CRUCIBLE_SANDBOX_USERS") {
            let users: Vec<String> = v
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect();
            if users.is_empty() {
                return Err("CRUCIBLE_SANDBOX_USERS: no user given".to_owned());
            }
            s.users = users;
        }
        for (key, field) in [
            ("CRUCIBLE_SANDBOX_SHM_MB", &mut s.shm_bytes),
            ("CRUCIBLE_SANDBOX_TMP_MB", &mut s.tmp_bytes),
        ] {
            if let Some(v) = lookup(key).filter(|v| !v.trim().is_empty()) {
                let mb: u64 = v
                    .trim()
                    .parse()
                    .map_err(|e| format!("{key}: cannot parse {v:?}: {e}"))?;
                *field = mb.clamp(16, 1 << 20) << 20;
            }
        }
        Ok(s)
    }
}

fn parse_layers(text: &str) -> Result<BTreeSet<SandboxLayer>, String> {
    match text.trim() {
        "all" => return Ok(SandboxLayer::ALL.into_iter().collect()),
        "none" | "" => return Ok(BTreeSet::new()),
        _ => {}
    }
    text.split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            SandboxLayer::from_name(l).ok_or_else(|| {
                let known: Vec<_> = SandboxLayer::ALL.iter().map(|l| l.name()).collect();
                format!(
                    "CRUCIBLE_SANDBOX_REQUIRE: unknown layer {l:?} (known: {}, or all, none)",
                    known.join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<SandboxSettings, String> {
        SandboxSettings::from_lookup(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_require_every_layer_but_the_cgroup() {
        let s = parse(&[]).unwrap();
        assert!(s.enabled);
        assert_eq!(s.required.len(), 6);
        assert!(!s.required.contains(&SandboxLayer::Cgroup));
        assert!(!s.required.contains(&SandboxLayer::Storage));
        assert_eq!(s.users, vec!["nobody"]);
    }

    #[test]
    fn layers_users_and_sizes_parse_and_bad_input_is_named() {
        let s = parse(&[
            ("CRUCIBLE_SANDBOX_REQUIRE", "network, landlock"),
            ("CRUCIBLE_SANDBOX_USERS", "crucible-s0,crucible-s1, 61000"),
            ("CRUCIBLE_SANDBOX_SHM_MB", "512"),
        ])
        .unwrap();
        assert_eq!(
            s.required.into_iter().collect::<Vec<_>>(),
            vec![SandboxLayer::Network, SandboxLayer::Landlock]
        );
        assert_eq!(s.users, vec!["crucible-s0", "crucible-s1", "61000"]);
        assert_eq!(s.shm_bytes, 512 << 20);
        assert_eq!(
            parse(&[("CRUCIBLE_SANDBOX_REQUIRE", "all")])
                .unwrap()
                .required
                .len(),
            8
        );
        assert!(
            parse(&[("CRUCIBLE_SANDBOX_REQUIRE", "none")])
                .unwrap()
                .required
                .is_empty()
        );
        let err = parse(&[("CRUCIBLE_SANDBOX_REQUIRE", "network,chroot")]).unwrap_err();
        assert!(err.contains("chroot") && err.contains("landlock"), "{err}");
        assert!(parse(&[("CRUCIBLE_SANDBOX", "maybe")]).is_err());
        assert!(!parse(&[("CRUCIBLE_SANDBOX", "off")]).unwrap().enabled);
        assert!(parse(&[("CRUCIBLE_SANDBOX_USERS", " , ")]).is_err());
    }
}
