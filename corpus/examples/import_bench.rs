//! The import benchmark (scripts/bench/corpus_import.sh runs it; docs/BENCHMARKS.md has the
//! figures): KernelBook and Sakana archive files synthesised in their published schemas, as
//! many rows as the published files hold (18,162 + 12,157 + 12,938 + 5,520 = 48,777), imported
//! and indexed with the functions `crucible corpus import` calls, then searched by every real
//! KernelBench problem for each backend the way a `raicl` prompt searches (k = 3, the problem's
//! own entries left out).
//!
//! cargo run --release -p crucible-corpus --features fixtures --example import_bench -- \
//!     --kernelbench DIR [--work DIR] [--scale F]

use crucible_corpus::import::fixtures::{
    KernelBookRow, SakanaRow, write_kernelbook_parquet, write_sakana_parquet,
};
use crucible_corpus::{Corpus, Dataset, ImportOptions, ProblemQuery, build_index, import_files};
use crucible_shared::{Backend, problem_hash};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type Fallible<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Rows of the published files: KernelBook's train split, then Sakana's levels 1-3.
const KERNELBOOK_ROWS: usize = 18_162;
const SAKANA_ROWS: [usize; 3] = [12_157, 12_938, 5_520];

struct Problem {
    level: i64,
    task: i64,
    name: String,
    source: String,
}

fn problems(dir: &Path) -> Fallible<Vec<Problem>> {
    let mut out = Vec::new();
    for level in 1..=3 {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(format!("level{level}")))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "py"))
            .collect();
        files.sort();
        for path in files {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            let task = stem
                .split('_')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            out.push(Problem {
                level,
                task,
                name: stem.to_string(),
                source: std::fs::read_to_string(&path)?,
            });
        }
    }
    Ok(out)
}

/// A Triton module of Inductor's shape, some 3-6 KB, its kernels named after the problem.
fn triton_module(p: &Problem, row: usize) -> String {
    let ops = ProblemQuery::from_reference(&p.source)
        .ops
        .join("_")
        .replace(['.', '@'], "");
    let mut s = String::from(
        "import torch\nimport triton\nimport triton.language as tl\nfrom torch._inductor.runtime.triton_heuristics import grid\n\n",
    );
    for k in 0..(2 + row % 4) {
        s.push_str(&format!(
            "@triton.jit\ndef triton_poi_fused_{ops}_{k}(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n    \
             xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:]\n    \
             xmask = xindex < xnumel\n    x0 = xindex % {m}\n    tmp0 = tl.load(in_ptr0 + xindex, xmask)\n    \
             tmp1 = tl.full([1], 0, tl.int32)\n    tmp2 = triton_helpers.maximum(tmp1, tmp0)\n    \
             tmp3 = tmp2 * {k}.0\n    tl.store(out_ptr0 + xindex, tmp3, xmask)\n\n\n",
            m = 64 << (row % 5),
        ));
    }
    s.push_str(&format!(
        "def call(args):\n    arg0_1, = args\n    buf0 = empty_strided_cuda((4, 4), (4, 1), torch.float32)\n    \
         triton_poi_fused_{ops}_0[grid(16)](arg0_1, buf0, 16, XBLOCK=16)\n    return buf0,\n\n\n\
         class ModelNew(torch.nn.Module):\n    def forward(self, input_0):\n        return call([input_0])[0]\n"
    ));
    s
}

/// A torch extension of the archive's shape, some 2-4 KB.
fn cuda_source(p: &Problem, row: usize) -> String {
    let name = p.name.to_lowercase();
    let mut s = String::from(
        "#include <torch/extension.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n\n#define BLOCK_SIZE 256\n\n",
    );
    for k in 0..(1 + row % 3) {
        s.push_str(&format!(
            "__global__ void kernel_{k}_{row}(const float* __restrict__ x, float* __restrict__ y, int n) {{\n    \
             int i = blockIdx.x * blockDim.x + threadIdx.x;\n    __shared__ float tile[BLOCK_SIZE];\n    \
             if (i < n) {{ tile[threadIdx.x] = x[i]; }}\n    __syncthreads();\n    \
             for (int s = blockDim.x / 2; s > 0; s >>= 1) {{ if (threadIdx.x < s) tile[threadIdx.x] += tile[threadIdx.x + s]; __syncthreads(); }}\n    \
             if (i < n) y[i] = fmaxf(tile[threadIdx.x], 0.0f) * {k}.0f;\n}}\n\n"
        ));
    }
    s.push_str(&format!(
        "torch::Tensor forward(torch::Tensor x) {{\n    auto y = torch::empty_like(x);\n    int n = x.numel();\n    \
         kernel_0_{row}<<<(n + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n    \
         return y;\n}}\n\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n    m.def(\"forward\", &forward, \"{name} (CUDA)\");\n}}\n"
    ));
    s
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> Fallible<()> {
    let mut args = std::env::args().skip(1);
    let (mut kernelbench, mut work, mut scale) = (None, None, 1.0f64);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--kernelbench" => kernelbench = args.next().map(PathBuf::from),
            "--work" => work = args.next().map(PathBuf::from),
            "--scale" => scale = args.next().ok_or("--scale F")?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let kernelbench = kernelbench.ok_or("--kernelbench DIR (KernelBench's level1-3)")?;
    let temp = tempfile::tempdir()?;
    let work = work.unwrap_or_else(|| temp.path().to_owned());
    std::fs::create_dir_all(&work)?;
    let problems = problems(&kernelbench)?;
    println!("kernelbench problems: {}", problems.len());

    let rows = |n: usize| ((n as f64) * scale).round() as usize;
    let kb: Vec<KernelBookRow> = (0..rows(KERNELBOOK_ROWS))
        .map(|i| {
            let p = &problems[i % problems.len()];
            let entry = format!("Module{i}");
            let python = p.source.replace("Model", &entry);
            KernelBookRow::new(
                i as i64,
                &entry,
                &python,
                &triton_module(p, i).replace("ModelNew", &format!("{entry}New")),
            )
        })
        .collect();
    let mut files = vec![(Dataset::KernelBook, work.join("dataset_permissive.parquet"))];
    write_kernelbook_parquet(&files[0].1, &kb)?;
    drop(kb);
    for (level, &n) in SAKANA_ROWS.iter().enumerate() {
        let level = level as i64 + 1;
        let tasks: Vec<&Problem> = problems.iter().filter(|p| p.level == level).collect();
        let rows: Vec<SakanaRow> = (0..rows(n))
            .map(|i| {
                let p = tasks[i % tasks.len()];
                let kernel = format!("kernel_{}_base", i / tasks.len());
                SakanaRow::new(
                    level,
                    p.task,
                    &p.name,
                    &kernel,
                    &p.source,
                    &cuda_source(p, i),
                    i % 10 != 9,
                )
            })
            .collect();
        let path = work.join(format!("level_{level}.parquet"));
        write_sakana_parquet(&path, &rows)?;
        files.push((Dataset::Sakana, path));
    }
    for (_, f) in &files {
        println!("{}: {} bytes", f.display(), std::fs::metadata(f)?.len());
    }

    let options = ImportOptions {
        include_incorrect: true,
        min_speedup: None,
    };
    let start = Instant::now();
    let (entries, reports) = import_files(&files, &options)?;
    let read = start.elapsed();
    let out = work.join("index");
    let start = Instant::now();
    let summary = build_index(&entries, &out, true)?;
    let built = start.elapsed();
    for r in &reports {
        println!(
            "{}: {} rows, {} imported",
            r.path.display(),
            r.rows,
            r.imported
        );
    }
    println!(
        "entries: {} ({} triton, {} cuda); read+map {:.2} s, index build {:.2} s, total {:.2} s; index {} bytes",
        summary.entries,
        summary.triton,
        summary.cuda,
        read.as_secs_f64(),
        built.as_secs_f64(),
        (read + built).as_secs_f64(),
        dir_bytes(&out)
    );
    drop(entries);

    let start = Instant::now();
    let corpus = Corpus::open(&out)?;
    println!("open: {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
    let mut times = Vec::new();
    let mut empty = 0;
    for round in 0..2 {
        for p in &problems {
            for backend in [Backend::Triton, Backend::Cuda] {
                let t = Instant::now();
                let query = ProblemQuery::from_reference(&p.source);
                let hits = corpus.search(&query, backend, 3, Some(&problem_hash(&p.source)))?;
                let took = t.elapsed();
                // The first round warms the page cache and tantivy's caches; the second is timed.
                if round == 1 {
                    times.push(took);
                    empty += usize::from(hits.is_empty());
                }
            }
        }
    }
    times.sort();
    println!(
        "queries: {} (every problem x triton, cuda; k=3, own excluded; {} with no hit): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        times.len(),
        empty,
        percentile(&times, 0.5),
        percentile(&times, 0.9),
        percentile(&times, 0.99),
        percentile(&times, 1.0)
    );
    Ok(())
}
