//! Where a submission's tasks may run, decided at submission from the worker registry: a named
//! device class must have a live worker (else 422 `DEVICE_CLASS_UNAVAILABLE`), and in a batch
//! the tasks that name none are placed group by group on one class each, so that a GRPO group's
//! speedups never come from two kinds of device. A group is the tasks of one batch that evaluate
//! the same reference: the samples of one problem. The rules are `crucible_shared::placement`'s;
//! this module reads the registry and the queue for them.
//!
//! The check is a convenience against typos and missing hardware, not a guarantee: workers
//! come and go, and a task queued for a class whose workers all stop stays queued (shown
//! `unservable` in `/queue/status`) until one returns or it is cancelled.

use crate::error::HttpError;
use crate::state::AppState;
use crucible_shared::{EvaluateRequest, LiveClasses, QueuedByClass, problem_hash};
use std::collections::BTreeMap;

async fn live(state: &AppState) -> Result<LiveClasses, HttpError> {
    Ok(LiveClasses::of(&state.broker.list_workers().await?))
}

/// `POST /evaluate`: the request's class, if it names one, has a live worker. A request
/// without one runs on any worker, as a single task has no group to keep together.
pub async fn check(state: &AppState, request: &EvaluateRequest) -> Result<(), HttpError> {
    if let Some(class) = &request.device_class {
        live(state).await?.require(class, "device_class")?;
    }
    Ok(())
}

/// A batch's requests: every class named has a live worker (`field(i)` names the field of
/// request `i` in the error), and each group of the requests that name none gets one live class,
/// GPU classes first and by their free capacity (`LiveClasses::place`). With no live worker at
/// all they stay unclassed: there is nothing to choose from, and any worker may take them.
pub async fn place_batch(
    state: &AppState,
    requests: &mut [EvaluateRequest],
    field: impl Fn(usize) -> String,
) -> Result<(), HttpError> {
    if requests.is_empty() {
        return Ok(());
    }
    let live = live(state).await?;
    for (i, request) in requests.iter().enumerate() {
        if let Some(class) = &request.device_class {
            live.require(class, &field(i))?;
        }
    }
    let group = |r: &EvaluateRequest| problem_hash(&r.reference_code);
    let mut groups: BTreeMap<String, u64> = BTreeMap::new();
    for request in requests.iter().filter(|r| r.device_class.is_none()) {
        *groups.entry(group(request)).or_default() += 1;
    }
    if groups.is_empty() {
        return Ok(());
    }
    let queued: QueuedByClass = state
        .broker
        .queue_status()
        .await?
        .classes
        .unwrap_or_default()
        .into_iter()
        .map(|row| (row.device_class, row.queued))
        .collect();
    let placed = live.place(&groups, &queued);
    for request in requests.iter_mut().filter(|r| r.device_class.is_none()) {
        request.device_class = placed.get(&group(request)).cloned();
    }
    Ok(())
}
