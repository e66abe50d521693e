//! What the node keeps between tasks: built extensions and Triton kernels (`build_cache`),
//! the key of a reference timing (`reference_cache`), the precompiled headers (`pch`).
//!
//! May import: `child` (the protocol's reports, the harness's sources), `device`.

pub mod build_cache;
pub mod pch;
pub mod reference_cache;
