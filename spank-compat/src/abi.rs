//! The functions plugins call, exported from the host binary under their `spank.h` names
//! (`spank_get_item` and the loggers are in the C shim, which calls [`drover_spank_item`] and
//! [`crate::log`]'s `drover_spank_log`).
//!
//! Every function finds the plugin by its handle's address among the loaded plugins (a bad
//! handle is `ESPANK_BAD_ARG`, never dereferenced), computes its answer under the session lock,
//! and writes into the plugin's memory only after releasing it.

use crate::error::Espank;
use crate::session::{self, Session};
use crate::stack::{RawOption, register_option};
use crate::{Context, Hook};
use std::ffi::{CStr, c_char, c_int, c_void};

type SpankT = *mut c_void;

fn code(result: Result<(), Espank>) -> c_int {
    match result {
        Ok(()) => Espank::Success as c_int,
        Err(code) => code as c_int,
    }
}

/// Runs `f` on the session and the calling plugin's index; `ESPANK_BAD_ARG` for a bad handle.
fn with_plugin<T>(spank: SpankT, f: impl FnOnce(&mut Session, usize) -> Result<T, Espank>) -> Result<T, Espank> {
    let mut guard = session::lock();
    let session = guard.as_mut().ok_or(Espank::BadArg)?;
    let plugin_idx = session.plugin_of(spank).ok_or(Espank::BadArg)?;
    f(session, plugin_idx)
}

/// A C string argument, or `ESPANK_BAD_ARG` for NULL.
///
/// # Safety
/// `ptr` is NULL or a valid C string.
unsafe fn arg_str(ptr: *const c_char) -> Result<String, Espank> {
    if ptr.is_null() {
        return Err(Espank::BadArg);
    }
    // SAFETY: non-NULL and valid by the caller's promise.
    Ok(unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned())
}

/// Copies `value` and a NUL into `buf` of `len` bytes; `ESPANK_NOSPACE` if it does not fit.
///
/// # Safety
/// `buf` is writable for `len` bytes (checked non-NULL here).
unsafe fn copy_out(value: &str, buf: *mut c_char, len: c_int) -> Result<(), Espank> {
    let len = usize::try_from(len).map_err(|_| Espank::BadArg)?;
    if buf.is_null() {
        return Err(Espank::BadArg);
    }
    if value.len() + 1 > len {
        return Err(Espank::NoSpace);
    }
    // SAFETY: `buf` holds `len` ≥ value.len() + 1 bytes by the caller's promise.
    unsafe {
        std::ptr::copy_nonoverlapping(value.as_ptr().cast::<c_char>(), buf, value.len());
        *buf.add(value.len()) = 0;
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn spank_context() -> c_int {
    session::lock().as_ref().map_or(Context::Error, |session| session.context) as c_int
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn spank_remote(spank: SpankT) -> c_int {
    with_plugin(spank, |session, _| Ok(c_int::from(session.context == Context::Remote))).unwrap_or(-1)
}

/// # Safety
/// `symbol` is NULL or a valid C string.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_symbol_supported(symbol: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { arg_str(symbol) } {
        Ok(name) => c_int::from(Hook::ALL.iter().any(|hook| hook.symbol() == name)),
        Err(_) => -1,
    }
}

#[unsafe(no_mangle)]
pub(crate) extern "C" fn spank_strerror(err: c_int) -> *const c_char {
    match Espank::from_code(err) {
        Some(code) => code.message_nul().as_ptr().cast(),
        None => c"Unknown error".as_ptr(),
    }
}

/// # Safety
/// `opt` is NULL or a `struct spank_option` whose strings are NULL or valid C strings.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_option_register(spank: SpankT, opt: *const RawOption) -> c_int {
    code(with_plugin(spank, |session, plugin_idx| {
        if session.hook_of(plugin_idx) != Some(Hook::Init) || opt.is_null() {
            return Err(Espank::BadArg);
        }
        // SAFETY: non-NULL, and a valid option by the caller's promise; the plugin's strings
        // stay loaded with it.
        unsafe { register_option(session, plugin_idx, &*opt) }
    }))
}

/// # Safety
/// `opt` is NULL or a valid `struct spank_option`; `optarg` is NULL or writable.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_option_getopt(
    spank: SpankT,
    opt: *const RawOption,
    optarg: *mut *mut c_char,
) -> c_int {
    let found = with_plugin(spank, |session, plugin_idx| {
        let hook = session.hook_of(plugin_idx);
        if matches!(hook, Some(Hook::Init | Hook::InitPostOpt | Hook::TaskPostFork | Hook::SlurmdExit | Hook::Exit)) {
            return Err(Espank::NotAvail);
        }
        if opt.is_null() {
            return Err(Espank::BadArg);
        }
        // SAFETY: non-NULL and valid by the caller's promise.
        let opt = unsafe { &*opt };
        if opt.has_arg != 0 && optarg.is_null() {
            return Err(Espank::BadArg);
        }
        // SAFETY: the option's name is a valid C string by the caller's promise.
        let name = unsafe { arg_str(opt.name) }?;
        let cached = session
            .options
            .iter()
            .find(|option| option.plugin_idx == plugin_idx && option.name == name && !option.disabled)
            .and_then(|option| option.value.clone());
        let value = match cached {
            Some(value) => value,
            None => {
                // Without cached state (job_script context): the environment, as Slurm does.
                let env_name = session::option_env_name(&session.plugins[plugin_idx].name, &name);
                let from_env = std::env::var(&env_name).or_else(|_| std::env::var(format!("SPANK_{env_name}")));
                match from_env {
                    Ok(value) => (!value.is_empty()).then_some(value),
                    Err(_) => return Err(Espank::Error),
                }
            }
        };
        let ptr = if opt.has_arg != 0 { value.as_deref().map(|value| session.keep_str(value)) } else { None };
        Ok(ptr)
    });
    match found {
        Ok(ptr) => {
            if !optarg.is_null() {
                // SAFETY: non-NULL and writable by the caller's promise.
                unsafe { *optarg = ptr.unwrap_or(std::ptr::null_mut()) };
            }
            Espank::Success as c_int
        }
        Err(code) => code as c_int,
    }
}

fn require_remote(session: &Session) -> Result<(), Espank> {
    if session.context == Context::Remote { Ok(()) } else { Err(Espank::NotRemote) }
}

/// # Safety
/// `var` is NULL or a C string; `buf` NULL or writable for `len` bytes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_getenv(spank: SpankT, var: *const c_char, buf: *mut c_char, len: c_int) -> c_int {
    let value = with_plugin(spank, |session, _| {
        require_remote(session)?;
        // SAFETY: the caller's promise.
        let name = unsafe { arg_str(var) }?;
        if buf.is_null() || len < 0 {
            return Err(Espank::BadArg);
        }
        session.env_get(&name).map(str::to_owned).ok_or(Espank::EnvNoexist)
    });
    // SAFETY: the caller's promise for `buf`.
    code(value.and_then(|value| unsafe { copy_out(&value, buf, len) }))
}

/// # Safety
/// `var` and `val` are NULL or C strings.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_setenv(
    spank: SpankT,
    var: *const c_char,
    val: *const c_char,
    overwrite: c_int,
) -> c_int {
    code(with_plugin(spank, |session, _| {
        require_remote(session)?;
        // SAFETY: the caller's promise.
        let (name, value) = unsafe { (arg_str(var)?, arg_str(val)?) };
        if name.is_empty() || name.contains('=') {
            return Err(Espank::BadArg);
        }
        match session.env.iter_mut().find(|(n, _)| *n == name) {
            Some(_) if overwrite == 0 => Err(Espank::EnvExists),
            Some(entry) => {
                entry.1 = value;
                Ok(())
            }
            None => {
                session.env.push((name, value));
                Ok(())
            }
        }
    }))
}

/// # Safety
/// `var` is NULL or a C string.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_unsetenv(spank: SpankT, var: *const c_char) -> c_int {
    code(with_plugin(spank, |session, _| {
        require_remote(session)?;
        // SAFETY: the caller's promise.
        let name = unsafe { arg_str(var) }?;
        session.env.retain(|(n, _)| *n != name);
        Ok(())
    }))
}

/// The job-control checks: local/allocator only; job_script has no store.
fn job_control(session: &Session, setting: bool) -> Result<(), Espank> {
    match session.context {
        Context::Remote => Err(Espank::NotLocal),
        Context::Slurmd | Context::Error => Err(Espank::NotAvail),
        Context::JobScript if setting => Err(Espank::BadArg),
        Context::JobScript => Err(Espank::EnvNoexist),
        Context::Local | Context::Allocator => Ok(()),
    }
}

/// # Safety
/// `name` is NULL or a C string; `buf` NULL or writable for `len` bytes.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_job_control_getenv(
    spank: SpankT,
    name: *const c_char,
    buf: *mut c_char,
    len: c_int,
) -> c_int {
    let value = with_plugin(spank, |session, _| {
        job_control(session, false)?;
        // SAFETY: the caller's promise.
        let name = unsafe { arg_str(name) }?;
        if buf.is_null() || len < 0 {
            return Err(Espank::BadArg);
        }
        session.job_control_env.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone()).ok_or(Espank::EnvNoexist)
    });
    // SAFETY: the caller's promise for `buf`.
    code(value.and_then(|value| unsafe { copy_out(&value, buf, len) }))
}

/// # Safety
/// `name` and `value` are NULL or C strings.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_job_control_setenv(
    spank: SpankT,
    name: *const c_char,
    value: *const c_char,
    overwrite: c_int,
) -> c_int {
    code(with_plugin(spank, |session, _| {
        job_control(session, true)?;
        // SAFETY: the caller's promise.
        let (name, value) = unsafe { (arg_str(name)?, arg_str(value)?) };
        match session.job_control_env.iter_mut().find(|(n, _)| *n == name) {
            Some(_) if overwrite == 0 => Err(Espank::EnvExists),
            Some(entry) => {
                entry.1 = value;
                Ok(())
            }
            None => {
                session.job_control_env.push((name, value));
                Ok(())
            }
        }
    }))
}

/// # Safety
/// `name` is NULL or a C string.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn spank_job_control_unsetenv(spank: SpankT, name: *const c_char) -> c_int {
    code(with_plugin(spank, |session, _| {
        job_control(session, true)?;
        // SAFETY: the caller's promise.
        let name = unsafe { arg_str(name) }?;
        session.job_control_env.retain(|(n, _)| *n != name);
        Ok(())
    }))
}

/// One answer of `spank_get_item`, computed under the lock, written after it.
enum Item {
    U32(u32),
    U16(u16),
    U64(u64),
    Int(i32),
    Ptr(*mut c_void),
    Argv(i32, *mut *mut c_char),
    Gids(*mut u32, i32),
}

const VERSION: [&CStr; 4] = [c"22.05.8", c"22", c"05", c"8"];

/// The typed half of `spank_get_item`: the shim pulled `value_in` (items 15–18) and the
/// out-pointers `first` and `second` (items 9 and 19) off the va_list.
///
/// # Safety
/// `first` and `second` are NULL or point to writable objects of the item's types.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn drover_spank_item(
    spank: SpankT,
    item: c_int,
    value_in: i64,
    first: *mut c_void,
    second: *mut c_void,
) -> c_int {
    let answer = with_plugin(spank, |session, plugin_idx| {
        if first.is_null() || ((item == 9 || item == 19) && second.is_null()) {
            return Err(Espank::BadArg);
        }
        item_value(session, plugin_idx, item, value_in)
    });
    let item = match answer {
        Ok(item) => item,
        Err(code) => return code as c_int,
    };
    // SAFETY: the out-pointers have the item's types by the ABI and the caller's promise.
    unsafe {
        match item {
            Item::U32(v) => *first.cast::<u32>() = v,
            Item::U16(v) => *first.cast::<u16>() = v,
            Item::U64(v) => *first.cast::<u64>() = v,
            Item::Int(v) => *first.cast::<c_int>() = v,
            Item::Ptr(v) => *first.cast::<*mut c_void>() = v,
            Item::Argv(argc, argv) => {
                *first.cast::<c_int>() = argc;
                *second.cast::<*mut *mut c_char>() = argv;
            }
            Item::Gids(gids, n_gids) => {
                *first.cast::<*mut u32>() = gids;
                *second.cast::<c_int>() = n_gids;
            }
        }
    }
    Espank::Success as c_int
}

fn item_value(session: &mut Session, plugin_idx: usize, item: c_int, value_in: i64) -> Result<Item, Espank> {
    if (20..=23).contains(&item) {
        return Ok(Item::Ptr(VERSION[usize::try_from(item - 20).unwrap_or(0)].as_ptr().cast_mut().cast()));
    }
    let hook = session.hook_of(plugin_idx);
    match session.context {
        Context::Remote => {}
        Context::Local => {
            return match item {
                0 | 1 | 2 | 3 | 4 | 7 | 9 | 10 => {
                    let job = session.job.clone().ok_or(Espank::NotAvail)?;
                    match item {
                        10 => Ok(Item::Ptr(std::ptr::null_mut())),
                        9 => {
                            let argv = session.keep_array(&job.argv);
                            Ok(Item::Argv(i32::try_from(job.argv.len()).unwrap_or(i32::MAX), argv))
                        }
                        _ => job_scalar(&job, item),
                    }
                }
                _ => Err(Espank::NotRemote),
            };
        }
        Context::Allocator => {
            return match item {
                0 | 1 => Err(Espank::NotAvail),
                2 | 3 | 4 | 7 | 9 | 10 => Err(Espank::BadArg),
                _ => Err(Espank::NotRemote),
            };
        }
        Context::JobScript => {
            return match item {
                0..=2 => session.job.as_ref().ok_or(Espank::NotAvail).and_then(|job| job_scalar(job, item)),
                _ => Err(Espank::NotAvail),
            };
        }
        Context::Slurmd | Context::Error => return Err(Espank::NotAvail),
    }
    let job = session.job.clone().ok_or(Espank::NotAvail)?;
    let task = session.task.filter(|_| hook.is_some_and(Hook::is_per_task));
    let in_u32 = || u32::try_from(value_in).map_err(|_| Espank::NoExist);
    match item {
        9 => {
            let argv = session.keep_array(&job.argv);
            Ok(Item::Argv(i32::try_from(job.argv.len()).unwrap_or(i32::MAX), argv))
        }
        10 => {
            let env: Vec<String> = session.env.iter().map(|(name, value)| format!("{name}={value}")).collect();
            Ok(Item::Ptr(session.keep_array(&env).cast()))
        }
        11 => task.map(|task| Item::Int(i32::try_from(task.local_id).unwrap_or(i32::MAX))).ok_or(Espank::NotTask),
        12 => task.map(|task| Item::U32(task.global_id)).ok_or(Espank::NotTask),
        13 => task
            .filter(|_| hook == Some(Hook::TaskExit))
            .and_then(|task| task.exit_status)
            .map(Item::Int)
            .ok_or(Espank::NotTask),
        14 => task.map(|task| Item::Int(task.pid)).ok_or(Espank::NotTask),
        15 | 16 => {
            if session.tasks.is_empty() {
                return Err(Espank::NotExecd);
            }
            let (_, local_id, global_id) =
                *session.tasks.iter().find(|(pid, _, _)| i64::from(*pid) == value_in).ok_or(Espank::NoExist)?;
            Ok(Item::U32(if item == 15 { global_id } else { local_id }))
        }
        17 => {
            let local_id = in_u32()?;
            if local_id >= job.local_task_count {
                return Err(Espank::NoExist);
            }
            Ok(Item::U32(job.global_id(local_id)))
        }
        18 => {
            let global_id = in_u32()?;
            (0..job.local_task_count)
                .find(|local_id| job.global_id(*local_id) == global_id)
                .map(Item::U32)
                .ok_or(Espank::NoExist)
        }
        19 => {
            let mut gids = job.groups.clone();
            let n_gids = i32::try_from(gids.len()).unwrap_or(i32::MAX);
            let ptr = gids.as_mut_ptr();
            session.kept_gids.push(gids);
            Ok(Item::Gids(ptr, n_gids))
        }
        25 => Ok(Item::Ptr(session.keep_str(&job.job_alloc_cores).cast())),
        27 => Ok(Item::Ptr(session.keep_str(&job.step_alloc_cores).cast())),
        _ => job_scalar(&job, item),
    }
}

fn job_scalar(job: &crate::JobInfo, item: c_int) -> Result<Item, Espank> {
    Ok(match item {
        0 => Item::U32(job.uid),
        1 => Item::U32(job.gid),
        2 => Item::U32(job.job_id),
        3 => Item::U32(job.step_id),
        4 => Item::U32(job.n_nodes),
        5 => Item::U32(job.node_id),
        6 => Item::U32(job.local_task_count),
        7 => Item::U32(job.total_task_count),
        8 => Item::U16(job.n_cpus),
        24 => Item::U32(job.cpus_per_task),
        26 => Item::U64(job.job_alloc_mem),
        28 => Item::U64(job.step_alloc_mem),
        29 => Item::U32(job.restart_count),
        30 => Item::U32(job.array_job_id),
        31 => Item::U32(job.array_task_id),
        _ => return Err(Espank::BadArg),
    })
}

/// Keeps every export in the binary whatever the linker thinks of unreferenced code.
#[used]
static KEEP: [unsafe extern "C" fn(); 15] = {
    // SAFETY: these function pointers are never called through this table; it only makes the
    // linker keep the symbols. The transmutes change the signature, not the address.
    unsafe {
        [
            std::mem::transmute::<extern "C" fn() -> c_int, unsafe extern "C" fn()>(spank_context),
            std::mem::transmute::<extern "C" fn(SpankT) -> c_int, unsafe extern "C" fn()>(spank_remote),
            std::mem::transmute::<unsafe extern "C" fn(*const c_char) -> c_int, unsafe extern "C" fn()>(
                spank_symbol_supported,
            ),
            std::mem::transmute::<extern "C" fn(c_int) -> *const c_char, unsafe extern "C" fn()>(spank_strerror),
            std::mem::transmute::<unsafe extern "C" fn(SpankT, *const RawOption) -> c_int, unsafe extern "C" fn()>(
                spank_option_register,
            ),
            std::mem::transmute::<
                unsafe extern "C" fn(SpankT, *const RawOption, *mut *mut c_char) -> c_int,
                unsafe extern "C" fn(),
            >(spank_option_getopt),
            std::mem::transmute::<
                unsafe extern "C" fn(SpankT, *const c_char, *mut c_char, c_int) -> c_int,
                unsafe extern "C" fn(),
            >(spank_getenv),
            std::mem::transmute::<
                unsafe extern "C" fn(SpankT, *const c_char, *const c_char, c_int) -> c_int,
                unsafe extern "C" fn(),
            >(spank_setenv),
            std::mem::transmute::<unsafe extern "C" fn(SpankT, *const c_char) -> c_int, unsafe extern "C" fn()>(
                spank_unsetenv,
            ),
            std::mem::transmute::<
                unsafe extern "C" fn(SpankT, *const c_char, *mut c_char, c_int) -> c_int,
                unsafe extern "C" fn(),
            >(spank_job_control_getenv),
            std::mem::transmute::<
                unsafe extern "C" fn(SpankT, *const c_char, *const c_char, c_int) -> c_int,
                unsafe extern "C" fn(),
            >(spank_job_control_setenv),
            std::mem::transmute::<unsafe extern "C" fn(SpankT, *const c_char) -> c_int, unsafe extern "C" fn()>(
                spank_job_control_unsetenv,
            ),
            std::mem::transmute::<
                unsafe extern "C" fn(SpankT, c_int, i64, *mut c_void, *mut c_void) -> c_int,
                unsafe extern "C" fn(),
            >(drover_spank_item),
            std::mem::transmute::<unsafe extern "C" fn(i32, *const c_char), unsafe extern "C" fn()>(
                crate::log::drover_spank_log,
            ),
            std::mem::transmute::<unsafe extern "C" fn(i32, *const c_char), unsafe extern "C" fn()>(
                crate::log::drover_spank_log,
            ),
        ]
    }
};
