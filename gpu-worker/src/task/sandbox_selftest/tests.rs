//! Tests of [`super`], in a file of their own so that the module stays a readable length.

use super::*;
use crate::child::protocol::{JudgeReport, RunnerReport, SpaceReport, StatusFields};

fn report() -> SelftestReport {
    let status = |uid: &str| -> StatusFields {
        [
            ("Uid", vec![uid; 4]),
            ("CapEff", vec!["0000000000000000"]),
            ("Seccomp", vec!["2"]),
            ("Seccomp_filters", vec!["3"]),
            ("NoNewPrivs", vec!["1"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
        .collect()
    };
    SelftestReport {
        runner: RunnerReport {
            pid: 2,
            status: status("65534"),
            ppid: 1,
            tcp_worker: Some("ECONNREFUSED".into()),
            tcp_socket: "ok".into(),
            read_canary: Some("EACCES".into()),
            write_outside: Some("EACCES".into()),
            visible_pids: vec![1, 2],
            kill_all: "ESRCH".into(),
            ptrace_judge: "EPERM".into(),
            unshare_user: "EPERM".into(),
            sigkill: "EPERM".into(),
            cores: vec![2, 3],
            widen_cores: "EPERM".into(),
            cgroup: "0::/crucible-w1/selftest-abc\n".into(),
            mounts: [("/tmp", "tmpfs"), ("/dev/shm", "tmpfs"), ("/proc", "proc")]
                .into_iter()
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .collect(),
            ipc_sum: None,
            space: SpaceReport {
                bytes: 2 << 30,
                inodes: 1 << 17,
            },
            cgroups_listed: 0,
        },
        judge: JudgeReport {
            pid: 1,
            status: status("65534"),
        },
    }
}

fn targets() -> Targets {
    Targets {
        tcp_port: 1,
        canary_file: "/w/canary".into(),
        canary_dir: "/w".into(),
        uid: Some(65534),
        worker_uid: 0,
        cgroup_name: Some("selftest-abc".into()),
        gpu: false,
        cpus: vec![2, 3],
        space: Some(SpaceLimits {
            bytes: 2 << 30,
            inodes: 1 << 17,
        }),
        cgroups_masked: true,
    }
}

#[test]
fn a_report_where_every_probe_was_refused_proves_every_layer() {
    let all: BTreeSet<_> = SandboxLayer::ALL.into_iter().collect();
    let verdicts = judge_layers(&report(), &all, &targets());
    assert_eq!(verdicts.len(), 8);
    for (layer, v) in verdicts {
        assert!(v.is_ok(), "{layer:?}: {v:?}");
    }
}

#[test]
fn a_probe_that_got_through_fails_its_layer() {
    let all: BTreeSet<_> = SandboxLayer::ALL.into_iter().collect();
    let mut r = report();
    r.runner.tcp_worker = Some("ok".into());
    r.runner.read_canary = Some("ok".into());
    r.runner.visible_pids = (1..40).collect();
    r.runner.sigkill = "ok".into();
    r.runner.widen_cores = "ok".into();
    r.runner.mounts.insert("/tmp".into(), "ext4".into());
    r.runner.status.insert("Uid".into(), vec!["0".into(); 4]);
    r.runner.cgroup = "0::/\n".into();
    r.runner.space.inodes = 1 << 20;
    let verdicts = judge_layers(&r, &all, &targets());
    for layer in SandboxLayer::ALL {
        assert!(verdicts[&layer].is_err(), "{layer:?} should fail");
    }
}

#[test]
fn a_runner_that_left_its_cores_refuses_the_worker_and_widening_them_fails_seccomp() {
    assert!(check_cores(&report(), &targets()).is_ok());
    let mut r = report();
    r.runner.cores = vec![0, 1, 2, 3];
    let why = check_cores(&r, &targets()).unwrap_err();
    assert!(why.contains("cores 0-3 instead of 2-3"), "{why}");
    let mut r = report();
    r.runner.widen_cores = "ok".into();
    let seccomp: BTreeSet<_> = [SandboxLayer::Seccomp].into_iter().collect();
    assert!(judge_layers(&r, &seccomp, &targets())[&SandboxLayer::Seccomp].is_err());
}

#[test]
fn the_mount_layer_hides_the_hosts_cgroups_and_storage_wants_the_asked_space() {
    let both: BTreeSet<_> = [SandboxLayer::Mount, SandboxLayer::Storage]
        .into_iter()
        .collect();
    let mut r = report();
    r.runner.cgroups_listed = 11;
    r.runner.space.bytes += 4096;
    let verdicts = judge_layers(&r, &both, &targets());
    assert!(verdicts[&SandboxLayer::Mount].is_err());
    assert!(
        verdicts[&SandboxLayer::Storage].is_ok(),
        "a page of rounding"
    );
    r.runner.space.bytes = 64 << 30;
    let verdicts = judge_layers(&r, &both, &targets());
    assert!(verdicts[&SandboxLayer::Storage].is_err(), "the host's disk");
}

#[test]
fn only_active_layers_are_judged() {
    let some: BTreeSet<_> = [SandboxLayer::Landlock].into_iter().collect();
    assert_eq!(
        judge_layers(&report(), &some, &targets())
            .keys()
            .collect::<Vec<_>>(),
        vec![&SandboxLayer::Landlock]
    );
}
