//! Who a task child becomes. A root worker hands each child one of its sandbox users (the
//! least used at that moment); an unprivileged worker cannot change uid, so its children keep
//! the worker's ids inside a user namespace and give up every capability there.

use super::SandboxError;
use std::sync::{Arc, Mutex};

/// The identity one child enters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The worker is root: the child becomes this unprivileged user.
    User {
        /// The user as configured (a name, or a numeric uid).
        name: String,
        /// Its uid.
        uid: u32,
        /// Its primary gid.
        gid: u32,
    },
    /// The worker is not root: the worker's own ids, mapped in a user namespace.
    Namespace {
        /// The worker's uid.
        uid: u32,
        /// The worker's gid.
        gid: u32,
    },
}

impl Identity {
    /// The uid and gid the child runs as.
    pub fn ids(&self) -> (u32, u32) {
        match self {
            Identity::User { uid, gid, .. } | Identity::Namespace { uid, gid } => (*uid, *gid),
        }
    }

    /// How a report names it.
    pub fn describe(&self) -> String {
        match self {
            Identity::User { name, uid, .. } => format!("{name} (uid {uid})"),
            Identity::Namespace { uid, .. } => format!("user namespace of uid {uid}"),
        }
    }
}

/// The identities children of one worker take in turn.
#[derive(Debug, Clone)]
pub struct Identities {
    choices: Arc<Vec<Identity>>,
    /// Children holding each choice right now.
    in_use: Arc<Mutex<Vec<u32>>>,
}

impl Identities {
    /// For a root worker: resolves each configured user (a name from the user database, or a
    /// numeric uid, which then also serves as its gid when the database has no entry).
    pub fn users(names: &[String]) -> Result<Self, SandboxError> {
        let mut choices = Vec::new();
        for name in names {
            let found = match name.parse::<u32>() {
                Ok(uid) => nix::unistd::User::from_uid(uid.into())
                    .ok()
                    .flatten()
                    .map(|u| (u.name, uid, u.gid.as_raw()))
                    .or(Some((format!("uid-{uid}"), uid, uid))),
                Err(_) => nix::unistd::User::from_name(name)
                    .ok()
                    .flatten()
                    .map(|u| (u.name, u.uid.as_raw(), u.gid.as_raw())),
            };
            let Some((name, uid, gid)) = found else {
                return Err(SandboxError::Config(format!(
                    "sandbox user {name:?} does not exist (create it, e.g. with deploy/install.sh, or set CRUCIBLE_SANDBOX_USERS)"
                )));
            };
            if uid == 0 || gid == 0 {
                return Err(SandboxError::Config(format!(
                    "sandbox user {name:?} is root (uid {uid}, gid {gid}): task children must never be root"
                )));
            }
            choices.push(Identity::User { name, uid, gid });
        }
        Ok(Self::of(choices))
    }

    /// For an unprivileged worker: its own ids, in a user namespace.
    pub fn own_namespace() -> Self {
        Self::of(vec![Identity::Namespace {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        }])
    }

    fn of(choices: Vec<Identity>) -> Self {
        let n = choices.len();
        Self {
            choices: Arc::new(choices),
            in_use: Arc::new(Mutex::new(vec![0; n])),
        }
    }

    /// The least used identity, held until the lease is dropped.
    pub(crate) fn acquire(&self) -> IdentityLease {
        let mut in_use = self.in_use.lock().expect("identity lock");
        let index = (0..in_use.len())
            .min_by_key(|&i| in_use[i])
            .expect("at least one identity");
        in_use[index] += 1;
        IdentityLease {
            identity: self.choices[index].clone(),
            index,
            in_use: self.in_use.clone(),
        }
    }

    /// How reports name them all.
    pub fn describe(&self) -> String {
        let names: Vec<String> = self.choices.iter().map(Identity::describe).collect();
        names.join(", ")
    }
}

/// One child's identity; given back when dropped.
#[derive(Debug)]
pub(crate) struct IdentityLease {
    /// The identity the child enters.
    pub identity: Identity,
    index: usize,
    in_use: Arc<Mutex<Vec<u32>>>,
}

impl Drop for IdentityLease {
    fn drop(&mut self) {
        if let Ok(mut in_use) = self.in_use.lock() {
            in_use[self.index] = in_use[self.index].saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_take_the_least_used_user_and_give_it_back() {
        let pool = Identities::users(&["61001".to_owned(), "61002".to_owned()]).unwrap();
        let a = pool.acquire();
        let b = pool.acquire();
        assert_ne!(a.identity, b.identity, "two children at once get two users");
        let a_ids = a.identity.ids();
        drop(a);
        let c = pool.acquire();
        assert_eq!(c.identity.ids(), a_ids, "the freed user is the least used");
        let d = pool.acquire();
        assert!(
            matches!(d.identity, Identity::User { .. }),
            "more children than users share"
        );
    }

    #[test]
    fn root_and_unknown_users_are_refused() {
        let err = Identities::users(&["root".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("never be root"), "{err}");
        let err = Identities::users(&["no-such-user-crucible".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        let nobody = Identities::users(&["nobody".to_owned()]).unwrap();
        assert_eq!(nobody.acquire().identity.ids().0, 65534);
    }
}
