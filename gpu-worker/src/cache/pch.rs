//! The node's precompiled headers of `torch/extension.h`, which halve the compile of a
//! candidate's `load_inline` bindings file (`main.cpp`) without changing what it builds (a CUDA
//! build's wall time is nvcc's `cuda.cu`, which no precompiled header reaches: docs/BENCHMARKS.md,
//! "CUDA builds"). On where the compile pool is, unless `CRUCIBLE_PCH=0`.
//!
//! torch starts every extension's `main.cpp` with `#include <torch/extension.h>`, and most of
//! that translation unit's compile is the header. GCC looks for `torch/extension.h.gch` in each
//! include directory before the header and uses it only when the same compiler made it with
//! the same flags; otherwise it goes on to the header itself. The worker (never a candidate)
//! makes one such file per variant of `extra_cflags` ([`DEFAULT_VARIANTS`]) with
//! `harness/pch.py`, which takes torch's own command line for `main.cpp`; the harness's
//! `load_inline` stand-in puts the matching variant's directory first on the include path of
//! the compile and leaves the build's cache key as it was (builds.py, `ExtensionBuilds`).
//!
//! The directory is written by the worker's user, renamed into place whole per variant and only
//! ever readable by children (it is among the sandbox's read-only directories), so no
//! candidate can put a header of its own in another's build. Several workers of a node share
//! it: a variant made by one is used by all.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// The variants every GPU worker makes at start: no flags, and `-O3`, the flags models write
/// most. A build that asks for other flags compiles the header as before.
pub const DEFAULT_VARIANTS: &[&str] = &["", "-O3"];

/// The node's precompiled headers under the build cache directory.
pub fn dir(build_cache_dir: &Path) -> PathBuf {
    build_cache_dir.join("pch")
}

/// Makes the directory (before the sandbox lists its read-only directories, which skips
/// those that do not exist).
pub fn prepare(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// Makes every variant of [`DEFAULT_VARIANTS`] missing under `dir` with the children's
/// interpreter (about half a minute of one core each, 29 s on the 4×H200; once per node and
/// torch; builds meanwhile compile the header themselves). Logs what it made; a failure only means slower builds.
pub async fn build(python: PathBuf, dir: PathBuf) {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&python);
    command
        .arg("-c")
        .arg(crate::child::harness::PCH_SOURCE)
        .arg(&dir)
        .arg("--with-cuda")
        .args(DEFAULT_VARIANTS.iter().map(|v| format!("--cflags={v}")))
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    match command.output().await {
        Ok(out) => {
            let report = String::from_utf8_lossy(&out.stdout);
            if out.status.success() {
                tracing::info!(dir = %dir.display(), took_s = started.elapsed().as_secs(), variants = %report.trim(), "precompiled headers ready");
            } else {
                let stderr = String::from_utf8_lossy(&out.stderr);
                tracing::warn!(dir = %dir.display(), variants = %report.trim(), stderr = %stderr.trim(), "precompiled headers not all made: load_inline builds compile torch/extension.h themselves");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, python = %python.display(), "precompiled headers not made")
        }
    }
}
