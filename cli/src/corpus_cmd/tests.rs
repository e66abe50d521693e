//! `crucible corpus import` as the command line gives it: KernelBook and Sakana files written
//! in their published schemas, imported into one index that is then searched.

use super::*;
use crate::{Cli, Command};
use clap::Parser;
use crucible_corpus::import::fixtures::{
    KernelBookRow, SakanaRow, write_kernelbook_parquet, write_sakana_parquet,
};
use std::path::Path;

const SOFTMAX: &str = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=1)\n\ndef get_inputs():\n    return [torch.randn(16, 16384)]\n";
const MATMUL: &str = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A, B)\n";
const RELU: &str = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n";

fn corpus(args: &[&str]) -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(["crucible", "corpus"].iter().chain(args))?;
    match cli.command {
        Command::Corpus { command } => run(command),
        _ => unreachable!("a corpus command"),
    }
}

fn write_datasets(dir: &Path) -> (String, String) {
    let kb = dir.join("dataset_permissive.parquet");
    let mut no_code = KernelBookRow::new(2, "Model", RELU, "");
    no_code.triton_code = None;
    write_kernelbook_parquet(
        &kb,
        &[
            KernelBookRow::new(
                0,
                "Model",
                SOFTMAX,
                "@triton.jit\ndef softmax_kernel(x): tl.exp(x)\nclass ModelNew: pass\n",
            ),
            KernelBookRow::new(
                1,
                "Model",
                MATMUL,
                "@triton.jit\ndef matmul_kernel(a, b): tl.dot(a, b)\nclass ModelNew: pass\n",
            ),
            no_code,
        ],
    )
    .unwrap();
    let sakana = dir.join("level_1.parquet");
    let cuda = |name: &str| {
        format!(
            "__global__ void {name}_kernel(float* x) {{}}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{}}\n"
        )
    };
    write_sakana_parquet(
        &sakana,
        &[
            SakanaRow::new(
                1,
                23,
                "23_Softmax",
                "softmax_base",
                SOFTMAX,
                &cuda("softmax"),
                true,
            ),
            SakanaRow::new(
                1,
                1,
                "1_Square_matrix_multiplication_",
                "tiled_base",
                MATMUL,
                &cuda("matmul"),
                true,
            ),
            SakanaRow::new(1, 19, "19_ReLU", "relu_base", RELU, &cuda("relu"), false),
        ],
    )
    .unwrap();
    (kb.display().to_string(), sakana.display().to_string())
}

#[test]
fn import_indexes_both_datasets_and_search_finds_each_backend() {
    let dir = tempfile::tempdir().unwrap();
    let (kb, sakana) = write_datasets(dir.path());
    let out = dir.path().join("index");
    let out_arg = out.display().to_string();
    corpus(&[
        "import",
        "--kernelbook",
        &kb,
        "--sakana",
        &sakana,
        "--out",
        &out_arg,
    ])
    .unwrap();

    let index = Corpus::open(&out).unwrap();
    let s = index.summary();
    assert_eq!((s.entries, s.triton, s.cuda), (4, 2, 2));
    let query = ProblemQuery::from_reference(SOFTMAX);
    let ids = |backend, exclude: Option<&str>| -> Vec<String> {
        index
            .search(&query, backend, 3, exclude)
            .unwrap()
            .into_iter()
            .map(|h| h.entry.id)
            .collect()
    };
    assert_eq!(ids(Backend::Triton, None)[0], "kernelbook/0");
    assert_eq!(ids(Backend::Cuda, None)[0], "sakana/L1/23/softmax_base");
    // The problem's own solutions are left out, as a prompt for it leaves them out.
    let own = problem_hash(SOFTMAX);
    assert!(!ids(Backend::Cuda, Some(&own)).contains(&"sakana/L1/23/softmax_base".to_string()));
    assert!(!ids(Backend::Triton, Some(&own)).contains(&"kernelbook/0".to_string()));
    let problem = dir.path().join("23_Softmax.py");
    std::fs::write(&problem, SOFTMAX).unwrap();
    let problem = problem.display().to_string();
    corpus(&[
        "search",
        &out_arg,
        "--reference",
        &problem,
        "--backend",
        "cuda",
        "--exclude-own",
    ])
    .unwrap();

    // Incorrect rows on request.
    corpus(&[
        "import",
        "--sakana",
        &sakana,
        "--out",
        &out_arg,
        "--force",
        "--include-incorrect",
    ])
    .unwrap();
    assert_eq!(Corpus::open(&out).unwrap().summary().cuda, 3);
}

#[test]
fn import_refuses_an_existing_index_and_leaves_nothing_after_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let (kb, sakana) = write_datasets(dir.path());
    let out = dir.path().join("index");
    let out_arg = out.display().to_string();
    corpus(&["import", "--kernelbook", &kb, "--out", &out_arg]).unwrap();
    let err = corpus(&["import", "--kernelbook", &kb, "--out", &out_arg]).unwrap_err();
    assert!(err.to_string().contains("exists already"), "{err}");

    // A Sakana file given as KernelBook: an error naming the file and column, nothing written.
    let fresh = dir.path().join("fresh");
    let fresh_arg = fresh.display().to_string();
    let err = corpus(&["import", "--kernelbook", &kb, &sakana, "--out", &fresh_arg]).unwrap_err();
    assert!(
        err.to_string()
            .contains("level_1.parquet column uuid: no such column"),
        "{err}"
    );
    assert!(!fresh.exists());
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 3, "no partial directory left: {entries:?}");
    // Neither dataset named.
    assert!(corpus(&["import", "--out", &fresh_arg]).is_err());
}
