//! What every handler shares. Only handles and read-only configuration: the broker holds the
//! state (the one exception, `deliveries`, is this process's own drain).

use crate::auth::Auth;
use crate::deliveries::Deliveries;
use crate::limits::ServeLimits;
use crate::metrics::Metrics;
use crate::problems::ProblemRegistry;
use crate::prompts::config::PromptConfig;
use crucible_task_manager::Broker;
use std::sync::Arc;
use tokio::sync::Semaphore;

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
    /// Timeouts, the connection cap and the request-body budget (`limits`).
    pub limits: Arc<ServeLimits>,
    /// Prompt templates and the RA-ICL corpus (`prompts::config`).
    pub prompts: Arc<PromptConfig>,
    /// Finished tasks answered to clients while this process drains (`deliveries`).
    pub deliveries: Arc<Deliveries>,
    /// This replica's open OpenEnv WebSocket sessions, at most `OPENENV_SESSIONS` (an
    /// upgraded connection leaves the accept loop's connection cap).
    pub openenv_sessions: Arc<Semaphore>,
}

impl AppState {
    /// State with fresh metrics and no problem registry.
    pub fn new(broker: Arc<dyn Broker>, auth: Auth) -> Self {
        Self {
            broker,
            metrics: Arc::new(Metrics::new()),
            problems: Arc::new(ProblemRegistry::default()),
            auth: Arc::new(auth),
            limits: Arc::new(ServeLimits::default()),
            prompts: Arc::new(PromptConfig::default()),
            deliveries: Arc::new(Deliveries::default()),
            openenv_sessions: Arc::new(Semaphore::new(crucible_shared::bounds::OPENENV_SESSIONS)),
        }
    }

    /// The same state serving this problem registry.
    pub fn with_problems(mut self, problems: ProblemRegistry) -> Self {
        self.problems = Arc::new(problems);
        self
    }

    /// The same state making prompts from these templates and this corpus.
    pub fn with_prompts(mut self, prompts: PromptConfig) -> Self {
        self.prompts = Arc::new(prompts);
        self
    }

    /// The same state serving under these limits.
    pub fn with_limits(mut self, limits: ServeLimits) -> Self {
        self.limits = Arc::new(limits);
        self
    }
}
