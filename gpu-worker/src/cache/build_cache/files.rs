//! The build cache's file operations: files created and locked without following links,
//! copies checked against the digest stored for them, and the plain names it accepts.

use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// An exclusive advisory lock on `path` if no other holder has it now.
pub(super) fn try_lock(path: &Path) -> io::Result<Option<Flock<File>>> {
    match Flock::lock(lock_file(path)?, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(e.into()),
    }
}

/// A name no other process picks at the same time (pid and a clock reading).
pub(super) fn uuid_like() -> String {
    let nanos = now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

pub(super) fn now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// The flat name of an entry's `i`th Triton cache file.
pub(super) fn triton_name(i: usize) -> String {
    format!("t{i}")
}

/// Copies an entry's file to a new file `dest`, which must end up with the digest `expected`.
pub(super) fn copy_checked(src: &Path, dest: &Path, expected: &str) -> io::Result<()> {
    let mut src_file = File::open(src)?;
    let mut dst = new_file(dest)?;
    if copy_hashing(&mut src_file, &mut dst)? != expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} changed since it was stored", src.display()),
        ));
    }
    Ok(())
}

/// Copies `src` to `dst` and returns the sha256 (hex) of the bytes copied.
pub(super) fn copy_hashing(src: &mut impl Read, dst: &mut File) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = src.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n])?;
    }
    Ok(format!("{:x}", hasher.finalize()))
}

pub(super) fn lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

pub(super) fn new_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

pub(super) fn is_key(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| c.is_ascii_hexdigit())
}

pub(super) fn is_flat_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')
        && !s.starts_with('.')
}
