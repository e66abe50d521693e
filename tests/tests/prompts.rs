//! Prompts end to end: a corpus written from our own solved kernels by
//! `tests/prompts/build_corpus.py`, indexed by the real `crucible corpus index`, opened by
//! `crucible up` through `CRUCIBLE_CORPUS`; every prompt option asked of the live API; the
//! retrieval-quality check (for every registered problem, the first retrieved example solves
//! a problem of the same operator family, and none solves the problem itself); the
//! configuration faults that stop the server; the CLI's refusal of a bad corpus line.

use crucible_rl::prompt::{PromptOption, PromptRequest, PromptSettings};
use crucible_shared::{Backend, ProblemRef};
use crucible_tests::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The operator family of a problem, by its name (ours in tests/problems, KernelBench's
/// level 1): what a retrieved example must share with the problem it is retrieved for.
fn family(problem_name: &str) -> &'static str {
    match problem_name {
        "elementwise_relu" | "ReLU" | "LeakyReLU" | "Sigmoid" | "Tanh" | "Swish" | "GELU_"
        | "HardSigmoid" | "Softsign" | "HardTanh" | "MinGPTNewGelu" => "elementwise",
        "softmax" | "Softmax" | "LogSoftmax" => "softmax",
        "reduction_sum"
        | "Sum_reduction_over_a_dimension"
        | "Mean_reduction_over_a_dimension"
        | "Max_reduction_over_a_dimension"
        | "RMSNorm_"
        | "L1Norm_" => "reduction",
        "matmul" | "fused_linear_relu" | "small_mlp" | "Square_matrix_multiplication_" => "matmul",
        other => panic!("no family for problem {other}: add it to the table"),
    }
}

/// The problem name of a corpus entry id (`legit/softmax__online_chunks`,
/// `gpu-smoke/cuda/19_ReLU`).
fn entry_problem(id: &str) -> &str {
    let stem = id.rsplit('/').next().unwrap();
    match stem.split_once("__") {
        Some((problem, _)) => problem,
        None => stem.split_once('_').map_or(stem, |(_, name)| name),
    }
}

fn run_ok(mut cmd: Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

struct Files {
    corpus: PathBuf,
    registry: PathBuf,
    index: PathBuf,
}

/// The corpus and registry from our kernels, and the index built by the real CLI.
fn build_files(dir: &Path) -> Files {
    let files = Files {
        corpus: dir.join("corpus.jsonl"),
        registry: dir.join("problems.jsonl"),
        index: dir.join("index"),
    };
    let mut script = Command::new("python3");
    script
        .arg(repo_root().join("tests/prompts/build_corpus.py"))
        .arg("--corpus")
        .arg(&files.corpus)
        .arg("--registry")
        .arg(&files.registry);
    run_ok(script, "build_corpus.py");
    let _ = std::fs::remove_dir_all(&files.index);
    let mut index = Command::new(bin("crucible"));
    index
        .args(["corpus", "index"])
        .arg(&files.corpus)
        .arg("--out")
        .arg(&files.index);
    let out = run_ok(index, "crucible corpus index");
    assert!(String::from_utf8_lossy(&out.stdout).contains("indexed"));
    files
}

async fn start(logs: &Path, env: &[(&str, &Path)]) -> (Proc, Api) {
    let port = free_port();
    let mut cmd = crucible_up(port);
    cmd.env_remove("KERNELBENCH_ROOT")
        .env_remove("CRUCIBLE_CORPUS")
        .env_remove("CRUCIBLE_PROMPT_TEMPLATES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let up = Proc::spawn("crucible-up", cmd, logs);
    let api = Api::new(port);
    api.wait_ready().await;
    (up, api)
}

/// A server that must refuse to start: its exit status and log, within a deadline.
fn refused_start(logs: &Path, env: &[(&str, &Path)]) -> String {
    let mut cmd = crucible_up(free_port());
    cmd.env_remove("KERNELBENCH_ROOT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut proc = Proc::spawn("refused", cmd, logs);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = proc.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server started: {}",
            proc.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    proc.log_text()
}

fn ids(prompt: &Value) -> Vec<String> {
    prompt["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_option_from_a_live_api_and_retrieval_finds_the_family_never_the_problem() {
    let logs = log_dir("prompts-options");
    let files = build_files(&logs);
    let (_up, api) = start(
        &logs,
        &[
            ("CRUCIBLE_PROBLEMS", &files.registry),
            ("CRUCIBLE_CORPUS", &files.index),
        ],
    )
    .await;
    let (_, softmax) = api.get("/problems/1/1006").await;
    let source = softmax["reference_code"].as_str().unwrap();
    let prompt = |query: &str| {
        let api = api.clone();
        let path = format!("/problems/1/1006/prompt{query}");
        async move { api.get(&path).await }
    };

    // Zero-shot: the problem and the format, no example; the format is what the parser reads.
    let (status, zero) = prompt("").await;
    assert_eq!(status, 200, "{zero}");
    let text = zero["text"].as_str().unwrap();
    assert!(text.contains(source.trim_end()) && text.contains("<KERNEL>"));
    assert!(text.contains(zero["response_format"].as_str().unwrap()));
    assert!(!text.contains("<think>") && ids(&zero).is_empty());
    assert_eq!(zero["settings"]["option"], "zero_shot");

    // One- and few-shot: built-in examples of the asked backend, in order.
    let (_, one) = prompt("?option=one_shot&backend=cuda&thinking=true").await;
    assert_eq!(ids(&one), ["builtin/leaky_relu.cuda"]);
    assert!(one["text"].as_str().unwrap().contains("load_inline("));
    assert!(one["response_format"].as_str().unwrap().contains("<think>"));
    let (_, few) = prompt("?option=few_shot").await;
    assert_eq!(
        ids(&few),
        [
            "builtin/leaky_relu.triton",
            "builtin/row_softmax.triton",
            "builtin/linear_bias_relu.triton"
        ]
    );
    assert_eq!(few["settings"]["k"], 3);
    let (_, two) = prompt("?option=few_shot&k=2").await;
    assert_eq!(ids(&two).len(), 2);

    // RA-ICL: k examples of the backend, from the corpus, their code in the text.
    let corpus: BTreeMap<String, Value> = std::fs::read_to_string(&files.corpus)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["id"].as_str().unwrap().to_owned(), v)
        })
        .collect();
    let (status, raicl) = prompt("?option=raicl").await;
    assert_eq!(status, 200, "{raicl}");
    assert_eq!(raicl["settings"]["k"], 3);
    assert_eq!(ids(&raicl).len(), 3);
    for id in ids(&raicl) {
        assert_eq!(corpus[&id]["backend"], "triton", "{id}");
        let code = corpus[&id]["code"].as_str().unwrap();
        assert!(raicl["text"].as_str().unwrap().contains(code.trim_end()));
    }
    let (_, cuda) = prompt("?option=raicl&backend=cuda&k=2").await;
    assert!(!ids(&cuda).is_empty());
    assert!(ids(&cuda).iter().all(|id| corpus[id]["backend"] == "cuda"));
    // The same problem sent as source: the same examples (its own solutions left out by hash).
    let (status, posted) = api
        .post(
            "/prompts",
            json!({"reference_code": source, "settings": {"option": "raicl"}}),
        )
        .await;
    assert_eq!(status, 200, "{posted}");
    assert_eq!(ids(&posted), ids(&raicl));
    assert_eq!(posted["text"], raicl["text"]);

    // The Rust client asks the same of both routes.
    let client = crucible_client::Client::new(api.base.clone());
    let settings = PromptSettings {
        option: PromptOption::Raicl,
        ..PromptSettings::default()
    };
    let by_get = client.prompt(1, 1006, &settings).await.unwrap();
    assert_eq!(serde_json::to_value(&by_get).unwrap(), raicl);
    let by_post = client
        .prompt_for(&PromptRequest {
            problem: Some(ProblemRef { level: 1, id: 1006 }),
            reference_code: None,
            settings: PromptSettings {
                option: PromptOption::FewShot,
                backend: Backend::Cuda,
                thinking: true,
                k: Some(1),
            },
        })
        .await
        .unwrap();
    assert_eq!(by_post.examples, ["builtin/leaky_relu.cuda"]);
    assert!(by_post.response_format.contains("<think>"));

    // Bad asks: named fields, the right statuses.
    for (query, field) in [("?option=zero_shot&k=2", "k"), ("?option=raicl&k=99", "k")] {
        let (status, err) = prompt(query).await;
        assert_eq!(
            (status, err["field"].as_str()),
            (422, Some(field)),
            "{query}: {err}"
        );
    }
    let (status, _) = prompt("?option=two_shot").await;
    assert_eq!(status, 422);
    let (status, _) = api.get("/problems/1/999/prompt").await;
    assert_eq!(status, 404);
    let (status, err) = api
        .post(
            "/prompts",
            json!({"problem": {"level": 1, "id": 1006}, "reference_code": source}),
        )
        .await;
    assert_eq!(status, 422, "{err}");

    // Retrieval quality: for every problem, the first example is of its family and none is
    // its own solution. The whole ranking is printed, then every miss asserted at once.
    let (_, problems) = api.get("/problems").await;
    let mut misses = Vec::new();
    let problems = problems["problems"].as_array().unwrap();
    assert!(problems.len() >= 6, "{problems:?}");
    for p in problems {
        let (name, hash) = (p["name"].as_str().unwrap(), p["hash"].as_str().unwrap());
        let path = format!(
            "/problems/{}/{}/prompt?option=raicl&k=3",
            p["level"], p["id"]
        );
        let (status, got) = api.get(&path).await;
        assert_eq!(status, 200, "{got}");
        let ranked = ids(&got);
        println!("{name:<34} [{}] -> {}", family(name), ranked.join(", "));
        match ranked.first() {
            Some(first) if family(entry_problem(first)) == family(name) => {}
            other => misses.push(format!("{name}: first {other:?}")),
        }
        for id in &ranked {
            if corpus[id]["problem_hash"].as_str() == Some(hash) {
                misses.push(format!("{name}: its own solution {id} was retrieved"));
            }
        }
    }
    assert!(
        misses.is_empty(),
        "retrieval misses:\n{}",
        misses.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_override_the_words_and_bad_configuration_stops_the_server() {
    let dir = log_dir("prompts-config");
    let registry = repo_root().join("tests/rollouts/problems.jsonl");
    let templates = dir.join("templates");
    let _ = std::fs::remove_dir_all(&templates);
    std::fs::create_dir_all(&templates).unwrap();
    std::fs::write(
        templates.join("first_turn.txt"),
        "Our own words for {{ModelNew}} in {backend}.\n{examples}{reference_code}\n{response_format}\n",
    )
    .unwrap();
    {
        let (_up, api) = start(
            &dir,
            &[
                ("CRUCIBLE_PROBLEMS", &registry),
                ("CRUCIBLE_PROMPT_TEMPLATES", &templates),
            ],
        )
        .await;
        let (status, p) = api.get("/problems/1/23/prompt?option=one_shot").await;
        assert_eq!(status, 200, "{p}");
        let text = p["text"].as_str().unwrap();
        assert!(
            text.starts_with("Our own words for {ModelNew} in Triton"),
            "{text}"
        );
        assert!(text.contains("Example 1, a problem:") && text.contains("torch.softmax"));
        // No corpus configured: RA-ICL is refused and says how to configure one.
        let (status, err) = api.get("/problems/1/23/prompt?option=raicl").await;
        assert_eq!(status, 409, "{err}");
        assert!(err["message"].as_str().unwrap().contains("CRUCIBLE_CORPUS"));
    }

    std::fs::write(templates.join("example.txt"), "{code}\n{solution}\n").unwrap();
    let log = refused_start(&dir, &[("CRUCIBLE_PROMPT_TEMPLATES", &templates)]);
    assert!(
        log.contains("example.txt line 2: unknown placeholder {solution}"),
        "{log}"
    );
    let log = refused_start(&dir, &[("CRUCIBLE_CORPUS", &templates)]);
    assert!(log.contains("is not a kernel corpus index"), "{log}");
}

#[test]
fn the_cli_refuses_a_bad_line_and_leaves_no_index() {
    let dir = log_dir("prompts-cli");
    let corpus = dir.join("bad.jsonl");
    let out = dir.join("bad-index");
    let _ = std::fs::remove_dir_all(&out);
    let good = r#"{"id":"a","backend":"triton","description":"relu","code":"tl.maximum(x, 0)"}"#;
    std::fs::write(
        &corpus,
        format!("{good}\n{{\"id\":\"b\",\"backend\":\"rust\"}}\n"),
    )
    .unwrap();
    let run = Command::new(bin("crucible"))
        .args(["corpus", "index"])
        .arg(&corpus)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(stderr.contains("bad.jsonl line 2"), "{stderr}");
    assert!(!out.exists());

    std::fs::write(&corpus, format!("{good}\n")).unwrap();
    let mut index = Command::new(bin("crucible"));
    index
        .args(["corpus", "index"])
        .arg(&corpus)
        .arg("--out")
        .arg(&out);
    run_ok(index, "crucible corpus index");
    let mut search = Command::new(bin("crucible"));
    search
        .args(["corpus", "search"])
        .arg(&out)
        .arg("y = torch.relu(x)");
    let found = run_ok(search, "crucible corpus search");
    let stdout = String::from_utf8_lossy(&found.stdout);
    assert!(
        stdout.contains("operators: torch.relu") && stdout.contains(" a\n"),
        "{stdout}"
    );
}
