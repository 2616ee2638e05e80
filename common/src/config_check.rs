//! Checking a TOML configuration before a restart finds what is wrong
//! with it: every [`Problem`] with its dotted key and line, not serde's
//! first error alone.
//!
//! [`check`] reads the file as the program would, and goes on past each
//! error serde reports: the offending entry (or table) is blanked and the
//! file read again, so one run names every unknown key, wrong type and
//! malformed value. Then the caller's own checks run on what was read
//! (ranges, files), each naming its key; [`Doc::problem`] finds the key's
//! line. The helpers below check the files a configuration names:
//! [`unreadable`], [`private`] for secrets, [`uncreatable_dir`],
//! [`not_executable`], [`not_absolute`].

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file it is in (the configuration, or a file it names).
    pub file: PathBuf,
    /// 1-based, when the problem is at a place in the file.
    pub line: Option<usize>,
    /// The dotted key (`limits.grace_period_secs`, `accounts[1].token`), or
    /// empty for the file as a whole.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Errors serde reports one at a time; past this many, the rest wait for
/// the next run.
const MOST_READ_ERRORS: usize = 50;

/// Reads the configuration at `path` into a `T`, past serde's errors, and
/// adds what `more` finds wrong with what was read: the configuration, or
/// every problem in the file's order (those of no place last).
pub fn check<T: DeserializeOwned>(
    path: &Path,
    more: impl FnOnce(&Doc<'_>, &T) -> Vec<Problem>,
) -> Result<T, Vec<Problem>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![Problem {
            file: path.to_owned(),
            line: None,
            key: String::new(),
            message: format!("cannot read {}: {e}", path.display()),
        }]
    })?;
    let doc = Doc {
        path,
        text: &text,
        table: DeTable::parse(&text).ok().map(|t| t.into_inner()),
    };
    let (config, mut problems) = doc.read::<T>();
    let Some(config) = config else {
        in_order(&mut problems);
        return Err(problems);
    };
    // Keys blanked after a read error stand at their defaults now: what
    // is found wrong under them only repeats that error.
    let blanked: Vec<String> = problems.iter().map(|p| p.key.clone()).collect();
    problems.extend(more(&doc, &config).into_iter().filter(|p| {
        !blanked
            .iter()
            .any(|top| under(&p.key, top) || under(top, &p.key))
    }));
    in_order(&mut problems);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

/// In the file's order; those of no place (a missing key) last.
fn in_order(problems: &mut [Problem]) {
    problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
}

/// Whether `key` is `top` or lies beneath it.
fn under(key: &str, top: &str) -> bool {
    !top.is_empty()
        && (key == top
            || key.starts_with(&format!("{top}."))
            || key.starts_with(&format!("{top}[")))
}

/// A configuration's text, and its table (when it parses), to find keys'
/// lines in.
pub struct Doc<'a> {
    path: &'a Path,
    text: &'a str,
    table: Option<DeTable<'a>>,
}

impl Doc<'_> {
    /// The configuration's file.
    pub fn path(&self) -> &Path {
        self.path
    }

    /// `message` about `key`, at the key's line.
    pub fn problem(&self, key: impl Into<String>, message: impl Into<String>) -> Problem {
        let key = key.into();
        Problem {
            file: self.path.to_owned(),
            line: self.line_of(&key),
            key,
            message: message.into(),
        }
    }

    fn line_at(&self, offset: usize) -> usize {
        line_at(self.text, offset)
    }

    /// Reads the file as the program does, going on past each error serde
    /// reports by blanking what it was about; the configuration if it
    /// reads (with what was blanked at its defaults), and every error met.
    fn read<T: DeserializeOwned>(&self) -> (Option<T>, Vec<Problem>) {
        let (_, syntax) = DeTable::parse_recoverable(self.text);
        if !syntax.is_empty() {
            let problems = syntax
                .iter()
                .map(|e| Problem {
                    file: self.path.to_owned(),
                    line: e.span().map(|s| self.line_at(s.start)),
                    key: String::new(),
                    message: e.message().trim().to_owned(),
                })
                .collect();
            return (None, problems);
        }
        let mut work = self.text.to_owned();
        let mut problems: Vec<Problem> = Vec::new();
        for _ in 0..MOST_READ_ERRORS {
            let error = match toml::from_str::<T>(&work) {
                Ok(config) => return (Some(config), problems),
                Err(error) => error,
            };
            let message = error.message().trim().to_owned();
            // An empty span is the whole document's (the root table).
            let span = error
                .span()
                .filter(|s| s.start < s.end && s.start < work.len());
            if let Some(field) = missing_field(&message) {
                // Named by its table; nothing to blank, so the read ends.
                let table = span
                    .as_ref()
                    .map(|s| locate(&work, s.start).0)
                    .unwrap_or_default();
                let key = if table.is_empty() {
                    field.to_owned()
                } else {
                    format!("{table}.{field}")
                };
                // Missing only because its wrong value was blanked: that
                // error was told.
                if !problems.iter().any(|p| p.key == key) {
                    problems.push(Problem {
                        file: self.path.to_owned(),
                        line: self.line_of(&table),
                        key,
                        message,
                    });
                }
                return (None, problems);
            }
            let key = span
                .as_ref()
                .map(|s| locate(self.text, s.start).0)
                .unwrap_or_default();
            problems.push(Problem {
                file: self.path.to_owned(),
                line: span.as_ref().map(|s| self.line_at(s.start)),
                key,
                message,
            });
            match span {
                Some(span) if blank(&mut work, span.start) => {}
                _ => return (None, problems),
            }
        }
        (None, problems)
    }

    /// The line of a dotted key (`a.b`, `accounts[1].c`, `a.list[2]`): its
    /// own, or that of its nearest table present in the file.
    pub fn line_of(&self, key: &str) -> Option<usize> {
        if key.is_empty() {
            return None;
        }
        let mut span = None;
        let mut here: &DeTable = self.table.as_ref()?;
        for part in key.split('.') {
            let (name, index) = match part.split_once('[') {
                Some((name, rest)) => (name, rest.trim_end_matches(']').parse::<usize>().ok()),
                None => (part, None),
            };
            let Some((k, v)) = here.get_key_value(name) else {
                break;
            };
            span = Some(k.span().start);
            let value = match (v.get_ref(), index) {
                (DeValue::Array(items), Some(i)) => match items.get(i) {
                    Some(item) => {
                        span = Some(item.span().start);
                        item
                    }
                    None => break,
                },
                _ => v,
            };
            match value.get_ref() {
                DeValue::Table(t) => here = t,
                _ => break,
            }
        }
        span.map(|s| self.line_at(s))
    }
}

/// The 1-based line of `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// A TOML error in another file the configuration names (a tokens file, a
/// list of repositories), on one line: `FILE:LINE: message`.
pub fn error_at(path: &Path, text: &str, error: &toml::de::Error) -> String {
    let line = error.span().map(|s| line_at(text, s.start));
    format!(
        "{}{}: {}",
        path.display(),
        line.map(|l| format!(":{l}")).unwrap_or_default(),
        error.message().trim()
    )
}

/// What is wrong with `key = value` if it is not within `min..=max`.
pub fn out_of_range(key: &str, value: u64, min: u64, max: u64) -> Option<String> {
    (!(min..=max).contains(&value))
        .then(|| format!("{key} must be from {min} to {max}, got {value}"))
}

/// Why a file cannot be read, if it cannot.
pub fn unreadable(path: &Path) -> Option<String> {
    match std::fs::File::open(path) {
        Ok(file) => match file.metadata() {
            Ok(meta) if meta.is_file() => None,
            Ok(_) => Some(format!("{} is not a file", path.display())),
            Err(e) => Some(format!("cannot read {}: {e}", path.display())),
        },
        Err(e) => Some(format!("cannot read {}: {e}", path.display())),
    }
}

/// Why a secret file is too open, if any of the permission bits in `mask`
/// is set: the mode seen, and the chmod that closes it.
pub fn open_to(path: &Path, mask: u32) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & mask != 0).then(|| {
        let who = if mask & 0o070 != 0 {
            "its group or others"
        } else {
            "others"
        };
        format!(
            "{} holds a secret but is open to {who} (mode {mode:04o}): chmod {} it",
            path.display(),
            if mask & 0o070 != 0 { "600" } else { "o-rwx" }
        )
    })
}

/// Why a secret file is not fit to hold one, if it is not: unreadable, or
/// open to anyone but its owner.
pub fn private(path: &Path) -> Option<String> {
    unreadable(path).or_else(|| open_to(path, 0o077))
}

/// A secret file's text: readable, and open to its owner alone.
pub fn secret(path: &Path) -> Result<String, String> {
    if let Some(why) = private(path) {
        return Err(why);
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Why a program cannot be run, if it cannot: missing, not a file, or not
/// executable by this user.
pub fn not_executable(path: &Path) -> Option<String> {
    use rustix::fs::Access;
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Some(format!("{} is not a file", path.display())),
        Ok(_) => rustix::fs::access(path, Access::EXEC_OK)
            .is_err()
            .then(|| format!("{} is not executable by this user", path.display())),
        Err(e) => Some(format!("cannot run {}: {e}", path.display())),
    }
}

/// Why `path` cannot be (or be made, as `create_dir_all` would) a
/// directory, if it cannot: it is something else, something on the way is
/// not a directory, or the deepest directory on the way is not this
/// user's to write in.
pub fn uncreatable_dir(path: &Path) -> Option<String> {
    use rustix::fs::Access;
    let cannot = |why: String| Some(format!("cannot create {}: {why}", path.display()));
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return None,
        Ok(_) => return Some(format!("{} is not a directory", path.display())),
        Err(e) if !missing(&e) => return Some(format!("cannot use {}: {e}", path.display())),
        Err(_) => {}
    }
    let mut up = path.parent();
    while let Some(dir) = up {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {
                return rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK)
                    .is_err()
                    .then(|| format!("{} is not writable by this user", dir.display()))
                    .and_then(cannot);
            }
            Ok(_) => return cannot(format!("{} is not a directory", dir.display())),
            Err(e) if missing(&e) => up = dir.parent(),
            Err(e) => return cannot(format!("{}: {e}", dir.display())),
        }
    }
    None
}

/// Whether an error means nothing is there (a file on the way says it
/// too).
fn missing(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// Why a path is not one a program can use wherever it starts, if it is
/// not: relative, or written with `~` or a `$VARIABLE` (which are never
/// expanded).
pub fn not_absolute(path: &Path) -> Option<String> {
    (!path.is_absolute()).then(|| {
        format!(
            "{:?} is not a full path: ~ and $VARIABLES are not expanded, and a relative path \
             would be taken from wherever the program starts",
            path.display().to_string()
        )
    })
}

/// The field a "missing field `x`" error names.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// What holds `offset` in `text`: the dotted key of the deepest entry
/// whose key or value holds it, and that entry's span (key to the end of
/// its value) unless it is a table.
fn locate(text: &str, offset: usize) -> (String, Option<(usize, usize)>) {
    let Ok(table) = DeTable::parse(text) else {
        return (String::new(), None);
    };
    let mut path = Vec::new();
    let entry = find(table.get_ref(), offset, &mut path).flatten();
    (path.join("."), entry)
}

/// Pushes onto `path` the keys down to the entry that holds `offset`;
/// `None` if no entry of `table` does, else the entry's span unless it is
/// a table.
fn find(table: &DeTable, offset: usize, path: &mut Vec<String>) -> Option<Option<(usize, usize)>> {
    for (k, v) in table {
        let span = (k.span().start, v.span().end.max(k.span().end));
        let own = k.span().contains(&offset)
            || v.span().contains(&offset)
            || (span.0..span.1).contains(&offset);
        let name = k.get_ref().to_string();
        match v.get_ref() {
            // A table's entries may lie anywhere (under its header, or
            // dotted keys): it holds the offset if one of them does.
            DeValue::Table(t) => {
                path.push(name);
                match find(t, offset, path) {
                    Some(found) => return Some(found),
                    None if own => return Some(None),
                    None => path.pop(),
                };
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let DeValue::Table(t) = item.get_ref() else {
                        continue;
                    };
                    path.push(format!("{name}[{i}]"));
                    match find(t, offset, path) {
                        Some(found) => return Some(found),
                        None if item.span().contains(&offset) => return Some(None),
                        None => path.pop(),
                    };
                }
                if own {
                    path.push(name);
                    return Some(Some(span));
                }
            }
            _ if own => {
                path.push(name);
                return Some(Some(span));
            }
            _ => {}
        }
    }
    None
}

/// Blanks (to spaces, keeping every offset and line) what an error at
/// `offset` is about: a table from its header to the next header, or the
/// whole entry (key to the end of its value, over as many lines as it
/// takes) that holds `offset`, widened to whole lines. False if nothing
/// was left to blank.
fn blank(text: &mut String, offset: usize) -> bool {
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let (_, entry) = locate(text, offset);
    let (start, end) = if text[start..line_end].trim_start().starts_with('[') && entry.is_none() {
        // A table: to the next header.
        let mut end = line_end;
        while end < text.len() {
            let next = text[end + 1..]
                .find('\n')
                .map_or(text.len(), |i| end + 1 + i);
            if text[end + 1..next].trim_start().starts_with('[') {
                break;
            }
            end = next;
        }
        (start, end)
    } else {
        match entry {
            Some((from, to)) => {
                let from = text[..from].rfind('\n').map_or(0, |i| i + 1);
                let to = text[to..].find('\n').map_or(text.len(), |i| to + i);
                (from.min(start), to.max(line_end))
            }
            None => (start, line_end),
        }
    };
    if text[start..end].trim().is_empty() {
        return false;
    }
    let blanked: String = text[start..end]
        .bytes()
        .map(|b| if b == b'\n' { '\n' } else { ' ' })
        .collect();
    text.replace_range(start..end, &blanked);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::os::unix::fs::PermissionsExt;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Config {
        name: String,
        #[serde(default)]
        limits: Limits,
        #[serde(default)]
        items: Vec<Item>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Limits {
        wait_secs: u64,
        tags: Vec<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        id: u32,
    }

    fn run(
        text: &str,
        more: impl FnOnce(&Doc<'_>, &Config) -> Vec<Problem>,
    ) -> Result<Config, Vec<String>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).expect("write");
        check(&path, more).map_err(|problems| {
            problems
                .iter()
                .map(|p| p.to_string().replace(&path.display().to_string(), "F"))
                .collect()
        })
    }

    #[test]
    fn every_read_error_is_named_with_its_key_and_line_in_order() {
        let text = "name = \"a\"\ncolour = 1\n[limits]\nwait_secs = \"x\"\n\n[[items]]\nid = 1\n\
                    [[items]]\nid = 2\nsize = 3\n";
        let got = run(text, |_, _| vec![]).unwrap_err();
        assert_eq!(
            got,
            [
                "F:2: colour: unknown field `colour`, expected one of `name`, `limits`, `items`",
                "F:4: limits.wait_secs: invalid type: string \"x\", expected u64",
                "F:10: items[1].size: unknown field `size`, expected `id`",
            ]
        );
    }

    #[test]
    fn a_wrong_required_value_is_one_problem_not_two() {
        let got = run("name = 5\n", |_, _| vec![]).unwrap_err();
        assert_eq!(
            got,
            ["F:1: name: invalid type: integer `5`, expected a string"]
        );
        let got = run("[limits]\n", |_, _| vec![]).unwrap_err();
        assert_eq!(got, ["F: name: missing field `name`"]);
    }

    #[test]
    fn checks_after_the_read_find_their_lines_and_skip_blanked_keys() {
        let text = "name = \"a\"\n[limits]\nwait_secs = 9\ntags = [\"a\",\n  \"b\"]\n";
        let got = run(text, |doc, c: &Config| {
            let mut problems = vec![doc.problem("nowhere", "last")];
            problems.extend(
                out_of_range("wait_secs", c.limits.wait_secs, 1, 5)
                    .map(|m| doc.problem("limits.wait_secs", m)),
            );
            problems.push(doc.problem("limits.tags[1]", "bad tag"));
            problems
        })
        .unwrap_err();
        assert_eq!(
            got,
            [
                "F:3: limits.wait_secs: wait_secs must be from 1 to 5, got 9",
                "F:5: limits.tags[1]: bad tag",
                "F: nowhere: last",
            ]
        );
        // A key whose read failed is not reported again by the checks.
        let got = run("name = \"a\"\n[limits]\nwait_secs = -1\n", |doc, _| {
            vec![doc.problem("limits.wait_secs", "again")]
        })
        .unwrap_err();
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(run("name = \"a\"\n", |_, _| vec![]).is_ok());
    }

    #[test]
    fn syntax_errors_stop_the_read() {
        let got = run("name = \"a\"\nx = = 1\n", |_, _| vec![]).unwrap_err();
        assert!(got.iter().all(|p| p.starts_with("F:2: ")), "{got:?}");
    }

    #[test]
    fn secrets_are_for_their_owner_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "t").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        assert_eq!(
            private(&file),
            Some(format!(
                "{} holds a secret but is open to its group or others (mode 0640): chmod 600 it",
                file.display()
            ))
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(secret(&file), Ok("t".into()));
        assert!(private(dir.path()).is_some_and(|m| m.ends_with("is not a file")));
        assert!(
            private(&dir.path().join("none"))
                .is_some_and(|m| m.contains("No such file or directory"))
        );
    }

    #[test]
    fn a_directory_can_be_made_unless_a_file_is_in_the_way() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(uncreatable_dir(dir.path()), None);
        assert_eq!(uncreatable_dir(&dir.path().join("a/b/c")), None);
        let file = dir.path().join("f");
        std::fs::write(&file, "").expect("write");
        assert_eq!(
            uncreatable_dir(&file),
            Some(format!("{} is not a directory", file.display()))
        );
        assert_eq!(
            uncreatable_dir(&file.join("d/e")),
            Some(format!(
                "cannot create {}: {} is not a directory",
                file.join("d/e").display(),
                file.display()
            ))
        );
    }

    #[test]
    fn a_program_must_be_an_executable_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let program = dir.path().join("run");
        std::fs::write(&program, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(
            not_executable(&program),
            Some(format!(
                "{} is not executable by this user",
                program.display()
            ))
        );
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(not_executable(&program), None);
        assert!(
            not_executable(&dir.path().join("none"))
                .is_some_and(|m| m.starts_with("cannot run ") && m.contains("No such file"))
        );
    }

    #[test]
    fn paths_must_be_full() {
        assert_eq!(not_absolute(Path::new("/etc/x")), None);
        for p in ["~/x", "$HOME/x", "x"] {
            assert!(
                not_absolute(Path::new(p)).is_some_and(|m| m.starts_with(&format!("{p:?}"))),
                "{p}"
            );
        }
    }

    #[test]
    fn errors_in_other_files_name_their_line() {
        let text = "a = 1\nb = \n";
        let err = toml::from_str::<toml::Table>(text).unwrap_err();
        let got = error_at(Path::new("/t.toml"), text, &err);
        assert!(got.starts_with("/t.toml:2: "), "{got}");
        assert_eq!(got.lines().count(), 1);
    }
}
