//! Log lines of processes that share one standard error (MPI ranks under
//! `mpirun`, a test's children) come out whole: each line is one `write`.

use fabric_core::fi_log;
use fabric_core::log::Level;
use std::process::Command;

const CHILD: &str = "FABRIC_LOG_LINES_CHILD";
const LINES: usize = 3000;

/// In a child (`CHILD` set): `LINES` debug lines of several format pieces.
fn child() {
    for i in 0..LINES {
        fi_log!(Level::Debug, "tcp", "mr", "line {} of {}: {} {:#x} {}", i, LINES, "a piece", i * 7, "and the end");
    }
}

#[test]
fn lines_of_processes_sharing_stderr_do_not_interleave() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let test = "lines_of_processes_sharing_stderr_do_not_interleave";
    // Two children at once on one pipe: the shell's standard error.
    let script = "\"$0\" \"$1\" --exact --nocapture --test-threads=1 >/dev/null & \
                  \"$0\" \"$1\" --exact --nocapture --test-threads=1 >/dev/null & wait";
    let out = Command::new("sh")
        .args(["-c", script])
        .arg(&exe)
        .arg(test)
        .env(CHILD, "1")
        .env("FI_LOG_LEVEL", "debug")
        .env_remove("FI_LOG_PROV")
        .output()
        .expect("run sh");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut pids = std::collections::HashSet::new();
    let mut n = 0;
    for line in stderr.lines().filter(|l| l.contains(":mr:")) {
        // fabric:PID:SECONDS::tcp:mr:<debug> line I of LINES: a piece 0x.. and the end
        let rest = line.strip_prefix("fabric:").unwrap_or_else(|| panic!("cut line: {line:?}"));
        let (pid, rest) = rest.split_once(':').unwrap_or_else(|| panic!("cut line: {line:?}"));
        assert!(pid.parse::<u32>().is_ok(), "cut line: {line:?}");
        let (_, msg) = rest.split_once("::tcp:mr:<debug> line ").unwrap_or_else(|| panic!("cut line: {line:?}"));
        let (i, tail) = msg.split_once(' ').unwrap_or_else(|| panic!("cut line: {line:?}"));
        let i: usize = i.parse().unwrap_or_else(|_| panic!("cut line: {line:?}"));
        assert_eq!(tail, format!("of {LINES}: a piece {:#x} and the end", i * 7), "cut line: {line:?}");
        pids.insert(pid.to_string());
        n += 1;
    }
    assert_eq!(n, 2 * LINES, "{stderr}");
    assert_eq!(pids.len(), 2);
}

/// The macro's name, spelled so that this file's own text is no invocation.
const MACRO: &str = concat!("fi_log", "!");

/// `fi_log!` invocations in files that other work was changing when the rule came
/// in, with their count: each prints Rust debug text still and must be fixed
/// (the proposed texts are in issue 19's closing note). Entries are removed as the
/// lines are fixed; the test fails on an entry no longer needed, so the list only
/// shrinks.
const PENDING: &[(&str, usize)] = &[];

/// The string literals of a piece of Rust (plain and raw), roughly lexed: enough
/// for format strings.
fn string_literals(src: &str) -> Vec<&str> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'r' if b.get(i + 1) == Some(&b'"') || (b.get(i + 1) == Some(&b'#') && b.get(i + 2) == Some(&b'"')) => {
                let hashes = if b[i + 1] == b'#' { "#" } else { "" };
                let start = i + 2 + hashes.len();
                let close = format!("\"{hashes}");
                let end = src[start..].find(&close).map_or(b.len(), |e| start + e);
                out.push(&src[start..end]);
                i = end + close.len();
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                out.push(&src[start..j.min(b.len())]);
                i = j + 1;
            }
            // A char literal such as '(' or '"' (not a lifetime).
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
            b'\'' if b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'') => i += 4,
            _ => i += 1,
        }
    }
    out
}

/// Each `fi_log!(...)` invocation in `src`: its line and its text.
fn invocations(src: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = src[from..].find(MACRO).map(|a| from + a) {
        from = at + MACRO.len();
        let rest = src[from..].trim_start();
        if !rest.starts_with('(') {
            continue;
        }
        let open = src.len() - rest.len();
        let b = src.as_bytes();
        let (mut depth, mut j) = (0usize, open);
        while j < b.len() {
            match b[j] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                b'"' => {
                    j += 1;
                    while j < b.len() && b[j] != b'"' {
                        j += if b[j] == b'\\' { 2 } else { 1 };
                    }
                }
                b'\'' if b.get(j + 2) == Some(&b'\'') => j += 2,
                b'\'' if b.get(j + 1) == Some(&b'\\') && b.get(j + 3) == Some(&b'\'') => j += 3,
                _ => {}
            }
            j += 1;
        }
        let line = src[..at].matches('\n').count() + 1;
        out.push((line, &src[at..j.min(b.len())]));
        from = j.min(b.len());
    }
    out
}

/// Whether a format string has a Debug placeholder (`{:?}`, `{x:?}`, `{:#?}`).
fn has_debug(fmt: &str) -> bool {
    let s = fmt.replace("{{", "").replace("}}", "");
    let mut rest = s.as_str();
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        let spec = &rest[open + 1..open + close];
        if spec.split_once(':').is_some_and(|(_, f)| f.ends_with('?')) {
            return true;
        }
        rest = &rest[open + close + 1..];
    }
    false
}

/// The invocations of `src` printing Rust debug text: their lines.
fn debug_lines(src: &str) -> Vec<usize> {
    invocations(src)
        .into_iter()
        .filter(|(_, inv)| string_literals(inv).iter().any(|s| has_debug(s)))
        .map(|l| l.0)
        .collect()
}

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_scan_finds_debug_placeholders() {
    let src = "fn f() {\n    LOG!(Level::Info, NAME, \"ep\", \"from {:?}\", peer);\n    \
               LOG!(Level::Info, NAME, \"ep\", \"from {peer} ({n} bytes, {:#x})\", k);\n    \
               LOG!(\n        Level::Debug,\n        NAME,\n        \"ep\",\n        \"state {st:#?} ')' {{:?}}\"\n    );\n    \
               LOG!(Level::Info, NAME, \"ep\", \"why: {}\", format!(\"{e:?}\"));\n    \
               LOG!(Level::Info, NAME, \"ep\", \"a {{literal}} brace and {x:>8}\", x = 1);\n}\n"
        .replace("LOG!", MACRO);
    assert_eq!(debug_lines(&src), [2, 4, 10]);
    assert!(has_debug("{:?}") && has_debug("{a:?}") && has_debug("{0:#?}") && has_debug("{:>8?}"));
    assert!(!has_debug("{}") && !has_debug("{a:#x}") && !has_debug("{{:?}}") && !has_debug("{:p}"));
}

/// Log lines carry no Rust debug text (`connection from Some(127.0.0.1:47942)`):
/// no `fi_log!` in the workspace formats an argument with `{:?}` (a value that may
/// be missing goes through `fabric_core::log::or_unknown`), but those [`PENDING`].
#[test]
fn log_lines_carry_no_rust_debug_text() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().expect("workspace root");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut bad = Vec::new();
    let mut pending_seen = std::collections::HashMap::new();
    let mut scanned = 0;
    for f in &files {
        let Ok(src) = std::fs::read_to_string(f) else { continue };
        let rel = f.strip_prefix(&root).unwrap_or(f).to_string_lossy().replace('\\', "/");
        scanned += invocations(&src).len();
        let lines = debug_lines(&src);
        if lines.is_empty() {
            continue;
        }
        if PENDING.iter().any(|(p, n)| *p == rel && *n == lines.len()) {
            pending_seen.insert(rel, lines.len());
            continue;
        }
        bad.extend(lines.iter().map(|l| format!("{rel}:{l}")));
    }
    assert!(scanned > 100, "found only {scanned} invocations under {}", root.display());
    assert!(bad.is_empty(), "fi_log! with {{:?}} (print plain text; or_unknown for an Option): {bad:#?}");
    let stale: Vec<_> = PENDING.iter().filter(|(p, _)| !pending_seen.contains_key(*p)).collect();
    assert!(stale.is_empty(), "fixed (or changed): remove from PENDING: {stale:?}");
}
