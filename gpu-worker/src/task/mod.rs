//! A task's stages, each a child run end to end: the CPU stage (`prepare`) and the device
//! stage (`evaluation`), the stage directory and command line (`stage`), the typed
//! `spec.json` (`spec`), one budget for both stages (`budget`), how a child's end reads
//! (`verdict`); and the start-up self-test of the sandbox, a whole child run like a task's
//! stage (`sandbox_selftest`).
//!
//! May import: `process`, `sandbox`, `child`, `cache`, `config`, `device`, `metrics`.

pub mod budget;
pub mod evaluation;
pub mod prepare;
pub mod sandbox_selftest;
pub mod spec;
pub mod stage;
pub mod verdict;
