//! The names values have on the wire, for the places that need them as plain strings (metric
//! labels): taken from the serde attributes, so there is no second spelling to keep in step.

use serde::Serialize;

/// The name a unit variant has on the wire: `WorkerState::Idle` → `idle`,
/// `VerdictCode::CudaFault` → `CUDA_FAULT`. Empty for a value that is not a plain string.
pub fn wire_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backend, TaskStatus, Verdict, VerdictCode, WorkerState};

    #[test]
    fn unit_variants_have_their_serde_names() {
        assert_eq!(wire_name(&WorkerState::Unhealthy), "unhealthy");
        assert_eq!(wire_name(&VerdictCode::CudaFault), "CUDA_FAULT");
        assert_eq!(wire_name(&Verdict::Incorrect), "incorrect");
        assert_eq!(wire_name(&Backend::Cuda), Backend::Cuda.as_str());
        assert_eq!(wire_name(&TaskStatus::Failed), "failed");
        assert_eq!(wire_name(&3u32), "", "not a string");
    }
}
