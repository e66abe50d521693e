//! The split and the batches against orders computed outside Rust (Python's hashlib over the
//! bytes [`split_key`] and [`epoch_key`] document), and every refusal naming its field.

use super::*;
use crucible_shared::problem::problem_hash;

/// Ten level-1 problems with ids 1-10 (sources `problem {id}`) and one of level 2.
fn registry() -> Vec<ProblemInfo> {
    let mut r: Vec<ProblemInfo> = (1..=10)
        .map(|id| ProblemInfo {
            level: 1,
            id,
            name: format!("P{id}"),
            hash: problem_hash(&format!("problem {id}")),
        })
        .collect();
    r.push(ProblemInfo {
        level: 2,
        id: 1,
        name: "Chain".into(),
        hash: problem_hash("chain"),
    });
    r
}

fn ids(problems: &[ProblemInfo]) -> Vec<u32> {
    problems.iter().map(|p| p.id).collect()
}

fn selection(test_fraction: f64, seed: u64) -> ProblemSetSelection {
    ProblemSetSelection {
        test_fraction,
        seed,
        ..ProblemSetSelection::default()
    }
}

fn batch(seed: u64, epoch: u32, step: u32, batch_size: u32) -> ProblemBatchRequest {
    ProblemBatchRequest {
        set: selection(0.3, seed),
        split: Split::Train,
        epoch,
        step,
        batch_size,
        group_size: 4,
        shuffle: true,
    }
}

#[test]
fn the_split_holds_out_the_smallest_keys() {
    // Python: sorted(ids, key=sha256(pack(">Q", seed) + b"split" + hash)) [:3].
    let set = problem_set(&selection(0.3, 0), &registry(), "").unwrap();
    assert_eq!(ids(&set.test), [1, 4, 6]);
    assert_eq!(ids(&set.train), [2, 3, 5, 7, 8, 9, 10]);
    assert_eq!(set.selection.start, Some(1));
    assert_eq!(set.selection.end, Some(10));
    let other = problem_set(&selection(0.3, 7), &registry(), "").unwrap();
    assert_eq!(ids(&other.test), [3, 5, 8]);
    // The same question, the same answer, whatever order the registry lists its problems in.
    let mut reversed = registry();
    reversed.reverse();
    assert_eq!(problem_set(&selection(0.3, 0), &reversed, "").unwrap(), set);
}

#[test]
fn start_and_end_bound_the_ids_and_the_count_rounds_halves_up() {
    let s = ProblemSetSelection {
        start: Some(3),
        end: Some(7),
        ..selection(0.1, 0)
    };
    let set = problem_set(&s, &registry(), "").unwrap();
    // 5 × 0.1 = 0.5 rounds up to 1.
    assert_eq!((set.train.len(), set.test.len()), (4, 1));
    assert!(
        set.train
            .iter()
            .chain(&set.test)
            .all(|p| (3..=7).contains(&p.id))
    );
    assert_eq!(test_count(10, 0.1), 1);
    assert_eq!(test_count(10, 0.25), 3);
    assert_eq!(test_count(10, 0.0), 0);
    assert_eq!(test_count(2, 0.75), 1, "never the whole set");
    assert_eq!(test_count(1, 0.5), 0);
}

#[test]
fn bad_selections_name_their_field() {
    let r = registry();
    let field = |s: ProblemSetSelection| problem_set(&s, &r, "set.").unwrap_err().field;
    let named = |name: &str| Some(name.to_owned());
    assert_eq!(
        field(ProblemSetSelection {
            level: 3,
            ..Default::default()
        }),
        named("set.level")
    );
    for bad in [1.0, -0.1, f64::NAN] {
        assert_eq!(
            field(selection(bad, 0)),
            named("set.test_fraction"),
            "{bad}"
        );
    }
    let reversed = ProblemSetSelection {
        start: Some(5),
        end: Some(4),
        ..Default::default()
    };
    assert_eq!(field(reversed), named("set.start"));
    let empty = ProblemSetSelection {
        start: Some(50),
        end: Some(60),
        ..Default::default()
    };
    assert_eq!(field(empty), named("set.start"));
    let err = problem_set(
        &ProblemSetSelection {
            level: 3,
            ..Default::default()
        },
        &r,
        "",
    )
    .unwrap_err();
    assert_eq!(err.http_status(), 422);
    assert!(
        err.message.contains("levels with problems: 1, 2"),
        "{}",
        err.message
    );
}

#[test]
fn batches_walk_the_epochs_shuffle_by_batch_size() {
    let r = registry();
    // Python: the train split [2, 3, 5, 7, 8, 9, 10] sorted by
    // sha256(pack(">Q", 0) + b"epoch" + pack(">I", epoch) + hash).
    let epoch0 = [3, 2, 5, 7, 10, 8, 9];
    let epoch1 = [7, 9, 2, 8, 3, 5, 10];
    for (epoch, order) in [(0, epoch0), (1, epoch1)] {
        let steps: Vec<ProblemBatch> = (0..3)
            .map(|step| problem_batch(&batch(0, epoch, step, 3), &r).unwrap())
            .collect();
        let got: Vec<u32> = steps
            .iter()
            .flat_map(|b| b.problems.iter().map(|p| p.info.id))
            .collect();
        assert_eq!(got, order, "epoch {epoch}");
        assert!(steps.iter().all(|b| b.steps_per_epoch == 3));
        assert_eq!(
            steps.iter().map(|b| b.last_step).collect::<Vec<_>>(),
            [false, false, true]
        );
        assert_eq!(
            steps[2].problems.len(),
            1,
            "the last step holds what is left"
        );
        assert!(
            steps
                .iter()
                .flat_map(|b| &b.problems)
                .all(|p| p.group_size == 4)
        );
    }
    let unshuffled = ProblemBatchRequest {
        shuffle: false,
        ..batch(0, 1, 0, 3)
    };
    let b = problem_batch(&unshuffled, &r).unwrap();
    assert_eq!(
        b.problems.iter().map(|p| p.info.id).collect::<Vec<_>>(),
        [2, 3, 5]
    );
}

#[test]
fn steps_past_the_epoch_and_oversized_steps_are_refused() {
    let r = registry();
    let err = problem_batch(&batch(0, 0, 3, 3), &r).unwrap_err();
    assert_eq!(err.field.as_deref(), Some("step"));
    assert!(err.message.contains("make 3 steps"), "{}", err.message);
    let big = ProblemBatchRequest {
        group_size: 300,
        ..batch(0, 0, 0, 4)
    };
    assert_eq!(
        problem_batch(&big, &r).unwrap_err().field.as_deref(),
        Some("group_size")
    );
    let zero = ProblemBatchRequest {
        batch_size: 0,
        ..batch(0, 0, 0, 4)
    };
    assert_eq!(
        problem_batch(&zero, &r).unwrap_err().field.as_deref(),
        Some("batch_size")
    );
    let no_test = ProblemBatchRequest {
        set: selection(0.0, 0),
        split: Split::Test,
        ..batch(0, 0, 0, 4)
    };
    assert_eq!(
        problem_batch(&no_test, &r).unwrap_err().field.as_deref(),
        Some("split")
    );
}

#[test]
fn the_request_defaults_are_kernel_rls() {
    let r: ProblemBatchRequest = serde_json::from_str(r#"{"epoch": 0, "step": 1}"#).unwrap();
    assert_eq!(
        (r.batch_size, r.group_size, r.shuffle, r.split),
        (4, 4, true, Split::Train)
    );
    assert_eq!(r.set, ProblemSetSelection::default());
    assert_eq!(
        (r.set.level, r.set.test_fraction, r.set.backend),
        (1, 0.1, Backend::Triton)
    );
    let unknown = serde_json::from_str::<ProblemBatchRequest>(r#"{"epoch":0,"step":0,"x":1}"#);
    assert!(unknown.is_err());
}
