//! The operator's command-line tools, each run instead of a broker:
//!
//! - [`route`]: `--route CONFIG [TOPIC]`, where a topic lands;
//!
//! Every tool answers bad input with one line naming the file and what to
//! do, and exits non-zero.

pub mod json;
pub mod route;

use std::io::{self, IsTerminal as _};
use std::path::Path;
use std::process::ExitCode;

/// The tools' part of `saguin --help`.
pub const USAGE: &str = "\
       saguin --route CONFIG [TOPIC-OR-FILTER] [--json]
                                   where a topic lands; without one, a subject a line from stdin";

/// Exit status for a usage or input mistake, as `--check-config` uses.
const BAD_INPUT: u8 = 2;

/// Runs the tool `args` name, or `None` when they name no tool.
pub fn dispatch(args: &[String]) -> Option<ExitCode> {
    let (json, rest): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| *a == "--json");
    let json = !json.is_empty();
    let rest: Vec<&str> = rest.iter().map(|s| s.as_str()).collect();
    match rest.as_slice() {
        ["--route", config] => Some(route_command(Path::new(config), None, json)),
        ["--route", config, subject] => Some(route_command(Path::new(config), Some(subject), json)),
        ["--route", ..] => Some(usage_error(
            "--route takes a configuration file and at most one topic or filter",
        )),
        _ if json => Some(usage_error(
            "--json is how --route answers for a program; it is not a flag of its own",
        )),
        _ => None,
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("saguin: {message}");
    ExitCode::from(BAD_INPUT)
}

fn route_command(config_path: &Path, subject: Option<&str>, json: bool) -> ExitCode {
    let config = match crate::config::load(config_path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(BAD_INPUT);
        }
    };
    let router = route::Router::new(&config);
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let answered = match subject {
        Some(subject) => {
            route::answer_one(&router, subject, json, &mut out).map(|ok| ok as usize ^ 1)
        }
        None => {
            if io::stdin().is_terminal() {
                eprintln!("saguin --route: reading topics and filters from standard input, one a line (end with Ctrl-D)");
            }
            route::answer_lines(&router, io::stdin().lock(), json, &mut out)
        }
    };
    match answered {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(BAD_INPUT),
        Err(error) => {
            eprintln!("saguin --route: cannot write the answer: {error}");
            ExitCode::FAILURE
        }
    }
}
