//! `srun --multi-prog FILE`: a different program (and arguments) per task, from a configuration
//! file in Slurm's format. Each line is `RANKS PROGRAM [ARGS…]`, where `RANKS` is a comma list of
//! task ids and ranges (`0,2-3`) or `*` for every task no other line names; `%t` in the
//! arguments is the task's id and `%o` its offset within its line's ranks. `#` starts a comment
//! line, and a line ending in `\` continues on the next. The file becomes one `/bin/sh` script
//! that every task runs and that execs its own line's program (each word quoted, so nothing in
//! the file is interpreted by the shell).

/// The largest configuration file read.
const MAX_FILE: usize = 1 << 20;
/// The most task ids the file may name (one `case` arm each).
const MAX_RANKS: usize = 65_536;

/// `word` quoted for `/bin/sh`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The words of a line: split on blanks, with `'…'` and `"…"` quoting.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut quote_char: Option<char> = None;
    for c in line.chars() {
        match quote_char {
            Some(q) if c == q => quote_char = None,
            Some(_) => current.get_or_insert_with(String::new).push(c),
            None if c == '\'' || c == '"' => {
                quote_char = Some(c);
                current.get_or_insert_with(String::new);
            }
            None if c.is_whitespace() => out.extend(current.take()),
            None => current.get_or_insert_with(String::new).push(c),
        }
    }
    if quote_char.is_some() {
        return Err("unterminated quote".into());
    }
    out.extend(current);
    Ok(out)
}

/// The task ids of `RANKS` (`None` for `*`).
fn ranks(text: &str) -> Result<Option<Vec<u32>>, String> {
    if text == "*" {
        return Ok(None);
    }
    let mut ids = Vec::new();
    for part in text.split(',') {
        let (low, high) = part.split_once('-').unwrap_or((part, part));
        let number = |s: &str| s.trim().parse::<u32>().map_err(|_| format!("invalid task ids `{text}`"));
        let (low, high) = (number(low)?, number(high)?);
        if high < low || (high - low) as usize >= MAX_RANKS || ids.len() + ((high - low) as usize) >= MAX_RANKS {
            return Err(format!("invalid task ids `{text}` (at most {MAX_RANKS} tasks)"));
        }
        ids.extend(low..=high);
    }
    Ok(Some(ids))
}

/// `word` with `%t` and `%o` put in, as shell text: literal parts quoted, `%t` of a `*` line is
/// the task's id at run time.
fn expand(word: &str, task: Option<(u32, usize)>) -> String {
    let mut out = String::new();
    let mut literal = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek(), task) {
            ('%', Some('t'), Some((id, _))) => {
                chars.next();
                literal.push_str(&id.to_string());
            }
            ('%', Some('o'), Some((_, offset))) => {
                chars.next();
                literal.push_str(&offset.to_string());
            }
            ('%', Some('t' | 'o'), None) => {
                chars.next();
                out.push_str(&quote(&std::mem::take(&mut literal)));
                out.push_str("\"$SLURM_PROCID\"");
            }
            _ => literal.push(c),
        }
    }
    out.push_str(&quote(&literal));
    out
}

/// A line of the file: its task ids (`None` for `*`) and its words (program, arguments).
type Line = (Option<Vec<u32>>, Vec<String>);

/// The file's lines that name programs (comments and blank lines left out, continuations
/// joined), each with its line number; a task named twice is refused.
fn lines(config: &str) -> Result<Vec<(usize, Line)>, String> {
    let mut out = Vec::new();
    let mut named = std::collections::HashSet::new();
    let joined = config.replace("\\\n", " ");
    for (n, line) in joined.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words = words(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        let [ids, program, args @ ..] = words.as_slice() else {
            return Err(format!("line {}: no program for tasks `{line}`", n + 1));
        };
        let ids = ranks(ids).map_err(|e| format!("line {}: {e}", n + 1))?;
        for &id in ids.iter().flatten() {
            if !named.insert(id) {
                return Err(format!("line {}: task {id} is named twice", n + 1));
            }
            if named.len() > MAX_RANKS {
                return Err(format!("more than {MAX_RANKS} tasks named"));
            }
        }
        out.push((n + 1, (ids, std::iter::once(program.clone()).chain(args.iter().cloned()).collect())));
    }
    Ok(out)
}

/// The `/bin/sh` script that runs each task's line of `config` (the file's text).
pub(crate) fn script(config: &str) -> Result<String, String> {
    let mut arms = Vec::new();
    let mut default = None;
    for (_, (ids, words)) in lines(config)? {
        let [program, args @ ..] = words.as_slice() else { continue };
        match ids {
            None => {
                let words: Vec<String> =
                    std::iter::once(quote(program)).chain(args.iter().map(|a| expand(a, None))).collect();
                default.get_or_insert(words.join(" "));
            }
            Some(ids) => {
                for (offset, id) in ids.into_iter().enumerate() {
                    let words: Vec<String> = std::iter::once(quote(program))
                        .chain(args.iter().map(|a| expand(a, Some((id, offset)))))
                        .collect();
                    arms.push(format!("{id}) exec {} ;;", words.join(" ")));
                }
            }
        }
    }
    if arms.is_empty() && default.is_none() {
        return Err("no program for any task".into());
    }
    let fallback = match default {
        Some(words) => format!("*) exec {words} ;;"),
        None => "*) echo \"srun: error: no program for task $SLURM_PROCID in the --multi-prog file\" >&2; exit 1 ;;"
            .to_owned(),
    };
    Ok(format!("case \"$SLURM_PROCID\" in\n{}\n{fallback}\nesac\n", arms.join("\n")))
}

/// The program word of each of tasks `0..ntasks` as the file `config` writes it (what
/// `--debugger-test` prints as the task's executable); Slurm's error for a task no line names.
pub(crate) fn programs(config: &str, ntasks: u32, file: &str) -> Result<Vec<String>, String> {
    let lines = lines(config).map_err(|e| format!("{file}: {e}"))?;
    let program = |task: u32| {
        let named = lines.iter().find(|(_, (ids, _))| ids.as_ref().is_some_and(|ids| ids.contains(&task)));
        let line = named.or_else(|| lines.iter().find(|(_, (ids, _))| ids.is_none()));
        line.and_then(|(_, (_, words))| words.first().cloned())
    };
    (0..ntasks)
        .map(|task| {
            program(task).ok_or_else(|| format!("Configuration file {file} invalid, no record for task id {task}"))
        })
        .collect()
}

/// The text of `srun --multi-prog FILE`'s file (`command` is srun's command words).
fn read(command: &[String]) -> Result<(String, String), String> {
    let [file] = command else { return Err("--multi-prog takes one configuration file as the command".into()) };
    let size = std::fs::metadata(file).map_err(|e| format!("{file}: {}", crate::strip_os_error(&e.to_string())))?.len();
    if size > MAX_FILE as u64 {
        return Err(format!("{file}: larger than {MAX_FILE} bytes"));
    }
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("{file}: {}", crate::strip_os_error(&e.to_string())))?;
    Ok((file.clone(), text))
}

/// Each task's program word for `srun --multi-prog FILE` with `ntasks` tasks (see [`programs`]).
pub(crate) fn task_programs(command: &[String], ntasks: u32) -> Result<Vec<String>, String> {
    let (file, text) = read(command)?;
    programs(&text, ntasks, &file)
}

/// The argv every task runs for `srun --multi-prog FILE` (`command` is srun's command words).
pub(crate) fn argv(command: &[String]) -> Result<Vec<String>, String> {
    let (file, text) = read(command)?;
    let script = script(&text).map_err(|e| format!("{file}: {e}"))?;
    Ok(vec!["/bin/sh".into(), "-c".into(), script, "multi-prog".into()])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the script as task `id` and returns what it printed.
    fn run_as(script: &str, id: u32) -> String {
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", script, "multi-prog"])
            .env("SLURM_PROCID", id.to_string())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    #[test]
    fn each_task_runs_its_line_with_its_id_and_offset() {
        let config = "# MPMD\n0 echo first %t:%o\n1-2,5 /bin/echo task:%t:offset:%o 'a b' \"$HOME\"\n\
            3 echo \\\n  continued %t\n* echo rest %t %o\n";
        let script = script(config).unwrap();
        assert_eq!(run_as(&script, 0), "first 0:0\n");
        assert_eq!(run_as(&script, 2), "task:2:offset:1 a b $HOME\n");
        assert_eq!(run_as(&script, 5), "task:5:offset:2 a b $HOME\n");
        assert_eq!(run_as(&script, 3), "continued 3\n");
        assert_eq!(run_as(&script, 4), "rest 4 4\n");
        // Nothing in the file reaches the shell unquoted.
        let script = super::script("0 echo $(id) ';' `x`\n").unwrap();
        assert_eq!(run_as(&script, 0), "$(id) ; `x`\n");
        // A task no line names fails with the reason.
        let script = super::script("0 true\n").unwrap();
        assert!(run_as(&script, 1).contains("no program for task 1"));
    }

    #[test]
    fn each_task_s_program_word_as_the_file_writes_it() {
        let config = "1-2   hostname\n0,3   date\n";
        assert_eq!(programs(config, 4, "f").unwrap(), ["date", "hostname", "hostname", "date"]);
        // Slurm's words for a task no line names.
        assert_eq!(programs(config, 5, "f").unwrap_err(), "Configuration file f invalid, no record for task id 4");
        assert_eq!(programs("0 echo %t\n* /bin/true x\n", 3, "f").unwrap(), ["echo", "/bin/true", "/bin/true"]);
        assert!(programs("0 echo\n0 true\n", 1, "f").unwrap_err().contains("named twice"));
    }

    #[test]
    fn bad_files_are_refused_with_the_line() {
        assert!(script("0-x echo\n").unwrap_err().starts_with("line 1: invalid task ids"));
        assert!(script("0 echo\n0 true\n").unwrap_err().contains("task 0 is named twice"));
        assert!(script("0\n").unwrap_err().contains("no program"));
        assert!(script("0-4000000000 true\n").unwrap_err().contains("at most"));
        assert!(script("# nothing\n").is_err());
        assert!(script("0 echo 'open\n").unwrap_err().contains("unterminated quote"));
    }
}
