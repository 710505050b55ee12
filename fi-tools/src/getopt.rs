//! A small `getopt_long`: the short and long options of libfabric's tools, parsed as
//! glibc parses them, so that every spelling a user types for libfabric works here.
//!
//! - short options, alone or clustered: `-v`, `-lv`;
//! - short options with an argument, attached or separate: `-ptcp`, `-p tcp`;
//! - long options with an argument, attached or separate: `--provider=tcp`,
//!   `--provider tcp`; a unique prefix of a long name is accepted (`--prov`);
//! - operands anywhere (GNU permutation), and everything after `--`; a lone `-` is an
//!   operand.
//!
//! Errors carry glibc's wording (`fi_info: unrecognized option '--bogus'`).

/// One option a tool accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt {
    /// The key the tool matches on (usually the long name, or the letter).
    pub name: &'static str,
    /// The short letter, if any.
    pub short: Option<char>,
    /// The long name, without `--`, if any.
    pub long: Option<&'static str>,
    /// Whether the option takes an argument.
    pub has_arg: bool,
}

impl Opt {
    /// An option with both a short and a long spelling.
    pub const fn both(name: &'static str, short: char, long: &'static str, has_arg: bool) -> Opt {
        Opt { name, short: Some(short), long: Some(long), has_arg }
    }

    /// A short-only option.
    pub const fn short(name: &'static str, short: char, has_arg: bool) -> Opt {
        Opt { name, short: Some(short), long: None, has_arg }
    }

    /// A long-only option.
    pub const fn long(name: &'static str, long: &'static str, has_arg: bool) -> Opt {
        Opt { name, short: None, long: Some(long), has_arg }
    }
}

/// One parsed element of the command line, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// An option (by its [`Opt::name`]) and its argument, if it takes one.
    Opt(&'static str, Option<String>),
    /// An operand (a non-option argument).
    Operand(String),
}

/// A command-line error, worded as glibc's `getopt_long` words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GetoptError(pub String);

/// Parse `args` (without the program name) against `opts`. `prog` names the tool in
/// error messages.
pub fn getopt<I, S>(prog: &str, args: I, opts: &[Opt]) -> Result<Vec<Item>, GetoptError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let args: Vec<String> = args.into_iter().map(Into::into).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            out.extend(args[i..].iter().cloned().map(Item::Operand));
            break;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, attached) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let opt = find_long(prog, name, opts)?;
            let long = opt.long.unwrap_or(name);
            if opt.has_arg {
                let value = match attached {
                    Some(v) => v,
                    None if i < args.len() => {
                        i += 1;
                        args[i - 1].clone()
                    }
                    None => return Err(GetoptError(format!("{prog}: option '--{long}' requires an argument"))),
                };
                out.push(Item::Opt(opt.name, Some(value)));
            } else if attached.is_some() {
                return Err(GetoptError(format!("{prog}: option '--{long}' doesn't allow an argument")));
            } else {
                out.push(Item::Opt(opt.name, None));
            }
            continue;
        }
        if a.len() > 1 && a.starts_with('-') {
            let body = &a[1..];
            for (pos, c) in body.char_indices() {
                let Some(opt) = opts.iter().find(|o| o.short == Some(c)) else {
                    return Err(GetoptError(format!("{prog}: invalid option -- '{c}'")));
                };
                if !opt.has_arg {
                    out.push(Item::Opt(opt.name, None));
                    continue;
                }
                let rest = &body[pos + c.len_utf8()..];
                let value = if !rest.is_empty() {
                    rest.to_string()
                } else if i < args.len() {
                    i += 1;
                    args[i - 1].clone()
                } else {
                    return Err(GetoptError(format!("{prog}: option requires an argument -- '{c}'")));
                };
                out.push(Item::Opt(opt.name, Some(value)));
                break;
            }
            continue;
        }
        out.push(Item::Operand(a.clone()));
    }
    Ok(out)
}

/// The option a long name (or a unique prefix of one) designates.
fn find_long<'a>(prog: &str, name: &str, opts: &'a [Opt]) -> Result<&'a Opt, GetoptError> {
    if let Some(o) = opts.iter().find(|o| o.long == Some(name)) {
        return Ok(o);
    }
    let matches: Vec<&Opt> = if name.is_empty() {
        Vec::new()
    } else {
        opts.iter().filter(|o| o.long.is_some_and(|l| l.starts_with(name))).collect()
    };
    match matches.len() {
        1 => Ok(matches[0]),
        0 => Err(GetoptError(format!("{prog}: unrecognized option '--{name}'"))),
        _ => {
            let list: Vec<String> = matches.iter().filter_map(|o| o.long).map(|l| format!("'--{l}'")).collect();
            Err(GetoptError(format!("{prog}: option '--{name}' is ambiguous; possibilities: {}", list.join(" "))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: &[Opt] = &[
        Opt::both("provider", 'p', "provider", true),
        Opt::both("verbose", 'v', "verbose", false),
        Opt::both("list", 'l', "list", false),
        Opt::long("version", "version", false),
        Opt::short("B", 'B', true),
        Opt::short("6", '6', false),
    ];

    fn parse(args: &[&str]) -> Result<Vec<Item>, GetoptError> {
        getopt("fi_test", args.iter().copied(), OPTS)
    }

    fn p(v: &str) -> Item {
        Item::Opt("provider", Some(v.to_string()))
    }

    #[test]
    fn every_spelling_of_an_argument() {
        for args in [&["-p", "tcp"][..], &["-ptcp"], &["--provider=tcp"], &["--provider", "tcp"], &["--prov=tcp"]] {
            assert_eq!(parse(args).unwrap(), vec![p("tcp")], "{args:?}");
        }
        // An argument may itself start with a dash, and may be empty when attached.
        assert_eq!(parse(&["-p", "-v"]).unwrap(), vec![p("-v")]);
        assert_eq!(parse(&["--provider="]).unwrap(), vec![p("")]);
    }

    #[test]
    fn clusters_operands_and_terminator() {
        assert_eq!(
            parse(&["-lv", "host", "-B", "5000", "-6ptcp"]).unwrap(),
            vec![
                Item::Opt("list", None),
                Item::Opt("verbose", None),
                Item::Operand("host".into()),
                Item::Opt("B", Some("5000".into())),
                Item::Opt("6", None),
                p("tcp"),
            ]
        );
        assert_eq!(
            parse(&["-v", "--", "-l", "-"]).unwrap(),
            vec![Item::Opt("verbose", None), Item::Operand("-l".into()), Item::Operand("-".into())]
        );
        assert_eq!(parse(&["-"]).unwrap(), vec![Item::Operand("-".into())]);
        assert_eq!(parse(&["--version"]).unwrap(), vec![Item::Opt("version", None)]);
    }

    #[test]
    fn errors_are_worded_as_glibc_words_them() {
        assert_eq!(parse(&["--bogus"]).unwrap_err().0, "fi_test: unrecognized option '--bogus'");
        assert_eq!(parse(&["-x"]).unwrap_err().0, "fi_test: invalid option -- 'x'");
        assert_eq!(parse(&["-vx"]).unwrap_err().0, "fi_test: invalid option -- 'x'");
        assert_eq!(parse(&["-p"]).unwrap_err().0, "fi_test: option requires an argument -- 'p'");
        assert_eq!(parse(&["--provider"]).unwrap_err().0, "fi_test: option '--provider' requires an argument");
        assert_eq!(parse(&["--list=3"]).unwrap_err().0, "fi_test: option '--list' doesn't allow an argument");
        assert_eq!(
            parse(&["--ver"]).unwrap_err().0,
            "fi_test: option '--ver' is ambiguous; possibilities: '--verbose' '--version'"
        );
        assert_eq!(parse(&["--"]).unwrap(), vec![]);
        assert_eq!(parse(&["--=x"]).unwrap_err().0, "fi_test: unrecognized option '--'");
    }
}
