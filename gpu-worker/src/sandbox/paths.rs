//! What a task child may see of the filesystem: the system read-only, the Python it runs with
//! its packages and the CUDA toolkit read-only, its own task directory read-write, a few
//! device nodes, and private tmpfs mounts of its own for /tmp and /dev/shm. Homes the sandbox
//! user could not traverse (a Python under /root, say) are masked by an empty tmpfs with only
//! the needed directories bound back in, so the child sees those and nothing else there.

use super::SandboxError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Read (and execute) for every child: the system's programs, libraries and configuration.
/// Secrets must not live in world-readable files: a child reads what its user may read here.
pub const SYSTEM_READ_ONLY: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys",
];

/// Device nodes every child may open read-write.
pub const COMMON_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Variables naming toolchain directories a child reads (the CUDA toolkit, its libraries).
const TOOLCHAIN_VARS: &[&str] = &["CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"];
const CUDA_DEFAULT: &str = "/usr/local/cuda";

/// A tmpfs only the task's mount namespace sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrivateMount {
    /// Where it is mounted (/tmp, /dev/shm).
    pub path: PathBuf,
    /// Octal mode of the tmpfs root.
    pub mode: String,
    /// The tmpfs's size limit; its pages count as the task's memory.
    pub size_bytes: u64,
    /// Its inode limit (`nr_inodes`): files, directories and links it holds at most.
    pub inodes: u64,
    /// Owned by the task's user (its /dev/shm); otherwise by root.
    pub owned: bool,
    /// The task may write into it (Landlock rule added in the child: the tmpfs is new).
    pub writable: bool,
    /// Directories of the host bound back in at their own paths.
    pub expose: Vec<PathBuf>,
}

/// The NVIDIA device nodes of this host (`/dev/nvidia0`, `/dev/nvidiactl`, `/dev/nvidia-uvm`,
/// ...): opened read-write and driven by ioctl by CUDA.
pub fn gpu_devices() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = dir
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// The directories the worker's Python reads from: its prefixes and every `sys.path` entry
/// (site-packages with torch, triton and the NVIDIA libraries included), resolved.
pub async fn python_dirs(python: &Path) -> Result<Vec<PathBuf>, SandboxError> {
    const PROGRAM: &str = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, \
        sys.exec_prefix, sys.base_exec_prefix] + [p for p in sys.path if p]))";
    let out = tokio::process::Command::new(python)
        .args(["-I", "-c", PROGRAM])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| SandboxError::Host(format!("running {}: {e}", python.display())))?;
    if !out.status.success() {
        return Err(SandboxError::Host(format!(
            "{} could not list its paths: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let listed: Vec<PathBuf> = serde_json::from_slice(&out.stdout)
        .map_err(|e| SandboxError::Host(format!("python paths: {e}")))?;
    Ok(existing_dirs(listed))
}

/// The CUDA toolkit and library directories the worker was told about.
pub fn toolchain_dirs(lookup: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(CUDA_DEFAULT)];
    for var in TOOLCHAIN_VARS {
        if let Some(value) = lookup(var) {
            dirs.extend(
                value
                    .split(':')
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from),
            );
        }
    }
    existing_dirs(dirs)
}

/// Resolved (symlinks followed), existing directories (a zip on sys.path stands for its
/// directory), without duplicates or paths under another one of the list.
pub fn existing_dirs(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut resolved: Vec<PathBuf> = paths
        .into_iter()
        .filter(|p| p.is_absolute())
        .filter_map(|p| std::fs::canonicalize(&p).ok())
        .map(|p| match p.is_dir() {
            true => p,
            false => p.parent().map(Path::to_path_buf).unwrap_or(p),
        })
        .collect();
    resolved.sort();
    resolved.dedup();
    minimal_cover(resolved)
}

/// Drops every path that lies under another one of the (sorted) list.
pub fn minimal_cover(sorted: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in sorted {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    kept
}

/// Whether the user (`uid`, `gid`) may traverse `dir` (search permission), as the kernel
/// decides it for an unprivileged process.
pub fn traversable_by(dir: &Path, uid: u32, gid: u32) -> bool {
    let Ok(meta) = std::fs::metadata(dir) else {
        return false;
    };
    let mode = meta.mode();
    if meta.uid() == uid {
        mode & 0o100 != 0
    } else if meta.gid() == gid {
        mode & 0o010 != 0
    } else {
        mode & 0o001 != 0
    }
}

/// Where the host's cgroup hierarchies are: masked in every task, whose own cgroup is joined
/// before (the directories name other tasks; nothing in a task needs them).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Inodes of a read-only mask: the directories bound back into it.
const MASK_INODES: u64 = 1024;

/// The sizes of a task's writable private mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountSizes {
    /// Its /dev/shm's bytes.
    pub shm_bytes: u64,
    /// Its /tmp's bytes.
    pub tmp_bytes: u64,
    /// The inodes of each.
    pub inodes: u64,
}

/// The task's private mounts (pure): /dev/shm (owned, writable), /tmp (writable; the task
/// directory and anything else needed bound back when under it), a read-only mask over the
/// topmost ancestor the sandbox user cannot traverse of each path it must reach, and an empty
/// one over [`CGROUP_ROOT`] when `mask_cgroups`.
pub fn private_mounts(
    task_dir: &Path,
    readable: &[PathBuf],
    traversable: impl Fn(&Path) -> bool,
    sizes: MountSizes,
    mask_cgroups: bool,
) -> Vec<PrivateMount> {
    let tmp = Path::new("/tmp");
    let needed: Vec<&Path> = std::iter::once(task_dir)
        .chain(readable.iter().map(PathBuf::as_path))
        .collect();
    let mut tmp_expose = Vec::new();
    let mut masks: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for path in needed {
        if path.starts_with(tmp) {
            // A fresh /tmp is made traversable all the way down.
            tmp_expose.push(path.to_path_buf());
            continue;
        }
        let blocked = path
            .ancestors()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .find(|a| *a != Path::new("/") && !traversable(a));
        if let Some(top) = blocked {
            masks
                .entry(top.to_path_buf())
                .or_default()
                .push(path.to_path_buf());
        }
    }
    let mut mounts = vec![
        PrivateMount {
            path: "/dev/shm".into(),
            mode: "0700".into(),
            size_bytes: sizes.shm_bytes,
            inodes: sizes.inodes,
            owned: true,
            writable: true,
            expose: Vec::new(),
        },
        PrivateMount {
            path: tmp.into(),
            mode: "1777".into(),
            size_bytes: sizes.tmp_bytes,
            inodes: sizes.inodes,
            owned: false,
            writable: true,
            expose: tmp_expose,
        },
    ];
    mounts.extend(masks.into_iter().map(|(path, expose)| PrivateMount {
        path,
        mode: "0755".into(),
        size_bytes: 1 << 20,
        inodes: MASK_INODES,
        owned: false,
        writable: false,
        expose,
    }));
    if mask_cgroups {
        mounts.push(PrivateMount {
            path: CGROUP_ROOT.into(),
            mode: "0555".into(),
            size_bytes: 64 << 10,
            inodes: 16,
            owned: false,
            writable: false,
            expose: Vec::new(),
        });
    }
    mounts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_under_a_private_home_is_bound_back_into_a_mask() {
        let readable = vec![
            PathBuf::from("/root/.cache/crucible/venv"),
            PathBuf::from("/root/.pyenv/versions/3.11.7"),
            PathBuf::from("/opt/torch/.venv"),
        ];
        let traversable = |p: &Path| p != Path::new("/root");
        let sizes = MountSizes {
            shm_bytes: 1 << 30,
            tmp_bytes: 1 << 29,
            inodes: 5000,
        };
        let mounts = private_mounts(
            Path::new("/tmp/crucible/task-x"),
            &readable,
            traversable,
            sizes,
            false,
        );
        assert_eq!(mounts.len(), 3);
        let shm = &mounts[0];
        assert!(shm.path == Path::new("/dev/shm") && shm.owned && shm.writable);
        assert_eq!((shm.size_bytes, shm.inodes), (1 << 30, 5000));
        let tmp = &mounts[1];
        assert_eq!(tmp.expose, vec![PathBuf::from("/tmp/crucible/task-x")]);
        assert_eq!(tmp.mode, "1777");
        let mask = &mounts[2];
        assert_eq!(mask.path, PathBuf::from("/root"));
        assert!(!mask.writable && !mask.owned);
        assert_eq!(mask.expose, readable[..2].to_vec());
    }

    #[test]
    fn the_topmost_blocked_ancestor_is_masked_and_open_paths_are_left_alone() {
        let traversable = |p: &Path| !p.starts_with("/home/alice");
        let sizes = MountSizes {
            shm_bytes: 1,
            tmp_bytes: 1,
            inodes: 1,
        };
        let mounts = private_mounts(
            Path::new("/var/lib/crucible/work/task-y"),
            &[PathBuf::from("/home/alice/private/venv")],
            traversable,
            sizes,
            true,
        );
        assert_eq!(mounts.len(), 4);
        assert_eq!(mounts[1].expose, Vec::<PathBuf>::new());
        assert_eq!(mounts[2].path, PathBuf::from("/home/alice"));
        let cgroups = &mounts[3];
        assert_eq!(cgroups.path, PathBuf::from(CGROUP_ROOT));
        assert!(!cgroups.writable && cgroups.expose.is_empty());
    }

    #[test]
    fn nested_paths_collapse_to_their_top() {
        let cover = minimal_cover(vec![
            "/opt/a".into(),
            "/opt/a/lib".into(),
            "/opt/ab".into(),
            "/usr".into(),
        ]);
        assert_eq!(
            cover,
            vec![
                PathBuf::from("/opt/a"),
                PathBuf::from("/opt/ab"),
                PathBuf::from("/usr")
            ]
        );
    }

    #[test]
    fn traversal_follows_owner_group_other_bits() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let meta = std::fs::metadata(p).unwrap();
        assert!(traversable_by(p, meta.uid(), meta.gid()));
        assert!(!traversable_by(p, meta.uid() + 1, meta.gid() + 1));
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o701)).unwrap();
        assert!(traversable_by(p, meta.uid() + 1, meta.gid() + 1));
    }
}
