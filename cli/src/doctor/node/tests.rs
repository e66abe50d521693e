use super::*;
use crate::doctor::report::Level;
use crucible_gpu_worker::device::report::GpuReport;

fn levels(checks: &[Check]) -> Vec<(&str, Level)> {
    checks.iter().map(|c| (c.name.as_str(), c.level)).collect()
}

fn torch_report() -> PythonReport {
    PythonReport {
        python: "3.11.7".into(),
        torch: Some("2.5.1+cu124".into()),
        torch_cuda: Some("12.4".into()),
        cuda_available: true,
        cuda_devices: 2,
        triton: Some("3.1.0".into()),
        ..PythonReport::default()
    }
}

fn gpu(index: u32) -> GpuReport {
    GpuReport {
        index,
        name: "NVIDIA H100 80GB HBM3".into(),
        persistence: Some(true),
        sm_clock_mhz: Some(1980),
        sm_max_mhz: Some(1980),
        sm_app_mhz: Some(1755),
        slowdowns: Vec::new(),
    }
}

fn two_gpus() -> Result<NvmlReport, String> {
    Ok(NvmlReport {
        driver: "550.54.15".into(),
        cuda_driver: Some(12040),
        gpus: vec![gpu(0), gpu(1)],
    })
}

fn probes_ok() -> Vec<(u32, Probe)> {
    vec![(0, Ok("probe ok".into())), (1, Ok("probe ok".into()))]
}

#[test]
fn python_without_torch_or_triton_fails_and_a_home_python_warns_a_worker() {
    let path = Path::new("/opt/crucible/venv/bin/python");
    let good = python_checks(Role::Worker, path, &Ok(torch_report()));
    assert_eq!(
        levels(&good),
        [
            ("python", Level::Ok),
            ("torch", Level::Ok),
            ("triton", Level::Ok)
        ]
    );
    assert!(good[1].detail.contains("CUDA 12.4"), "{}", good[1]);

    let bare = PythonReport {
        python: "3.11.2".into(),
        torch_error: Some("ModuleNotFoundError: No module named 'torch'".into()),
        triton_error: Some("ModuleNotFoundError: No module named 'triton'".into()),
        ..PythonReport::default()
    };
    let checks = python_checks(Role::All, path, &Ok(bare));
    assert_eq!(
        levels(&checks),
        [
            ("python", Level::Ok),
            ("torch", Level::Fail),
            ("triton", Level::Fail)
        ]
    );
    assert!(checks[1].detail.contains("No module named 'torch'"));

    let gone = python_checks(Role::Worker, path, &Err("No such file or directory".into()));
    assert_eq!(levels(&gone), [("python", Level::Fail)]);

    let home = Path::new("/root/.cache/crucible/venv/bin/python");
    assert_eq!(
        python_checks(Role::Worker, home, &Ok(torch_report()))[0].level,
        Level::Warn
    );
    // `crucible up` runs as the user who started it: no unit hides their home.
    assert_eq!(
        python_checks(Role::All, home, &Ok(torch_report()))[0].level,
        Level::Ok
    );
}

#[test]
fn no_gpu_is_a_cpu_worker_warning_not_a_failure() {
    for nvml in [
        Err("nvml: libnvidia-ml.so.1: cannot open shared object file".to_owned()),
        Ok(NvmlReport {
            driver: "550".into(),
            cuda_driver: None,
            gpus: Vec::new(),
        }),
    ] {
        let checks = gpu_checks(&nvml, Some(&torch_report()), &[], false);
        assert_eq!(levels(&checks), [("gpu", Level::Warn)]);
        assert!(
            checks[0].detail.starts_with("no GPU: cpu worker"),
            "{}",
            checks[0]
        );
    }
}

#[test]
fn healthy_gpus_report_driver_clocks_and_persistence() {
    let checks = gpu_checks(&two_gpus(), Some(&torch_report()), &probes_ok(), true);
    assert_eq!(
        levels(&checks),
        [
            ("driver", Level::Ok),
            ("cuda", Level::Ok),
            ("gpu 0", Level::Ok),
            ("gpu 1", Level::Ok)
        ]
    );
    assert_eq!(checks[0].detail, "NVIDIA 550.54.15 (CUDA 12.4)");
    assert!(checks[2].detail.contains("persistence on"), "{}", checks[2]);
    assert!(
        checks[2]
            .detail
            .contains("SM clock 1980/1980 MHz, applications 1755"),
        "{}",
        checks[2]
    );
}

#[test]
fn a_failed_probe_fails_and_settings_that_spoil_timings_warn() {
    let mut report = two_gpus().unwrap();
    report.gpus[0].persistence = Some(false);
    report.gpus[1].slowdowns = vec!["thermal (hardware)"];
    let checks = gpu_checks(
        &Ok(report.clone()),
        Some(&torch_report()),
        &probes_ok(),
        true,
    );
    let by_name = |n: &str| checks.iter().find(|c| c.name == n).unwrap().clone();
    assert_eq!(by_name("gpu 0").level, Level::Warn);
    assert!(by_name("gpu 0").fix.unwrap().contains("nvidia-smi -pm 1"));
    assert_eq!(by_name("gpu 1").level, Level::Warn);
    assert!(
        by_name("gpu 1")
            .detail
            .contains("clocks held down: thermal (hardware)")
    );

    let probes = vec![
        (0, Ok("ok".into())),
        (1, Err("cuda probe failed: context: OOM".into())),
    ];
    let checks = gpu_checks(&Ok(report), Some(&torch_report()), &probes, false);
    let by_name = |n: &str| checks.iter().find(|c| c.name == n).unwrap().clone();
    assert_eq!(by_name("gpu 1").level, Level::Fail);
    assert!(by_name("gpu 1").detail.contains("context: OOM"));
    assert_eq!(by_name("nvidia-uvm").level, Level::Warn);
}

#[test]
fn torch_that_sees_no_gpu_on_a_gpu_node_fails() {
    let cpu_torch = PythonReport {
        torch_cuda: None,
        cuda_available: false,
        cuda_devices: 0,
        ..torch_report()
    };
    let checks = gpu_checks(&two_gpus(), Some(&cpu_torch), &probes_ok(), true);
    assert_eq!(checks[1].name, "cuda");
    assert_eq!(checks[1].level, Level::Fail);
    let one = PythonReport {
        cuda_devices: 1,
        ..torch_report()
    };
    assert_eq!(
        gpu_checks(&two_gpus(), Some(&one), &probes_ok(), true)[1].level,
        Level::Warn
    );
}

#[test]
fn compilers_are_required_and_nvcc_only_with_a_gpu() {
    let all = Toolchain {
        path: "/v/bin:/usr/bin".into(),
        cxx: Some("/usr/bin/c++".into()),
        ninja: Some("/v/bin/ninja".into()),
        nvcc: Some("/usr/local/cuda/bin/nvcc".into()),
    };
    assert!(
        toolchain_checks(&all, true)
            .iter()
            .all(|c| c.level == Level::Ok)
    );
    let none = Toolchain {
        path: "/usr/bin".into(),
        ..Toolchain::default()
    };
    assert_eq!(
        levels(&toolchain_checks(&none, true)),
        [
            ("c++", Level::Fail),
            ("ninja", Level::Fail),
            ("nvcc", Level::Fail)
        ]
    );
    let cpu = toolchain_checks(&none, false);
    assert_eq!(cpu[2].level, Level::Warn);
    assert!(cpu[2].detail.contains("no GPU: cpu worker"));
    assert!(
        cpu[0].detail.contains("/usr/bin"),
        "the PATH searched is named"
    );
}

#[test]
fn disk_space_fails_below_a_gibibyte_and_warns_below_ten() {
    let disk = |available: u64, at: &str| DiskSpace {
        dir: "/var/lib/crucible-worker/gpu0".into(),
        measured: Ok((at.into(), available, 100 << 30)),
    };
    let here = "/var/lib/crucible-worker/gpu0";
    assert_eq!(
        disk_check("work dir", "CRUCIBLE_WORK_DIR", &disk(50 << 30, here)).level,
        Level::Ok
    );
    assert_eq!(
        disk_check("work dir", "CRUCIBLE_WORK_DIR", &disk(5 << 30, here)).level,
        Level::Warn
    );
    let full = disk_check("work dir", "CRUCIBLE_WORK_DIR", &disk(100 << 20, here));
    assert_eq!(full.level, Level::Fail);
    assert!(full.fix.unwrap().contains("CRUCIBLE_WORK_DIR"));
    let early = disk_check("work dir", "CRUCIBLE_WORK_DIR", &disk(50 << 30, "/var/lib"));
    assert!(early.detail.contains("measured at /var/lib"), "{early}");
    let unknown = DiskSpace {
        dir: "/x".into(),
        measured: Err("EACCES".into()),
    };
    assert_eq!(
        disk_check("build cache", "CRUCIBLE_BUILD_CACHE", &unknown).level,
        Level::Warn
    );
}
