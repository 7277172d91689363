//! The `saguin` command: run the broker, or check a configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use saguin::config::{self, Config};

const USAGE: &str = "\
usage: saguin [--config FILE]      run the broker (without --config: the embedded default, data in ./data)
       saguin --check-config FILE  validate FILE and exit
       saguin --print-default-config
       saguin --passwd FILE add USER | delete USER | list
       saguin --version
{}";

enum Command {
    Run(Option<PathBuf>),
    CheckConfig(PathBuf),
    PrintDefaultConfig,
    Version,
    Help,
    /// `--passwd` and what follows it.
    Passwd(Vec<String>),
}

fn parse_args(args: &[String]) -> Result<Command, String> {
    match args {
        [] => Ok(Command::Run(None)),
        [flag, path] if flag == "--config" => Ok(Command::Run(Some(path.into()))),
        [flag, path] if flag == "--check-config" => Ok(Command::CheckConfig(path.into())),
        [flag, rest @ ..] if flag == "--passwd" => Ok(Command::Passwd(rest.to_vec())),
        [flag] if flag == "--print-default-config" => Ok(Command::PrintDefaultConfig),
        [flag] if flag == "--version" || flag == "-V" => Ok(Command::Version),
        [flag] if flag == "--help" || flag == "-h" => Ok(Command::Help),
        _ => Err(format!("unrecognised arguments: {}", args.join(" "))),
    }
}

fn load(path: Option<PathBuf>) -> Result<Config, ExitCode> {
    match path {
        None => embedded_default(),
        Some(path) => config::load(&path).map_err(|error| {
            eprintln!("{error}");
            ExitCode::from(2)
        }),
    }
}

fn usage() -> String {
    USAGE.replace("{}", saguin::tools::USAGE)
}

/// The embedded default, keeping its records in `./data` under the
/// working directory, which is created when missing.
fn embedded_default() -> Result<Config, ExitCode> {
    let fail = |what: &str, error: std::io::Error| {
        eprintln!("{}: cannot {what}: {error}", config::EMBEDDED_SOURCE);
        ExitCode::FAILURE
    };
    let working_dir = std::env::current_dir().map_err(|e| fail("read the working directory", e))?;
    let data_dir = working_dir.join(config::EMBEDDED_DATA_DIR);
    std::fs::create_dir_all(&data_dir)
        .map_err(|e| fail(&format!("create {}", data_dir.display()), e))?;
    Ok(config::default_config_in(&working_dir))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = saguin::tools::dispatch(&args) {
        return code;
    }
    let command = match parse_args(&args) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("{message}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Version => println!("saguin {}", env!("CARGO_PKG_VERSION")),
        Command::Help => println!("{}", usage()),
        Command::Passwd(args) => {
            if let Err(message) = saguin::auth::command::run(&args) {
                eprintln!("{message}");
                return ExitCode::from(2);
            }
        }
        Command::PrintDefaultConfig => print!("{}", config::DEFAULT_CONFIG_YAML),
        Command::CheckConfig(path) => {
            let config = match load(Some(path.clone())) {
                Ok(config) => config,
                Err(code) => return code,
            };
            // The files a door serves are read as a start would read them.
            let tls = config.broker.mqtt.tcp.iter().map(|d| d.tls.clone());
            if let Err(error) = saguin::net::load_tls(tls.collect()) {
                eprintln!("{error}");
                return ExitCode::from(2);
            }
            println!("{}: configuration is valid", path.display());
        }
        Command::Run(path) => {
            let config = match load(path) {
                Ok(config) => config,
                Err(code) => return code,
            };
            let level = config.broker.log_level.to_level_filter();
            // Logs go to standard output; the init system bounds them.
            if let Err(error) = simple_logger::SimpleLogger::new().with_level(level).init() {
                eprintln!("cannot start logging: {error}");
            }
            let rules = config.broker.mqtt.door_rules();
            let authentication = match saguin::auth::Authentication::load(&rules) {
                Ok(authentication) => authentication,
                Err(error) => {
                    log::error!("{error}");
                    return ExitCode::FAILURE;
                }
            };
            if let Err(error) = saguin::net::run(config.shell_settings(), authentication) {
                log::error!("{error}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
