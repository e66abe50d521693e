//! The report's arithmetic against figures worked out by hand.

use super::*;

fn judged(verdict: Verdict, speedup: Option<f64>) -> SampleOutcome {
    SampleOutcome::Judged { verdict, speedup }
}

fn sample(level: Option<u32>, outcome: SampleOutcome) -> Sample {
    Sample { level, outcome }
}

#[test]
fn fast_p_is_over_every_sample_and_the_means_over_the_correct_timed_ones() {
    use Verdict::*;
    let l1 = Some(1);
    let samples = [
        sample(l1, judged(Ok, Some(2.0))),
        sample(l1, judged(Ok, Some(0.5))),
        sample(l1, judged(Ok, Some(1.2))),
        sample(l1, judged(Ok, None)),
        sample(l1, judged(Decoy, Some(3.0))),
        sample(l1, judged(Hack, Some(800.0))),
        sample(l1, judged(Incorrect, None)),
        sample(l1, SampleOutcome::Unscored),
        sample(Some(2), judged(Ok, Some(4.0))),
        sample(Some(2), judged(Error, None)),
        sample(None, SampleOutcome::NoKernel),
        sample(None, SampleOutcome::Pending),
    ];
    let report = BatchReport::of(BatchId("b".into()), ReportSource::Rollouts, &samples);
    let [one, two, none] = &report.levels[..] else {
        panic!("{:?}", report.levels)
    };
    assert_eq!((one.level, two.level, none.level), (Some(1), Some(2), None));

    // Level 1: 8 samples, 4 ok; timed correct speedups 2.0, 0.5, 1.2.
    assert_eq!((one.samples, one.correct, one.timed), (8, 4, 3));
    assert_eq!(one.correct_rate, 0.5);
    let counts: Vec<usize> = one.fast_p.iter().map(|f| f.count).collect();
    // > 0: 3; > 1: 2.0, 1.2; > 1.2: 2.0 only (1.2 is not above 1.2); > 1.5: 2.0; > 2: none.
    assert_eq!(counts, [3, 2, 1, 1, 0]);
    assert_eq!(one.fast(1.0), 2.0 / 8.0);
    assert_eq!(one.fast(2.0), 0.0);
    assert_eq!(one.mean_speedup, Some(3.7 / 3.0));
    // (2 × 0.5 × 1.2)^(1/3) = 1.2^(1/3).
    assert!((one.geomean_speedup.unwrap() - 1.2f64.powf(1.0 / 3.0)).abs() < 1e-12);
    assert_eq!(
        (one.hacks, one.decoys, one.incorrect, one.unscored),
        (1, 1, 1, 1)
    );

    assert_eq!((two.samples, two.correct, two.errors), (2, 1, 1));
    assert_eq!(two.fast(2.0), 0.5);
    assert_eq!(two.geomean_speedup, Some(4.0));

    assert_eq!(
        (none.samples, none.no_kernel, none.pending, none.correct),
        (2, 1, 1, 0)
    );
    assert_eq!((none.mean_speedup, none.geomean_speedup), (None, None));

    // Overall: 12 samples, 5 ok; fast_1 = {2.0, 1.2, 4.0} = 3/12.
    let all = &report.overall;
    assert_eq!((all.level, all.samples, all.correct), (None, 12, 5));
    assert_eq!(all.fast(0.0), 4.0 / 12.0);
    assert_eq!(all.fast(1.0), 3.0 / 12.0);
    assert_eq!(all.fast(1.5), 2.0 / 12.0);
    assert_eq!(all.mean_speedup, Some(7.7 / 4.0));
    assert!(!report.done, "a pending sample leaves the report open");
}

#[test]
fn an_empty_group_has_zero_rates_and_no_means() {
    let g = GroupReport::of(Some(1), &[]);
    assert_eq!((g.samples, g.correct_rate, g.fast(0.0)), (0, 0.0, 0.0));
    assert_eq!((g.mean_speedup, g.geomean_speedup), (None, None));
    let report = BatchReport::of(BatchId("b".into()), ReportSource::Evaluations, &[]);
    assert!(report.done && report.levels.is_empty());
}

#[test]
fn tasks_map_to_outcomes_by_status() {
    use crucible_shared::ids::TaskId;
    let view = |status| TaskView {
        task_id: TaskId("t".into()),
        status,
        result: None,
        error: None,
        attempts: 0,
        worker_id: None,
        priority: Default::default(),
        device_class: None,
        batch_id: None,
        submitted_at: chrono::Utc::now(),
        started_at: None,
        finished_at: None,
        cached: false,
    };
    assert_eq!(SampleOutcome::of_task(None), SampleOutcome::Unscored);
    for (status, outcome) in [
        (TaskStatus::Queued, SampleOutcome::Pending),
        (TaskStatus::Running, SampleOutcome::Pending),
        (TaskStatus::Failed, SampleOutcome::Unscored),
        (TaskStatus::Cancelled, SampleOutcome::Unscored),
        (TaskStatus::Done, SampleOutcome::Unscored),
    ] {
        assert_eq!(
            SampleOutcome::of_task(Some(&view(status))),
            outcome,
            "{status:?}"
        );
    }
}
