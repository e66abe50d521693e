//! The worker's processes and directories, below everything that runs a child: the limits
//! a child gets (`limits`), the steps a forked child takes before exec (`isolation`), the
//! `/proc` watchdog, the task directory (its removal and bounded space), the owner files of
//! the directories a worker makes and the start-up sweep of those a dead worker left, and the
//! cores each child is pinned to, and the lent device cores taken back while the device times.
//!
//! May import: nothing else of the crate (`scripts/check_layout.py` checks every folder's rule).

pub mod cores;
pub mod dir_owner;
pub(crate) mod isolation;
pub mod lending;
pub mod limits;
pub mod sweep;
pub mod task_dir;
pub mod watchdog;
