use super::*;
use std::sync::mpsc;

#[test]
fn threads_files_are_read_one_id_a_line() {
    let ids: Vec<i32> = parse_threads("12\n 13 \n\nnot-a-tid\n0\n-4\n14").collect();
    assert_eq!(ids, vec![12, 13, 14]);
}

#[test]
fn members_are_listed_again_until_nobody_new_appears() {
    // Each pass of pinning "starts" a thread of the next listing, as a parent not yet pinned
    // would, until pass three.
    let listings = [
        vec![10, 11],
        vec![10, 11, 12],
        vec![10, 11, 12, 13],
        vec![10, 12, 13],
    ];
    let mut pass = 0;
    let mut pinned = Vec::new();
    let mut done = HashSet::new();
    let moved = repin_until_stable(
        &mut done,
        || {
            let l = listings[pass.min(listings.len() - 1)].clone();
            pass += 1;
            l
        },
        |tid| {
            pinned.push(tid);
            match tid {
                11 => Err(Errno::ESRCH),
                12 => Ok(false),
                _ => Ok(true),
            }
        },
    );
    assert_eq!(
        pinned,
        vec![10, 11, 12, 13],
        "each thread pinned once, in listing order"
    );
    assert_eq!(pass, 4, "the fourth listing named nobody new");
    assert_eq!(
        moved,
        Moved {
            threads: 2,
            failed: 0
        },
        "a thread that ended before it was pinned is no failure, one already there no move"
    );
    // A second move of the same stage pins nobody it has pinned already.
    let again = repin_until_stable(&mut done, || vec![10, 12, 13], |_| panic!("pinned twice"));
    assert_eq!(again, Moved::default());
}

#[test]
fn a_refused_pin_and_a_stage_that_never_settles_are_failures() {
    let mut done = HashSet::new();
    let refused = repin_until_stable(&mut done, || vec![7], |_| Err(Errno::EPERM));
    assert_eq!(
        refused,
        Moved {
            threads: 0,
            failed: 1
        }
    );
    let mut next = 100;
    let endless = repin_until_stable(
        &mut HashSet::new(),
        || {
            next += 1;
            vec![next]
        },
        |_| Ok(true),
    );
    assert_eq!(endless.threads, MAX_PASSES);
    assert_eq!(endless.failed, 1, "given up after MAX_PASSES listings");
}

#[test]
fn nothing_to_lend_without_both_pools() {
    assert!(LentCores::new(&[], &[1]).is_none());
    assert!(LentCores::new(&[0], &[]).is_none());
    assert!(LentCores::new(&[0], &[usize::MAX]).is_none());
}

fn cpus_of(tid: i32) -> Vec<usize> {
    let set = nix::sched::sched_getaffinity(Pid::from_raw(tid)).expect("getaffinity");
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// Real threads of this process stand in for a CPU stage's: their ids in a file as a cgroup
/// lists them. They start on the stage core, as a lent stage's plan pins it; the worker lends
/// them the "device" core, takes it back for a timing and lends it again after; a stage
/// registered during a timing stays on the stage core until the timing is over.
#[test]
fn the_worker_lends_real_threads_the_device_cores_and_takes_them_back_for_a_timing() {
    let mine = cpus_of(0);
    if mine.len() < 2 {
        eprintln!("skipped: this process may use only {mine:?}");
        return;
    }
    let (stage, device) = (vec![mine[0]], vec![mine[1]]);
    let lent = LentCores::new(&stage, &device).expect("two pools");
    let both = vec![mine[0], mine[1]];
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let stop_rx = Arc::new(Mutex::new(stop_rx));
    let (tid_tx, tid_rx) = mpsc::channel();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (tid_tx, stop_rx) = (tid_tx.clone(), stop_rx.clone());
            let stage = stage.clone();
            std::thread::spawn(move || {
                let mut set = CpuSet::new();
                for &c in &stage {
                    set.set(c).unwrap();
                }
                nix::sched::sched_setaffinity(Pid::from_raw(0), &set).unwrap();
                tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
                let _ = stop_rx.lock().unwrap().recv();
            })
        })
        .collect();
    let tids: Vec<i32> = (0..3).map(|_| tid_rx.recv().unwrap()).collect();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, tids: &[i32]| {
        let path = dir.path().join(name);
        let text: String = tids.iter().map(|t| format!("{t}\n")).collect();
        std::fs::write(&path, text).unwrap();
        path
    };
    // Its cgroup lists nobody yet when it registers, as a stage's does before its child runs.
    let first = lent.register(file("a", &[]));
    assert_eq!(
        lent.restore(),
        Moved::default(),
        "nothing to restore before a vacate"
    );
    file("a", &tids[..2]);
    assert_eq!(
        lent.sweep(),
        Moved {
            threads: 2,
            failed: 0
        },
        "lent once listed"
    );
    assert_eq!(cpus_of(tids[0]), both);
    assert_eq!(lent.sweep(), Moved::default(), "each thread placed once");
    assert_eq!(
        lent.vacate(),
        Moved {
            threads: 2,
            failed: 0
        }
    );
    assert!(lent.vacated());
    assert_eq!(cpus_of(tids[0]), stage);
    assert_eq!(cpus_of(tids[1]), stage);
    assert_eq!(
        lent.vacate(),
        Moved::default(),
        "a second vacate moves nobody twice"
    );
    // Registered during the timing: left on the stage core, a sweep changes nothing.
    let late = lent.register(file("b", &tids[2..]));
    assert_eq!(lent.sweep(), Moved::default());
    assert_eq!(cpus_of(tids[2]), stage);
    let back = lent.restore();
    assert_eq!(
        back,
        Moved {
            threads: 3,
            failed: 0
        },
        "every registered stage lent again"
    );
    assert!(!lent.vacated());
    for &tid in &tids {
        assert_eq!(cpus_of(tid), both);
    }
    drop(late);
    lent.vacate();
    assert_eq!(cpus_of(tids[0]), stage);
    assert_eq!(cpus_of(tids[2]), both, "a stage gone is left as it was");
    drop(first);
    drop(stop_tx);
    for w in workers {
        w.join().unwrap();
    }
}
