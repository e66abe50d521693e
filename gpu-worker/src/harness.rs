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

/// Source of `gpu-worker/harness/screen.py`, the static screening the harness runs before the
/// candidate is imported; written next to `harness.py`, which loads it from its own directory.
pub const SCREEN_SOURCE: &str = include_str!("../harness/screen.py");

/// The file name of the screening module, next to `harness.py`.
pub const SCREEN_FILE: &str = "screen.py";
