//! `crucible workers drain <id>`: the admin drains a worker (`POST /admin/workers/{id}/drain`)
//! for a rolling restart (docs/OPERATIONS.md), with the admin token (`--token` or
//! `CRUCIBLE_TOKEN`).

use crate::Remote;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum WorkersCommand {
    /// Drain a worker: it stops claiming, finishes what is on its device, deregisters and
    /// exits (its supervisor starts a fresh one).
    Drain {
        /// The worker's id, as `crucible status` lists it.
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn run(command: WorkersCommand) -> anyhow::Result<()> {
    let answer = match command {
        WorkersCommand::Drain { id, remote } => {
            serde_json::to_value(remote.client().drain_worker(&id).await?)?
        }
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}
