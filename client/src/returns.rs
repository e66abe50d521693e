//! Multi-turn returns for trainers: the discounted return of each turn and the early-stop
//! rule, re-exported from `crucible_rl::returns` so the client and the server's episodes
//! share one definition.

pub use crucible_rl::returns::{DEFAULT_GAMMA, discounted_returns, stops_early};
