//! `crucible cancel <id>`: cancel a task (`t_...`) or every open task of a batch (`b_...`, a
//! rollout batch's too) on a running service, and print the server's answer.

use crate::Remote;
use anyhow::bail;
use crucible_client::ClientError;
use crucible_shared::{ApiErrorCode, BatchId, TaskId};

/// What an id names, told by its prefix.
#[derive(Debug, PartialEq)]
enum Target {
    Task(TaskId),
    Batch(BatchId),
}

fn target(id: &str) -> anyhow::Result<Target> {
    if id.starts_with(TaskId::PREFIX) {
        Ok(Target::Task(TaskId::from(id)))
    } else if id.starts_with(BatchId::PREFIX) {
        Ok(Target::Batch(BatchId::from(id)))
    } else {
        bail!(
            "{id:?} is neither a task id ({}...) nor a batch id ({}...)",
            TaskId::PREFIX,
            BatchId::PREFIX
        )
    }
}

/// Cancels `id` on the service `remote` names and prints the answer: the task's status before,
/// or the batch's counts. A task that already finished (the API's 409 `CONFLICT`) is said so
/// on stderr and is no failure, as a finished batch is not (its tasks count as already
/// finished): either way nothing of it runs any more, which is what was asked. Any other
/// error, an unknown id's `NOT_FOUND` first, fails with the API's code and message.
pub async fn run(id: &str, remote: Remote) -> anyhow::Result<()> {
    let client = remote.client();
    let answer = match target(id)? {
        Target::Task(task) => match client.cancel_task(&task).await {
            Ok(answer) => serde_json::to_string_pretty(&answer)?,
            Err(ClientError::Api { error, .. }) if error.code == ApiErrorCode::Conflict => {
                eprintln!("nothing to cancel: {error}");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        },
        Target::Batch(batch) => serde_json::to_string_pretty(&client.cancel_batch(&batch).await?)?,
    };
    println!("{answer}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_tells_a_task_from_a_batch() {
        assert_eq!(target("t_1").unwrap(), Target::Task(TaskId::from("t_1")));
        assert_eq!(target("b_1").unwrap(), Target::Batch(BatchId::from("b_1")));
        let refused = target("w_1").unwrap_err().to_string();
        assert!(refused.contains("neither a task id (t_...)"), "{refused}");
    }
}
