use super::fixtures::{KernelBookRow, SakanaRow, write_kernelbook_parquet, write_sakana_parquet};
use super::rows::{self, Mapped};
use super::table::Cell;
use super::*;
use crucible_shared::{Backend, problem_hash};

const SOFTMAX: &str = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=1)\n";
const ADD: &str = "import torch\nclass Add(torch.nn.Module):\n    def forward(self, a, b):\n        return a + b\n";
const CUDA: &str = "#include <torch/extension.h>\n__global__ void k(float* x) {}\ntorch::Tensor forward(torch::Tensor x) { return x; }\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }";

fn kernelbook_rows() -> Vec<KernelBookRow> {
    let mut no_code = KernelBookRow::new(7, "Gone", ADD, "");
    no_code.triton_code = None;
    let mut no_source = KernelBookRow::new(8, "Bare", ADD, "@triton.jit\ndef k(): pass\n");
    no_source.python_code = None;
    vec![
        KernelBookRow::new(0, "Add", ADD, "import triton\nclass AddNew: pass\n"),
        no_code,
        no_source,
    ]
}

fn sakana_rows() -> Vec<SakanaRow> {
    let row = |task, kernel: &str, correct| {
        SakanaRow::new(1, task, "23_Softmax", kernel, SOFTMAX, CUDA, correct)
    };
    let mut slow = row(23, "slow_base", true);
    slow.CUDA_Speedup_Native = Some(0.3);
    vec![
        row(23, "softmax_base", true),
        row(23, "softmax_base", true),
        row(23, "broken_base", false),
        slow,
    ]
}

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn import(
    dataset: Dataset,
    path: &Path,
    options: &ImportOptions,
) -> (Vec<CorpusEntry>, FileReport) {
    let (entries, mut reports) = import_files(&[(dataset, path.to_owned())], options).unwrap();
    (entries, reports.remove(0))
}

fn import_error(dataset: Dataset, path: &Path) -> String {
    import_files(&[(dataset, path.to_owned())], &ImportOptions::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn kernelbook_parquet_rows_become_triton_entries_of_their_module() {
    let d = dir();
    let path = d.path().join("dataset_permissive.parquet");
    write_kernelbook_parquet(&path, &kernelbook_rows()).unwrap();
    let (entries, report) = import(Dataset::KernelBook, &path, &ImportOptions::default());
    assert_eq!((report.rows, report.imported, report.renamed), (3, 2, 0));
    assert_eq!(report.skipped, BTreeMap::from([(Skip::NoCode, 1)]));
    assert_eq!(entries[0].id, "kernelbook/0");
    assert_eq!(entries[0].backend, Backend::Triton);
    assert_eq!(entries[0].description, ADD);
    assert_eq!(entries[0].code, "import triton\nclass AddNew: pass\n");
    assert_eq!(entries[0].problem_hash, Some(problem_hash(ADD)));
    // No PyTorch source: described by its entry point, and no hash.
    assert_eq!(entries[1].id, "kernelbook/8");
    assert_eq!(
        (entries[1].description.as_str(), &entries[1].problem_hash),
        ("Bare", &None)
    );
}

#[test]
fn sakana_rows_are_correct_cuda_entries_with_unique_ids_and_the_source_quoted() {
    let d = dir();
    let path = d.path().join("level_1.parquet");
    write_sakana_parquet(&path, &sakana_rows()).unwrap();
    let (entries, report) = import(Dataset::Sakana, &path, &ImportOptions::default());
    let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "sakana/L1/23/softmax_base",
            "sakana/L1/23/softmax_base#2",
            "sakana/L1/23/slow_base"
        ]
    );
    assert_eq!((report.rows, report.imported, report.renamed), (4, 3, 1));
    assert_eq!(report.skipped, BTreeMap::from([(Skip::Incorrect, 1)]));
    let e = &entries[0];
    assert_eq!(e.backend, Backend::Cuda);
    assert_eq!(e.description, SOFTMAX);
    assert_eq!(e.problem_hash, Some(problem_hash(SOFTMAX)));
    assert!(
        e.code
            .contains(&format!("cuda_source = r\"\"\"\n{CUDA}\n\"\"\"\n")),
        "{}",
        e.code
    );
    assert!(
        e.code.starts_with("# The raw CUDA source of a solution"),
        "{}",
        e.code
    );

    let all = ImportOptions {
        include_incorrect: true,
        min_speedup: None,
    };
    assert_eq!(import(Dataset::Sakana, &path, &all).1.imported, 4);
    let fast = ImportOptions {
        include_incorrect: false,
        min_speedup: Some(1.0),
    };
    let (entries, report) = import(Dataset::Sakana, &path, &fast);
    assert_eq!(entries.len(), 2);
    assert_eq!(
        report.skipped,
        BTreeMap::from([(Skip::Incorrect, 1), (Skip::BelowSpeedup, 1)])
    );
}

#[test]
fn the_json_forms_give_the_same_entries_as_parquet() {
    let d = dir();
    let parquet = d.path().join("kb.parquet");
    write_kernelbook_parquet(&parquet, &kernelbook_rows()).unwrap();
    let array: Vec<_> = kernelbook_rows()
        .iter()
        .map(KernelBookRow::to_json)
        .collect();
    let json = d.path().join("dataset_permissive.json");
    std::fs::write(&json, serde_json::to_string_pretty(&array).unwrap()).unwrap();
    let options = ImportOptions::default();
    assert_eq!(
        import(Dataset::KernelBook, &json, &options).0,
        import(Dataset::KernelBook, &parquet, &options).0
    );

    let parquet = d.path().join("level_1.parquet");
    write_sakana_parquet(&parquet, &sakana_rows()).unwrap();
    let lines: String = sakana_rows()
        .iter()
        .map(|r| format!("{}\n\n", r.to_json()))
        .collect();
    let jsonl = d.path().join("level_1.jsonl");
    std::fs::write(&jsonl, lines).unwrap();
    assert_eq!(
        import(Dataset::Sakana, &jsonl, &options).0,
        import(Dataset::Sakana, &parquet, &options).0
    );
}

#[test]
fn bad_input_names_the_file_row_and_column() {
    let d = dir();
    // A Sakana file read as KernelBook: the first column it lacks.
    let sakana = d.path().join("level_1.parquet");
    write_sakana_parquet(&sakana, &sakana_rows()).unwrap();
    let msg = import_error(Dataset::KernelBook, &sakana);
    assert!(
        msg.contains("level_1.parquet column uuid: no such column"),
        "{msg}"
    );

    let mut rows = kernelbook_rows();
    rows[1].uuid = None;
    let kb = d.path().join("kb.parquet");
    write_kernelbook_parquet(&kb, &rows).unwrap();
    let msg = import_error(Dataset::KernelBook, &kb);
    assert!(
        msg.ends_with("kb.parquet row 2 column uuid: is null"),
        "{msg}"
    );

    let mut record = kernelbook_rows()[0].to_json();
    record["uuid"] = "zero".into();
    let json = d.path().join("kb.json");
    std::fs::write(&json, format!("[{record}]")).unwrap();
    let msg = import_error(Dataset::KernelBook, &json);
    assert!(
        msg.ends_with("kb.json row 1 column uuid: is not an integer"),
        "{msg}"
    );

    let mut record = sakana_rows()[0].to_json();
    record.as_object_mut().unwrap().remove("Correct");
    let jsonl = d.path().join("l1.jsonl");
    std::fs::write(
        &jsonl,
        format!("{}\n{record}\n", sakana_rows()[0].to_json()),
    )
    .unwrap();
    let msg = import_error(Dataset::Sakana, &jsonl);
    assert!(
        msg.ends_with("l1.jsonl line 2 column Correct: missing"),
        "{msg}"
    );

    let mut rows = sakana_rows();
    rows[0].Kernel_Name = None;
    write_sakana_parquet(&sakana, &rows).unwrap();
    let msg = import_error(Dataset::Sakana, &sakana);
    assert!(
        msg.ends_with("row 1 column Kernel_Name: is null or empty"),
        "{msg}"
    );

    let text = d.path().join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    assert!(import_error(Dataset::Sakana, &text).contains("neither parquet nor JSON"));
    let bytes = std::fs::read(&kb).unwrap();
    std::fs::write(&kb, &bytes[..bytes.len() / 2]).unwrap();
    assert!(import_error(Dataset::KernelBook, &kb).contains("not a readable parquet file"));
    std::fs::write(&json, "[{\"uuid\": 1,").unwrap();
    assert!(import_error(Dataset::KernelBook, &json).contains("not a JSON array of records"));
}

#[test]
fn rows_map_onto_entries_by_their_cells() {
    let text = |s: &str| Cell::Text(s.into());
    let kb = |code: &str| vec![Cell::Int(5), text("Add"), text(ADD), text(code)];
    assert!(matches!(
        rows::kernelbook(kb("  \n")),
        Ok(Mapped::Skipped(Skip::NoCode))
    ));
    let huge = "x".repeat(crucible_shared::MAX_CODE_BYTES + 1);
    assert_eq!(
        rows::kernelbook(kb(&huge)),
        Ok(Mapped::Skipped(Skip::TooLarge))
    );
    let sakana = |correct: Cell, speedup: Cell| {
        vec![
            text("23_Softmax"),
            Cell::Int(2),
            Cell::Int(40),
            text("k_base"),
            text(CUDA),
            text(""),
            correct,
            speedup,
        ]
    };
    let options = ImportOptions::default();
    let Ok(Mapped::Entry(e)) = rows::sakana(sakana(Cell::Bool(true), Cell::Null), &options) else {
        panic!("a correct row is an entry");
    };
    // No PyTorch source: described by the op's name.
    assert_eq!(
        (e.id.as_str(), e.description.as_str()),
        ("sakana/L2/40/k_base", "23_Softmax")
    );
    assert_eq!(e.problem_hash, None);
    assert_eq!(
        rows::sakana(sakana(Cell::Null, Cell::Null), &options),
        Ok(Mapped::Skipped(Skip::Incorrect))
    );
    let fast = ImportOptions {
        include_incorrect: true,
        min_speedup: Some(1.0),
    };
    assert_eq!(
        rows::sakana(sakana(Cell::Null, Cell::Null), &fast),
        Ok(Mapped::Skipped(Skip::BelowSpeedup))
    );
    assert!(matches!(
        rows::sakana(sakana(Cell::Null, Cell::Float(1.5)), &fast),
        Ok(Mapped::Entry(_))
    ));

    let quoted = rows::sakana_code(1, 2, "k", "const char* s = \"\"\"\"\";").unwrap();
    assert!(quoted.contains("cuda_source = r'''\n"), "{quoted}");
    assert_eq!(rows::sakana_code(1, 2, "k", "\"\"\" '''"), None);
}

#[test]
fn ids_taken_get_the_next_free_number() {
    let mut taken = HashMap::new();
    let mut ids: Vec<String> = ["a", "a#2", "a", "a"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let renamed: Vec<bool> = ids.iter_mut().map(|id| unique_id(id, &mut taken)).collect();
    assert_eq!(ids, ["a", "a#2", "a#3", "a#4"]);
    assert_eq!(renamed, [false, false, true, true]);
}
