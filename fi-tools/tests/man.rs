//! The manual pages in `fi-tools/man`: each renders without a warning, every
//! tool has one, every option a tool's `--help` lists is on its page, every
//! parameter `fi_info -e` lists (and every one a provider declares, built here or
//! not) is on its provider's page with its default, and `install-man.sh` puts
//! them where `man -M` finds them.
//!
//! Rendering and installing need `man` (man-db) and groff; without them those
//! tests skip (area `man`), unless `FABRIC_REQUIRE` names `man`. The other checks
//! read the page sources and need nothing installed.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

/// `fi-tools/man`.
fn man_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("man")
}

/// The directory cargo put this package's binaries in (fi_info's).
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_fi_info")).parent().expect("a directory").to_path_buf()
}

/// The pages of one section (`man1`, `man7`), sorted.
fn pages(section: &str) -> Vec<PathBuf> {
    let dir = man_dir().join(format!("man{section}"));
    let suffix = format!(".{section}");
    let mut v: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.to_string_lossy().ends_with(&suffix))
        .collect();
    v.sort();
    v
}

/// Every page of every section.
fn all_pages() -> Vec<PathBuf> {
    let mut v = pages("1");
    v.extend(pages("7"));
    v
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The page a `.so` stub names (`.so man1/fi_send_lat.1`, relative to the
/// manual's root, as man(1) resolves it), or `None` for a page of its own.
fn so_target(src: &str) -> Option<PathBuf> {
    let first = src.lines().find(|l| !l.starts_with(".\\\"") && !l.trim().is_empty())?;
    first.strip_prefix(".so ").map(|t| man_dir().join(t.trim()))
}

/// The page itself, or the one its `.so` stub names (which must exist).
fn resolved(p: &Path) -> (PathBuf, String) {
    let src = read(p);
    match so_target(&src) {
        Some(t) => {
            assert!(t.is_file(), "{}: .so names {}, which does not exist", p.display(), t.display());
            let tsrc = read(&t);
            assert!(so_target(&tsrc).is_none(), "{}: a stub naming a stub ({})", p.display(), t.display());
            (t, tsrc)
        }
        None => (p.to_path_buf(), src),
    }
}

/// A page's source as text: comments dropped, the escapes the pages use for
/// hyphens and fonts undone (`\-` is `-`, `\fB` nothing), so an option or a
/// variable is found as it is typed.
fn plain(src: &str) -> String {
    src.lines()
        .filter(|l| !l.starts_with(".\\\""))
        .map(|l| {
            l.replace("\\-", "-")
                .replace("\\fB", "")
                .replace("\\fI", "")
                .replace("\\fR", "")
                .replace("\\fP", "")
                .replace("\\&", "")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `word` occurs in `text` as a whole word: not inside a longer option
/// or name (`-c` is not found in `--caps`, `FI_TCP_PORT` not in
/// `FI_TCP_PORT_LOW_RANGE`).
fn has_word(text: &str, word: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

/// The tools of fi-tools: `src/bin/*.rs` and any `[[bin]]` named in Cargo.toml.
fn tools() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<String> = fs::read_dir(root.join("src/bin"))
        .expect("src/bin")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().expect("a name").to_string_lossy().into_owned())
        .collect();
    let manifest = read(&root.join("Cargo.toml"));
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin {
            if let Some(name) = line.strip_prefix("name").map(str::trim).and_then(|r| r.strip_prefix('=')) {
                v.push(name.trim().trim_matches('"').to_string());
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether `prog --version` runs here.
fn runs(prog: &str) -> bool {
    Command::new(prog).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// `man` (man-db) and groff are installed; if not, skip (area `man`) and say so.
fn have_man() -> bool {
    for prog in ["man", "groff"] {
        if !runs(prog) {
            fabric_testkit::skip("man", format!("`{prog}` is not installed (Debian: man-db groff-base)"));
            return false;
        }
    }
    true
}

/// `man` with no configuration of the caller's that could change its answers.
fn man() -> Command {
    let mut c = Command::new("man");
    c.env_remove("MANOPT").env_remove("MANPATH").env_remove("MANSECT").env("MANWIDTH", "80");
    c
}

#[test]
fn every_page_renders_without_warnings() {
    if !have_man() {
        return;
    }
    let pages = all_pages();
    assert!(pages.len() >= 9, "pages found: {pages:?}");
    for p in pages {
        // From the manual's root, where a stub's `.so man1/...` resolves.
        let o =
            man().current_dir(man_dir()).args(["--warnings", "-E", "UTF-8", "-l"]).arg(&p).output().expect("run man");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && o.stderr.is_empty() && out.contains("NAME") && out.contains("SEE ALSO"),
            "{}: {}",
            p.display(),
            text(&o)
        );
    }
}

#[test]
fn every_page_is_titled_after_its_file() {
    for p in all_pages() {
        let name = p.file_name().expect("a name").to_string_lossy().into_owned();
        let (stem, section) = name.rsplit_once('.').expect("a section suffix");
        let raw = read(&p);
        if so_target(&raw).is_some() {
            // A stub: its page is another's, which names this one in NAME.
            let (target, src) = resolved(&p);
            // NAME's text up to its " - ": the names the page is for.
            let plain = plain(&src);
            let after = plain.split(".SH NAME").nth(1).unwrap_or_default();
            let names = after.split(" - ").next().unwrap_or_default();
            assert!(
                names.split([',', ' ', '\n']).any(|w| w == stem),
                "{name}: {} does not name {stem} in its NAME section",
                target.display()
            );
            continue;
        }
        let src = raw;
        let th = src.lines().find(|l| l.starts_with(".TH ")).unwrap_or_else(|| panic!("{name}: no .TH line"));
        let words: Vec<&str> = th.split_whitespace().collect();
        assert_eq!(
            (words.get(1).map(|w| w.to_ascii_lowercase()), words.get(2).copied()),
            (Some(stem.to_string()), Some(section)),
            "{name}: {th}"
        );
        // NAME: "stem - what it is", or "stem, other, ... - what they are"
        // (a page several tools share, each other name a `.so` stub).
        let plain = plain(&src);
        let section_text = plain.split(".SH NAME\n").nth(1).unwrap_or_default();
        let names = section_text.split(" - ").next().unwrap_or_default();
        let first = names.split([',', ' ', '\n']).next().unwrap_or_default();
        assert!(
            first == stem && section_text.contains(" - ") && !names.contains(".SH"),
            "{name}: NAME section {:?}",
            section_text.lines().take(3).collect::<Vec<_>>()
        );
    }
}

#[test]
fn every_tool_has_a_page_and_every_page_a_tool() {
    let tools = tools();
    assert!(tools.iter().any(|t| t == "fi_info"), "tools found: {tools:?}");
    let pages: Vec<String> =
        pages("1").iter().map(|p| p.file_stem().expect("a name").to_string_lossy().into_owned()).collect();
    let missing: Vec<&String> = tools.iter().filter(|t| !pages.contains(t)).collect();
    assert!(missing.is_empty(), "tools without a page in fi-tools/man/man1: {missing:?}");
    let stale: Vec<&String> = pages.iter().filter(|p| !tools.contains(p)).collect();
    assert!(stale.is_empty(), "pages in man1 of no tool (src/bin or [[bin]]): {stale:?}");
}

/// The options a help text lists: on each line that starts (after blanks) with
/// `-`, the leading option words (`-s, --src_addr=ADDR` gives `-s` and
/// `--src_addr`; `-B <src_port>` gives `-B`).
fn help_options(help: &str) -> Vec<String> {
    let mut v = Vec::new();
    for line in help.lines().filter(|l| l.trim_start().starts_with('-')) {
        for word in line.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()) {
            if !word.starts_with('-') || word == "-" {
                break;
            }
            let opt = word.split(['=', '[']).next().unwrap_or(word);
            v.push(opt.to_string());
        }
    }
    v.sort();
    v.dedup();
    v
}

#[test]
fn help_options_are_parsed() {
    let help = "Usage: x\n  -h, --help\t\tdisplay\n -B <src_port>   port (47592)\n  --version\tprint\n\
                A client given -B but not -P\n -a, --all[=N]  all sizes\n";
    assert_eq!(help_options(help), ["--all", "--help", "--version", "-B", "-a", "-h"]);
}

#[test]
fn every_help_option_is_on_its_page() {
    let mut checked = 0;
    for tool in tools() {
        let exe = bin_dir().join(&tool);
        let o = Command::new(&exe).arg("--help").output().unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
        let help = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success() && help.contains("sage"), "{tool} --help: {}", text(&o));
        let (page, src) = resolved(&man_dir().join(format!("man1/{tool}.1")));
        let src = plain(&src);
        let missing: Vec<String> = help_options(&help).into_iter().filter(|opt| !has_word(&src, opt)).collect();
        assert!(
            missing.is_empty(),
            "{}: options {tool} --help lists but the page does not: {missing:?}",
            page.display()
        );
        checked += help_options(&help).len();
    }
    // fi_info alone lists 17 options: an empty count means the parse failed.
    assert!(checked >= 17, "only {checked} options found in the tools' help");
}

/// A parameter: its variable's name and the default `fi_info -e` prints (none
/// when it prints none).
type Params = BTreeMap<String, Option<String>>;

/// The parameters `fi_info -e` prints (`# NAME: Type` then `# help (default: X)`):
/// each with the default it prints and its help line.
fn listed_params() -> BTreeMap<String, (Option<String>, String)> {
    let o = Command::new(bin_dir().join("fi_info"))
        .arg("-e")
        .env_remove("FI_PROVIDER")
        .env_remove("FI_LOG_LEVEL")
        .output()
        .expect("run fi_info -e");
    assert!(o.status.success(), "fi_info -e: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    let mut params = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((name, _kind)) = line.strip_prefix("# ").and_then(|l| l.split_once(": ")) else { continue };
        if !name.starts_with("FI_") || name.contains(' ') {
            continue;
        }
        let help = lines.get(i + 1).copied().unwrap_or_default().to_string();
        let default =
            help.split_once("(default: ").and_then(|(_, rest)| rest.split_once(')')).map(|(d, _)| d.to_string());
        params.insert(name.to_string(), (default, help));
    }
    params
}

/// The parameters every provider declares in its source (`fn params()` of
/// `providers/<name>/src/lib.rs`), built into this fi_info or not: the verbs
/// provider's are declared whether or not the `verbs` feature is on. The
/// default is the declared one (none when empty, as `fi_info` prints it).
fn declared_params() -> BTreeMap<String, Params> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(repo().join("providers")).expect("providers/") {
        let dir = entry.expect("directory entry").path();
        let Ok(src) = fs::read_to_string(dir.join("src/lib.rs")) else { continue };
        let Some(start) = src.find("fn params() -> Vec<Param>") else { continue };
        let body = &src[start..];
        let body = &body[..body.find("\n}\n").expect("end of params()")];
        let prov = dir.file_name().expect("a name").to_string_lossy().into_owned();
        let field = |s: &str, key: &str| -> Option<String> {
            let i = s.find(key)? + key.len();
            let rest = &s[i..];
            Some(rest[..rest.find('"')?].to_string())
        };
        let mut params = Params::new();
        for piece in body.split("Param {").skip(1) {
            let name = field(piece, "name: \"").expect("a parameter's name");
            let default = field(piece, "default: \"").expect("a parameter's default");
            let var = format!("FI_{}_{}", prov.to_uppercase(), name.to_uppercase());
            params.insert(var, Some(default).filter(|d| !d.is_empty()));
        }
        assert!(!params.is_empty(), "{}: params() declares nothing that was parsed", dir.display());
        out.insert(prov, params);
    }
    out
}

/// The provider pages (`fabric_tcp.7`, ...) by the prefix of their variables
/// (`FI_TCP_`).
fn provider_pages() -> Vec<(String, PathBuf)> {
    pages("7")
        .into_iter()
        .filter_map(|p| {
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            let prov = stem.strip_prefix("fabric_")?.to_uppercase();
            Some((format!("FI_{prov}_"), p))
        })
        .collect()
}

/// The page a variable belongs on: its provider's, by prefix, else fabric.7.
fn page_of(var: &str) -> PathBuf {
    provider_pages()
        .into_iter()
        .find(|(prefix, _)| var.starts_with(prefix.as_str()))
        .map_or_else(|| man_dir().join("man7/fabric.7"), |(_, p)| p)
}

/// The entries of a page's tagged paragraphs whose tag is one bold variable
/// (`.TP` / `.B FI_...`): the variable and its paragraph's text, up to the next
/// paragraph or section.
fn variable_entries(src: &str) -> BTreeMap<String, String> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = BTreeMap::new();
    for (i, w) in lines.windows(2).enumerate() {
        let Some(var) = w[1].strip_prefix(".B FI_").map(|v| format!("FI_{v}")) else { continue };
        if w[0] != ".TP" || var.contains(' ') {
            continue;
        }
        let body: Vec<&str> = lines[i + 2..]
            .iter()
            .take_while(|l| !(l.starts_with(".TP") || l.starts_with(".SH") || l.starts_with(".SS")))
            .copied()
            .collect();
        out.insert(var, body.join(" "));
    }
    out
}

/// Whether a paragraph states `Default: <d>` (followed by a period or the end),
/// or with no default known, states one at all.
fn states_default(entry: &str, default: Option<&str>) -> bool {
    match default {
        Some(d) => entry
            .match_indices(&format!("Default: {d}"))
            .any(|(i, m)| matches!(entry[i + m.len()..].chars().next(), None | Some('.' | ' ' | ','))),
        None => entry.contains("Default:"),
    }
}

#[test]
fn the_default_check_tells_defaults_apart() {
    assert!(states_default("Largest. Default: 8192.", Some("8192")));
    assert!(!states_default("Largest. Default: 81920.", Some("8192")));
    assert!(!states_default("Largest (default 8192).", Some("8192")));
    assert!(states_default("x. Default: unset (every interface).", None));
    assert!(!states_default("x.", None));
}

#[test]
fn declared_parameters_are_those_fi_info_lists() {
    // The source parse the verbs parameters rely on (when verbs is not built)
    // must find exactly what fi_info lists for the providers that are built,
    // with the defaults fi_info prints (it prints none where the help itself
    // speaks of the default, as FI_UDP_RCVBUF's: "0 keeps the system's default").
    let listed = listed_params();
    let declared = declared_params();
    let mut built = 0;
    for (prov, params) in &declared {
        let prefix = format!("FI_{}_", prov.to_uppercase());
        let from_fi_info: BTreeMap<&String, &(Option<String>, String)> =
            listed.iter().filter(|(k, _)| k.starts_with(&prefix)).collect();
        if from_fi_info.is_empty() {
            continue;
        }
        built += 1;
        let names: Vec<&String> = from_fi_info.keys().copied().collect();
        assert_eq!(
            names,
            params.keys().collect::<Vec<_>>(),
            "{prov}: fi_info -e and providers/{prov}/src/lib.rs differ"
        );
        for (var, (printed, help)) in from_fi_info {
            let declared = &params[var];
            assert!(
                printed == declared || (printed.is_none() && help.to_ascii_lowercase().contains("default")),
                "{var}: fi_info -e prints the default {printed:?}, the source declares {declared:?}"
            );
        }
    }
    assert!(built >= 3, "fi_info -e lists the parameters of only {built} providers: {listed:?}");
    assert!(declared.contains_key("verbs"), "no parameters found in providers/verbs/src/lib.rs");
}

#[test]
fn every_parameter_is_on_its_page_with_its_default() {
    // The default each page must state: the declared one where a provider
    // declares the parameter (fi_info prints it, or its help speaks of it),
    // else the one fi_info prints (the general ones).
    let mut params: Params = listed_params().into_iter().map(|(k, (d, _))| (k, d)).collect();
    for ps in declared_params().into_values() {
        params.extend(ps);
    }
    for general in ["FI_PROVIDER", "FI_LOG_LEVEL", "FI_LOG_PROV"] {
        assert!(params.contains_key(general), "fi_info -e lacks {general}: {params:?}");
    }
    let mut problems = Vec::new();
    let mut pages: BTreeMap<PathBuf, BTreeMap<String, String>> = BTreeMap::new();
    for (var, default) in &params {
        let page = page_of(var);
        let entries = pages.entry(page.clone()).or_insert_with(|| variable_entries(&plain(&read(&page))));
        let name = page.file_name().expect("a name").to_string_lossy();
        match entries.get(var) {
            None => problems.push(format!("{name}: no entry (.TP / .B {var})")),
            Some(e) if !states_default(e, default.as_deref()) => problems
                .push(format!("{name}: {var}'s entry does not say `Default: {}`", default.as_deref().unwrap_or("..."))),
            Some(_) => {}
        }
    }
    // The other way: a variable a provider page documents is one that exists.
    for (prefix, page) in provider_pages() {
        for var in variable_entries(&plain(&read(&page))).into_keys() {
            if var.starts_with(&prefix) && !params.contains_key(&var) {
                problems.push(format!("{}: documents {var}, which no provider declares", page.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn install_script_installs_where_man_finds() {
    if !have_man() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("man-install-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("install-man.sh");
    for gzip in [false, true] {
        let mut c = Command::new(&script);
        if gzip {
            c.arg("--gzip");
        }
        let o = c.arg(&dir).output().expect("run install-man.sh");
        assert!(o.status.success(), "install-man.sh: {}", text(&o));
        for p in all_pages() {
            let rel = p.strip_prefix(man_dir()).expect("under man/");
            let plain_copy = dir.join(rel);
            let gz = dir.join(format!("{}.gz", rel.display()));
            let (there, gone) = if gzip { (&gz, &plain_copy) } else { (&plain_copy, &gz) };
            assert!(there.is_file() && !gone.exists(), "{}: not installed as expected", there.display());
            if !gzip {
                assert_eq!(read(there), read(&p), "{} differs from its source", there.display());
            }
        }
        for (sec, page) in [("1", "fi_info"), ("7", "fabric_tcp"), ("7", "fabric")] {
            let o = man().arg("-M").arg(&dir).args(["-w", sec, page]).output().expect("run man -w");
            let found = String::from_utf8_lossy(&o.stdout).trim().to_string();
            assert!(
                o.status.success() && Path::new(&found).starts_with(&dir) && found.ends_with(".gz") == gzip,
                "man -M {} -w {sec} {page}: {}",
                dir.display(),
                text(&o)
            );
        }
        let o = man().arg("-M").arg(&dir).arg("fi_info").output().expect("run man");
        assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("--provider"), "{}", text(&o));
    }
    let o = Command::new(&script).args(["a", "b"]).output().expect("run install-man.sh");
    assert!(o.status.code() == Some(2) && String::from_utf8_lossy(&o.stderr).contains("usage"), "{}", text(&o));
    fs::remove_dir_all(&dir).expect("remove the install directory");
}
