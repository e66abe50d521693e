//! The Python harness, embedded in the binary so a node needs only this binary and a Python
//! that has torch.

/// Source of `gpu-worker/harness/harness.py`.
pub const HARNESS_SOURCE: &str = include_str!("../harness/harness.py");

/// The file name the harness gets inside a task directory.
pub const HARNESS_FILE: &str = "harness.py";

/// Source of `gpu-worker/harness/template.py`, the warm fork server.
pub const TEMPLATE_SOURCE: &str = include_str!("../harness/template.py");

/// The file name the template gets inside its directory.
pub const TEMPLATE_FILE: &str = "template.py";

/// The harness's own modules, written next to `harness.py`, which loads them from its own
/// directory: `screen.py` (static screening before the candidate is imported),
/// `transport.py` (messages and tensors between the judge and the candidate's process),
/// `sandbox.py` (entering the sandbox plan) and `selftest.py` (the start-up probes).
pub const HARNESS_MODULES: [(&str, &str); 4] = [
    ("screen.py", include_str!("../harness/screen.py")),
    ("transport.py", include_str!("../harness/transport.py")),
    ("sandbox.py", include_str!("../harness/sandbox.py")),
    ("selftest.py", include_str!("../harness/selftest.py")),
];
