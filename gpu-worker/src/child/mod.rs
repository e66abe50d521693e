//! One child process and what it speaks: starting and supervising it (`supervisor`, its
//! gate), the warm template that forks it (`template`), the strict parser of its result pipe
//! (`protocol`) and the embedded Python harness it runs (`harness`). Nothing here knows what a
//! task is.
//!
//! May import: `process`, `sandbox`.

pub mod harness;
pub mod protocol;
pub mod supervisor;
pub mod template;
