//! The Python harness, embedded in the binary so a node needs only this binary and a Python
//! that has torch.

/// Source of `gpu-worker/harness/harness.py`, the entry point.
pub const HARNESS_SOURCE: &str = include_str!("../../harness/harness.py");

/// The file name the harness gets inside a task directory.
pub const HARNESS_FILE: &str = "harness.py";

/// Source of `gpu-worker/harness/template.py`, the warm fork server.
pub const TEMPLATE_SOURCE: &str = include_str!("../../harness/template.py");

/// The file name the template gets inside its directory.
pub const TEMPLATE_FILE: &str = "template.py";

/// Source of `gpu-worker/harness/pch.py`, which builds the node's precompiled headers
/// ([`crate::cache::pch`]); run by the worker, never inside a task.
pub const PCH_SOURCE: &str = include_str!("../../harness/pch.py");

/// Its file name in the harness directory.
pub const PCH_FILE: &str = "pch.py";

/// The harness's own modules, written next to `harness.py`, which loads them from its own
/// directory (its `MODULES`), bottom layer first as `tests/harness/check_layers.py` declares:
/// `trusted.py` (functions captured before any candidate code runs), `errors.py`,
/// `contexts.py` (the hardware queues a CUDA context is made with), `channel.py` (fd 3 and the gate), `spec.py` (the typed spec.json), `tensors.py`,
/// `transport.py` (messages and tensors between the judge and the candidate's process),
/// `sandbox.py` (entering the sandbox plan), `screen.py` (static screening before the
/// candidate is imported), `selftest.py` (the start-up probes), `builds.py` (load_inline),
/// `integrity.py`, `triton_aot.py` (the CPU stage's dry run that compiles Triton kernels ahead),
/// `memory.py` (the footprint a device child reports before it is let go), `timing_check.py` (the
/// judge's own check of the candidate's claimed times and its quiet-device probe), the judge's stages
/// (`judge_*.py`), `runner.py` (everything that runs in the candidate's process) and
/// `judge.py`.
pub const HARNESS_MODULES: [(&str, &str); 25] = [
    ("trusted.py", include_str!("../../harness/trusted.py")),
    ("errors.py", include_str!("../../harness/errors.py")),
    ("contexts.py", include_str!("../../harness/contexts.py")),
    (
        "nvcc_overlap.py",
        include_str!("../../harness/nvcc_overlap.py"),
    ),
    ("channel.py", include_str!("../../harness/channel.py")),
    ("spec.py", include_str!("../../harness/spec.py")),
    ("tensors.py", include_str!("../../harness/tensors.py")),
    ("transport.py", include_str!("../../harness/transport.py")),
    ("sandbox.py", include_str!("../../harness/sandbox.py")),
    ("screen.py", include_str!("../../harness/screen.py")),
    ("selftest.py", include_str!("../../harness/selftest.py")),
    ("builds.py", include_str!("../../harness/builds.py")),
    ("integrity.py", include_str!("../../harness/integrity.py")),
    ("triton_aot.py", include_str!("../../harness/triton_aot.py")),
    ("memory.py", include_str!("../../harness/memory.py")),
    (
        "timing_check.py",
        include_str!("../../harness/timing_check.py"),
    ),
    (
        "judge_setup.py",
        include_str!("../../harness/judge_setup.py"),
    ),
    ("judge_load.py", include_str!("../../harness/judge_load.py")),
    (
        "judge_correctness.py",
        include_str!("../../harness/judge_correctness.py"),
    ),
    (
        "judge_verify.py",
        include_str!("../../harness/judge_verify.py"),
    ),
    (
        "judge_performance.py",
        include_str!("../../harness/judge_performance.py"),
    ),
    (
        "runner_checks.py",
        include_str!("../../harness/runner_checks.py"),
    ),
    (
        "runner_profile.py",
        include_str!("../../harness/runner_profile.py"),
    ),
    ("runner.py", include_str!("../../harness/runner.py")),
    ("judge.py", include_str!("../../harness/judge.py")),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// A module missing here would be missing next to harness.py on every node: the harness
    /// would exit 3 on every task. Every .py in the harness directory is embedded, and in the
    /// order harness.py loads them.
    #[test]
    fn every_harness_module_is_embedded_in_load_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("harness");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("harness dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.ends_with(".py") && n != HARNESS_FILE && n != TEMPLATE_FILE && n != PCH_FILE
            })
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> =
            HARNESS_MODULES.iter().map(|(f, _)| f.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);

        let order: Vec<String> = HARNESS_MODULES
            .iter()
            .map(|(f, _)| format!("\"{}\"", f.trim_end_matches(".py")))
            .collect();
        let start = HARNESS_SOURCE
            .find("MODULES = (")
            .expect("MODULES in harness.py");
        let end = start + HARNESS_SOURCE[start..].find(')').expect("end of MODULES");
        let listed: Vec<String> = HARNESS_SOURCE[start + "MODULES = (".len()..end]
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(listed, order);
    }
}
