//! The plan a task child enters (spec.json's `sandbox`, read by harness/sandbox.py): which
//! namespaces, who it becomes, its cgroups, its private mounts, the Landlock ruleset it was
//! handed and the seccomp programs. Built here from the layers in force; pure.

use super::identity::Identity;
use super::paths::PrivateMount;
use crucible_shared::SandboxLayer;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The descriptor number the Landlock ruleset has in the child.
pub const RULESET_FD: i32 = 5;

/// The sandbox of one child as harness/sandbox.py enters it: serialised into the `sandbox` of
/// its `spec.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// `setuid` (root worker: become `uid`/`gid`), `userns` (keep the worker's ids in a user
    /// namespace, drop every capability) or `none` (no identity change available).
    pub identity: &'static str,
    /// The uid the child runs as (mapped to itself in a user namespace).
    pub uid: u32,
    /// The gid the child runs as.
    pub gid: u32,
    /// Namespaces to unshare, in order (`user` first when present).
    pub namespaces: Vec<&'static str>,
    /// `cgroup.procs` files the child writes itself into, first of all.
    pub cgroup_procs: Vec<PathBuf>,
    /// The cores the child pins itself to next, before it starts a thread (`crate::process::cores`);
    /// the seccomp filter keeps it there. Empty: left as inherited.
    pub cpus: Vec<usize>,
    /// Whether it then drops to `SCHED_IDLE` with `RLIMIT_NICE` 0, so that it never takes a
    /// core from another thread (a CPU stage on lent device cores, `crate::process::cores`).
    pub idle_priority: bool,
    /// Fresh tmpfs mounts in the child's mount namespace (its /tmp and /dev/shm).
    pub private_mounts: Vec<PrivateMount>,
    /// The Landlock ruleset to restrict itself with; `None` when the layer is not in force.
    pub landlock: Option<LandlockPlan>,
    /// The seccomp programs of the judge and the runner; `None` when the layer is not in force.
    pub seccomp: Option<SeccompPlan>,
}

/// The Landlock ruleset the child inherits, and the rights it adds for its own mounts (paths
/// that exist only once they are mounted, so the worker cannot add them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LandlockPlan {
    /// Its descriptor in the child ([`RULESET_FD`]).
    pub fd: i32,
    /// Rights for the child's own writable mounts (/tmp, /dev/shm).
    pub rw_access: u64,
    /// Rights for its fresh /proc.
    pub proc_access: u64,
}

/// Base64 classic-BPF programs, installed in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeccompPlan {
    /// The judge's filters, installed after its Landlock domain.
    pub judge: Vec<String>,
    /// The runner's, added on top of the judge's (stricter: no `SIGKILL` sent).
    pub runner: Vec<String>,
}

/// What the plan is built from.
pub(crate) struct PlanInputs<'a> {
    /// The layers in force.
    pub active: &'a BTreeSet<SandboxLayer>,
    /// Who the child becomes.
    pub identity: &'a Identity,
    /// The `cgroup.procs` files of the child's cgroup.
    pub cgroup_procs: Vec<PathBuf>,
    /// The cores it runs on.
    pub cpus: Vec<usize>,
    /// Whether at idle priority.
    pub idle_priority: bool,
    /// The private tmpfs mounts.
    pub private_mounts: Vec<PrivateMount>,
    /// The ruleset, when Landlock is in force.
    pub landlock: Option<LandlockPlan>,
    /// The programs, when seccomp is in force.
    pub seccomp: Option<SeccompPlan>,
}

/// The plan for the layers in force. A pid namespace only with a mount namespace (CUDA needs
/// a /proc of its own pid namespace, measured on the H100); a user namespace whenever an
/// unprivileged worker asks for any namespace (it could not make them otherwise).
pub(crate) fn build(inputs: PlanInputs<'_>) -> Plan {
    let on = |l| inputs.active.contains(&l);
    let (uid, gid) = inputs.identity.ids();
    let userns = matches!(inputs.identity, Identity::Namespace { .. });
    let mut namespaces = Vec::new();
    if userns && on(SandboxLayer::User) {
        namespaces.push("user");
    }
    if on(SandboxLayer::Mount) {
        namespaces.extend(["mount", "ipc"]);
        if on(SandboxLayer::Pid) {
            namespaces.push("pid");
        }
    }
    if on(SandboxLayer::Network) {
        namespaces.push("network");
    }
    Plan {
        identity: match (on(SandboxLayer::User), userns) {
            (false, _) => "none",
            (true, false) => "setuid",
            (true, true) => "userns",
        },
        uid,
        gid,
        namespaces,
        cgroup_procs: if on(SandboxLayer::Cgroup) {
            inputs.cgroup_procs
        } else {
            Vec::new()
        },
        cpus: inputs.cpus,
        idle_priority: inputs.idle_priority,
        private_mounts: if on(SandboxLayer::Mount) {
            inputs.private_mounts
        } else {
            Vec::new()
        },
        landlock: inputs.landlock.filter(|_| on(SandboxLayer::Landlock)),
        seccomp: inputs.seccomp.filter(|_| on(SandboxLayer::Seccomp)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(active: &[SandboxLayer], identity: Identity) -> Plan {
        let active: BTreeSet<_> = active.iter().copied().collect();
        build(PlanInputs {
            active: &active,
            identity: &identity,
            cgroup_procs: vec!["/sys/fs/cgroup/x/cgroup.procs".into()],
            cpus: vec![2, 3],
            idle_priority: false,
            private_mounts: Vec::new(),
            landlock: Some(LandlockPlan {
                fd: RULESET_FD,
                rw_access: 1,
                proc_access: 1,
            }),
            seccomp: Some(SeccompPlan {
                judge: vec!["AA==".into()],
                runner: vec![],
            }),
        })
    }

    #[test]
    fn a_root_worker_with_every_layer_gets_namespaces_a_user_and_the_filters() {
        let nobody = Identity::User {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
        };
        let p = plan(&SandboxLayer::ALL, nobody);
        assert_eq!(p.identity, "setuid");
        assert_eq!(p.uid, 65534);
        assert_eq!(p.namespaces, vec!["mount", "ipc", "pid", "network"]);
        assert_eq!(p.cgroup_procs.len(), 1);
        assert!(p.landlock.is_some() && p.seccomp.is_some());
    }

    #[test]
    fn an_unprivileged_worker_unshares_a_user_namespace_first_and_layers_off_are_left_out() {
        let own = Identity::Namespace {
            uid: 1000,
            gid: 1000,
        };
        let p = plan(
            &[SandboxLayer::User, SandboxLayer::Network, SandboxLayer::Pid],
            own.clone(),
        );
        assert_eq!(p.identity, "userns");
        assert_eq!(
            p.namespaces,
            vec!["user", "network"],
            "no pid namespace without a mount namespace for its /proc"
        );
        assert!(p.cgroup_procs.is_empty() && p.landlock.is_none() && p.seccomp.is_none());
        assert_eq!(plan(&[], own).identity, "none");
    }
}
