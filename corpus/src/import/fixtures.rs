//! Files written in exactly the published schemas, for tests and the import benchmark: every
//! column of the published file, of its type, nullable as pandas writes them, Snappy-compressed
//! parquet; and the JSON forms. Not used by the importer itself.

use parquet::basic::Compression;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::parser::parse_message_type;
use serde_json::{Value, json};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

type Fallible = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The schema of KernelBook's `dataset_permissive.parquet` (12 columns).
pub const KERNELBOOK_SCHEMA: &str = "message schema {
  OPTIONAL BYTE_ARRAY entry_point (UTF8);
  OPTIONAL BYTE_ARRAY original_triton_code (UTF8);
  OPTIONAL BYTE_ARRAY python_code (UTF8);
  OPTIONAL BYTE_ARRAY triton_code (UTF8);
  OPTIONAL BYTE_ARRAY repo_name (UTF8);
  OPTIONAL BYTE_ARRAY module_name (UTF8);
  OPTIONAL BOOLEAN synthetic;
  OPTIONAL INT64 uuid;
  OPTIONAL group licenses (LIST) {
    REPEATED group list {
      OPTIONAL BYTE_ARRAY element (UTF8);
    }
  }
  OPTIONAL INT64 stars;
  OPTIONAL BYTE_ARRAY sha (UTF8);
  OPTIONAL BYTE_ARRAY repo_link (UTF8);
}";

/// The schema of the Sakana archive's `level_<n>.parquet` (19 columns).
pub const SAKANA_SCHEMA: &str = "message schema {
  OPTIONAL BYTE_ARRAY Op_Name (UTF8);
  OPTIONAL INT64 Level_ID;
  OPTIONAL INT64 Task_ID;
  OPTIONAL BYTE_ARRAY Kernel_Name (UTF8);
  OPTIONAL DOUBLE CUDA_Runtime;
  OPTIONAL DOUBLE PyTorch_Native_Runtime;
  OPTIONAL DOUBLE PyTorch_Compile_Runtime;
  OPTIONAL DOUBLE CUDA_Speedup_Native;
  OPTIONAL DOUBLE CUDA_Speedup_Compile;
  OPTIONAL BYTE_ARRAY CUDA_Code (UTF8);
  OPTIONAL BYTE_ARRAY PyTorch_Code_Module (UTF8);
  OPTIONAL BYTE_ARRAY PyTorch_Code_Functional (UTF8);
  OPTIONAL BOOLEAN Correct;
  OPTIONAL DOUBLE Max_Diff;
  OPTIONAL BYTE_ARRAY Error (UTF8);
  OPTIONAL BYTE_ARRAY NCU_Profile (UTF8);
  OPTIONAL BYTE_ARRAY Torch_Profile (UTF8);
  OPTIONAL BYTE_ARRAY Clang_Tidy (UTF8);
  OPTIONAL INT64 __index_level_0__;
}";

/// Rows per row group.
const ROW_GROUP: usize = 1024;

/// One KernelBook row.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // each field is the published column of its name
pub struct KernelBookRow {
    pub entry_point: Option<String>,
    pub original_triton_code: Option<String>,
    pub python_code: Option<String>,
    pub triton_code: Option<String>,
    pub repo_name: Option<String>,
    pub module_name: Option<String>,
    pub synthetic: Option<bool>,
    pub uuid: Option<i64>,
    pub licenses: Vec<String>,
    pub stars: Option<i64>,
    pub sha: Option<String>,
    pub repo_link: Option<String>,
}

impl KernelBookRow {
    /// A row of `entry_point`'s module and its Triton module; the metadata made up.
    pub fn new(uuid: i64, entry_point: &str, python_code: &str, triton_code: &str) -> Self {
        Self {
            entry_point: Some(entry_point.into()),
            original_triton_code: Some(format!("# inductor output of {entry_point}\n")),
            python_code: Some(python_code.into()),
            triton_code: Some(triton_code.into()),
            repo_name: Some("example/repo".into()),
            module_name: Some(entry_point.into()),
            synthetic: Some(false),
            uuid: Some(uuid),
            licenses: vec!["MIT".into()],
            stars: Some(3),
            sha: Some("0123456789abcdef0123456789abcdef01234567".into()),
            repo_link: Some("https://github.com/example/repo".into()),
        }
    }

    /// The row as a JSON record (every column).
    pub fn to_json(&self) -> Value {
        json!({
            "entry_point": self.entry_point, "original_triton_code": self.original_triton_code,
            "python_code": self.python_code, "triton_code": self.triton_code,
            "repo_name": self.repo_name, "module_name": self.module_name,
            "synthetic": self.synthetic, "uuid": self.uuid, "licenses": self.licenses,
            "stars": self.stars, "sha": self.sha, "repo_link": self.repo_link,
        })
    }
}

/// One Sakana archive row.
#[derive(Debug, Clone)]
#[allow(non_snake_case, missing_docs)] // each field is the published column of its name
pub struct SakanaRow {
    pub Op_Name: Option<String>,
    pub Level_ID: Option<i64>,
    pub Task_ID: Option<i64>,
    pub Kernel_Name: Option<String>,
    pub CUDA_Runtime: Option<f64>,
    pub PyTorch_Native_Runtime: Option<f64>,
    pub PyTorch_Compile_Runtime: Option<f64>,
    pub CUDA_Speedup_Native: Option<f64>,
    pub CUDA_Speedup_Compile: Option<f64>,
    pub CUDA_Code: Option<String>,
    pub PyTorch_Code_Module: Option<String>,
    pub PyTorch_Code_Functional: Option<String>,
    pub Correct: Option<bool>,
    pub Max_Diff: Option<f64>,
    pub Error: Option<String>,
    pub NCU_Profile: Option<String>,
    pub Torch_Profile: Option<String>,
    pub Clang_Tidy: Option<String>,
    pub __index_level_0__: Option<i64>,
}

impl SakanaRow {
    /// A row of task `task` of `level` (`op_name` as `1_Square_matrix_multiplication_`); the
    /// runtimes and profiles made up.
    pub fn new(
        level: i64,
        task: i64,
        op_name: &str,
        kernel_name: &str,
        module: &str,
        cuda: &str,
        correct: bool,
    ) -> Self {
        Self {
            Op_Name: Some(op_name.into()),
            Level_ID: Some(level),
            Task_ID: Some(task),
            Kernel_Name: Some(kernel_name.into()),
            CUDA_Runtime: correct.then_some(0.5),
            PyTorch_Native_Runtime: Some(0.6),
            PyTorch_Compile_Runtime: Some(0.7),
            CUDA_Speedup_Native: correct.then_some(1.2),
            CUDA_Speedup_Compile: correct.then_some(1.4),
            CUDA_Code: Some(cuda.into()),
            PyTorch_Code_Module: Some(module.into()),
            PyTorch_Code_Functional: Some(format!("# functional form of {op_name}\n")),
            Correct: Some(correct),
            Max_Diff: correct.then_some(1e-5),
            Error: (!correct).then(|| "Max difference too large".into()),
            NCU_Profile: correct.then(|| "{'metrics': {}}".into()),
            Torch_Profile: correct.then(|| "{'aten::mm': {}}".into()),
            Clang_Tidy: Some("{'stdout': '', 'stderr': '', 'errored': False}".into()),
            __index_level_0__: Some(task),
        }
    }

    /// The row as a JSON record (every column).
    pub fn to_json(&self) -> Value {
        json!({
            "Op_Name": self.Op_Name, "Level_ID": self.Level_ID, "Task_ID": self.Task_ID,
            "Kernel_Name": self.Kernel_Name, "CUDA_Runtime": self.CUDA_Runtime,
            "PyTorch_Native_Runtime": self.PyTorch_Native_Runtime,
            "PyTorch_Compile_Runtime": self.PyTorch_Compile_Runtime,
            "CUDA_Speedup_Native": self.CUDA_Speedup_Native,
            "CUDA_Speedup_Compile": self.CUDA_Speedup_Compile, "CUDA_Code": self.CUDA_Code,
            "PyTorch_Code_Module": self.PyTorch_Code_Module,
            "PyTorch_Code_Functional": self.PyTorch_Code_Functional, "Correct": self.Correct,
            "Max_Diff": self.Max_Diff, "Error": self.Error, "NCU_Profile": self.NCU_Profile,
            "Torch_Profile": self.Torch_Profile, "Clang_Tidy": self.Clang_Tidy,
            "__index_level_0__": self.__index_level_0__,
        })
    }
}

enum Col {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
    TextList(Vec<Vec<String>>),
}

fn defs<T>(v: &[Option<T>]) -> Vec<i16> {
    v.iter().map(|x| i16::from(x.is_some())).collect()
}

fn write_col(w: &mut SerializedColumnWriter<'_>, col: Col) -> Fallible {
    match col {
        Col::Text(v) => {
            let d = defs(&v);
            let values: Vec<ByteArray> = v
                .into_iter()
                .flatten()
                .map(|s| s.into_bytes().into())
                .collect();
            w.typed::<ByteArrayType>()
                .write_batch(&values, Some(&d), None)?;
        }
        Col::Int(v) => {
            let d = defs(&v);
            let values: Vec<i64> = v.into_iter().flatten().collect();
            w.typed::<Int64Type>()
                .write_batch(&values, Some(&d), None)?;
        }
        Col::Float(v) => {
            let d = defs(&v);
            let values: Vec<f64> = v.into_iter().flatten().collect();
            w.typed::<DoubleType>()
                .write_batch(&values, Some(&d), None)?;
        }
        Col::Bool(v) => {
            let d = defs(&v);
            let values: Vec<bool> = v.into_iter().flatten().collect();
            w.typed::<BoolType>().write_batch(&values, Some(&d), None)?;
        }
        Col::TextList(v) => {
            // licenses: optional list (def 1 = present), repeated `list` (2), optional element (3).
            let (mut d, mut r, mut values) = (Vec::new(), Vec::new(), Vec::<ByteArray>::new());
            for list in v {
                if list.is_empty() {
                    d.push(1);
                    r.push(0);
                }
                for (i, s) in list.into_iter().enumerate() {
                    d.push(3);
                    r.push(i16::from(i > 0));
                    values.push(s.into_bytes().into());
                }
            }
            w.typed::<ByteArrayType>()
                .write_batch(&values, Some(&d), Some(&r))?;
        }
    }
    Ok(())
}

fn write_parquet<R>(
    path: &Path,
    schema: &str,
    rows: &[R],
    columns: fn(&[R]) -> Vec<Col>,
) -> Fallible {
    let schema = Arc::new(parse_message_type(schema)?);
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer = SerializedFileWriter::new(File::create(path)?, schema, Arc::new(props))?;
    for chunk in rows.chunks(ROW_GROUP) {
        let mut group = writer.next_row_group()?;
        for col in columns(chunk) {
            let mut w = group
                .next_column()?
                .ok_or("more columns than the schema has")?;
            write_col(&mut w, col)?;
            w.close()?;
        }
        group.close()?;
    }
    writer.close()?;
    Ok(())
}

/// Writes `rows` as KernelBook's `dataset_permissive.parquet`.
pub fn write_kernelbook_parquet(path: &Path, rows: &[KernelBookRow]) -> Fallible {
    write_parquet(path, KERNELBOOK_SCHEMA, rows, |rows| {
        let text = |f: fn(&KernelBookRow) -> &Option<String>| {
            Col::Text(rows.iter().map(|r| f(r).clone()).collect())
        };
        vec![
            text(|r| &r.entry_point),
            text(|r| &r.original_triton_code),
            text(|r| &r.python_code),
            text(|r| &r.triton_code),
            text(|r| &r.repo_name),
            text(|r| &r.module_name),
            Col::Bool(rows.iter().map(|r| r.synthetic).collect()),
            Col::Int(rows.iter().map(|r| r.uuid).collect()),
            Col::TextList(rows.iter().map(|r| r.licenses.clone()).collect()),
            Col::Int(rows.iter().map(|r| r.stars).collect()),
            text(|r| &r.sha),
            text(|r| &r.repo_link),
        ]
    })
}

/// Writes `rows` as one of the Sakana archive's `level_<n>.parquet`.
pub fn write_sakana_parquet(path: &Path, rows: &[SakanaRow]) -> Fallible {
    write_parquet(path, SAKANA_SCHEMA, rows, |rows| {
        let text = |f: fn(&SakanaRow) -> &Option<String>| {
            Col::Text(rows.iter().map(|r| f(r).clone()).collect())
        };
        let float = |f: fn(&SakanaRow) -> Option<f64>| Col::Float(rows.iter().map(f).collect());
        let int = |f: fn(&SakanaRow) -> Option<i64>| Col::Int(rows.iter().map(f).collect());
        vec![
            text(|r| &r.Op_Name),
            int(|r| r.Level_ID),
            int(|r| r.Task_ID),
            text(|r| &r.Kernel_Name),
            float(|r| r.CUDA_Runtime),
            float(|r| r.PyTorch_Native_Runtime),
            float(|r| r.PyTorch_Compile_Runtime),
            float(|r| r.CUDA_Speedup_Native),
            float(|r| r.CUDA_Speedup_Compile),
            text(|r| &r.CUDA_Code),
            text(|r| &r.PyTorch_Code_Module),
            text(|r| &r.PyTorch_Code_Functional),
            Col::Bool(rows.iter().map(|r| r.Correct).collect()),
            float(|r| r.Max_Diff),
            text(|r| &r.Error),
            text(|r| &r.NCU_Profile),
            text(|r| &r.Torch_Profile),
            text(|r| &r.Clang_Tidy),
            int(|r| r.__index_level_0__),
        ]
    })
}
