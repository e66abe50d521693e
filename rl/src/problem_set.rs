//! Problem sets: which registered problems a training run uses, which of them are held out,
//! and which a given step of an epoch takes (`GET /problem-sets`, `POST /problem-sets/batches`).
//! kernel_rl's dataset knobs, with the loop a trainer would otherwise write served by the API.
//!
//! Every order here comes from SHA-256 of the seed and the problem's content hash, never from
//! an RNG's state or a map's iteration order: every replica, every run and every client that
//! asks the same question gets the same answer, and a problem whose source changed moves (it is
//! a different problem). The exact bytes are written in [`split_key`] and [`epoch_key`].

use crucible_shared::bounds::{
    GROUP_SIZE, MAX_ROLLOUTS, PROBLEM_BATCH_SIZE, TEST_FRACTION, default_batch_size,
    default_group_size, default_problem_set_level, default_test_fraction, default_true,
};
use crucible_shared::error::ApiError;
use crucible_shared::problem::ProblemInfo;
use crucible_shared::request::Backend;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// Which problems form a set and how they split into train and test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProblemSetSelection {
    /// KernelBench level of the set's problems.
    #[serde(default = "default_problem_set_level")]
    #[schema(schema_with = crucible_shared::bounds::problem_set_level_schema)]
    pub level: u32,
    /// Smallest problem id taken (inclusive); left out, the level's first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u32>,
    /// Largest problem id taken (inclusive); left out, the level's last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u32>,
    /// What the kernels are written in; carried through for the rollouts. The split does not
    /// depend on it: a triton and a cuda run hold out the same problems.
    #[serde(default)]
    pub backend: Backend,
    /// Share of the selected problems held out as the test split, in [0, 1).
    #[serde(default = "default_test_fraction")]
    #[schema(schema_with = crucible_shared::bounds::test_fraction_schema)]
    pub test_fraction: f64,
    /// Seed of the split and of every epoch's shuffle (default 0).
    #[serde(default)]
    pub seed: u64,
}

impl Default for ProblemSetSelection {
    fn default() -> Self {
        Self {
            level: default_problem_set_level(),
            start: None,
            end: None,
            backend: Backend::default(),
            test_fraction: default_test_fraction(),
            seed: 0,
        }
    }
}

/// `GET /problem-sets`: the selection with `start`/`end` filled in, and its two splits, each
/// ordered by problem id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProblemSet {
    /// What was asked, `start` and `end` resolved to the ids actually bounding the set.
    pub selection: ProblemSetSelection,
    /// The problems trained on.
    pub train: Vec<ProblemInfo>,
    /// The problems held out: round(n × test_fraction) of the n selected (halves up), at most
    /// n − 1.
    pub test: Vec<ProblemInfo>,
}

/// One of a problem set's two parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// The problems trained on.
    #[default]
    Train,
    /// The held-out problems.
    Test,
}

impl Split {
    /// The wire name (`train`, `test`).
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
        }
    }
}

/// `POST /problem-sets/batches`: which step of which epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProblemBatchRequest {
    /// The problem set (as `GET /problem-sets`'s query); left out, every default.
    #[serde(default)]
    pub set: ProblemSetSelection,
    /// Which split the batch is drawn from (default `train`).
    #[serde(default)]
    pub split: Split,
    /// Epoch, from 0: each epoch has its own shuffle.
    pub epoch: u32,
    /// Step within the epoch, from 0 to `steps_per_epoch - 1`.
    pub step: u32,
    /// Problems per step.
    #[serde(default = "default_batch_size")]
    #[schema(schema_with = crucible_shared::bounds::batch_size_schema)]
    pub batch_size: u32,
    /// Rollouts per problem.
    #[serde(default = "default_group_size")]
    #[schema(schema_with = crucible_shared::bounds::group_size_schema)]
    pub group_size: u32,
    /// Shuffle the split's problems per epoch (by seed and epoch); false keeps id order.
    #[serde(default = "default_true")]
    pub shuffle: bool,
}

/// One problem of a step, with how many rollouts to sample for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchProblem {
    /// Level, id, name and hash, flattened into this object.
    #[serde(flatten)]
    pub info: ProblemInfo,
    /// Rollouts to sample for this problem (the request's `group_size`).
    pub group_size: u32,
}

/// The answer of `POST /problem-sets/batches`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProblemBatch {
    /// The split drawn from.
    pub split: Split,
    /// The epoch asked for.
    pub epoch: u32,
    /// The step asked for.
    pub step: u32,
    /// Steps in every epoch of this split: ceil(problems / batch_size).
    pub steps_per_epoch: u32,
    /// True for the epoch's last step: the next one is step 0 of the next epoch.
    pub last_step: bool,
    /// The set's backend, for the rollouts.
    pub backend: Backend,
    /// `batch_size` problems (fewer on an epoch's last step when they do not divide evenly).
    pub problems: Vec<BatchProblem>,
}

/// The split order of a problem: SHA-256 of the seed (8 bytes, big-endian), `"split"` and the
/// problem's content hash as written in [`ProblemInfo::hash`]; the smallest keys are held out.
pub fn split_key(seed: u64, hash: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(seed.to_be_bytes());
    h.update(b"split");
    h.update(hash.as_bytes());
    h.finalize().into()
}

/// The shuffled order of a problem in `epoch`: SHA-256 of the seed (8 bytes, big-endian),
/// `"epoch"`, the epoch (4 bytes, big-endian) and the content hash, ascending.
pub fn epoch_key(seed: u64, epoch: u32, hash: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(seed.to_be_bytes());
    h.update(b"epoch");
    h.update(epoch.to_be_bytes());
    h.update(hash.as_bytes());
    h.finalize().into()
}

/// How many of `n` problems are held out: round(n × fraction), halves up, at most n − 1 so
/// the train split is never empty.
pub fn test_count(n: usize, fraction: f64) -> usize {
    ((n as f64 * fraction).round() as usize).min(n.saturating_sub(1))
}

/// `problems` sorted by `key`, ties (identical sources) by level and id.
fn sort_by_key<K: Ord>(problems: &mut [ProblemInfo], key: impl Fn(&ProblemInfo) -> K) {
    problems.sort_by_cached_key(|p| (key(p), p.level, p.id));
}

/// The problem set `selection` names among `registry` (every registered problem); errors name
/// the field at fault, after `prefix` (`set.` in a batch request).
pub fn problem_set(
    selection: &ProblemSetSelection,
    registry: &[ProblemInfo],
    prefix: &str,
) -> Result<ProblemSet, ApiError> {
    let field = |name: &str| format!("{prefix}{name}");
    let f = selection.test_fraction;
    if !(TEST_FRACTION.min..TEST_FRACTION.max).contains(&f) {
        return Err(ApiError::invalid(
            &field("test_fraction"),
            format!("{f} is outside [0, 1)"),
        ));
    }
    let level: Vec<&ProblemInfo> = registry
        .iter()
        .filter(|p| p.level == selection.level)
        .collect();
    let (Some(first), Some(last)) = (
        level.iter().map(|p| p.id).min(),
        level.iter().map(|p| p.id).max(),
    ) else {
        let mut levels: Vec<u32> = registry.iter().map(|p| p.level).collect();
        levels.dedup();
        let known = levels
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ApiError::invalid(
            &field("level"),
            format!(
                "no registered problem has level {} (levels with problems: {})",
                selection.level,
                if known.is_empty() { "none" } else { &known }
            ),
        ));
    };
    let (start, end) = (
        selection.start.unwrap_or(first),
        selection.end.unwrap_or(last),
    );
    if start > end {
        return Err(ApiError::invalid(
            &field("start"),
            format!("start {start} is after end {end}"),
        ));
    }
    let mut chosen: Vec<ProblemInfo> = level
        .into_iter()
        .filter(|p| (start..=end).contains(&p.id))
        .cloned()
        .collect();
    if chosen.is_empty() {
        return Err(ApiError::invalid(
            &field("start"),
            format!(
                "no level {} problem has an id in {start}-{end} (its ids run {first}-{last})",
                selection.level
            ),
        ));
    }
    sort_by_key(&mut chosen, |p| split_key(selection.seed, &p.hash));
    let mut train = chosen.split_off(test_count(chosen.len(), f));
    let mut test = chosen;
    for part in [&mut train, &mut test] {
        part.sort_by_key(|p| p.id);
    }
    let resolved = ProblemSetSelection {
        start: Some(start),
        end: Some(end),
        ..selection.clone()
    };
    Ok(ProblemSet {
        selection: resolved,
        train,
        test,
    })
}

/// The problems of one step: the split's problems in the epoch's order (shuffled by
/// [`epoch_key`], or by id), `batch_size` at a time. A step past the epoch is a 422 naming
/// `step` that says how many there are.
pub fn problem_batch(
    request: &ProblemBatchRequest,
    registry: &[ProblemInfo],
) -> Result<ProblemBatch, ApiError> {
    for (name, value, bounds) in [
        ("batch_size", request.batch_size, PROBLEM_BATCH_SIZE),
        ("group_size", request.group_size, GROUP_SIZE),
    ] {
        if !(bounds.min..=bounds.max).contains(&value) {
            return Err(ApiError::invalid(
                name,
                format!("{value} is out of range {}-{}", bounds.min, bounds.max),
            ));
        }
    }
    let rollouts = request.batch_size as usize * request.group_size as usize;
    if rollouts > MAX_ROLLOUTS {
        return Err(ApiError::invalid(
            "group_size",
            format!(
                "batch_size × group_size is {rollouts}; one step must fit one POST /rollouts \
                 (at most {MAX_ROLLOUTS})"
            ),
        ));
    }
    let set = problem_set(&request.set, registry, "set.")?;
    let mut problems = match request.split {
        Split::Train => set.train,
        Split::Test => set.test,
    };
    if request.shuffle {
        let (seed, epoch) = (request.set.seed, request.epoch);
        sort_by_key(&mut problems, |p| epoch_key(seed, epoch, &p.hash));
    }
    let batch_size = request.batch_size as usize;
    let steps = problems.len().div_ceil(batch_size);
    let step = request.step as usize;
    let split = request.split.as_str();
    if steps == 0 {
        return Err(ApiError::invalid(
            "split",
            format!("the {split} split is empty (test_fraction rounds to no problem)"),
        ));
    }
    if step >= steps {
        return Err(ApiError::invalid(
            "step",
            format!(
                "step {step} is past the epoch: the {split} split's {n} problems make {steps} \
                 steps of batch_size {batch_size} (0-{last})",
                n = problems.len(),
                last = steps - 1,
            ),
        ));
    }
    let end = (step * batch_size + batch_size).min(problems.len());
    Ok(ProblemBatch {
        split: request.split,
        epoch: request.epoch,
        step: request.step,
        steps_per_epoch: steps as u32,
        last_step: step + 1 == steps,
        backend: request.set.backend,
        problems: problems[step * batch_size..end]
            .iter()
            .map(|info| BatchProblem {
                info: info.clone(),
                group_size: request.group_size,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests;
