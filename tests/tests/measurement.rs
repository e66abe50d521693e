//! Attacks on the measurement through the real service (redis-server, crucible-api, two
//! workers): each entry of tests/escapes/measurement/manifest.json is a candidate that forges
//! its timing, its proof of work or its end, or reaches a neighbour's timing, riding on an
//! honest Triton row-L2-norm (tests/escapes/measurement/kernel.py). Each runs twice, with the
//! default screening and with every rule off, among honest neighbours, and must end as one of
//! the verdicts its entry allows (never `ok`), decided once (one attempt), the unscreened run
//! by the runtime (not `SCREENED`); the honest neighbours stay `ok`, and on a GPU their timings
//! stay within NEIGHBOUR_FACTOR of the band of honest baselines taken alone before the attacks
//! and the cached reference timing within RELATIVE_TOLERANCE of theirs. Every result is logged to `measured.log` in the test's log directory.
//!
//! `CRUCIBLE_TEST_WORKER_ARGS` (default `--cpu`) runs the workers on a GPU instead (the GPU run:
//! scripts/gpu-measurement.sh, with `CRUCIBLE_TEST_WORKERS=1`); entries marked
//! `"device": "cuda"` run only there, and the problem's sizes grow to a GPU's. `CRUCIBLE_TEST_MEASUREMENT` (names, comma-separated) runs a
//! subset. As the escape corpus, it runs only against workers whose every layer is in force.

use crucible_tests::corpus::{require_sandboxed_workers, screening_off, services_died};
use crucible_tests::*;
use serde_json::{Value, json};
use std::io::Write as _;
use std::time::Duration;

const TASK_DEADLINE: Duration = Duration::from_secs(900);
const CASES: [&str; 2] = ["screened", "unscreened"];
/// On a GPU, how far the cached reference timing may move from the baseline's, and an
/// attack's speedup rise above the honest one, before the test calls it touched or gained.
const RELATIVE_TOLERANCE: f64 = 0.35;
/// On a GPU, the factor by which an honest neighbour's median may sit outside the band of the
/// honest medians taken alone before the attacks. Honest medians of this 0.2 ms kernel moved
/// 0.16-0.27 ms over one run's neighbours on the H100 (2026-11-28: the timed call includes the
/// launch, slower on a host busy with the attacks' compiles); a neighbour's work multiplied
/// them by 8 before the quiet-device wait.
const NEIGHBOUR_FACTOR: f64 = 2.0;
/// Honest tasks timed alone before the attacks: the band a neighbour's median is held to.
const BASELINE_RUNS: usize = 3;
/// The problem's sizes on a GPU: a 128 MiB float32 input, about 0.1-0.3 ms per call.
const GPU_SIZES: (&str, &str) = ("batch_size = 4096", "dim = 8192");

struct Attack {
    name: String,
    source: String,
    expect: Vec<String>,
    codes: Vec<String>,
    /// Measured and logged, not asserted: a forgery within the floor's slack (docs/INTEGRITY.md);
    /// `measure_only_on_gpu` makes it so on a GPU only, where the corpus's ~0.1 ms kernel is
    /// within the slack that a timed call's own launch and sync leave.
    measure_only: bool,
}

fn corpus(gpu: bool) -> Vec<Attack> {
    let dir = repo_root().join("tests/escapes/measurement");
    let read =
        |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let entries: Vec<Value> =
        serde_json::from_str(&read("manifest.json")).expect("measurement manifest JSON");
    let kernel = read("kernel.py");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    entries
        .iter()
        .filter(|e| gpu || e["device"] == "any")
        .map(|e| {
            let mut attack = read(e["file"].as_str().expect("file"));
            // A variant of a file: its text with some of it replaced (a milder forgery).
            for (from, to) in e["replace"].as_object().into_iter().flatten() {
                assert!(
                    attack.contains(from.as_str()),
                    "{from:?} not in {}",
                    e["file"]
                );
                attack = attack.replace(from.as_str(), to.as_str().expect("replacement"));
            }
            let name = e["name"].as_str().expect("name");
            Attack {
                name: name.to_owned(),
                source: format!(
                    "{}\n\n{kernel}",
                    attack.replace(
                        &format!(
                            "NAME = {:?}",
                            e["file"].as_str().unwrap_or("").trim_end_matches(".py")
                        ),
                        &format!("NAME = {name:?}"),
                    )
                ),
                expect: strings(&e["expect"]),
                codes: strings(&e["codes"]),
                measure_only: e["measure_only"].as_bool().unwrap_or(false)
                    || (gpu && e["measure_only_on_gpu"].as_bool().unwrap_or(false)),
            }
        })
        .filter(|a| match std::env::var("CRUCIBLE_TEST_MEASUREMENT") {
            Ok(names) => names.split(',').any(|n| n.trim() == a.name),
            Err(_) => true,
        })
        .collect()
}

fn honest() -> String {
    let dir = repo_root().join("tests/escapes/measurement");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect(f);
    format!("{}\n\n{}", read("honest.py"), read("kernel.py"))
}

fn median(result: &Value, field: &str) -> Option<f64> {
    result[field]["median"].as_f64()
}

fn within(value: Option<f64>, baseline: Option<f64>) -> bool {
    match (value, baseline) {
        (Some(v), Some(b)) if b > 0.0 => (v / b - 1.0).abs() <= RELATIVE_TOLERANCE,
        _ => false,
    }
}

/// Whether `value` lies within NEIGHBOUR_FACTOR of the band `(low, high)` of honest medians.
fn within_band(value: Option<f64>, (low, high): (f64, f64)) -> bool {
    value.is_some_and(|v| v >= low / NEIGHBOUR_FACTOR && v <= high * NEIGHBOUR_FACTOR)
}

struct Log(std::fs::File);

impl Log {
    fn line(&mut self, text: &str) {
        eprintln!("{text}");
        writeln!(self.0, "{text}").expect("measured.log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn measurement_attacks_fail_and_neighbours_keep_their_timings() {
    let logs = log_dir("measurement");
    let mut log = Log(std::fs::File::create(logs.join("measured.log")).expect("measured.log"));
    let redis = Redis::start(&logs).await;
    let env = service_env(&redis.url, "measurement");
    let port = free_port();
    let mut api_proc = Proc::spawn("api", api_command(port, &env), &logs);
    let worker_args = std::env::var("CRUCIBLE_TEST_WORKER_ARGS").unwrap_or_else(|_| "--cpu".into());
    let gpu = worker_args.contains("--gpu");
    // Two on a CPU; one on a GPU (scripts/gpu-measurement.sh): two workers on one GPU share no
    // timing gate, and each would find the other's work there whenever it times.
    let count: usize = std::env::var("CRUCIBLE_TEST_WORKERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    let mut workers: Vec<Proc> = (0..count)
        .map(|i| {
            let mut cmd = std::process::Command::new(bin("crucible-worker"));
            cmd.args(worker_args.split_whitespace())
                .envs(env.iter().map(|(k, v)| (k, v)));
            Proc::spawn(&format!("worker{i}"), cmd, &logs)
        })
        .collect();
    let api = Api::new(port);
    api.wait_ready().await;
    require_sandboxed_workers(&api, workers.len()).await;

    let mut reference =
        std::fs::read_to_string(repo_root().join("tests/escapes/measurement/problem.py"))
            .expect("the measurement corpus's problem");
    if gpu {
        reference = reference
            .replace("batch_size = 16", GPU_SIZES.0)
            .replace("dim = 1024", GPU_SIZES.1);
    }
    let body = |kernel: String, screening: Value| {
        json!({
            "reference_code": reference,
            "kernel_code": kernel,
            "num_correct_trials": 2,
            "num_perf_trials": 30,
            "timeout_s": 300,
            "screening": screening,
        })
    };

    // The honest baseline, alone, BASELINE_RUNS times (one after another, each a distinct
    // request): the band of its timings; the first leaves the reference timing cached.
    let mut baselines = Vec::new();
    for run in 0..BASELINE_RUNS {
        let id = api
            .submit(body(format!("{}\n# baseline {run}\n", honest()), json!({})))
            .await;
        let task = api.wait_task(&id, TASK_DEADLINE).await;
        assert_eq!(task["result"]["verdict"], "ok", "{task}");
        let r = &task["result"];
        log.line(&format!(
            "baseline: candidate {:?} ms, reference {:?} ms, speedup {:?}, floor {:?} ms ({} calls)",
            median(r, "runtime_ms"),
            median(r, "ref_runtime_ms"),
            r["speedup"].as_f64(),
            r["timing_check"]["floor_ms"].as_f64(),
            r["timing_check"]["calls"]
        ));
        baselines.push(task);
    }
    let base = &baselines[0]["result"];
    let band = baselines
        .iter()
        .filter_map(|t| median(&t["result"], "runtime_ms"))
        .fold((f64::INFINITY, 0.0f64), |(low, high), m| {
            (low.min(m), high.max(m))
        });

    let attacks = corpus(gpu);
    if std::env::var("CRUCIBLE_TEST_MEASUREMENT").is_err() {
        assert!(
            attacks.len() >= if gpu { 15 } else { 8 },
            "{} attacks",
            attacks.len()
        );
    }
    let mut submitted = Vec::new();
    let mut neighbours = Vec::new();
    for case in CASES {
        for (i, attack) in attacks.iter().enumerate() {
            let screening = if case == "unscreened" {
                screening_off()
            } else {
                json!({})
            };
            let id = api.submit(body(attack.source.clone(), screening)).await;
            submitted.push((attack, case, id));
            if i % 3 == 1 {
                // A source of its own, so that the result cache does not answer for it.
                let kernel = format!("{}\n# neighbour {case} {i}\n", honest());
                neighbours.push(api.submit(body(kernel, json!({}))).await);
            }
        }
    }

    let mut failures = Vec::new();
    for (attack, case, id) in &submitted {
        let task = api.wait_task(id, TASK_DEADLINE).await;
        let r = &task["result"];
        let label = format!("{} ({case})", attack.name);
        let verdict = r["verdict"].as_str().unwrap_or("none");
        let code = r["error_code"].as_str().unwrap_or("");
        let rules: Vec<&str> = r["flags"]
            .as_array()
            .map(|f| f.iter().filter_map(|x| x["rule"].as_str()).collect())
            .unwrap_or_default();
        log.line(&format!(
            "{label}: {} {verdict} {code} attempts {} speedup {:?} claimed {:?} ms floor {:?} ms ({} calls, batch {:?} ms, per call {:?} ms) flags {rules:?}",
            task["status"],
            task["attempts"],
            r["speedup"].as_f64(),
            median(r, "runtime_ms"),
            r["timing_check"]["floor_ms"].as_f64(),
            r["timing_check"]["calls"],
            r["timing_check"]["batch_ms"].as_f64(),
            r["timing_check"]["call_overhead_ms"].as_f64()
        ));
        // An attack that did not take effect here is an honest candidate: `ok` at no more than
        // the honest speedup (with the tolerance) is then right; any gain is a forgery taken.
        let no_gain = verdict == "ok"
            && matches!(
                (r["speedup"].as_f64(), base["speedup"].as_f64()),
                (Some(s), Some(b)) if s <= b * (1.0 + RELATIVE_TOLERANCE)
            );
        let said = r["output_tail"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("crucible-measurement") && !l.ends_with("attempted"))
            .collect::<Vec<_>>()
            .join("; ");
        if no_gain {
            log.line(&format!(
                "{label}: took no effect here ({said}): ok at the honest speed"
            ));
        }
        let allowed = attack.expect.iter().any(|v| v == verdict) || no_gain || attack.measure_only;
        if task["status"] != "done" || !allowed {
            failures.push(format!(
                "{label}: {} {verdict} (want one of {:?}): {} [{said}]",
                task["status"], attack.expect, r["error_message"]
            ));
        }
        if !attack.codes.is_empty() && !attack.codes.iter().any(|c| c == code) {
            failures.push(format!(
                "{label}: code {code} (want one of {:?})",
                attack.codes
            ));
        }
        if task["attempts"] != 1 {
            failures.push(format!(
                "{label}: {} attempts: a candidate's own end is decided once",
                task["attempts"]
            ));
        }
        if *case == "unscreened" {
            if code == "SCREENED" {
                failures.push(format!("{label}: screened with every rule off"));
            }
            let tail = r["output_tail"].as_str().unwrap_or_default();
            if !tail.contains(&format!("crucible-measurement {}: attempted", attack.name)) {
                failures.push(format!("{label}: the attack did not run: {tail:?}"));
            }
        }
    }

    // The neighbours: honest and, on a GPU, timed as the baseline was.
    for id in &neighbours {
        let task = api.wait_task(id, TASK_DEADLINE).await;
        let r = &task["result"];
        log.line(&format!(
            "neighbour: {} {} candidate {:?} ms reference {:?} ms (cached {}) quiet wait {:?} ms floor {:?} ms ({} calls, batch {:?} ms, per call {:?} ms)",
            task["status"],
            r["verdict"],
            median(r, "runtime_ms"),
            median(r, "ref_runtime_ms"),
            r["ref_runtime_cached"],
            r["timing_check"]["quiet_wait_ms"].as_f64(),
            r["timing_check"]["floor_ms"].as_f64(),
            r["timing_check"]["calls"],
            r["timing_check"]["batch_ms"].as_f64(),
            r["timing_check"]["call_overhead_ms"].as_f64()
        ));
        if r["verdict"] != "ok" {
            failures.push(format!(
                "neighbour {id}: {} {} {}",
                task["status"], r["verdict"], r["error_message"]
            ));
        } else if gpu && !within_band(median(r, "runtime_ms"), band) {
            failures.push(format!(
                "neighbour {id}: candidate median {:?} ms, beyond {NEIGHBOUR_FACTOR}x the \
                 baseline's {:.4}-{:.4} ms",
                median(r, "runtime_ms"),
                band.0,
                band.1
            ));
        }
    }

    // Nothing poisoned: a last honest task takes the cached reference timing, which on a GPU
    // is still the baseline's.
    let last = api
        .submit(body(format!("{}\n# the last one\n", honest()), json!({})))
        .await;
    let last = api.wait_task(&last, TASK_DEADLINE).await;
    let r = &last["result"];
    log.line(&format!(
        "last honest: {} reference {:?} ms (cached {}) speedup {:?}",
        r["verdict"],
        median(r, "ref_runtime_ms"),
        r["ref_runtime_cached"],
        r["speedup"].as_f64()
    ));
    if r["verdict"] != "ok" {
        failures.push(format!("the last honest task: {}", r["verdict"]));
    }
    if gpu && !within(median(r, "ref_runtime_ms"), median(base, "ref_runtime_ms")) {
        failures.push(format!(
            "the reference timing moved: {:?} ms against the baseline's {:?} ms",
            median(r, "ref_runtime_ms"),
            median(base, "ref_runtime_ms")
        ));
    }
    failures.extend(services_died(&mut api_proc, &mut workers));
    assert!(
        failures.is_empty(),
        "{} measurement check(s) failed over {} attack tasks:\n{}",
        failures.len(),
        submitted.len(),
        failures.join("\n")
    );
}
