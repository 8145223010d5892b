//! The four `bpf(2)` commands the device filter needs, through `libc::syscall` with minimal
//! `#[repr(C)]` attribute structs: load a `BPF_PROG_TYPE_CGROUP_DEVICE` program, attach it to a
//! cgroup with `BPF_F_ALLOW_MULTI` (a legacy attachment: it lives as long as the cgroup, through
//! any restart of noded, and composes with the host's own device programs), and query the
//! programs attached to a cgroup. [`crate::bpf`] builds the programs and calls these.

use crate::bpf::BpfError;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;
/// Bytes of verifier log kept when a load fails.
const LOG_SIZE: usize = 64 * 1024;
/// Size of one eBPF instruction.
const INSN_SIZE: usize = 8;

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct ProgAttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

#[repr(C)]
#[derive(Default)]
struct ProgQueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    padding: u32,
    prog_attach_flags: u64,
}

fn bpf<T>(command: libc::c_long, attr: &mut T) -> Result<libc::c_long, std::io::Error> {
    // SAFETY: `attr` is a live, initialized #[repr(C)] struct matching the kernel's layout for
    // `command`, its exact size is passed, and every pointer inside it points at memory that
    // outlives the call (the callers keep the buffers alive).
    let rc = unsafe { libc::syscall(libc::SYS_bpf, command, std::ptr::from_mut(attr), std::mem::size_of::<T>()) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) }
}

/// Loads a device program; `name` is cut to 15 bytes. On failure the load is retried once with
/// the verifier's log, which then becomes part of the error.
pub(crate) fn load_device_program(bytecode: &[u8], name: &str) -> Result<OwnedFd, BpfError> {
    static LICENSE: &CStr = c"GPL";
    let mut prog_name = [0u8; 16];
    for (slot, byte) in
        prog_name.iter_mut().zip(name.bytes().filter(|byte| byte.is_ascii_alphanumeric() || *byte == b'_').take(15))
    {
        *slot = byte;
    }
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: u32::try_from(bytecode.len() / INSN_SIZE).unwrap_or(u32::MAX),
        insns: bytecode.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        prog_name,
        ..ProgLoadAttr::default()
    };
    let fd = match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => fd,
        Err(source) => {
            let mut log = vec![0u8; LOG_SIZE];
            attr.log_level = 1;
            attr.log_size = u32::try_from(log.len()).unwrap_or(u32::MAX);
            attr.log_buf = log.as_mut_ptr() as u64;
            let retried = bpf(BPF_PROG_LOAD, &mut attr);
            let end = log.iter().position(|&byte| byte == 0).unwrap_or(log.len());
            let verifier_log = String::from_utf8_lossy(&log[..end]).trim().to_owned();
            match retried {
                Ok(fd) => fd,
                Err(_) => return Err(BpfError::Load { source, verifier_log }),
            }
        }
    };
    let fd = i32::try_from(fd).map_err(|_| BpfError::Load {
        source: std::io::Error::other("descriptor out of range"),
        verifier_log: String::new(),
    })?;
    // SAFETY: the kernel just returned this descriptor for us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches a loaded device program to the cgroup open as `cgroup`, with `BPF_F_ALLOW_MULTI`.
pub(crate) fn attach_device_program(cgroup: &OwnedFd, program: &OwnedFd) -> Result<(), std::io::Error> {
    let mut attr = ProgAttachAttr {
        target_fd: raw(cgroup),
        attach_bpf_fd: raw(program),
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        replace_bpf_fd: 0,
    };
    bpf(BPF_PROG_ATTACH, &mut attr).map(drop)
}

/// The ids of the device programs attached to the cgroup open as `cgroup` itself (not inherited).
pub(crate) fn query_device_programs(cgroup: &OwnedFd) -> Result<Vec<u32>, std::io::Error> {
    let mut ids = vec![0u32; 64];
    let mut attr = ProgQueryAttr {
        target_fd: raw(cgroup),
        attach_type: BPF_CGROUP_DEVICE,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: u32::try_from(ids.len()).unwrap_or(u32::MAX),
        ..ProgQueryAttr::default()
    };
    bpf(BPF_PROG_QUERY, &mut attr)?;
    ids.truncate(usize::try_from(attr.prog_cnt).unwrap_or(0));
    Ok(ids)
}

fn raw(fd: &OwnedFd) -> u32 {
    u32::try_from(fd.as_raw_fd()).unwrap_or(u32::MAX)
}
