//! The built-in worked examples of one-shot and few-shot prompts: for each described `Model`
//! (`worked/<name>.problem.py`), a solution per backend (`worked/<name>.<backend>.py`), compiled
//! in from files that `scripts/check_worked_examples.py` checks (the Triton ones run against
//! their Model on CPU through the Triton interpreter).

use crucible_rl::prompt::WorkedExample;
use crucible_shared::Backend;

/// One worked problem: its id, its reference and its solutions.
struct Worked {
    name: &'static str,
    problem: &'static str,
    triton: &'static str,
    cuda: &'static str,
}

/// In the order prompts take them: elementwise first (one-shot), then a row reduction, then a
/// matmul with a fused epilogue.
const WORKED: [Worked; 3] = [
    Worked {
        name: "leaky_relu",
        problem: include_str!("worked/leaky_relu.problem.py"),
        triton: include_str!("worked/leaky_relu.triton.py"),
        cuda: include_str!("worked/leaky_relu.cuda.py"),
    },
    Worked {
        name: "row_softmax",
        problem: include_str!("worked/row_softmax.problem.py"),
        triton: include_str!("worked/row_softmax.triton.py"),
        cuda: include_str!("worked/row_softmax.cuda.py"),
    },
    Worked {
        name: "linear_bias_relu",
        problem: include_str!("worked/linear_bias_relu.problem.py"),
        triton: include_str!("worked/linear_bias_relu.triton.py"),
        cuda: include_str!("worked/linear_bias_relu.cuda.py"),
    },
];

/// The first `n` built-in examples written in `backend`, each described by its reference
/// source; ids are `builtin/<name>.<backend>`.
pub fn examples(backend: Backend, n: usize) -> Vec<WorkedExample> {
    WORKED
        .iter()
        .take(n)
        .map(|w| WorkedExample {
            id: format!("builtin/{}.{}", w.name, backend.as_str()),
            backend,
            description: w.problem.to_string(),
            code: match backend {
                Backend::Triton => w.triton,
                Backend::Cuda => w.cuda,
            }
            .to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_rl::prompt::FEW_SHOT_K;

    #[test]
    fn every_backend_has_as_many_examples_as_few_shot_may_ask_for() {
        for backend in [Backend::Triton, Backend::Cuda] {
            let all = examples(backend, usize::MAX);
            assert_eq!(all.len(), FEW_SHOT_K.max as usize);
            for e in &all {
                assert!(e.code.contains("class ModelNew"), "{}", e.id);
                assert!(e.description.contains("class Model("), "{}", e.id);
                let marker = match backend {
                    Backend::Triton => "@triton.jit",
                    Backend::Cuda => "load_inline(",
                };
                assert!(e.code.contains(marker), "{} is not {backend:?}", e.id);
            }
        }
        assert_eq!(examples(Backend::Cuda, 1)[0].id, "builtin/leaky_relu.cuda");
    }
}
