//! The seccomp filters of task children, compiled by the worker with `seccompiler` and
//! installed by the child (classic BPF handed over in the plan). A deny-list: what no kernel,
//! compiler or framework needs, refused with EPERM; `clone3` answers ENOSYS so that glibc
//! falls back to `clone`, whose namespace flags can be checked.
//!
//! The judge gets [`judge_programs`]; the runner keeps those and adds [`runner_programs`]:
//! no SIGKILL sent (so a runner that dies of SIGKILL was killed from outside it), and, where
//! the task has no network namespace, no socket but `AF_UNIX`.

use super::SandboxError;
use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};
use std::collections::BTreeMap;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Refused outright: tracing and reading other processes, changing mounts and namespaces,
/// loading code into the kernel, keyrings, clocks, the host's identity, its cores, io_uring
/// (its own path around these filters) and the rest of the kernel's attack surface no kernel
/// needs.
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_vhangup,
    // The child was pinned to its cores before the filter (crate::process::cores): it stays there.
    libc::SYS_sched_setaffinity,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
];

/// `clone` flags that would make new namespaces.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

/// `personality` values a program may set: the default and the query.
const PERSONALITY_ALLOWED: [u64; 2] = [0, 0xffff_ffff];

/// Signal-sending calls and the index of their signal argument.
const SIGNAL_SENDERS: &[(libc::c_long, u8)] = &[
    (libc::SYS_kill, 1),
    (libc::SYS_tkill, 1),
    (libc::SYS_tgkill, 2),
    (libc::SYS_rt_sigqueueinfo, 1),
    (libc::SYS_rt_tgsigqueueinfo, 2),
    (libc::SYS_pidfd_send_signal, 1),
];

/// Bit 30 of the syscall number selects the x32 ABI on x86_64: the same calls under other
/// numbers, which a deny-list by number must refuse as a whole.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).map_err(err)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conditions).map_err(err)
}

fn err(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Seccomp(e.to_string())
}

fn compile(rules: Rules, action: SeccompAction) -> Result<Vec<u8>, SandboxError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, ARCH).map_err(err)?;
    let program: BpfProgram = filter.try_into().map_err(err)?;
    Ok(encode(&program))
}

/// The kernel's `struct sock_filter` layout: u16 code, u8 jt, u8 jf, u32 k, native endian.
fn encode(program: &[sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        push_insn(&mut out, insn.code, insn.jt, insn.jf, insn.k);
    }
    out
}

fn push_insn(out: &mut Vec<u8>, code: u16, jt: u8, jf: u8, k: u32) {
    out.extend_from_slice(&code.to_ne_bytes());
    out.push(jt);
    out.push(jf);
    out.extend_from_slice(&k.to_ne_bytes());
}

/// Prepends "refuse any x32 call" (x86_64): load the number, and answer ENOSYS when bit 30 is
/// set; other calls go on to the program unchanged (BPF jumps are relative).
fn with_x32_guard(program: Vec<u8>) -> Vec<u8> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut out = Vec::with_capacity(program.len() + 24);
        // offsetof(struct seccomp_data, nr) is 0.
        push_insn(
            &mut out,
            (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            0,
            0,
            0,
        );
        push_insn(
            &mut out,
            (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
            0,
            1,
            X32_SYSCALL_BIT,
        );
        push_insn(
            &mut out,
            (libc::BPF_RET | libc::BPF_K) as u16,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        );
        out.extend(program);
        out
    }
    #[cfg(not(target_arch = "x86_64"))]
    program
}

/// The judge's filters (the runner inherits them): the deny-list, then `clone3` → ENOSYS.
pub fn judge_programs() -> Result<Vec<Vec<u8>>, SandboxError> {
    let mut denied: Rules = DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    denied.insert(
        libc::SYS_clone,
        NAMESPACE_FLAGS
            .iter()
            .map(|&flag| rule(vec![condition(0, SeccompCmpOp::MaskedEq(flag), flag)?]))
            .collect::<Result<_, _>>()?,
    );
    denied.insert(
        libc::SYS_personality,
        vec![rule(
            PERSONALITY_ALLOWED
                .iter()
                .map(|&v| condition(0, SeccompCmpOp::Ne, v))
                .collect::<Result<_, _>>()?,
        )?],
    );
    let clone3: Rules = [(libc::SYS_clone3, Vec::new())].into_iter().collect();
    Ok(vec![
        with_x32_guard(compile(denied, SeccompAction::Errno(libc::EPERM as u32))?),
        compile(clone3, SeccompAction::Errno(libc::ENOSYS as u32))?,
    ])
}

/// What the runner adds: no SIGKILL sent; no other process's resource limits changed
/// (`prlimit64` on a pid other than 0: an RLIMIT_CPU set on its judge would end the judge by
/// the kernel's hand); no socket but AF_UNIX unless the task has a network namespace of its own
/// (then Landlock and the empty namespace already keep it in).
pub fn runner_programs(network_namespace: bool) -> Result<Vec<Vec<u8>>, SandboxError> {
    let mut denied: Rules = Rules::new();
    denied.insert(
        libc::SYS_prlimit64,
        vec![rule(vec![condition(0, SeccompCmpOp::Ne, 0)?])?],
    );
    for &(nr, arg) in SIGNAL_SENDERS {
        denied.insert(
            nr,
            vec![rule(vec![condition(
                arg,
                SeccompCmpOp::Eq,
                libc::SIGKILL as u64,
            )?])?],
        );
    }
    if !network_namespace {
        denied.insert(
            libc::SYS_socket,
            vec![rule(vec![condition(
                0,
                SeccompCmpOp::Ne,
                libc::AF_UNIX as u64,
            )?])?],
        );
    }
    Ok(vec![compile(
        denied,
        SeccompAction::Errno(libc::EPERM as u32),
    )?])
}

/// Whether this kernel has seccomp filters (an error says why not).
#[allow(unsafe_code)] // prctl(PR_GET_SECCOMP), which neither nix nor seccompiler wraps
pub fn available() -> Result<(), SandboxError> {
    // SAFETY: prctl(PR_GET_SECCOMP) takes no pointers.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode < 0 {
        return Err(SandboxError::Seccomp(format!(
            "the kernel has no seccomp: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

// The tests fork and make raw system calls to see what the filters refuse.
#[allow(unsafe_code)]
#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `probe` in a forked child under `programs`; its exit code comes back.
    fn in_child_under(programs: &[Vec<u8>], probe: fn() -> i32) -> i32 {
        // SAFETY: the child makes only raw system calls and exits without returning.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                for p in programs {
                    let prog = libc::sock_fprog {
                        len: (p.len() / 8) as u16,
                        filter: p.as_ptr() as *mut libc::sock_filter,
                    };
                    if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0 {
                        libc::_exit(99);
                    }
                }
                libc::_exit(probe());
            },
            nix::unistd::ForkResult::Parent { child } => {
                match nix::sys::wait::waitpid(child, None).unwrap() {
                    nix::sys::wait::WaitStatus::Exited(_, code) => code,
                    other => panic!("child ended {other:?}"),
                }
            }
        }
    }

    fn errno_of(result: libc::c_long) -> i32 {
        if result < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        } else {
            0
        }
    }

    #[test]
    fn the_judge_filter_refuses_namespaces_and_ptrace_and_lets_ordinary_calls_through() {
        let judge = judge_programs().unwrap();
        assert!(judge.iter().all(|p| !p.is_empty() && p.len() % 8 == 0));
        assert_eq!(
            in_child_under(&judge, || errno_of(unsafe {
                libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER)
            })),
            libc::EPERM
        );
        assert_eq!(
            in_child_under(&judge, || errno_of(unsafe {
                libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0)
            })),
            libc::EPERM
        );
        assert_eq!(
            in_child_under(&judge, || errno_of(unsafe {
                libc::syscall(libc::SYS_clone3, 0, 0)
            })),
            libc::ENOSYS
        );
        assert_eq!(
            in_child_under(&judge, || errno_of(unsafe {
                libc::syscall(libc::SYS_getpid)
            })),
            0
        );
        // A plain fork (clone without namespace flags) works under the filter.
        assert_eq!(
            in_child_under(&judge, || {
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    unsafe { libc::_exit(0) }
                }
                let mut status = 0;
                unsafe { libc::waitpid(pid, &mut status, 0) };
                if pid > 0 { 0 } else { 1 }
            }),
            0
        );
    }

    #[test]
    fn the_runner_filter_refuses_sigkill_others_limits_and_non_unix_sockets_without_a_namespace() {
        let runner = runner_programs(false).unwrap();
        assert_eq!(
            in_child_under(&runner, || errno_of(unsafe {
                libc::syscall(libc::SYS_kill, libc::getpid(), libc::SIGKILL)
            })),
            libc::EPERM
        );
        assert_eq!(
            in_child_under(&runner, || errno_of(unsafe {
                libc::syscall(libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, 0)
            })),
            libc::EPERM
        );
        // Another process's limits (the judge's) are out of reach; its own are not.
        assert_eq!(
            in_child_under(&runner, || errno_of(unsafe {
                libc::syscall(
                    libc::SYS_prlimit64,
                    libc::getppid(),
                    libc::RLIMIT_CPU,
                    std::ptr::null::<libc::rlimit>(),
                    std::ptr::null_mut::<libc::rlimit>(),
                )
            })),
            libc::EPERM
        );
        assert_eq!(
            in_child_under(&runner, || {
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                errno_of(unsafe {
                    libc::syscall(
                        libc::SYS_prlimit64,
                        0,
                        libc::RLIMIT_CPU,
                        std::ptr::null::<libc::rlimit>(),
                        &mut limit,
                    )
                }) as i32
            }),
            0
        );
        assert_eq!(
            in_child_under(&runner, || {
                let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
                if fd >= 0 { 0 } else { 1 }
            }),
            0
        );
        let with_netns = runner_programs(true).unwrap();
        assert_eq!(
            in_child_under(&with_netns, || {
                let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
                if fd >= 0 { 0 } else { 1 }
            }),
            0
        );
    }
}
