//! Tests of [`super`]: keys, publishing and installing (extensions and Triton cache files),
//! links refused, pruning, slots. In a file of their own so that build_cache.rs stays a
//! readable length.

use super::*;

fn sw(torch: &str) -> SoftwareVersions {
    SoftwareVersions {
        torch: Some(torch.into()),
        triton: Some("3.6.0".into()),
        cuda: Some("13.0".into()),
    }
}

fn ext(name: &str, file: &str) -> BuiltExtension {
    BuiltExtension {
        name: name.into(),
        key: "ab".repeat(32),
        file: file.into(),
        python_module: true,
    }
}

#[test]
fn the_key_covers_source_torch_cuda_and_architecture() {
    let base = entry_key("src", &sw("2.11.0"), "9.0");
    assert_eq!(base, entry_key("src", &sw("2.11.0"), "9.0"));
    assert!(is_key(&base));
    assert_ne!(base, entry_key("src ", &sw("2.11.0"), "9.0"));
    assert_ne!(base, entry_key("src", &sw("2.12.0"), "9.0"));
    assert_ne!(base, entry_key("src", &sw("2.11.0"), "8.0"));
    let mut other_cuda = sw("2.11.0");
    other_cuda.cuda = Some("12.8".into());
    assert_ne!(base, entry_key("src", &other_cuda, "9.0"));
}

#[test]
fn publish_copies_regular_files_and_install_hands_out_copies() {
    let root = tempfile::tempdir().unwrap();
    let cache = BuildCache::open(root.path(), 2, 10).unwrap();
    let task = tempfile::tempdir().unwrap();
    fs::create_dir_all(task.path().join("build/k1")).unwrap();
    fs::write(task.path().join("build/k1/ext.so"), b"ELF-bytes").unwrap();
    let key = "cd".repeat(32);
    assert!(cache.lookup(&key).is_none());
    let entry = cache
        .publish(&key, task.path(), &[ext("ext", "build/k1/ext.so")], false)
        .unwrap();
    assert_eq!(entry.manifest.builds[0].file, "0.so");
    let digests = entry.digests.clone().expect("digests of what was stored");
    let gpu_dir = tempfile::tempdir().unwrap();
    let installed = cache.install(&entry, &digests, gpu_dir.path()).unwrap();
    assert_eq!(installed[0].file, "prebuilt/0.so");
    assert_eq!(
        fs::read(gpu_dir.path().join("prebuilt/0.so")).unwrap(),
        b"ELF-bytes"
    );
    // The child's copy is its own: changing it leaves the cache alone.
    fs::write(gpu_dir.path().join("prebuilt/0.so"), b"tampered").unwrap();
    let again = cache.lookup(&key).unwrap();
    assert_eq!(fs::read(again.dir.join("0.so")).unwrap(), b"ELF-bytes");

    // Someone with the worker's uid changes the entry itself: the next copy is refused.
    fs::write(again.dir.join("0.so"), b"planted").unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let refused = cache
        .install(&again, &digests, other_dir.path())
        .unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::InvalidData);
    fs::write(again.dir.join("0.so"), b"ELF-bytes").unwrap();

    // A second store keeps the first entry; a forced rebuild replaces it.
    fs::write(task.path().join("build/k1/ext.so"), b"rebuilt").unwrap();
    let kept = cache
        .publish(&key, task.path(), &[ext("ext", "build/k1/ext.so")], false)
        .unwrap();
    assert_eq!(fs::read(kept.dir.join("0.so")).unwrap(), b"ELF-bytes");
    let replaced = cache
        .publish(&key, task.path(), &[ext("ext", "build/k1/ext.so")], true)
        .unwrap();
    assert_eq!(fs::read(replaced.dir.join("0.so")).unwrap(), b"rebuilt");
}

#[test]
fn the_triton_key_covers_code_reference_triton_torch_and_target() {
    let mut sw = sw("2.11.0");
    let base = triton_entry_key("cand", "ref", &sw, "9.0").unwrap();
    assert!(is_key(&base));
    assert_eq!(
        Some(&base),
        triton_entry_key("cand", "ref", &sw, "9.0").as_ref()
    );
    assert_ne!(
        Some(&base),
        triton_entry_key("cand ", "ref", &sw, "9.0").as_ref()
    );
    assert_ne!(
        Some(&base),
        triton_entry_key("cand", "ref2", &sw, "9.0").as_ref()
    );
    assert_ne!(
        Some(&base),
        triton_entry_key("cand", "ref", &sw, "10.0").as_ref()
    );
    // Never the key of the same source's CUDA builds.
    assert_ne!(base, entry_key("cand", &sw, "9.0"));
    sw.triton = Some("3.9.0".into());
    assert_ne!(
        Some(&base),
        triton_entry_key("cand", "ref", &sw, "9.0").as_ref()
    );
    sw.torch = Some("2.12.0".into());
    let other_torch = triton_entry_key("cand", "ref", &sw, "9.0").unwrap();
    sw.torch = Some("2.11.0".into());
    assert_ne!(
        other_torch,
        triton_entry_key("cand", "ref", &sw, "9.0").unwrap()
    );
    sw.triton = None;
    assert_eq!(triton_entry_key("cand", "ref", &sw, "9.0"), None);
}

/// A dry run's files as the child leaves them: `cache/triton/<entry>/<file>`.
fn triton_task() -> (tempfile::TempDir, Vec<String>) {
    let task = tempfile::tempdir().unwrap();
    let entry = task.path().join("cache/triton/ABC123");
    fs::create_dir_all(&entry).unwrap();
    fs::write(entry.join("__grp__k.json"), b"{\"child_paths\": {}}").unwrap();
    fs::write(entry.join("k.cubin"), b"cubin-bytes").unwrap();
    let files = vec![
        "cache/triton/ABC123/__grp__k.json".to_owned(),
        "cache/triton/ABC123/k.cubin".to_owned(),
    ];
    (task, files)
}

#[test]
fn triton_files_are_stored_and_installed_where_the_jit_looks() {
    let root = tempfile::tempdir().unwrap();
    let cache = BuildCache::open(root.path(), 1, 10).unwrap();
    let (task, files) = triton_task();
    let key = "7a".repeat(32);
    let entry = cache
        .publish_triton(&key, task.path(), &files, false)
        .unwrap();
    assert_eq!(entry.manifest.triton, files);
    let digests = entry.digests.clone().unwrap();
    assert_eq!(digests.len(), 2);
    // Found again without the digests of the process that stored it.
    let found = cache.lookup(&key).unwrap();
    let gpu_dir = tempfile::tempdir().unwrap();
    fs::create_dir(gpu_dir.path().join("cache")).unwrap();
    let builds = cache.install(&found, &digests, gpu_dir.path()).unwrap();
    assert!(builds.is_empty());
    assert!(!gpu_dir.path().join("prebuilt").exists());
    assert_eq!(
        fs::read(gpu_dir.path().join("cache/triton/ABC123/k.cubin")).unwrap(),
        b"cubin-bytes"
    );

    // The entry changed behind the broker's back: nothing of it reaches the next task.
    fs::write(found.dir.join("t1"), b"planted").unwrap();
    let other = tempfile::tempdir().unwrap();
    fs::create_dir(other.path().join("cache")).unwrap();
    let refused = cache.install(&found, &digests, other.path()).unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::InvalidData);
    assert!(!other.path().join("cache/triton").exists());
    // A record of another length is refused the same way.
    let short = cache
        .install(&found, &digests[..1], other.path())
        .unwrap_err();
    assert_eq!(short.kind(), io::ErrorKind::InvalidData);
}

#[test]
fn triton_files_are_opened_without_links_and_within_bounds() {
    let root = tempfile::tempdir().unwrap();
    let cache = BuildCache::open(root.path(), 1, 10).unwrap();
    let (task, mut files) = triton_task();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), b"secret").unwrap();
    let entry = task.path().join("cache/triton/ABC123");
    std::os::unix::fs::symlink(outside.path().join("secret"), entry.join("k.ptx")).unwrap();
    std::os::unix::fs::symlink(outside.path(), task.path().join("cache/triton/LINK")).unwrap();
    let key = "7b".repeat(32);
    for bad in [
        "cache/triton/ABC123/k.ptx",
        "cache/triton/LINK/secret",
        "cache/triton/../../etc/passwd",
        "cache/triton/ABC123",
        "build/x.so",
    ] {
        let mut with = files.clone();
        with.push(bad.to_owned());
        assert!(
            cache
                .publish_triton(&key, task.path(), &with, false)
                .is_err(),
            "{bad} must be refused"
        );
        assert!(cache.lookup(&key).is_none());
    }
    // More than an entry may hold in all: refused.
    let many: Vec<String> = (0..5)
        .map(|i| {
            let name = format!("part{i}.cubin");
            let f = File::create(entry.join(&name)).unwrap();
            f.set_len(MAX_TRITON_FILE_BYTES).unwrap();
            format!("cache/triton/ABC123/{name}")
        })
        .collect();
    assert!(
        cache
            .publish_triton(&key, task.path(), &many, false)
            .is_err()
    );
    // Larger than any cubin: refused rather than copied.
    let big = File::create(entry.join("big.cubin")).unwrap();
    big.set_len(MAX_TRITON_FILE_BYTES + 1).unwrap();
    files.push("cache/triton/ABC123/big.cubin".to_owned());
    assert!(
        cache
            .publish_triton(&key, task.path(), &files, false)
            .is_err()
    );
}

#[test]
fn publish_refuses_links_planted_by_the_child() {
    let root = tempfile::tempdir().unwrap();
    let cache = BuildCache::open(root.path(), 1, 10).unwrap();
    let task = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), b"secret").unwrap();
    fs::create_dir_all(task.path().join("build")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret"),
        task.path().join("build/ext.so"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path(), task.path().join("build/dir")).unwrap();
    for file in ["build/ext.so", "build/dir/secret"] {
        let key = "ef".repeat(32);
        assert!(
            cache
                .publish(&key, task.path(), &[ext("ext", file)], false)
                .is_err(),
            "{file} must not be followed"
        );
        assert!(cache.lookup(&key).is_none());
    }
}

/// A child can leave anything where it reports a build: a FIFO (opened for reading, it would
/// block until a writer came, holding a thread and a compile slot forever), a listening socket,
/// a device node, a directory. Each is refused at once, nothing read, nothing stored.
#[test]
fn publish_refuses_fifos_sockets_devices_and_directories_at_once() {
    let root = tempfile::tempdir().unwrap();
    let cache = BuildCache::open(root.path(), 1, 10).unwrap();
    let task = tempfile::tempdir().unwrap();
    let build = task.path().join("build");
    fs::create_dir_all(build.join("dir.so")).unwrap();
    nix::unistd::mkfifo(&build.join("fifo.so"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(build.join("socket.so")).unwrap();
    let device = nix::sys::stat::mknod(
        &build.join("null.so"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::S_IRWXU,
        nix::sys::stat::makedev(1, 3),
    );
    let mut files = vec!["build/fifo.so", "build/socket.so", "build/dir.so"];
    if device.is_ok() {
        files.push("build/null.so");
    }
    // A FIFO opened for reading without O_NONBLOCK would hang this test here.
    for file in files {
        let key = "cd".repeat(32);
        let stored = cache.publish(&key, task.path(), &[ext("ext", file)], false);
        assert!(stored.is_err(), "{file} must be refused");
        assert!(cache.lookup(&key).is_none());
    }
}

#[test]
fn entries_beyond_the_cap_are_pruned_oldest_first() {
    let root = tempfile::tempdir().unwrap();
    let cache = BuildCache::open(root.path(), 1, 2).unwrap();
    let task = tempfile::tempdir().unwrap();
    fs::create_dir_all(task.path().join("build")).unwrap();
    fs::write(task.path().join("build/e.so"), b"x").unwrap();
    let keys: Vec<String> = ["01", "02", "03"].iter().map(|k| k.repeat(32)).collect();
    for (i, key) in keys.iter().enumerate() {
        cache
            .publish(key, task.path(), &[ext("e", "build/e.so")], false)
            .unwrap();
        // Distinct, ordered use times without sleeping.
        let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + i as u64);
        File::open(root.path().join(key).join(MANIFEST))
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    cache.prune();
    assert!(cache.lookup(&keys[0]).is_none());
    assert!(cache.lookup(&keys[1]).is_some());
    assert!(cache.lookup(&keys[2]).is_some());
}

#[tokio::test]
async fn slots_bound_concurrent_builds() {
    let root = tempfile::tempdir().unwrap();
    let cache = BuildCache::open(root.path(), 2, 10).unwrap();
    let a = cache.slot().await.unwrap();
    let _b = cache.slot().await.unwrap();
    let third = tokio::time::timeout(Duration::from_millis(300), cache.slot()).await;
    assert!(third.is_err(), "a third slot while two are held");
    drop(a);
    let c = tokio::time::timeout(Duration::from_secs(10), cache.slot()).await;
    assert!(c.is_ok(), "a slot frees up when a build ends");
}

/// The build protocol is written twice: here, where it keys the build cache, and in the
/// harness's builds.py, which keys its own builds on it. Read from the file (not through the
/// embedded harness) so that the check does not depend on where either side's module lives.
#[test]
fn the_build_protocol_is_the_harness_s() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/harness/builds.py");
    let builds = std::fs::read_to_string(path).unwrap();
    let line = format!("BUILD_PROTOCOL = \"{BUILD_PROTOCOL}\"");
    assert!(
        builds.lines().any(|l| l == line),
        "{path} does not say {line}"
    );
}
