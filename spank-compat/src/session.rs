//! The state of the process's one active plugin stack, shared between the host side
//! ([`crate::Stack`]) and the functions plugins call ([`crate::abi`]).
//!
//! Plugins call back into the host while one of their callbacks runs, so the state lives in a
//! process-wide `Mutex` rather than in `Stack`: the host locks it only between callbacks, the
//! exported functions only for the time they read or change it, never while they write into a
//! plugin's memory (a fault there is caught by the crash guard, which must not leave the lock
//! held). A `Mutex` rather than a thread-local, because a plugin may call the API from a thread of
//! its own; the processes that host plugins are otherwise single-threaded while plugins run.

use crate::sys::{Library, OptionFn, SpankFn};
use crate::{Context, Hook, JobInfo};
use std::ffi::{CString, c_char};
use std::sync::{Mutex, MutexGuard};

/// The active stack, if any.
static SESSION: Mutex<Option<Session>> = Mutex::new(None);

/// Locks the session; a panic elsewhere does not make the state unusable.
pub(crate) fn lock() -> MutexGuard<'static, Option<Session>> {
    SESSION.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a `spank_t` points at. Plugins never look inside; the host recognizes a handle by its
/// address among the loaded plugins' handles, so a bad pointer is never dereferenced.
#[repr(C)]
pub(crate) struct HandleCell {
    pub(crate) _magic: u32,
}

pub(crate) struct Plugin {
    pub(crate) name: String,
    pub(crate) required: bool,
    pub(crate) handle: Box<HandleCell>,
    pub(crate) callbacks: [Option<SpankFn>; Hook::ALL.len()],
    /// The plugstack.conf arguments, and the NULL-terminated pointer array over them.
    pub(crate) _args: Vec<CString>,
    pub(crate) argv: Vec<*mut c_char>,
    /// Last: the code the callbacks point into is unloaded only after everything else is gone.
    pub(crate) _library: Library,
}

impl Plugin {
    pub(crate) fn handle_ptr(&self) -> *mut std::ffi::c_void {
        std::ptr::from_ref::<HandleCell>(&self.handle).cast_mut().cast()
    }
}

pub(crate) struct RegisteredOption {
    pub(crate) plugin_idx: usize,
    pub(crate) name: String,
    pub(crate) arginfo: Option<String>,
    pub(crate) usage: String,
    pub(crate) has_arg: i32,
    pub(crate) val: i32,
    pub(crate) cb: Option<OptionFn>,
    /// `Some` once given: with its argument, if any.
    pub(crate) value: Option<Option<String>>,
    /// A second plugin registered the same name: this one is ignored.
    pub(crate) disabled: bool,
}

/// The task a per-task callback is about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskState {
    pub(crate) local_id: u32,
    pub(crate) global_id: u32,
    pub(crate) pid: i32,
    pub(crate) exit_status: Option<i32>,
}

pub(crate) struct Session {
    pub(crate) context: Context,
    pub(crate) plugins: Vec<Plugin>,
    pub(crate) options: Vec<RegisteredOption>,
    pub(crate) job: Option<JobInfo>,
    /// The step environment (remote context), as `NAME=value` pairs.
    pub(crate) env: Vec<(String, String)>,
    /// The job-control environment (local and allocator contexts).
    pub(crate) job_control_env: Vec<(String, String)>,
    /// The plugin and hook running now.
    pub(crate) current: Option<(usize, Hook)>,
    pub(crate) task: Option<TaskState>,
    /// Tasks exec'd so far: pid, local id, global id.
    pub(crate) tasks: Vec<(i32, u32, u32)>,
    pub(crate) poisoned: bool,
    /// Strings and arrays handed out to plugins: they stay valid while the stack lives.
    pub(crate) kept_strings: Vec<CString>,
    pub(crate) kept_arrays: Vec<Vec<*mut c_char>>,
    pub(crate) kept_gids: Vec<Vec<u32>>,
}

// SAFETY: the raw pointers are addresses in loaded plugins and in strings this session owns;
// they are only used by the thread that holds the lock, and the libraries they point into live
// exactly as long as the session.
unsafe impl Send for Session {}

impl Session {
    pub(crate) fn new(context: Context) -> Session {
        Session {
            context,
            plugins: Vec::new(),
            options: Vec::new(),
            job: None,
            env: Vec::new(),
            job_control_env: Vec::new(),
            current: None,
            task: None,
            tasks: Vec::new(),
            poisoned: false,
            kept_strings: Vec::new(),
            kept_arrays: Vec::new(),
            kept_gids: Vec::new(),
        }
    }

    /// The index of the plugin whose handle this is.
    pub(crate) fn plugin_of(&self, spank: *mut std::ffi::c_void) -> Option<usize> {
        if spank.is_null() {
            return None;
        }
        self.plugins.iter().position(|plugin| plugin.handle_ptr() == spank)
    }

    /// The hook running now, if it is this plugin's.
    pub(crate) fn hook_of(&self, plugin_idx: usize) -> Option<Hook> {
        self.current.filter(|(idx, _)| *idx == plugin_idx).map(|(_, hook)| hook)
    }

    /// Keeps a copy of `text` alive and returns its address (NUL bytes cut it short).
    pub(crate) fn keep_str(&mut self, text: &str) -> *mut c_char {
        let text = CString::new(text.split('\0').next().unwrap_or_default()).unwrap_or_default();
        let ptr = text.as_ptr().cast_mut();
        self.kept_strings.push(text);
        ptr
    }

    /// Keeps a NULL-terminated array of copies of `items` alive and returns its address.
    pub(crate) fn keep_array(&mut self, items: &[String]) -> *mut *mut c_char {
        let mut array: Vec<*mut c_char> = items.iter().map(|item| self.keep_str(item)).collect();
        array.push(std::ptr::null_mut());
        let ptr = array.as_mut_ptr();
        self.kept_arrays.push(array);
        ptr
    }

    pub(crate) fn env_get(&self, name: &str) -> Option<&str> {
        self.env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// `_SLURM_SPANK_OPTION_<plugin>_<option>`, every character that is not ASCII alphanumeric
/// replaced by `_`: the name under which an option travels in the job's environment.
pub fn option_env_name(plugin: &str, option: &str) -> String {
    let clean = |text: &str| text.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect::<String>();
    format!("_SLURM_SPANK_OPTION_{}_{}", clean(plugin), clean(option))
}
