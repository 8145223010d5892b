//! The crate's system and FFI calls, each behind a safe wrapper: `dlopen`/`dlsym`, `glob(3)`,
//! the C shim's crash-guarded calls, and switching the effective user for `user_init`.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A plugin callback: `int f(spank_t, int ac, char **av)`.
pub(crate) type SpankFn = unsafe extern "C" fn(*mut c_void, c_int, *mut *mut c_char) -> c_int;
/// An option callback: `int cb(int val, const char *optarg, int remote)`.
pub(crate) type OptionFn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
/// A plugin's optional `int init(void)`.
pub(crate) type InitFn = unsafe extern "C" fn() -> c_int;

unsafe extern "C" {
    fn drover_spank_call_guarded(
        callback: SpankFn,
        spank: *mut c_void,
        ac: c_int,
        av: *mut *mut c_char,
        crash_signal: *mut c_int,
    ) -> c_int;
    fn drover_spank_call_init_guarded(init: InitFn, crash_signal: *mut c_int) -> c_int;
    fn drover_spank_call_option_guarded(
        cb: OptionFn,
        val: c_int,
        optarg: *const c_char,
        remote: c_int,
        crash_signal: *mut c_int,
    ) -> c_int;
}

/// What a guarded call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The callback returned this.
    Returned(i32),
    /// The callback died of this signal.
    Crashed(i32),
}

fn outcome(rc: c_int, crash_signal: c_int) -> Outcome {
    if crash_signal != 0 { Outcome::Crashed(crash_signal) } else { Outcome::Returned(rc) }
}

/// Calls a plugin callback; a fault signal inside it comes back as [`Outcome::Crashed`].
///
/// # Safety
/// `callback` must be a callback symbol of a loaded plugin, `av` an `ac`-long array of C strings
/// (plus a NULL) that outlives the call.
pub(crate) unsafe fn call_guarded(callback: SpankFn, spank: *mut c_void, ac: c_int, av: *mut *mut c_char) -> Outcome {
    let mut crash_signal = 0;
    // SAFETY: the caller vouches for the callback and its arguments; the shim only adds a
    // sigsetjmp guard around the call and restores the signal handlers afterwards.
    let rc = unsafe { drover_spank_call_guarded(callback, spank, ac, av, &mut crash_signal) };
    outcome(rc, crash_signal)
}

/// Calls a plugin's `init(void)` under the crash guard.
///
/// # Safety
/// `init` must be the `init` symbol of a loaded plugin.
pub(crate) unsafe fn call_init_guarded(init: InitFn) -> Outcome {
    let mut crash_signal = 0;
    // SAFETY: as for `call_guarded`; `init` takes no argument.
    let rc = unsafe { drover_spank_call_init_guarded(init, &mut crash_signal) };
    outcome(rc, crash_signal)
}

/// Calls an option callback under the crash guard.
///
/// # Safety
/// `cb` must come from a loaded plugin's option table.
pub(crate) unsafe fn call_option_guarded(cb: OptionFn, val: i32, optarg: Option<&CStr>, remote: bool) -> Outcome {
    let mut crash_signal = 0;
    let optarg = optarg.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: the caller vouches for `cb`; `optarg` is NULL or a C string that outlives the call.
    let rc = unsafe { drover_spank_call_option_guarded(cb, val, optarg, c_int::from(remote), &mut crash_signal) };
    outcome(rc, crash_signal)
}

/// A `dlopen`ed shared object, closed on drop.
#[derive(Debug)]
pub(crate) struct Library {
    handle: *mut c_void,
}

impl Library {
    /// `dlopen(path, RTLD_NOW | RTLD_LOCAL)`: every undefined symbol is resolved now, so a
    /// missing one is reported by name (in `dlerror`'s text) instead of failing mid-job.
    pub(crate) fn open(path: &Path) -> Result<Library, String> {
        let c_path =
            CString::new(path.as_os_str().as_bytes()).map_err(|_| "the path contains a NUL byte".to_owned())?;
        // SAFETY: `c_path` is a valid C string. dlopen runs the object's constructors, which is
        // what loading a plugin means; the object is the administrator's choice.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() { Err(dlerror()) } else { Ok(Library { handle }) }
    }

    /// The address of `name` in this object, if it defines it.
    pub(crate) fn symbol(&self, name: &CStr) -> Option<*mut c_void> {
        // SAFETY: `handle` is open for as long as `self` lives, `name` a valid C string.
        let address = unsafe { libc::dlsym(self.handle, name.as_ptr()) };
        (!address.is_null()).then_some(address)
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: `handle` came from dlopen and is closed once; nothing of the object is used
        // after the stack that owns this library is gone.
        unsafe { libc::dlclose(self.handle) };
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a thread-local C string valid until the next dl* call,
    // copied out at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        "unknown dlopen error".to_owned()
    } else {
        // SAFETY: non-NULL, NUL-terminated, see above.
        unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
    }
}

/// The paths matching `pattern`, sorted as `glob(3)` sorts them; none on no match or error.
pub(crate) fn glob(pattern: &Path) -> Vec<PathBuf> {
    let Ok(c_pattern) = CString::new(pattern.as_os_str().as_bytes()) else { return Vec::new() };
    // SAFETY: glob_t is plain old data; zeroed is its documented initial state.
    let mut found: libc::glob_t = unsafe { std::mem::zeroed() };
    // SAFETY: `c_pattern` is a valid C string and `found` a glob_t we own; globfree below.
    let rc = unsafe { libc::glob(c_pattern.as_ptr(), 0, None, &mut found) };
    let mut paths = Vec::new();
    if rc == 0 {
        for idx in 0..found.gl_pathc {
            // SAFETY: glob filled gl_pathv with gl_pathc valid C strings.
            let path = unsafe { CStr::from_ptr(*found.gl_pathv.add(idx)) };
            paths.push(PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes())));
        }
    }
    // SAFETY: `found` was filled by glob (or is zeroed), and is freed once.
    unsafe { libc::globfree(&mut found) };
    paths
}

/// The effective identity to restore after [`drop_effective`].
#[derive(Debug)]
pub(crate) struct SavedIdentity {
    euid: libc::uid_t,
    egid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

fn last_error(operation: &'static str) -> crate::SpankError {
    crate::SpankError::Sys { operation, source: std::io::Error::last_os_error() }
}

/// Takes the user's groups, gid and uid as the *effective* identity (the real one stays root, so
/// [`restore_effective`] can come back): Slurm's "privileges temporarily dropped" for `user_init`.
pub(crate) fn drop_effective(uid: u32, gid: u32, groups: &[u32]) -> Result<SavedIdentity, crate::SpankError> {
    // SAFETY: getgroups with a zero size only counts.
    let n_groups = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut saved_groups = vec![0; usize::try_from(n_groups).unwrap_or(0)];
    // SAFETY: the buffer holds exactly the count asked for.
    let n_groups = unsafe { libc::getgroups(n_groups, saved_groups.as_mut_ptr()) };
    saved_groups.truncate(usize::try_from(n_groups).unwrap_or(0));
    // SAFETY: plain getters.
    let saved =
        SavedIdentity { euid: unsafe { libc::geteuid() }, egid: unsafe { libc::getegid() }, groups: saved_groups };
    // SAFETY: setgroups reads `groups.len()` gids from a live slice.
    if unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } != 0 {
        return Err(last_error("setgroups"));
    }
    // SAFETY: plain system call.
    if unsafe { libc::setegid(gid) } != 0 {
        return Err(last_error("setegid"));
    }
    // SAFETY: plain system call.
    if unsafe { libc::seteuid(uid) } != 0 {
        return Err(last_error("seteuid"));
    }
    Ok(saved)
}

/// Undoes [`drop_effective`].
pub(crate) fn restore_effective(saved: &SavedIdentity) -> Result<(), crate::SpankError> {
    // SAFETY: plain system call; the real uid is still root.
    if unsafe { libc::seteuid(saved.euid) } != 0 {
        return Err(last_error("seteuid"));
    }
    // SAFETY: plain system call.
    if unsafe { libc::setegid(saved.egid) } != 0 {
        return Err(last_error("setegid"));
    }
    // SAFETY: setgroups reads a live slice.
    if unsafe { libc::setgroups(saved.groups.len(), saved.groups.as_ptr()) } != 0 {
        return Err(last_error("setgroups"));
    }
    Ok(())
}

/// Whether the effective uid is root.
pub(crate) fn is_root() -> bool {
    // SAFETY: plain getter.
    unsafe { libc::geteuid() == 0 }
}

/// `SIGSEGV`, `SIGBUS`, … for a signal number.
pub(crate) fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGSYS => "SIGSYS",
        other => return format!("signal {other}"),
    };
    name.to_owned()
}
