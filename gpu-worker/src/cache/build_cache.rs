//! The node-wide build cache of CUDA extensions and the compile pool's slots.
//!
//! A CUDA candidate's `load_inline` extensions are built once, off the GPU, by the CPU stage
//! of its task ([`crate::task::prepare`]); the worker (never the child) copies the built files into
//! an entry of this cache, keyed by [`entry_key`]: the candidate's whole source, the torch and
//! CUDA versions and the target architecture. A later task with the same key copies the files
//! into its own private directory and the compiler does not run. Keys are computed by the
//! worker from what it knows, never from what a child says, so a candidate can only ever
//! fill the entry of its own source. Children never see the cache: they get copies.
//!
//! Children share the worker's uid, so a child could reach the cache directory if it guessed
//! its path. The digests of an entry's files are therefore also kept in the broker, which no
//! child can reach ([`BUILD_CACHE_NAMESPACE`]), and every copy handed to a child is checked
//! against them: an entry changed since it was stored is thrown away and rebuilt.
//!
//! Several worker processes on a node share one directory: an entry is written under a
//! temporary name and renamed into place (readers see all of it or nothing), builds of one key
//! are serialised by an advisory lock on `.locks/<key>`, and at most `slots` builds run at
//! once on the node, each holding a lock on one of `.slots/<i>`.
//!
//! A Triton candidate's kernels, compiled by its CPU stage's dry run, are kept the same way:
//! an entry keyed by [`triton_entry_key`] whose files are Triton cache files, installed into
//! the device stage's `cache/triton/` (where its JIT finds them) and checked like builds.

use crate::cache::reference_cache::SoftwareVersions;
use crate::child::protocol::{BuiltExtension, check_triton_file};
use files::{
    copy_checked, copy_hashing, is_flat_name, is_key, new_file, now, triton_name, try_lock,
    uuid_like,
};
use nix::fcntl::{Flock, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Version of what decides a build; equal to the harness's `BUILD_PROTOCOL`.
pub const BUILD_PROTOCOL: &str = "build-v1";
/// The broker's key-value namespace of entry digests.
pub const BUILD_CACHE_NAMESPACE: crucible_task_manager::KvNamespace =
    crucible_task_manager::KvNamespace::Build;
/// Version of what decides a Triton precompile entry (the harness's dry run,
/// `triton_aot.py`): bump it when the dry run changes what it compiles.
pub const TRITON_PREBUILD_PROTOCOL: &str = "triton-aot-v1";
/// Largest Triton cache file accepted from a child (a cubin is kilobytes to a few MiB).
const MAX_TRITON_FILE_BYTES: u64 = 64 << 20;
/// Largest sum of one entry's Triton cache files (the harness stops listing there too).
const MAX_TRITON_BYTES: u64 = 256 << 20;
/// How long the broker keeps an entry's digests (an entry without them is rebuilt).
pub const BUILD_RECORD_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);
/// Largest built file accepted from a child.
const MAX_FILE_BYTES: u64 = 1 << 30;
/// How often a build waiting for a free slot looks again.
const SLOT_POLL: Duration = Duration::from_millis(100);
const MANIFEST: &str = "manifest.json";

/// The cache key of a candidate's builds: sha256 over the build protocol, the whole candidate
/// source, torch and CUDA versions and the target architecture.
pub fn entry_key(candidate_source: &str, software: &SoftwareVersions, cuda_arch: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        BUILD_PROTOCOL,
        software.torch.as_deref().unwrap_or("-"),
        software.cuda.as_deref().unwrap_or("-"),
        cuda_arch,
        candidate_source,
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    format!("{:x}", h.finalize())
}

/// The cache key of a Triton candidate's precompiled kernels: sha256 over
/// [`TRITON_PREBUILD_PROTOCOL`], the Triton and torch versions, the target architecture, the
/// reference (its inputs decide the kernels' specialisations) and the whole candidate source.
/// `None` without a Triton version (nothing to key the compiler on).
pub fn triton_entry_key(
    candidate_source: &str,
    reference_source: &str,
    software: &SoftwareVersions,
    cuda_arch: &str,
) -> Option<String> {
    let triton = software.triton.as_deref()?;
    let mut h = Sha256::new();
    for part in [
        TRITON_PREBUILD_PROTOCOL,
        triton,
        software.torch.as_deref().unwrap_or("-"),
        cuda_arch,
        reference_source,
        candidate_source,
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    Some(format!("{:x}", h.finalize()))
}

/// What an entry holds: the extensions in the harness's terms, each file a flat name inside
/// the entry (`<i>.so`), and Triton cache files (`t<i>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`BUILD_PROTOCOL`] when the entry was stored: an entry of another protocol is never reused.
    pub protocol: String,
    /// The extensions, their `file` renamed to the entry's flat names.
    pub builds: Vec<BuiltExtension>,
    /// Triton cache files as the device stage's task directory has them
    /// (`cache/triton/<entry>/<file>`), stored in the entry as `t<i>`.
    #[serde(default)]
    pub triton: Vec<String>,
}

/// An entry found in the cache.
#[derive(Debug, Clone)]
pub struct CachedBuild {
    /// The cache key ([`entry_key`]): the entry's directory name.
    pub key: String,
    dir: PathBuf,
    /// What the entry's `manifest.json` says it holds.
    pub manifest: Manifest,
    /// sha256 of each file as stored, when this process stored it (else from the broker).
    pub digests: Option<Vec<String>>,
}

/// The digests of an entry as the broker keeps them.
pub fn encode_digests(digests: &[String]) -> String {
    serde_json::to_string(digests).unwrap_or_default()
}

/// Reads back [`encode_digests`]; `None` unless it is a list of sha256 hex digests.
pub(crate) fn decode_digests(value: &str) -> Option<Vec<String>> {
    serde_json::from_str::<Vec<String>>(value)
        .ok()
        .filter(|d| d.iter().all(|x| is_key(x)))
}

/// The node-wide cache of extensions built by the CPU stage: a directory of entries keyed by
/// source, software and architecture, bounded in entries, shared by the node's workers.
#[derive(Debug, Clone)]
pub struct BuildCache {
    root: PathBuf,
    slots: usize,
    max_entries: usize,
}

impl BuildCache {
    /// Opens (creates) the cache directory.
    pub fn open(root: &Path, slots: usize, max_entries: usize) -> io::Result<Self> {
        for dir in [root.to_owned(), root.join(".locks"), root.join(".slots")] {
            fs::create_dir_all(&dir)?;
        }
        Ok(Self {
            root: root.to_owned(),
            slots: slots.max(1),
            max_entries: max_entries.max(1),
        })
    }

    fn entry_dir(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// The entry for `key`, if one is complete.
    pub fn lookup(&self, key: &str) -> Option<CachedBuild> {
        if !is_key(key) {
            return None;
        }
        let dir = self.entry_dir(key);
        let text = fs::read(dir.join(MANIFEST)).ok()?;
        let manifest: Manifest = serde_json::from_slice(&text).ok()?;
        if manifest.protocol != BUILD_PROTOCOL
            || manifest
                .builds
                .iter()
                .any(|b| !is_flat_name(&b.file) || !dir.join(&b.file).is_file())
            || manifest
                .triton
                .iter()
                .enumerate()
                .any(|(i, path)| !check_triton_file(path) || !dir.join(triton_name(i)).is_file())
        {
            return None;
        }
        // Recently used entries are the last to be pruned.
        let _ = File::open(dir.join(MANIFEST)).and_then(|f| f.set_modified(now()));
        Some(CachedBuild {
            key: key.to_owned(),
            dir,
            manifest,
            digests: None,
        })
    }

    /// Copies an entry's files into the task directory (a copy, so the child cannot change
    /// the cache): extensions into `prebuilt/`, returned as `spec.prebuilt` names them, Triton
    /// cache files to their own paths under `cache/triton/`. Each copy must have the digest
    /// the entry was stored with (`InvalidData` otherwise: the entry was changed). Called on a
    /// directory no child has seen yet, so nothing in it can be a planted link.
    pub fn install(
        &self,
        entry: &CachedBuild,
        digests: &[String],
        task_dir: &Path,
    ) -> io::Result<Vec<BuiltExtension>> {
        let installed = Self::install_files(entry, digests, task_dir);
        if installed.is_err() {
            // Nothing of a refused entry stays behind: Triton would find a file in
            // cache/triton whether or not the spec names it.
            for dir in ["prebuilt", "cache/triton"] {
                let _ = fs::remove_dir_all(task_dir.join(dir));
            }
        }
        installed
    }

    fn install_files(
        entry: &CachedBuild,
        digests: &[String],
        task_dir: &Path,
    ) -> io::Result<Vec<BuiltExtension>> {
        let m = &entry.manifest;
        if digests.len() != m.builds.len() + m.triton.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "build cache entry does not match its record",
            ));
        }
        let (build_digests, triton_digests) = digests.split_at(m.builds.len());
        let mut out = Vec::new();
        if !m.builds.is_empty() {
            fs::create_dir(task_dir.join("prebuilt"))?;
        }
        for (build, expected) in m.builds.iter().zip(build_digests) {
            let file = format!("prebuilt/{}", build.file);
            copy_checked(
                &entry.dir.join(&build.file),
                &task_dir.join(&file),
                expected,
            )?;
            out.push(BuiltExtension {
                file,
                ..build.clone()
            });
        }
        for (i, (path, expected)) in m.triton.iter().zip(triton_digests).enumerate() {
            let dest = task_dir.join(path);
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent)?;
            }
            copy_checked(&entry.dir.join(triton_name(i)), &dest, expected)?;
        }
        Ok(out)
    }

    /// Throws an entry away (changed since it was stored, or without a record).
    pub fn discard(&self, key: &str) {
        if is_key(key) {
            self.remove(key);
        }
    }

    /// Stores the files a prepare child built in `task_dir` as the entry for `key`. The files
    /// are opened beneath the task directory without following any link. Returns the entry:
    /// an existing one if another process stored the same key first, unless `replace` (a
    /// `force_refresh` rebuild), which swaps the new files in.
    pub fn publish(
        &self,
        key: &str,
        task_dir: &Path,
        builds: &[BuiltExtension],
        replace: bool,
    ) -> io::Result<CachedBuild> {
        let files: Vec<(&str, String, u64)> = builds
            .iter()
            .enumerate()
            .map(|(i, b)| (b.file.as_str(), format!("{i}.so"), MAX_FILE_BYTES))
            .collect();
        let manifest = Manifest {
            protocol: BUILD_PROTOCOL.to_owned(),
            builds: builds
                .iter()
                .zip(&files)
                .map(|(b, (_, name, _))| BuiltExtension {
                    file: name.clone(),
                    ..b.clone()
                })
                .collect(),
            triton: Vec::new(),
        };
        self.store(key, task_dir, &files, manifest, u64::MAX, replace)
    }

    /// Stores the Triton cache files a prepare child's dry run wrote (`cache/triton/...`,
    /// as [`check_triton_file`] allows) as the entry for `key`, like [`Self::publish`].
    pub fn publish_triton(
        &self,
        key: &str,
        task_dir: &Path,
        files: &[String],
        replace: bool,
    ) -> io::Result<CachedBuild> {
        if let Some(bad) = files.iter().find(|f| !check_triton_file(f)) {
            return Err(io::Error::other(format!(
                "malformed triton cache file {bad:?}"
            )));
        }
        let sources: Vec<(&str, String, u64)> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.as_str(), triton_name(i), MAX_TRITON_FILE_BYTES))
            .collect();
        let manifest = Manifest {
            protocol: BUILD_PROTOCOL.to_owned(),
            builds: Vec::new(),
            triton: files.to_vec(),
        };
        self.store(key, task_dir, &sources, manifest, MAX_TRITON_BYTES, replace)
    }

    /// Copies `files` (path in the task directory, flat name in the entry, largest size
    /// accepted) into a new entry with `manifest`, at most `max_total` bytes in all; digests
    /// in the order of `files`. Each is opened without following a link and without blocking,
    /// and must be a regular file of bounded size before a byte is read (a FIFO, socket,
    /// device or link the child left there is refused). Blocking I/O: call it off the runtime.
    fn store(
        &self,
        key: &str,
        task_dir: &Path,
        files: &[(&str, String, u64)],
        manifest: Manifest,
        max_total: u64,
        replace: bool,
    ) -> io::Result<CachedBuild> {
        if !is_key(key) {
            return Err(io::Error::other("malformed build cache key"));
        }
        if !replace && let Some(existing) = self.lookup(key) {
            return Ok(existing);
        }
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempdir_in(&self.root)?;
        let base: OwnedFd = nix::fcntl::open(
            task_dir,
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )?;
        let mut digests = Vec::new();
        // Every file opened and measured before any is copied: a list over its bounds costs
        // nothing to refuse.
        let mut total = 0u64;
        let mut sources = Vec::new();
        for (path, _, max) in files {
            // Non-blocking: a FIFO the child left in place of a file opens at once (and is
            // refused below) instead of holding this thread and its compile slot forever.
            let how = OpenHow::new()
                .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK)
                .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
            let src = File::from(openat2(&base, *path, how)?);
            let meta = src.metadata()?;
            total = total.saturating_add(meta.len());
            if !meta.is_file() || meta.len() > *max || total > max_total {
                return Err(io::Error::other(format!(
                    "built file {path} is not a regular file of at most {max} bytes, \
                     or passes the entry's {max_total}"
                )));
            }
            sources.push(src);
        }
        for ((_, name, max), mut src) in files.iter().zip(sources) {
            let mut dst = new_file(&tmp.path().join(name))?;
            digests.push(copy_hashing(&mut (&mut src).take(*max), &mut dst)?);
            dst.sync_all()?;
        }
        let mut f = new_file(&tmp.path().join(MANIFEST))?;
        f.write_all(&serde_json::to_vec(&manifest).map_err(io::Error::other)?)?;
        f.sync_all()?;
        let tmp = tmp.keep();
        if replace {
            self.remove(key);
        }
        if let Err(e) = fs::rename(&tmp, self.entry_dir(key)) {
            let _ = fs::remove_dir_all(&tmp);
            // Another process stored it first: theirs is as good as ours (its digests come
            // from the broker).
            return self.lookup(key).ok_or(e);
        }
        self.prune();
        let mut entry = self
            .lookup(key)
            .ok_or_else(|| io::Error::other("stored build cache entry vanished"))?;
        entry.digests = Some(digests);
        Ok(entry)
    }

    /// Removes an entry; renamed away first, so no reader sees half of it.
    fn remove(&self, key: &str) {
        let path = self.entry_dir(key);
        let doomed = path.with_extension(format!("old-{}", uuid_like()));
        if fs::rename(&path, &doomed).is_ok() {
            let _ = fs::remove_dir_all(&doomed);
        }
    }

    /// Removes the least recently used entries beyond `max_entries`.
    fn prune(&self) {
        let Ok(dir) = fs::read_dir(&self.root) else {
            return;
        };
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = dir
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(is_key))
            .filter_map(|e| {
                let used = fs::metadata(e.path().join(MANIFEST))
                    .ok()?
                    .modified()
                    .ok()?;
                Some((used, e.path()))
            })
            .collect();
        if entries.len() <= self.max_entries {
            return;
        }
        entries.sort();
        let excess = entries.len() - self.max_entries;
        for (_, path) in entries.into_iter().take(excess) {
            if let Some(key) = path.file_name().and_then(|n| n.to_str()) {
                self.remove(key);
            }
        }
    }

    /// Serialises builds of one key across the node's workers: the second builder waits and
    /// then finds the entry.
    pub async fn lock_key(&self, key: &str) -> io::Result<Flock<File>> {
        if !is_key(key) {
            return Err(io::Error::other("malformed build cache key"));
        }
        let path = self.root.join(".locks").join(key);
        loop {
            if let Some(lock) = try_lock(&path)? {
                return Ok(lock);
            }
            tokio::time::sleep(SLOT_POLL).await;
        }
    }

    /// One of the node's compile slots, waiting while all are taken.
    pub async fn slot(&self) -> io::Result<Flock<File>> {
        loop {
            for i in 0..self.slots {
                if let Some(lock) = try_lock(&self.root.join(".slots").join(i.to_string()))? {
                    return Ok(lock);
                }
            }
            tokio::time::sleep(SLOT_POLL).await;
        }
    }
}

mod files;
#[cfg(test)]
mod tests;
