//! The ACL grants each role's user must have, derived from the key table, and the check that
//! `deploy/redis.conf` has exactly those: a key added to the table and not granted, or granted
//! and not in the table, fails a test naming the key and the user.

use super::{Access, Family, Grant, Role, TABLE, kv_owner};
use crate::kv::KvNamespace;
use std::collections::{BTreeMap, BTreeSet};

impl Role {
    /// Its ACL user in `deploy/redis.conf`.
    pub(crate) fn user(self) -> &'static str {
        match self {
            Role::Api => "crucible-api",
            Role::Worker => "crucible-worker",
        }
    }
}

impl Access {
    /// The ACL's spelling of a key pattern with this access.
    fn spell(self, pattern: &str) -> String {
        match self {
            Access::No => String::new(),
            Access::Read => format!("%R~{pattern}"),
            Access::Write => format!("%W~{pattern}"),
            Access::Both => format!("~{pattern}"),
        }
    }
}

/// A role's key grants: top-level patterns with their access, and selectors (their commands,
/// sorted, → the patterns they cover); each with the families it stands for, to name them.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Grants {
    pub(crate) keys: BTreeMap<String, (Access, Vec<&'static str>)>,
    pub(crate) selectors: BTreeMap<Vec<String>, BTreeMap<String, Vec<&'static str>>>,
}

/// The patterns that grant `family` to `role`, under `prefix`.
fn patterns(family: &Family, role: Role, prefix: &str) -> Vec<String> {
    match family.grant {
        Grant::Own => {
            let head = family.name.split('{').next().unwrap_or_default();
            let star = if head.len() < family.name.len() {
                "*"
            } else {
                ""
            };
            vec![format!("{prefix}:{head}{star}")]
        }
        Grant::Under(pattern) => vec![format!("{prefix}:{pattern}")],
        Grant::PerKvNamespace => KvNamespace::ALL
            .into_iter()
            .filter(|ns| kv_owner(*ns) == role)
            .map(|ns| format!("{prefix}:kv:{}:{ns}:*", ns.as_str().len()))
            .collect(),
    }
}

/// What the key table says `role`'s user must be granted.
pub(crate) fn expected(role: Role, prefix: &str) -> Grants {
    let mut g = Grants::default();
    for f in TABLE {
        let reach = f.reach(role);
        for p in patterns(f, role, prefix) {
            if reach.keys != Access::No {
                let e = g.keys.entry(p.clone()).or_insert((reach.keys, Vec::new()));
                e.1.push(f.name);
            }
            if !reach.only.is_empty() {
                let mut cmds: Vec<String> = reach.only.iter().map(|c| c.to_string()).collect();
                cmds.sort();
                let s = g.selectors.entry(cmds).or_default();
                s.entry(p).or_default().push(f.name);
            }
        }
    }
    g
}

/// The grants of `user`'s line in a redis.conf text, or `None` when it has no such line.
pub(crate) fn granted(conf: &str, user: &str) -> Option<Grants> {
    let line = conf
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["user", user]))?;
    let mut g = Grants::default();
    let mut selector: Option<(Vec<String>, Vec<String>)> = None;
    for token in line.split_whitespace().skip(2) {
        let open = token.strip_prefix('(');
        let inner = open.unwrap_or(token);
        let (inner, close) = match inner.strip_suffix(')') {
            Some(i) => (i, true),
            None => (inner, false),
        };
        if open.is_some() {
            selector = Some((Vec::new(), Vec::new()));
        }
        if let Some((pats, cmds)) = selector.as_mut() {
            match inner.strip_prefix('~') {
                Some(p) => pats.push(p.to_owned()),
                None => cmds.push(inner.trim_start_matches('+').to_owned()),
            }
            if close {
                let (pats, mut cmds) = selector.take().unwrap_or_default();
                cmds.sort();
                let s = g.selectors.entry(cmds).or_default();
                for p in pats {
                    s.insert(p, Vec::new());
                }
            }
            continue;
        }
        let key = if let Some(p) = inner.strip_prefix("%R~") {
            Some((p, Access::Read))
        } else if let Some(p) = inner.strip_prefix("%W~") {
            Some((p, Access::Write))
        } else if let Some(p) = inner.strip_prefix("%RW~") {
            Some((p, Access::Both))
        } else {
            inner.strip_prefix('~').map(|p| (p, Access::Both))
        };
        if let Some((p, a)) = key {
            g.keys.insert(p.to_owned(), (a, Vec::new()));
        }
    }
    Some(g)
}

/// Every difference between what the table asks for `role` and what `conf` grants its user,
/// one sentence each (none when they agree).
pub(crate) fn differences(conf: &str, role: Role, prefix: &str) -> Vec<String> {
    let user = role.user();
    let Some(have) = granted(conf, user) else {
        return vec![format!("deploy/redis.conf has no `user {user}` line")];
    };
    let want = expected(role, prefix);
    let mut out = Vec::new();
    for (p, (access, families)) in &want.keys {
        let need = access.spell(p);
        let families = families.join("`, `");
        match have.keys.get(p) {
            Some((a, _)) if a == access => {}
            Some((a, _)) => out.push(format!(
                "{user}: key `{families}` (redis_broker/keys.rs) needs `{need}`, \
                 deploy/redis.conf grants `{}`",
                a.spell(p)
            )),
            None => out.push(format!(
                "{user}: key `{families}` (redis_broker/keys.rs) needs `{need}`, \
                 deploy/redis.conf does not grant it"
            )),
        }
    }
    for (p, (a, _)) in &have.keys {
        if !want.keys.contains_key(p) {
            out.push(format!(
                "{user}: deploy/redis.conf grants `{}`, which no key of the table \
                 (redis_broker/keys.rs) gives {user}",
                a.spell(p)
            ));
        }
    }
    let spell = |cmds: &[String], pats: &BTreeMap<String, Vec<&str>>| {
        let pats: Vec<String> = pats.keys().map(|p| format!("~{p}")).collect();
        let cmds: Vec<String> = cmds.iter().map(|c| format!("+{c}")).collect();
        format!("({} {})", pats.join(" "), cmds.join(" "))
    };
    for (cmds, pats) in &want.selectors {
        let theirs = have.selectors.get(cmds);
        let same = theirs.is_some_and(|t| t.keys().eq(pats.keys()));
        if !same {
            let families: BTreeSet<&str> = pats.values().flatten().copied().collect();
            let families: Vec<&str> = families.into_iter().collect();
            let families = families.join("`, `");
            out.push(format!(
                "{user}: keys `{families}` (redis_broker/keys.rs) need the selector `{}`, \
                 deploy/redis.conf has {}",
                spell(cmds, pats),
                theirs.map_or("none with those commands".to_owned(), |t| format!(
                    "`{}`",
                    spell(cmds, t)
                ))
            ));
        }
    }
    for (cmds, pats) in &have.selectors {
        if !want.selectors.contains_key(cmds) {
            out.push(format!(
                "{user}: deploy/redis.conf has the selector `{}`, which no key of the table \
                 (redis_broker/keys.rs) gives {user}",
                spell(cmds, pats)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped file, in the default prefix (install.sh rewrites `crucible:` for another).
    const CONF: &str = include_str!("../../../../deploy/redis.conf");
    const PREFIX: &str = "crucible";

    #[test]
    fn deploy_redis_conf_grants_each_role_the_keys_of_the_table() {
        let diff: Vec<String> = [Role::Api, Role::Worker]
            .into_iter()
            .flat_map(|role| differences(CONF, role, PREFIX))
            .collect();
        assert!(diff.is_empty(), "{}", diff.join("\n"));
    }

    #[test]
    fn a_missing_or_extra_grant_names_the_key_and_the_user() {
        let removed = CONF.replacen(" %R~crucible:tenant_weights", "", 1);
        assert_ne!(removed, CONF);
        let diff = differences(&removed, Role::Worker, PREFIX).join("\n");
        assert!(diff.contains("crucible-worker"), "{diff}");
        assert!(diff.contains("tenant_weights"), "{diff}");
        assert!(diff.contains("does not grant it"), "{diff}");

        let extra = CONF.replacen(
            "user crucible-api reset on",
            "user crucible-api reset on ~crucible:stray:*",
            1,
        );
        let diff = differences(&extra, Role::Api, PREFIX).join("\n");
        assert!(diff.contains("crucible-api"), "{diff}");
        assert!(diff.contains("`~crucible:stray:*`"), "{diff}");

        let narrowed = CONF.replacen("(~crucible:leases +zrangebyscore)", "", 1);
        let diff = differences(&narrowed, Role::Worker, PREFIX).join("\n");
        assert!(
            diff.contains("leases") && diff.contains("selector"),
            "{diff}"
        );
    }

    #[test]
    fn families_sharing_a_pattern_are_reached_alike() {
        // One ACL pattern cannot grant two families differently: a table that said so would
        // describe a reach the ACL does not have.
        for role in [Role::Api, Role::Worker] {
            let mut seen: BTreeMap<String, (&str, super::super::Reach)> = BTreeMap::new();
            for f in TABLE {
                for p in patterns(f, role, PREFIX) {
                    if let Some((other, reach)) = seen.insert(p.clone(), (f.name, f.reach(role))) {
                        assert_eq!(reach, f.reach(role), "{} and {other} share {p}", f.name);
                    }
                }
            }
        }
    }
}
