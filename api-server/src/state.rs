//! What every handler shares. Only handles: the broker holds the state.

use crate::metrics::Metrics;
use crucible_task_manager::Broker;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub broker: Arc<dyn Broker>,
    pub metrics: Arc<Metrics>,
}

impl AppState {
    pub fn new(broker: Arc<dyn Broker>) -> Self {
        Self {
            broker,
            metrics: Arc::new(Metrics::new()),
        }
    }
}
