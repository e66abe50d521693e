//! Identifiers. Each is a newtype over a string so a task id can never be passed where a worker
//! id is expected; on the wire they are plain strings.

use serde::{Deserialize, Serialize};
use std::fmt;
use utoipa::ToSchema;

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
        #[serde(transparent)]
        #[schema(value_type = String)]
        pub struct $name(pub String);

        impl $name {
            /// What every id of this kind made by [`Self::random`] starts with.
            pub const PREFIX: &'static str = $prefix;

            /// A fresh random id.
            pub fn random() -> Self {
                Self(format!("{}{}", Self::PREFIX, uuid::Uuid::new_v4().simple()))
            }

            /// The id as it appears on the wire and in Redis keys.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }
    };
}

string_id!(
    /// One evaluation task.
    TaskId,
    "t_"
);
string_id!(
    /// A group of tasks submitted together.
    BatchId,
    "b_"
);
string_id!(
    /// A worker process (one per device); chosen by the worker, stable across its heartbeats.
    WorkerId,
    "w_"
);
string_id!(
    /// The fencing token of one lease: only its holder may renew, complete or release it.
    LeaseToken,
    "l_"
);
string_id!(
    /// A tenant: who submitted a task or batch. Chosen by the broker when the tenant is
    /// created and never reused, so a tenant created again under a deleted one's name owns
    /// none of the deleted one's tasks. Internal: the API names tenants by name.
    TenantId,
    "tn_"
);

/// Id of the built-in tenant; random ids are `tn_` and 32 hex digits, so none can equal it.
const BUILTIN_TENANT_ID: &str = "tn_admin";

impl TenantId {
    /// The built-in tenant: the admin, and every caller when authentication is off.
    pub fn builtin() -> Self {
        Self(BUILTIN_TENANT_ID.to_owned())
    }

    /// Whether this is [`TenantId::builtin`], which has no stored record: brokers answer for
    /// it without looking it up.
    pub fn is_builtin(&self) -> bool {
        self.0 == BUILTIN_TENANT_ID
    }
}

string_id!(
    /// A multi-turn episode (`POST /episodes`).
    EpisodeId,
    "e_"
);
string_id!(
    /// The episodes of one problem started together (a GRPO group).
    EpisodeGroupId,
    "g_"
);
