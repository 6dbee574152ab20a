//! The egress proxy's seccomp profile (issue 25): the system calls `polyphony egress-proxy`
//! makes, and nothing else, instead of the engine's default profile (about 350 calls, for
//! any program). The proxy holds the model-API key of a gateway attempt and parses what a
//! hostile agent sends it; a compromised proxy cannot `ptrace`, mount, make namespaces,
//! load BPF, use io_uring, `userfaultfd`, keyrings or `perf_event_open` (`execve` stays:
//! runc starts the proxy through the filter; the image holds no other program). A call not
//! listed fails: with `ENOSYS` on engines that honour `defaultErrnoRet` (a newer call glibc
//! or Rust's standard library only probes for then falls back, as on an older kernel), with
//! `EPERM` on those that do not (Docker 20.10). No `architectures`: the filter holds the
//! host's own ABI only, and a call through another (x86's `int 0x80`) is refused.
//!
//! Architecture Invariant: pure; the list is checked against the proxy's real calls by the
//! egress and gateway tests, which run it under this profile in the real engine.

use serde_json::json;

/// `ENOSYS`: what a call outside the list returns where the engine honours it.
const ENOSYS: u32 = 38;

/// `clone` flags that make new namespaces (`CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC |
/// NEWUSER | NEWPID | NEWNET`): a `clone` with any of them is refused, as in the engine's
/// default profile for a container without `CAP_SYS_ADMIN`.
const CLONE_NAMESPACE_FLAGS: u64 = 0x7E02_0000;

/// The calls the proxy makes: the loader and glibc (files, memory, threads, signals,
/// the `getaddrinfo` of its lookups over UDP, TCP and netlink), Rust's standard library
/// and tokio (epoll, eventfd, futexes), and what runc's init does between loading the
/// filter and starting the proxy (`execve` once).
pub const PROXY_SYSCALLS: &[&str] = &[
    // Memory.
    "brk",
    "madvise",
    "membarrier",
    "mmap",
    "mprotect",
    "mremap",
    "munmap",
    // Threads, the process, time.
    "arch_prctl",
    "clock_getres",
    "clock_gettime",
    "clock_nanosleep",
    "execve",
    "exit",
    "exit_group",
    "futex",
    "get_robust_list",
    "getegid",
    "geteuid",
    "getgid",
    "getpid",
    "getppid",
    "getrandom",
    "getresgid",
    "getresuid",
    "getrlimit",
    "gettid",
    "gettimeofday",
    "getuid",
    "nanosleep",
    "prctl",
    "prlimit64",
    "restart_syscall",
    "rseq",
    "sched_getaffinity",
    "sched_yield",
    "set_robust_list",
    "set_tid_address",
    "sysinfo",
    "uname",
    // Signals.
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",
    "tgkill",
    // Files and descriptors (its config, /etc/hosts, resolv.conf, the CA bundle, stdout).
    "access",
    "close",
    "close_range",
    "dup",
    "dup2",
    "dup3",
    "faccessat",
    "faccessat2",
    "fcntl",
    "fstat",
    "fstatfs",
    "getcwd",
    "getdents64",
    "ioctl",
    "lseek",
    "lstat",
    "newfstatat",
    "open",
    "openat",
    "pipe",
    "pipe2",
    "pread64",
    "read",
    "readlink",
    "readlinkat",
    "readv",
    "stat",
    "statfs",
    "statx",
    "write",
    "writev",
    // Sockets and readiness.
    "accept",
    "accept4",
    "bind",
    "connect",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "eventfd",
    "eventfd2",
    "getpeername",
    "getsockname",
    "getsockopt",
    "listen",
    "poll",
    "ppoll",
    "pselect6",
    "recvfrom",
    "recvmmsg",
    "recvmsg",
    "select",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setsockopt",
    "shutdown",
    "socket",
    "socketpair",
];

/// The profile as the engine takes it (`--security-opt seccomp=<this JSON>`).
pub fn proxy_profile() -> String {
    profile("SCMP_ACT_ERRNO")
}

fn profile(default_action: &str) -> String {
    json!({
        "defaultAction": default_action,
        "defaultErrnoRet": ENOSYS,
        "syscalls": [
            { "names": PROXY_SYSCALLS, "action": "SCMP_ACT_ALLOW" },
            // Threads, not namespaces.
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ALLOW",
                "args": [{ "index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ" }]
            },
            // Its flags are behind a pointer the filter cannot read: `ENOSYS`, and glibc
            // makes its threads with `clone`.
            { "names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS }
        ]
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_allows_the_list_and_refuses_the_rest_with_enosys() {
        let p: serde_json::Value = serde_json::from_str(&proxy_profile()).unwrap();
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(p["defaultErrnoRet"], 38);
        let names: Vec<&str> = p["syscalls"][0]["names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        for call in ["read", "connect", "epoll_pwait", "futex", "execve"] {
            assert!(names.contains(&call), "{call}");
        }
        for call in [
            "ptrace",
            "mount",
            "unshare",
            "setns",
            "bpf",
            "io_uring_setup",
            "userfaultfd",
            "keyctl",
            "perf_event_open",
            "clone3",
            "clone",
            "kill",
            "chroot",
            "setuid",
        ] {
            assert!(
                !names.contains(&call),
                "{call} must not be allowed outright"
            );
        }
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "no call is listed twice");
        assert_eq!(p["syscalls"][1]["names"][0], "clone");
        assert_eq!(p["syscalls"][1]["args"][0]["value"], 0x7E02_0000u64);
        assert_eq!(p["syscalls"][2]["errnoRet"], 38);
    }
}
