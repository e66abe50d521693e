use super::*;

fn settings(n: usize) -> CoreSettings {
    CoreSettings {
        available: (0..n).collect(),
        ..CoreSettings::default()
    }
}

#[test]
fn lists_read_and_write_as_the_kernel_writes_them() {
    assert_eq!(
        parse_list("0-3,8, 10-11").unwrap(),
        vec![0, 1, 2, 3, 8, 10, 11]
    );
    assert_eq!(parse_list("5,5,4").unwrap(), vec![4, 5]);
    assert_eq!(format_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
    assert_eq!(format_list(&[]), "");
    for bad in ["", "a", "3-1", "1-", "0-99999"] {
        assert!(parse_list(bad).is_err(), "{bad:?} must be refused");
    }
}

#[test]
fn one_gpu_worker_on_sixteen_cores_gets_the_upper_half_to_itself() {
    let cores = settings(16).cores_for(Some(0), 1);
    assert_eq!(cores.device, (8..16).collect::<Vec<_>>());
    assert_eq!(cores.cpu_stage, (0..8).collect::<Vec<_>>());
    assert!(cores.isolated());
    assert_eq!(
        cores.to_string(),
        "device children on 8-15, CPU stages on 0-7"
    );
}

#[test]
fn lent_device_cores_take_cpu_stages_at_idle_priority_and_only_where_split() {
    let lend = |n: usize| CoreSettings {
        lend_device_cores: true,
        ..settings(n)
    };
    let cores = lend(16).cores_for(Some(1), 2);
    assert_eq!(
        cores.device_placement(),
        Placement {
            cpus: (12..16).collect(),
            idle_priority: false
        },
        "device children keep their slice, at normal priority"
    );
    assert_eq!(
        cores.cpu_stage_placement(true),
        Placement {
            cpus: (0..8).collect(),
            idle_priority: true
        },
        "it starts on the stage pool: only the worker lends it this worker's own slice"
    );
    let lent = cores.lent_cores().expect("lent");
    assert!(!lent.vacated());
    assert_eq!(
        cores.to_string(),
        "device children on 12-15, CPU stages on 0-7 (and on 12-15 at idle priority)"
    );
    let unlent = settings(16).cores_for(Some(0), 1).cpu_stage_placement(true);
    assert_eq!(
        (unlent.cpus, unlent.idle_priority),
        ((0..8).collect(), false)
    );
    let small = lend(2).cores_for(Some(0), 1);
    assert!(!small.lent, "nothing split, nothing to lend");
    assert!(!small.cpu_stage_placement(true).idle_priority);
    assert_eq!(
        cores.cpu_stage_placement(false),
        Placement {
            cpus: (0..8).collect(),
            idle_priority: false
        },
        "a stage whose threads cannot be found is not lent the device cores, nor slowed"
    );
    assert!(cores.lent_cores().is_some());
    assert!(small.lent_cores().is_none());
    let switch =
        |v: &'static str| move |k: &str| (k == "CRUCIBLE_LEND_DEVICE_CORES").then(|| v.to_owned());
    assert!(
        CoreSettings::from_lookup(switch("1"), vec![0, 1])
            .unwrap()
            .lend_device_cores
    );
    assert!(
        !CoreSettings::from_lookup(switch("off"), vec![0, 1])
            .unwrap()
            .lend_device_cores
    );
    assert_eq!(
        CoreSettings::from_lookup(|_| None, vec![0, 1])
            .unwrap()
            .lend_device_cores,
        DEFAULT_LEND_DEVICE_CORES,
        "unset: the default"
    );
    let err = CoreSettings::from_lookup(switch("maybe"), vec![0, 1]).unwrap_err();
    assert!(err.contains("CRUCIBLE_LEND_DEVICE_CORES"), "{err}");
}

#[test]
fn gpu_workers_of_one_process_get_disjoint_device_slices_and_share_the_stage_pool() {
    let s = settings(16);
    let parts: Vec<Cores> = (0..4).map(|i| s.cores_for(Some(i), 4)).collect();
    let mut seen = BTreeSet::new();
    for p in &parts {
        assert_eq!(p.device.len(), 2);
        assert!(p.device.iter().all(|c| seen.insert(*c)), "slices overlap");
        assert_eq!(p.cpu_stage, (0..8).collect::<Vec<_>>());
        assert!(p.isolated());
    }
    // Three workers on an uneven pool: the first take the remainder.
    let lens: Vec<usize> = (0..3)
        .map(|i| settings(14).cores_for(Some(i), 3).device.len())
        .collect();
    assert_eq!(lens, vec![3, 2, 2]);
}

#[test]
fn small_hosts_and_cpu_workers_share_every_core_and_say_why() {
    let two = settings(2).cores_for(Some(0), 1);
    assert_eq!(two.device, vec![0, 1]);
    assert_eq!(two.cpu_stage, vec![0, 1]);
    assert!(!two.isolated());
    assert!(two.to_string().contains("too few to split"));
    assert!(
        !settings(6).cores_for(Some(0), 4).isolated(),
        "6 cores, 4 GPUs"
    );
    assert!(!settings(64).cores_for(None, 1).isolated());
}

#[test]
fn explicit_lists_win_and_each_alone_leaves_the_rest_to_the_other_pool() {
    fn lookup(
        device: Option<&'static str>,
        stage: Option<&'static str>,
    ) -> impl Fn(&str) -> Option<String> {
        move |k: &str| match k {
            "CRUCIBLE_DEVICE_CPUS" => device.map(str::to_owned),
            "CRUCIBLE_STAGE_CPUS" => stage.map(str::to_owned),
            _ => None,
        }
    }
    let all: Vec<usize> = (0..2).collect();
    // Two cores split on request: one for the device, one for the stages.
    let s = CoreSettings::from_lookup(lookup(Some("1"), None), all.clone()).unwrap();
    let c = s.cores_for(Some(0), 1);
    assert_eq!((c.device, c.cpu_stage), (vec![1], vec![0]));
    let s = CoreSettings::from_lookup(lookup(None, Some("0")), all.clone()).unwrap();
    let c = s.cores_for(Some(0), 1);
    assert_eq!((c.device, c.cpu_stage), (vec![1], vec![0]));
    let s = CoreSettings::from_lookup(lookup(Some("0-1"), Some("1")), all.clone()).unwrap();
    assert!(!s.cores_for(Some(0), 1).isolated(), "overlapping lists");
    let err = CoreSettings::from_lookup(lookup(Some("7"), None), all.clone()).unwrap_err();
    assert!(err.contains("core 7"), "{err}");
    let cpus = |k: &str| (k == "CRUCIBLE_CPUS").then(|| "9".to_owned());
    assert!(CoreSettings::from_lookup(cpus, all).is_err());
}

#[test]
fn more_gpu_workers_than_device_cores_share_them_round_robin() {
    assert_eq!(slice(&[4, 5], 0, 3), vec![4]);
    assert_eq!(slice(&[4, 5], 2, 3), vec![4]);
    assert_eq!(slice(&[], 0, 1), Vec::<usize>::new());
}

#[test]
fn this_process_has_cores() {
    assert!(!available().is_empty());
}
