//! The RL environment over evaluations: what a trainer's rollouts, episodes and rewards mean,
//! written once for the API, the client and the CLI. Wire types (serde + utoipa schemas) with
//! the pure rules beside them: completion parsing, reward profiles and feedback (`reward`),
//! rollout batches and the step from finished tasks to scored rollouts (`rollout`), multi-turn
//! episodes' records, turns and next prompts (`episode`), discounted returns and early stop
//! (`returns`), prompts and their templates (`prompt`), problem sets' splits and batches
//! (`problem_set`), checkpoint reports (`report`), and the trainer protocols spoken over
//! episodes and evaluations: OpenEnv sessions (`openenv`) and KernelGYM's evaluation API
//! (`kernelgym`). Nothing here does I/O; the evaluation service's own types (requests, tasks,
//! verdicts, bounds, errors) are `crucible-shared`, which this crate builds on and never the
//! other way round.

pub mod episode;
pub mod kernelgym;
pub mod openenv;
pub mod problem_set;
pub mod prompt;
pub mod report;
pub mod returns;
pub mod reward;
pub mod rollout;
