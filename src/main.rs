//! The `saguin` command: run the broker, or check a configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use saguin::config::{self, Config};

const USAGE: &str = "\
usage: saguin [--config FILE]      run the broker (without --config: the embedded default, data in ./data)
       saguin --check-config FILE [--output]
                                   validate FILE and exit; with --output, print the
                                   configuration it resolves to, every default filled in, as YAML
       saguin --acl FILE [USER [CLIENT_ID]] [--json]
                                   what USER may do under FILE's acl_file, and why;
                                   without USER, one user name (and client id) a line on standard input
       saguin --print-default-config
       saguin --passwd FILE add USER | delete USER | list
       saguin --passwd FILE scope USER ROUTES|all
                                   the routes (comma-separated) an operator of an operations
                                   listener's password_file reaches; all for every route
       saguin --version
{}";

/// What `--acl` was asked.
struct AclQuestion {
    config: PathBuf,
    user: Option<String>,
    client_id: Option<String>,
    json: bool,
}

enum Command {
    Run(Option<PathBuf>),
    /// With `true`, the resolved configuration is printed.
    CheckConfig(PathBuf, bool),
    Acl(AclQuestion),
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
        [flag, path] if flag == "--check-config" => Ok(Command::CheckConfig(path.into(), false)),
        [flag, path, output] if flag == "--check-config" && output == "--output" => {
            Ok(Command::CheckConfig(path.into(), true))
        }
        [flag, path, rest @ ..] if flag == "--acl" => {
            let json = rest.iter().any(|a| a == "--json");
            let names: Vec<&String> = rest.iter().filter(|a| *a != "--json").collect();
            if names.len() > 2 || names.iter().any(|a| a.starts_with("--")) {
                return Err(format!("unrecognised arguments: {}", args.join(" ")));
            }
            Ok(Command::Acl(AclQuestion {
                config: path.into(),
                user: names.first().map(|s| s.to_string()),
                client_id: names.get(1).map(|s| s.to_string()),
                json,
            }))
        }
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
    // Synced up the tree, or a power cut soon after a first start could
    // take the directory and every record acknowledged into it.
    saguin::store::create_dir_all_synced(&data_dir)
        .map_err(|e| fail(&format!("create {}", data_dir.display()), e))?;
    Ok(config::default_config_in(&working_dir))
}

/// The configuration's acl_file, read and checked against its channels;
/// `None` where it names none.
fn load_acl(config: &Config) -> Result<Option<saguin::acl::Acl>, ExitCode> {
    let Some(path) = &config.broker.mqtt.acl_file else {
        return Ok(None);
    };
    config::acl_file::load(path, &config.channels)
        .map(Some)
        .map_err(|error| {
            eprintln!("{error}");
            ExitCode::from(2)
        })
}

/// `--acl`: the paragraph for one user, or the table for a list of them.
fn explain_acl(question: AclQuestion) -> ExitCode {
    use saguin::acl::{explain, Limits};
    let AclQuestion {
        config,
        user,
        client_id,
        json,
    } = question;
    let config = match load(Some(config)) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let acl = match load_acl(&config) {
        Ok(Some(acl)) => acl,
        Ok(None) if json => {
            println!("{}", explain::JSON_NO_ACL);
            return ExitCode::SUCCESS;
        }
        Ok(None) => {
            println!(
                "{} names no broker.mqtt.acl_file: every authenticated client may do anything",
                config.source
            );
            return ExitCode::SUCCESS;
        }
        Err(code) => return code,
    };
    let limits = &config.broker.limits;
    let broker_wide = Limits {
        publish_rate_per_s: limits.publish_rate_per_s,
        publish_bytes_per_s: limits.publish_bytes_per_s,
    };
    if let Some(user) = user {
        let answer = match json {
            true => explain::json_paragraph(&acl, &user, client_id.as_deref()),
            false => explain::paragraph(&acl, &user, client_id.as_deref(), broker_wide),
        };
        print!("{answer}");
        return ExitCode::SUCCESS;
    }
    if !json {
        println!("{}", explain::TABLE_HEADER);
    }
    for line in std::io::stdin().lines().map_while(Result::ok) {
        let mut fields = line.split([' ', '\t']).filter(|f| !f.is_empty());
        let Some(user) = fields.next().filter(|u| !u.starts_with('#')) else {
            continue;
        };
        let client_id = fields.next();
        let rows = match json {
            true => explain::json_rows(&acl, user, client_id, broker_wide),
            false => explain::table_rows(&acl, user, client_id, broker_wide),
        };
        print!("{rows}");
    }
    ExitCode::SUCCESS
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
        Command::CheckConfig(path, output) => {
            let (config, warnings) = match saguin::tools::check_config(&path) {
                Ok(checked) => checked,
                Err(error) => {
                    eprintln!("{error}");
                    return ExitCode::from(2);
                }
            };
            for warning in warnings {
                eprintln!("warning: {warning}");
            }
            if output {
                print!("{}", config::resolved::yaml(&config.resolved_parts()));
                return ExitCode::SUCCESS;
            }
            println!("{}: configuration is valid", path.display());
            let worst = saguin::net::worst_case::WorstCase::of(&config.shell_settings());
            for line in worst.lines() {
                println!("{line}");
            }
            for line in saguin::tools::landing::bridge_rules(&config) {
                println!("{line}");
            }
        }
        Command::Acl(question) => return explain_acl(question),
        Command::Run(path) => {
            let config = match load(path.clone()) {
                Ok(config) => config,
                Err(code) => return code,
            };
            let acl = match load_acl(&config) {
                Ok(acl) => acl,
                Err(code) => return code,
            };
            let level = config.broker.log_level.to_level_filter();
            // SIGUSR1 reads the level again from the file the broker started on.
            let reread = path.map(|path| {
                let reader: saguin::logging::LevelReader = std::sync::Arc::new(move || {
                    config::load(&path)
                        .map(|c| c.broker.log_level.to_level_filter())
                        .map_err(|e| e.to_string())
                });
                reader
            });
            let format = config.broker.log_format;
            if let Err(error) = saguin::logging::init(format, level, &config.broker.id, reread) {
                eprintln!("cannot start logging: {error}");
            }
            for warning in config.broker.mqtt.warnings() {
                log::warn!("{warning}");
            }
            let rules = config.broker.mqtt.door_rules();
            let authentication = match saguin::auth::Authentication::load(&rules) {
                Ok(authentication) => authentication,
                Err(errors) => {
                    for error in errors {
                        log::error!("{error}");
                    }
                    return ExitCode::FAILURE;
                }
            };
            let acl = acl.map(|acl| {
                let (path, channels) =
                    (config.broker.mqtt.acl_file.clone(), config.channels.clone());
                let read: saguin::net::AclReader = std::sync::Arc::new(move || {
                    let path = path.as_deref().expect("an acl_file was read at startup");
                    config::acl_file::load(path, &channels).map_err(|e| e.to_string())
                });
                saguin::net::AclSource { acl, read }
            });
            let settings = config.shell_settings();
            if let Err(error) = saguin::net::run_with_acl(settings, authentication, acl) {
                log::error!("{error}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
