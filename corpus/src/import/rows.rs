//! One published row onto one corpus entry (pure): which columns each dataset reads, the id,
//! backend, description, code and problem hash made of them, and why a row is left out.

use super::table::{Cell, Column, Kind};
use super::{ImportOptions, Skip};
use crate::CorpusEntry;
use crucible_shared::{Backend, MAX_CODE_BYTES, problem_hash};

/// The KernelBook columns read (`dataset_permissive.parquet` / `.json`); the others
/// (`original_triton_code`, `repo_name`, `module_name`, `synthetic`, `licenses`, `stars`,
/// `sha`, `repo_link`) are not.
pub(crate) const KERNELBOOK: &[Column] = &[
    Column {
        name: "uuid",
        kind: Kind::Int,
    },
    Column {
        name: "entry_point",
        kind: Kind::Text,
    },
    Column {
        name: "python_code",
        kind: Kind::Text,
    },
    Column {
        name: "triton_code",
        kind: Kind::Text,
    },
];

/// The Sakana archive columns read (`level_<n>.parquet`); the others (runtimes, the compile
/// speedup, `PyTorch_Code_Functional`, `Max_Diff`, `Error`, the profiles, the index) are not.
pub(crate) const SAKANA: &[Column] = &[
    Column {
        name: "Op_Name",
        kind: Kind::Text,
    },
    Column {
        name: "Level_ID",
        kind: Kind::Int,
    },
    Column {
        name: "Task_ID",
        kind: Kind::Int,
    },
    Column {
        name: "Kernel_Name",
        kind: Kind::Text,
    },
    Column {
        name: "CUDA_Code",
        kind: Kind::Text,
    },
    Column {
        name: "PyTorch_Code_Module",
        kind: Kind::Text,
    },
    Column {
        name: "Correct",
        kind: Kind::Bool,
    },
    Column {
        name: "CUDA_Speedup_Native",
        kind: Kind::Float,
    },
];

/// What a row became: an entry, a row left out and why, or bad input in a column.
#[derive(Debug, PartialEq)]
pub(crate) enum Mapped {
    Entry(CorpusEntry),
    Skipped(Skip),
}

/// A column whose cell cannot make an entry, and why.
pub(crate) type BadCell = (&'static str, String);

fn text(cells: &mut [Cell], i: usize) -> String {
    match std::mem::replace(&mut cells[i], Cell::Null) {
        Cell::Text(s) => s,
        _ => String::new(),
    }
}

fn required_int(cells: &[Cell], i: usize, columns: &[Column]) -> Result<i64, BadCell> {
    match cells[i] {
        Cell::Int(v) => Ok(v),
        _ => Err((columns[i].name, "is null".into())),
    }
}

fn too_large(entry: &CorpusEntry) -> bool {
    entry.code.len() > MAX_CODE_BYTES || entry.description.len() > MAX_CODE_BYTES
}

/// A KernelBook row: `kernelbook/<uuid>`, Triton, described by its PyTorch module
/// (`python_code`, also what its problem hash is of), its code `triton_code` as published (the
/// module defining `<entry_point>New`).
pub(crate) fn kernelbook(mut cells: Vec<Cell>) -> Result<Mapped, BadCell> {
    let uuid = required_int(&cells, 0, KERNELBOOK)?;
    let entry_point = text(&mut cells, 1);
    let python = text(&mut cells, 2);
    let code = text(&mut cells, 3);
    if code.trim().is_empty() {
        return Ok(Mapped::Skipped(Skip::NoCode));
    }
    let has_source = !python.trim().is_empty();
    let entry = CorpusEntry {
        id: format!("kernelbook/{uuid}"),
        backend: Backend::Triton,
        problem_hash: has_source.then(|| problem_hash(&python)),
        description: if has_source { python } else { entry_point },
        code,
    };
    Ok(if too_large(&entry) {
        Mapped::Skipped(Skip::TooLarge)
    } else {
        Mapped::Entry(entry)
    })
}

/// A Sakana archive row: `sakana/L<Level_ID>/<Task_ID>/<Kernel_Name>`, CUDA, described by its
/// KernelBench problem (`PyTorch_Code_Module`, also what its problem hash is of), its code the
/// raw `CUDA_Code` as a Python string (see [`sakana_code`]). Rows whose `Correct` is not true
/// are left out unless `options.include_incorrect`; rows below `options.min_speedup` too.
pub(crate) fn sakana(mut cells: Vec<Cell>, options: &ImportOptions) -> Result<Mapped, BadCell> {
    let level = required_int(&cells, 1, SAKANA)?;
    let task = required_int(&cells, 2, SAKANA)?;
    let kernel = text(&mut cells, 3);
    if kernel.trim().is_empty() {
        return Err((SAKANA[3].name, "is null or empty".into()));
    }
    if !matches!(cells[6], Cell::Bool(true)) && !options.include_incorrect {
        return Ok(Mapped::Skipped(Skip::Incorrect));
    }
    if let Some(min) = options.min_speedup {
        match cells[7] {
            Cell::Float(s) if s >= min => {}
            _ => return Ok(Mapped::Skipped(Skip::BelowSpeedup)),
        }
    }
    let cuda = text(&mut cells, 4);
    if cuda.trim().is_empty() {
        return Ok(Mapped::Skipped(Skip::NoCode));
    }
    let Some(code) = sakana_code(level, task, &kernel, &cuda) else {
        return Ok(Mapped::Skipped(Skip::Unquotable));
    };
    let module = text(&mut cells, 5);
    let has_source = !module.trim().is_empty();
    let entry = CorpusEntry {
        id: format!("sakana/L{level}/{task}/{kernel}"),
        backend: Backend::Cuda,
        problem_hash: has_source.then(|| problem_hash(&module)),
        description: if has_source {
            module
        } else {
            text(&mut cells, 0)
        },
        code,
    };
    Ok(if too_large(&entry) {
        Mapped::Skipped(Skip::TooLarge)
    } else {
        Mapped::Entry(entry)
    })
}

/// A Sakana `CUDA_Code` (a raw `.cu` torch extension binding `forward` with `PYBIND11_MODULE`,
/// not a `ModelNew` module) as the code a prompt shows: a Python raw string holding it verbatim,
/// under a comment saying what it is, so the example sits in the prompt's Python block as what
/// a CUDA answer passes to `load_inline`. None when the source holds both `"""` and `'''`.
pub(crate) fn sakana_code(level: i64, task: i64, kernel: &str, cuda: &str) -> Option<String> {
    let quote = ["\"\"\"", "'''"].into_iter().find(|q| !cuda.contains(q))?;
    Some(format!(
        "# The raw CUDA source of a solution (AI CUDA Engineer archive, level {level}, task \
         {task}, kernel {kernel}):\n\
         # a torch extension whose PYBIND11_MODULE binds `forward`; not a ModelNew module. A\n\
         # ModelNew answer builds such a source with torch.utils.cpp_extension.load_inline.\n\
         cuda_source = r{quote}\n{cuda}\n{quote}\n"
    ))
}
