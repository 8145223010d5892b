//! Where srun writes its tasks' output: its own stdout and stderr, or the files `-o/-e` name.
//! Step patterns expand per task: `%t` task id, `%n` node index in the step, `%N` node name,
//! `%s` step id, `%j`/`%J` job id (`%J` as `job.step`), `%A` the array's job id (the job id
//! outside an array), `%a` the array task id (0 outside an array), `%u` user, `%x` job name, `%%`; a decimal
//! width between `%` and the letter zero-pads numbers; other tokens stay as written. Files are
//! opened by srun, as the user running it, relative to the step's working directory; without
//! `%t`/`%n`/`%N` every task shares one file. `-e` defaults to the `-o` file.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a pattern may refer to for one task.
pub(crate) struct TaskContext<'a> {
    pub(crate) job_id: u32,
    pub(crate) step_id: u32,
    pub(crate) task: u32,
    pub(crate) node_index: u32,
    pub(crate) node_name: &'a str,
    pub(crate) user: &'a str,
    pub(crate) job_name: &'a str,
    /// The job's array: its job id and this job's task id (`None` outside an array).
    pub(crate) array: Option<(u32, u32)>,
}

/// Expands a step output pattern for one task.
pub(crate) fn expand(pattern: &str, context: &TaskContext<'_>) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
            digits.push(d);
            chars.next();
        }
        let width: usize = digits.parse().unwrap_or(0).min(10);
        let number = |n: u32| format!("{n:0width$}");
        let Some(token) = chars.next() else {
            out.push('%');
            out.push_str(&digits);
            break;
        };
        match token {
            '%' => out.push('%'),
            't' => out.push_str(&number(context.task)),
            'n' => out.push_str(&number(context.node_index)),
            's' => out.push_str(&number(context.step_id)),
            'j' => out.push_str(&number(context.job_id)),
            'J' => out.push_str(&format!("{}.{}", number(context.job_id), context.step_id)),
            'A' => out.push_str(&number(context.array.map_or(context.job_id, |(job, _)| job))),
            'a' => out.push_str(&number(context.array.map_or(0, |(_, task)| task))),
            'N' => out.push_str(context.node_name),
            'u' => out.push_str(context.user),
            'x' => out.push_str(context.job_name),
            other => {
                out.push('%');
                out.push_str(&digits);
                out.push(other);
            }
        }
    }
    out
}

/// Open output files by path, shared by the tasks whose pattern names the same file.
#[derive(Default)]
pub(crate) struct Files {
    open: HashMap<PathBuf, File>,
}

impl Files {
    /// Appends `data` to `path` (created, or truncated the first time this step opens it).
    pub(crate) fn write(&mut self, base: &Path, path: &str, data: &[u8]) -> std::io::Result<()> {
        let full = base.join(path);
        if !self.open.contains_key(&full) {
            let file = File::create(&full)?;
            self.open.insert(full.clone(), file);
        }
        match self.open.get_mut(&full) {
            Some(file) => file.write_all(data),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TaskContext, expand};

    #[test]
    fn step_tokens() {
        let context = TaskContext {
            job_id: 42,
            step_id: 1,
            task: 3,
            node_index: 1,
            node_name: "n2",
            user: "alice",
            job_name: "train",
            array: None,
        };
        assert_eq!(expand("out-%j.%s-%t-%n-%N.txt", &context), "out-42.1-3-1-n2.txt");
        assert_eq!(expand("%3t|%J|%u|%x|%%|%q", &context), "003|42.1|alice|train|%|%q");
        assert_eq!(expand("%A.%a", &context), "42.0");
        assert_eq!(expand("%A.%a", &TaskContext { array: Some((40, 2)), ..context }), "40.2");
    }
}
