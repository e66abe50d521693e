//! A dataset file read row by row, only the columns a dataset names: parquet (what both
//! datasets publish on the Hugging Face hub), a JSON array of records (KernelBook's
//! `dataset_permissive.json`) or JSON lines, one record a line (a `datasets` `to_json` export).
//! Which one a file is comes from its first bytes, not its name.

use crate::CorpusError;
use parquet::basic::Type as Physical;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use parquet::schema::types::Type;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

/// What a column must hold (or null).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Int,
    Bool,
    Float,
}

impl Kind {
    fn words(self) -> &'static str {
        match self {
            Kind::Text => "a string",
            Kind::Int => "an integer",
            Kind::Bool => "a boolean",
            Kind::Float => "a number",
        }
    }
}

/// A column a dataset reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    pub name: &'static str,
    pub kind: Kind,
}

/// One cell, of its column's kind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

/// One row: its place in the file and its cells, in the order of the columns asked for.
#[derive(Debug)]
pub(crate) struct Row {
    /// `row N` or `line N`.
    pub at: String,
    pub cells: Vec<Cell>,
}

fn error(path: &Path, row: Option<&str>, column: Option<&str>, message: String) -> CorpusError {
    CorpusError::Import {
        path: path.to_owned(),
        row: row.map(str::to_string),
        column: column.map(str::to_string),
        message,
    }
}

/// Calls `each` with every row of the file at `path`, its cells those of `columns`. A column
/// missing from the file, or a cell not of its column's kind, is an error naming the file, the
/// row and the column.
pub(crate) fn read_rows(
    path: &Path,
    columns: &[Column],
    each: &mut dyn FnMut(Row) -> Result<(), CorpusError>,
) -> Result<(), CorpusError> {
    let io = |e: std::io::Error| CorpusError::Io {
        path: path.to_owned(),
        source: e,
    };
    let mut file = File::open(path).map_err(io)?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic).map_err(io)?;
    if &magic[..n] == b"PAR1" {
        let file = File::open(path).map_err(io)?;
        return parquet_rows(path, file, columns, each);
    }
    let mut reader = BufReader::new(File::open(path).map_err(io)?);
    let first = loop {
        let buf = reader.fill_buf().map_err(io)?;
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => break Some(buf[i]),
            None if buf.is_empty() => break None,
            None => {
                let len = buf.len();
                reader.consume(len);
            }
        }
    };
    match first {
        Some(b'[') => json_array_rows(path, reader, columns, each),
        Some(b'{') => json_lines_rows(path, reader, columns, each),
        Some(_) => Err(error(
            path,
            None,
            None,
            "neither parquet nor JSON (a JSON array of records, or one record a line)".into(),
        )),
        None => Err(error(path, None, None, "the file is empty".into())),
    }
}

fn parquet_rows(
    path: &Path,
    file: File,
    columns: &[Column],
    each: &mut dyn FnMut(Row) -> Result<(), CorpusError>,
) -> Result<(), CorpusError> {
    let bad = |m: String| {
        error(
            path,
            None,
            None,
            format!("not a readable parquet file: {m}"),
        )
    };
    let reader = SerializedFileReader::new(file).map_err(|e| bad(e.to_string()))?;
    let schema = reader.metadata().file_metadata().schema();
    let mut projected: Vec<Arc<Type>> = Vec::new();
    for field in schema.get_fields() {
        let Some(column) = columns.iter().find(|c| c.name == field.name()) else {
            continue;
        };
        let fits = field.is_primitive()
            && matches!(
                (column.kind, field.get_physical_type()),
                (Kind::Text, Physical::BYTE_ARRAY)
                    | (Kind::Int, Physical::INT32 | Physical::INT64)
                    | (Kind::Bool, Physical::BOOLEAN)
                    | (
                        Kind::Float,
                        Physical::FLOAT | Physical::DOUBLE | Physical::INT32 | Physical::INT64
                    )
            );
        if !fits {
            let found = if field.is_primitive() {
                format!("{}", field.get_physical_type())
            } else {
                "a nested group".to_string()
            };
            return Err(error(
                path,
                None,
                Some(column.name),
                format!("holds {found}, not {}", column.kind.words()),
            ));
        }
        projected.push(field.clone());
    }
    if let Some(missing) = columns
        .iter()
        .find(|c| !projected.iter().any(|f| f.name() == c.name))
    {
        return Err(error(
            path,
            None,
            Some(missing.name),
            "no such column in the file".into(),
        ));
    }
    let projection = Type::group_type_builder(schema.name())
        .with_fields(projected)
        .build()
        .map_err(|e| bad(e.to_string()))?;
    let rows = reader
        .get_row_iter(Some(projection))
        .map_err(|e| bad(e.to_string()))?;
    for (n, row) in rows.enumerate() {
        let at = format!("row {}", n + 1);
        let row = row.map_err(|e| error(path, Some(&at), None, e.to_string()))?;
        let mut cells = vec![Cell::Null; columns.len()];
        for (name, field) in row.into_columns() {
            if let Some(i) = columns.iter().position(|c| c.name == name) {
                cells[i] = parquet_cell(field, columns[i].kind)
                    .map_err(|m| error(path, Some(&at), Some(columns[i].name), m))?;
            }
        }
        each(Row { at, cells })?;
    }
    Ok(())
}

fn parquet_cell(field: Field, kind: Kind) -> Result<Cell, String> {
    let int = |f: &Field| match *f {
        Field::Byte(v) => Some(i64::from(v)),
        Field::Short(v) => Some(i64::from(v)),
        Field::Int(v) => Some(i64::from(v)),
        Field::Long(v) => Some(v),
        Field::UByte(v) => Some(i64::from(v)),
        Field::UShort(v) => Some(i64::from(v)),
        Field::UInt(v) => Some(i64::from(v)),
        Field::ULong(v) => i64::try_from(v).ok(),
        _ => None,
    };
    Ok(match (kind, field) {
        (_, Field::Null) => Cell::Null,
        (Kind::Text, Field::Str(s)) => Cell::Text(s),
        (Kind::Text, Field::Bytes(b)) => Cell::Text(
            String::from_utf8(b.data().to_vec()).map_err(|_| "is not UTF-8 text".to_string())?,
        ),
        (Kind::Bool, Field::Bool(b)) => Cell::Bool(b),
        (Kind::Float, Field::Float(v)) => Cell::Float(f64::from(v)),
        (Kind::Float, Field::Double(v)) => Cell::Float(v),
        (Kind::Int, f) if int(&f).is_some() => Cell::Int(int(&f).unwrap_or_default()),
        (Kind::Float, f) if int(&f).is_some() => Cell::Float(int(&f).unwrap_or_default() as f64),
        (kind, _) => return Err(format!("is not {}", kind.words())),
    })
}

fn json_cell(value: Value, kind: Kind) -> Result<Cell, String> {
    Ok(match (kind, value) {
        (_, Value::Null) => Cell::Null,
        (Kind::Text, Value::String(s)) => Cell::Text(s),
        (Kind::Bool, Value::Bool(b)) => Cell::Bool(b),
        (Kind::Int, Value::Number(n)) if n.as_i64().is_some() => {
            Cell::Int(n.as_i64().unwrap_or_default())
        }
        (Kind::Float, Value::Number(n)) if n.as_f64().is_some() => {
            Cell::Float(n.as_f64().unwrap_or_default())
        }
        (kind, _) => return Err(format!("is not {}", kind.words())),
    })
}

fn json_row(
    path: &Path,
    at: String,
    mut record: Map<String, Value>,
    columns: &[Column],
) -> Result<Row, CorpusError> {
    let mut cells = Vec::with_capacity(columns.len());
    for c in columns {
        let Some(value) = record.remove(c.name) else {
            return Err(error(path, Some(&at), Some(c.name), "missing".into()));
        };
        cells.push(json_cell(value, c.kind).map_err(|m| error(path, Some(&at), Some(c.name), m))?);
    }
    Ok(Row { at, cells })
}

fn json_lines_rows(
    path: &Path,
    reader: impl BufRead,
    columns: &[Column],
    each: &mut dyn FnMut(Row) -> Result<(), CorpusError>,
) -> Result<(), CorpusError> {
    for (n, line) in reader.lines().enumerate() {
        let at = format!("line {}", n + 1);
        let line = line.map_err(|e| error(path, Some(&at), None, e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Map<String, Value> = serde_json::from_str(&line)
            .map_err(|e| error(path, Some(&at), None, format!("not a JSON record: {e}")))?;
        each(json_row(path, at, record, columns)?)?;
    }
    Ok(())
}

/// A JSON array read one record at a time (KernelBook's JSON is some 400 MB): each record is
/// handed on and dropped before the next is parsed.
fn json_array_rows(
    path: &Path,
    reader: impl Read,
    columns: &[Column],
    each: &mut dyn FnMut(Row) -> Result<(), CorpusError>,
) -> Result<(), CorpusError> {
    struct Records<'a> {
        path: &'a Path,
        columns: &'a [Column],
        each: &'a mut dyn FnMut(Row) -> Result<(), CorpusError>,
        failed: Option<CorpusError>,
    }
    impl<'de> Visitor<'de> for &mut Records<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of records")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut n = 0;
            while let Some(record) = seq.next_element::<Map<String, Value>>()? {
                n += 1;
                let handed = json_row(self.path, format!("row {n}"), record, self.columns)
                    .and_then(|row| (self.each)(row));
                if let Err(e) = handed {
                    self.failed = Some(e);
                    return Err(serde::de::Error::custom("stopped"));
                }
            }
            Ok(())
        }
    }
    impl<'de> DeserializeSeed<'de> for &mut Records<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }
    let mut records = Records {
        path,
        columns,
        each,
        failed: None,
    };
    let mut de = serde_json::Deserializer::from_reader(BufReader::new(reader));
    let parsed = (&mut records).deserialize(&mut de).and_then(|()| de.end());
    match (records.failed, parsed) {
        (Some(e), _) => Err(e),
        (None, Err(e)) => Err(error(
            path,
            None,
            None,
            format!("not a JSON array of records: {e}"),
        )),
        (None, Ok(())) => Ok(()),
    }
}
