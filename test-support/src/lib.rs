//! What the test suites of the workspace share, kept in one place so that each suite does not
//! grow its own copy (and its own bugs):
//!
//! - [`RedisServer`]: a real, throwaway `redis-server` on a free port, either open (the
//!   end-to-end suite, its log in the test's log directory) or with only an ACL user and a
//!   password (the broker contract suite, so every Redis test also runs authenticated).
//! - [`Proc`]: a child process with its output in a log file, killed on drop.
//! - [`bin`]: a binary of this workspace, next to the running test.
//! - [`free_port`], [`eventually`] (a bounded poll) and [`log_dir`] (a fresh per-test folder).
//! - [`data_cell`]: a figure of the status page's HTML, by its `data-cell` name.
//! - [`SentinelCluster`]: a primary, its replica and three Sentinels, for failover tests.
//!
//! It is a dev-only crate: nothing it holds ships in a binary.

pub mod sentinel;
pub use sentinel::SentinelCluster;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A binary of this workspace, built by `cargo build --workspace --bins` (scripts/test.sh).
/// Found next to the running executable: a test runs from `target/<profile>/deps/`, a binary
/// of a test package (`crucible-bench`) from `target/<profile>/`.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let parent = exe.parent().expect("target/<profile>/...");
    let dir = if parent.file_name().is_some_and(|n| n == "deps") {
        parent.parent().expect("target/<profile>/deps/<test>")
    } else {
        parent
    };
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (scripts/test.sh does: cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// A port free when probed; a server that then loses it to another process must retry (as
/// [`RedisServer`] does).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// A fresh folder for one test's logs and files, under the temp dir, named by the test and
/// this process.
pub fn log_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("crucible-e2e")
        .join(format!("{test}-{}", std::process::id()));
    // A directory already there is an earlier run's whose process had this pid (a fresh
    // container numbers its processes alike): its files, an AOF a server would load among
    // them, must not leak into this run.
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("clear a stale log dir");
    }
    std::fs::create_dir_all(&dir).expect("log dir");
    dir
}

/// The text of the status page's element that carries `data-cell="{name}"` (the page's
/// HTML, as served or as a browser dumped it); panics naming the cell when there is none.
pub fn data_cell<'a>(html: &'a str, name: &str) -> &'a str {
    let at = html
        .find(&format!(r#"data-cell="{name}""#))
        .unwrap_or_else(|| panic!("no cell {name} in:\n{html}"));
    let text = &html[at..];
    let start = text.find('>').expect("the tag ends") + 1;
    let end = start + text[start..].find('<').expect("the element ends");
    &text[start..end]
}

/// A child process killed (SIGKILL) when dropped.
pub struct Proc {
    /// What the process is to the test (`api`, `worker-0`); names its log file.
    pub name: String,
    /// The process itself, for what the helpers below do not cover.
    pub child: Child,
    /// `<log_dir>/<name>.log`: its stdout and stderr.
    pub log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdin closed and stdout and stderr to `<log_dir>/<name>.log`;
    /// panics if it cannot be started.
    pub fn spawn(name: &str, mut cmd: Command, log_dir: &Path) -> Proc {
        let log = log_dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        Proc {
            name: name.to_owned(),
            child,
            log,
        }
    }

    /// Its process id, as `kill(2)` takes it.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGKILL and reap it: a crash, as far as the rest of the system can tell.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as an orchestrator stops it; the caller watches what follows.
    pub fn sigterm(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap_or_else(|e| panic!("SIGTERM to {}: {e}", self.name));
    }

    /// SIGTERM, then wait up to `timeout` for a clean exit (SIGKILL after).
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        if self.exited().is_none() {
            self.sigterm();
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
        false
    }

    /// Its exit status once it has exited by itself (reaped), `None` while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its output so far; empty if the log cannot be read.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// How long a fresh redis-server gets to answer PING.
const REDIS_READY: Duration = Duration::from_secs(10);

/// A throwaway `redis-server` on a free port, killed on drop.
pub struct RedisServer {
    child: Child,
    /// `redis://` URL to connect with, credentials included for [`RedisServer::start_acl`].
    pub url: String,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
}

/// Who may connect to a [`RedisServer`].
enum Access {
    /// Anyone, as the default user; output to `<log_dir>/redis.log`.
    Open { log_dir: PathBuf },
    /// Only one ACL user with a random password (the default user off); output discarded.
    AclUser,
}

impl RedisServer {
    /// An open server (no password), nothing saved to disk, `noeviction` as a node runs it;
    /// its output in `<log_dir>/redis.log`. For the end-to-end suite.
    pub async fn start(log_dir: &Path) -> RedisServer {
        Self::start_with(Access::Open {
            log_dir: log_dir.to_owned(),
        })
        .await
    }

    /// A server that takes only the ACL user `crucible-contract` with a random password (the
    /// default user is off), so every test against it also runs authenticated; `url` carries
    /// the credentials. For the broker contract suite.
    pub async fn start_acl() -> RedisServer {
        Self::start_with(Access::AclUser).await
    }

    async fn start_with(access: Access) -> RedisServer {
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| {
            if Path::new("/usr/bin/redis-server").exists() {
                "/usr/bin/redis-server".to_owned()
            } else {
                "redis-server".to_owned()
            }
        });
        // The port is free when probed but another process may take it before redis binds
        // it; redis then exits at once and another port is tried.
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new(&bin);
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdin(Stdio::null());
            let url = match &access {
                Access::Open { log_dir } => {
                    cmd.args(["--maxmemory-policy", "noeviction"]);
                    let file = std::fs::File::create(log_dir.join("redis.log")).expect("log file");
                    cmd.stdout(file.try_clone().expect("dup log")).stderr(file);
                    format!("redis://127.0.0.1:{port}")
                }
                Access::AclUser => {
                    let password = uuid::Uuid::new_v4().simple().to_string();
                    cmd.args(["--user", "default", "off"])
                        .args(["--user", "crucible-contract", "on", &format!(">{password}")])
                        .args(["~*", "&*", "+@all"])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    format!("redis://crucible-contract:{password}@127.0.0.1:{port}")
                }
            };
            let child = cmd.spawn().unwrap_or_else(|e| {
                panic!(
                    "cannot start {bin:?} ({e}): the tests need a real redis-server; install it \
                     (apt-get install redis-server) or set REDIS_SERVER to its path"
                )
            });
            let mut server = RedisServer { child, url, port };
            if server.wait_ready().await {
                return server;
            }
        }
        panic!("redis-server never became ready on any of 5 ports");
    }

    /// Polls PING until it answers; false if the server exited (its port taken).
    async fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + REDIS_READY;
        let client = redis::Client::open(self.url.as_str()).expect("valid redis url");
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                eprintln!("redis-server on port {} exited early: {status}", self.port);
                return false;
            }
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
                if pong.is_ok() {
                    return true;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer PING within {REDIS_READY:?}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ping(url: &str) -> redis::RedisResult<String> {
        let client = redis::Client::open(url)?;
        let mut c = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async(&mut c).await
    }

    #[tokio::test]
    async fn the_acl_server_takes_only_its_user() {
        let server = RedisServer::start_acl().await;
        assert_eq!(ping(&server.url).await.expect("the ACL user"), "PONG");
        let anonymous = format!("redis://127.0.0.1:{}", server.port);
        assert!(ping(&anonymous).await.is_err(), "the default user is off");
    }

    #[tokio::test]
    async fn the_open_server_logs_in_the_test_dir() {
        let dir = log_dir("test-support-open");
        let server = RedisServer::start(&dir).await;
        assert_eq!(ping(&server.url).await.expect("no password"), "PONG");
        assert!(dir.join("redis.log").exists());
    }
}
