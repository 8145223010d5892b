//! Local time through the C library (`localtime_r`), which knows the node's time zone.

/// The broken-down local time of `time` (seconds since the epoch); `None` when the C library
/// cannot represent it.
pub(crate) fn local_time(time: i64) -> Option<libc::tm> {
    // Drover runs on 64-bit Linux, where `time_t` is `i64`.
    let time_t: libc::time_t = time;
    // SAFETY: `tm` is plain old data; zeroed is a valid value for it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: localtime_r reads one time_t and writes one tm, both locals that outlive the call;
    // it is the thread-safe variant.
    if unsafe { libc::localtime_r(&time_t, &mut tm) }.is_null() {
        return None;
    }
    Some(tm)
}
