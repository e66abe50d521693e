//! The report `crucible doctor` prints: one [`Check`] per line, `ok`, `warn` or `FAIL` with
//! what to do, and the [`Role`] that decides which checks exist and which are required.

/// How a check came out. Only `Fail` makes `crucible doctor` exit non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// As it should be.
    Ok,
    /// Works, but not as well as it could (or cannot be checked from here).
    Warn,
    /// This node cannot serve its role until it is fixed.
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked (`torch`, `redis`, `gpu 0`).
    pub name: String,
    /// How it came out.
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// What to do about it (warnings and failures).
    pub fix: Option<String>,
}

impl Check {
    fn new(name: &str, level: Level, detail: String, fix: Option<String>) -> Check {
        Check {
            name: name.to_owned(),
            level,
            detail,
            fix,
        }
    }

    /// An `ok` line.
    pub fn ok(name: &str, detail: impl Into<String>) -> Check {
        Check::new(name, Level::Ok, detail.into(), None)
    }

    /// A `warn` line and its fix.
    pub fn warn(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::new(name, Level::Warn, detail.into(), Some(fix.into()))
    }

    /// A `FAIL` line and its fix.
    pub fn fail(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::new(name, Level::Fail, detail.into(), Some(fix.into()))
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let level = match self.level {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        write!(f, "{level:<5} {:<13} {}", self.name, self.detail)?;
        match &self.fix {
            Some(fix) => write!(f, " -- fix: {fix}"),
            None => Ok(()),
        }
    }
}

/// What the node runs, which decides the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Standalone workers (`crucible-worker`): Python, GPU, compilers, disks, the shared broker.
    Worker,
    /// An API replica (`crucible-api`): the shared broker and its own settings.
    Api,
    /// Everything on one node (`crucible up`): the in-process broker unless REDIS_URL is set.
    All,
}

impl Role {
    /// Whether workers run here.
    pub fn runs_workers(self) -> bool {
        self != Role::Api
    }

    /// Whether an API runs here.
    pub fn runs_api(self) -> bool {
        self != Role::Worker
    }

    /// As `--role` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Api => "api",
            Role::All => "all",
        }
    }
}

/// Whether the report has a failure (`crucible doctor` then exits non-zero).
pub fn any_failed(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.level == Level::Fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_the_level_what_was_found_and_the_fix() {
        let line = Check::fail("redis", "down", "start it").to_string();
        assert!(line.starts_with("FAIL  redis "), "{line}");
        assert!(line.ends_with("down -- fix: start it"), "{line}");
        assert_eq!(
            Check::ok("torch", "2.5").to_string().trim_end(),
            "ok    torch         2.5"
        );
        assert!(!any_failed(&[Check::ok("a", ""), Check::warn("b", "", "")]));
        assert!(any_failed(&[Check::ok("a", ""), Check::fail("b", "", "")]));
    }
}
