//! The private directory of one task child: created 0700, filled without following links,
//! removed afterwards whatever the child did to it.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A task child's private directory; removed when dropped.
pub struct TaskDir {
    dir: Option<tempfile::TempDir>,
}

impl TaskDir {
    /// A fresh private directory under `root` (created if missing).
    pub fn create(root: &Path, label: &str) -> io::Result<Self> {
        fs::create_dir_all(root)?;
        let safe_label: String = label
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(40)
            .collect();
        let dir = tempfile::Builder::new()
            .prefix(&format!("task-{safe_label}-"))
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(root)?;
        Ok(Self { dir: Some(dir) })
    }

    /// Where the directory is.
    pub fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("task dir is present until drop")
            .path()
    }

    /// Writes a new file; fails if anything (a file or a symlink) already has that name.
    pub fn write_new(&self, name: &str, contents: &[u8]) -> io::Result<PathBuf> {
        debug_assert!(!name.contains('/'), "task dir files are flat");
        let path = self.path().join(name);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)?;
        file.write_all(contents)?;
        file.sync_data().ok();
        Ok(path)
    }

    /// Makes a subdirectory (for caches and temp files the child owns).
    pub fn subdir(&self, name: &str) -> io::Result<PathBuf> {
        let path = self.path().join(name);
        fs::create_dir(&path)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
        Ok(path)
    }
}

impl Drop for TaskDir {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        let path = dir.path().to_owned();
        if dir.close().is_err() {
            // The child may have removed permissions on its own files; restore them (without
            // following links) and try once more.
            restore_permissions(&path);
            if let Err(e) = fs::remove_dir_all(&path) {
                tracing::warn!(path = %path.display(), error = %e, "could not remove task directory");
            }
        }
    }
}

fn restore_permissions(path: &Path) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    if meta.file_type().is_dir() {
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(path) {
            for entry in entries.flatten() {
                restore_permissions(&entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_to_write_through_a_symlink_and_cleans_up() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside.txt");
        fs::write(&outside, b"secret").unwrap();
        let path;
        {
            let dir = TaskDir::create(root.path(), "t_1").unwrap();
            path = dir.path().to_owned();
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700);
            std::os::unix::fs::symlink(&outside, path.join("candidate.py")).unwrap();
            assert!(dir.write_new("candidate.py", b"x").is_err());
            assert_eq!(fs::read(&outside).unwrap(), b"secret");
            dir.write_new("reference.py", b"y").unwrap();
            let sub = dir.subdir("locked").unwrap();
            fs::write(sub.join("f"), b"z").unwrap();
            fs::set_permissions(&sub, fs::Permissions::from_mode(0o000)).unwrap();
        }
        assert!(!path.exists());
        assert!(outside.exists());
    }
}
