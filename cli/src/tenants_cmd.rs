//! `crucible tenants create|list|delete`: the admin's side of tenants, with the admin token
//! (`--token` or `CRUCIBLE_TOKEN`). `create` prints the tenant and its token, which the server
//! shows this once.

use crate::Remote;
use clap::Subcommand;
use crucible_shared::CreateTenantRequest;

#[derive(Subcommand)]
pub enum TenantsCommand {
    /// Create a tenant and print it with its token (shown this once).
    Create {
        /// The tenant's name, unique among tenants.
        name: String,
        /// Most tasks it may have queued at once (default: only the global queue cap).
        #[arg(long)]
        max_queued: Option<u64>,
        /// Its share of the workers while several tenants have queued work (1-1000).
        #[arg(long)]
        weight: Option<u32>,
        /// Read and fill the result cache shared by every tenant created with this flag.
        #[arg(long)]
        share_cache: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// List every tenant with its settings and open tasks.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Delete a tenant: its token stops working and its open tasks are cancelled.
    Delete {
        /// The tenant to delete, by name.
        name: String,
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn run(command: TenantsCommand) -> anyhow::Result<()> {
    let answer = match command {
        TenantsCommand::Create {
            name,
            max_queued,
            weight,
            share_cache,
            remote,
        } => {
            let request = CreateTenantRequest {
                name,
                max_queued,
                weight,
                share_cache,
            };
            serde_json::to_value(remote.client().create_tenant(&request).await?)?
        }
        TenantsCommand::List { remote } => serde_json::to_value(remote.client().tenants().await?)?,
        TenantsCommand::Delete { name, remote } => {
            serde_json::to_value(remote.client().delete_tenant(&name).await?)?
        }
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}
