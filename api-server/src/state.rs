//! What every handler shares. Only handles and read-only configuration: the broker holds the
//! state.

use crate::auth::Auth;
use crate::metrics::Metrics;
use crate::problems::ProblemRegistry;
use crucible_task_manager::Broker;
use std::sync::Arc;

/// The handles every handler gets (cloned per request: all behind `Arc`).
#[derive(Clone)]
pub struct AppState {
    /// The task queue: every read and write of tasks, batches, workers and tenants.
    pub broker: Arc<dyn Broker>,
    /// This replica's metrics.
    pub metrics: Arc<Metrics>,
    /// Problems requests may name by level and id; empty when none was configured.
    pub problems: Arc<ProblemRegistry>,
    /// Who may call what (`auth.rs`).
    pub auth: Arc<Auth>,
}

impl AppState {
    /// State with fresh metrics and no problem registry.
    pub fn new(broker: Arc<dyn Broker>, auth: Auth) -> Self {
        Self {
            broker,
            metrics: Arc::new(Metrics::new()),
            problems: Arc::new(ProblemRegistry::default()),
            auth: Arc::new(auth),
        }
    }

    /// The same state serving this problem registry.
    pub fn with_problems(mut self, problems: ProblemRegistry) -> Self {
        self.problems = Arc::new(problems);
        self
    }
}
