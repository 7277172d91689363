//! A mosquitto configuration as this broker's: every option read in
//! mosquitto's order, given to the broker, a listener or a bridge as
//! mosquitto gives it, and written as the YAML keys that do the same, with
//! a report line for each.

use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use super::acl;
use super::bridges::{self, Bridge};
use super::conf::{self, Line};
use super::listeners::{self, Listener, Security, SECURITY_KEYS};
use super::report::Report;
use super::{boolean, put, Failure};
use crate::auth::{PasswordFile, PasswordHash};

/// The files a migration writes, by name within its directory.
pub const CONFIG_FILE: &str = "saguin.yaml";
pub const ACL_FILE: &str = "acl.yaml";
pub const REPORT_FILE: &str = "migration-report.txt";

/// What the migration of one configuration writes, and says.
pub struct Plan {
    /// Each file's name in the directory, and its text.
    pub files: Vec<(String, String)>,
    pub report: Report,
    /// With persistence on: where mosquitto kept its data, and the redb
    /// provider's file that takes it.
    pub persistence: Option<Kept>,
}

/// mosquitto's persistence file and the provider the migration names.
pub struct Kept {
    pub mosquitto_db: PathBuf,
    pub redb: PathBuf,
}

/// The migrated provider's name and bound.
pub const PROVIDER_NAME: &str = "local";
/// `256MiB`, as [`storage`] writes it.
pub const PROVIDER_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// Everything read, by where mosquitto applies it.
struct Model {
    per_listener: bool,
    /// The options of the broker as a whole, in the order met.
    global: Vec<Line>,
    security: Security,
    /// The default listener (`port`, `bind_address`, or options written
    /// before any `listener`), then each `listener` in order.
    default_listener: Option<Listener>,
    listeners: Vec<Listener>,
    bridges: Vec<Bridge>,
}

/// The migration of `conf` into a directory that will be `dir`, noted as
/// written at `written_at`; `host` is this machine's name.
pub fn plan(conf: &Path, dir: &Path, written_at: &str, host: &str) -> Result<Plan, Failure> {
    let lines = conf::read(conf)?;
    let base = conf.parent().unwrap_or(Path::new("/")).to_path_buf();
    let model = model(&lines)?;
    let mut outcomes: Vec<(Line, String)> = Vec::new();
    let mut report = Report::default();
    let mut broker = Mapping::new();
    put(&mut broker, "id", host);
    let mut mqtt = Mapping::new();

    // Who may connect: the broker's keys, or each listener's.
    let anonymous_default = model.listeners.is_empty() && model.default_listener.is_none();
    let mut files = Files::new(dir);
    let global_security = security_keys("broker.mqtt", &model.security, &mut files, &mut outcomes)?;
    // The doors of each kind, in the order listen takes them.
    let mut doors: [(&str, Vec<Value>); 3] = [
        ("tcp", Vec::new()),
        ("ws", Vec::new()),
        ("unix", Vec::new()),
    ];
    let mut door_names: Vec<String> = Vec::new();
    let mut acl_source: Option<(PathBuf, Line)> = model.security.acl_file.clone();
    let mut any_password_file = global_security.password_file.clone();
    let mut names_by_certificate = false;
    let mut anonymous_admitted = false;
    let all_listeners: Vec<&Listener> = model
        .default_listener
        .iter()
        .chain(&model.listeners)
        .collect();
    let local_only = Listener::new(None, 1883, Some("127.0.0.1".into()));
    let listed: Vec<&Listener> = match all_listeners.is_empty() {
        true => vec![&local_only],
        false => all_listeners,
    };
    let mut max_connections: Option<u64> = Some(0);
    for listener in &listed {
        let wanted = match listener.is_unix() {
            true => "unix".to_string(),
            false => format!("port-{}", listener.port),
        };
        let name = unique(&mut door_names, &wanted);
        let mut door = listeners::door(listener, &name, &base)?;
        outcomes.append(&mut door.outcomes);
        let Some(mut block) = door.block else {
            continue;
        };
        let kind = listener.kind()?;
        let own = match model.per_listener {
            true => security_keys(
                &format!("broker.mqtt.listen.{kind}[{name}]"),
                &listener.security,
                &mut files,
                &mut outcomes,
            )?,
            false => Keys::default(),
        };
        if let Some((path, line)) = &listener.security.acl_file {
            match &acl_source {
                Some((first, first_line)) if first != path => {
                    return Err(line.fail(format!("a second acl_file, where {}, line {} names {}: this broker has one acl_file for every door; merge them and migrate again", first_line.file.display(), first_line.number, first.display())))
                }
                _ => acl_source = Some((path.clone(), line.clone())),
            }
        }
        let password_file = own
            .password_file
            .as_ref()
            .or(global_security.password_file.as_ref());
        let allow_anonymous = own
            .allow_anonymous
            .or(global_security.allow_anonymous)
            .unwrap_or(anonymous_default);
        let by_certificate = listener.names_by_certificate()?;
        if password_file.is_none() && !allow_anonymous && !by_certificate {
            if let Some(line) = &listener.line {
                outcomes.retain(|(l, _)| l != line);
                outcomes.push((line.clone(), "ACTION: left out: with no password_file and allow_anonymous false (mosquitto 2.0's default once a listener is written) mosquitto admitted no client here; write a password_file or allow_anonymous true for it and migrate again".into()));
            }
            door_names.pop();
            continue;
        }
        names_by_certificate |= by_certificate;
        anonymous_admitted |= allow_anonymous;
        if model.per_listener {
            if let Some(path) = &own.password_file {
                put(&mut block, "password_file", path.display().to_string());
            }
            // `false` with no file would be a door admitting nobody, and
            // one naming clients by certificate admits no client without a
            // name anyway.
            if allow_anonymous || password_file.is_some() {
                put(&mut block, "allow_anonymous", allow_anonymous);
            }
            any_password_file = any_password_file.or(own.password_file);
        }
        max_connections = match (max_connections, listener_connections(listener)?) {
            (Some(sum), Some(n)) => Some(sum + n),
            _ => None,
        };
        if let Some((_, of_kind)) = doors.iter_mut().find(|(k, _)| *k == kind) {
            of_kind.push(Value::Mapping(block));
        }
    }
    if doors.iter().all(|(_, of_kind)| of_kind.is_empty()) {
        return Err(Failure::at(conf, None, "no listener can be carried over, so the broker would have no door; see the report's ACTION lines"));
    }
    let mut listen = Mapping::new();
    for (kind, of_kind) in doors.into_iter().filter(|(_, d)| !d.is_empty()) {
        put(&mut listen, kind, of_kind);
    }
    put(&mut mqtt, "listen", listen);
    if !model.per_listener {
        if let Some(path) = &global_security.password_file {
            put(&mut mqtt, "password_file", path.display().to_string());
        }
        if let Some(allow) = global_security.allow_anonymous {
            if allow || global_security.password_file.is_some() {
                put(&mut mqtt, "allow_anonymous", allow);
            }
        }
    }
    if anonymous_default {
        report.note_file(conf, "(no listener)", "mosquitto 2.0 then listens on localhost port 1883 only and admits clients without a user name: became broker.mqtt.listen.tcp[port-1883], address 127.0.0.1:1883 (IPv4's loopback only)");
    }

    let mut acl_yaml = None;
    if let Some((path, line)) = &acl_source {
        if any_password_file.is_none() && !names_by_certificate {
            return Err(line.fail("an acl_file beside no password_file and no listener naming clients by certificate: mosquitto then took the user name a client stated, unchecked, and this broker refuses rules about names nothing proves; add a password_file and migrate again"));
        }
        let read = acl::read(path)?;
        if anonymous_admitted {
            // Nothing here admits a client without a user name beside an
            // acl_file: it would be the empty name, which "*" matches.
            strip_allow_anonymous(&mut mqtt);
            outcomes.retain(|(l, _)| l.key != "allow_anonymous");
            for l in allow_anonymous_lines(&model) {
                outcomes.push((l.clone(), "ACTION: not carried: beside an acl_file this broker admits no client without a user name; give those clients a user name (see the acl_file's anonymous lines below)".into()));
            }
        }
        let converted = read.convert(anonymous_admitted, &mut report);
        acl_yaml = Some(
            super::header(written_at, conf) + &crate::config::resolved::yaml_block(&converted),
        );
        let written = dir.join(ACL_FILE);
        put(&mut mqtt, "acl_file", written.display().to_string());
        outcomes.push((
            line.clone(),
            format!(
                "became broker.mqtt.acl_file {}, converted line by line (below)",
                written.display()
            ),
        ));
    }
    put(&mut broker, "mqtt", Value::Mapping(mqtt));

    let mut limits = Mapping::new();
    let mut log_level: Option<(&str, u8)> = None;
    // Where the provider's file goes is known before what is said of it.
    let location = model
        .global
        .iter()
        .rev()
        .find(|l| l.key == "persistence_location")
        .map_or(base.clone(), |l| listeners::absolute(&base, l).0);
    let mut persistence = Some(Persistence {
        on: false,
        location,
    });
    for line in &model.global {
        let outcome = global(line, &mut limits, &mut log_level, &mut persistence, &base)?;
        if !outcome.is_empty() {
            outcomes.push((line.clone(), outcome));
        }
    }
    let connections_outcome = match max_connections.filter(|n| *n > 0) {
        Some(n) => {
            put(&mut limits, "max_connections", n);
            format!("counted into broker.limits.max_connections {n}, which bounds every door together")
        }
        None => "not carried: another listener has no bound, so broker.limits.max_connections keeps its default (10000) across every door".into(),
    };
    for listener in &listed {
        for line in listener
            .options
            .iter()
            .filter(|l| l.key == "max_connections")
        {
            outcomes.push((line.clone(), connections_outcome.clone()));
        }
    }
    fit_session_queue(&mut limits);
    if let Some((level, _)) = log_level {
        put(&mut broker, "log_level", level);
        for (_, outcome) in outcomes.iter_mut().filter(|(_, o)| o == LOG_LEVEL_NOTE) {
            *outcome = format!("broker.log_level {level}: {LOG_LEVEL_NOTE}");
        }
    }
    if !limits.is_empty() {
        put(&mut broker, "limits", limits);
    }
    let kept = persistence
        .as_ref()
        .and_then(|p: &Persistence| p.on.then_some(&p.location))
        .map(|location| {
            storage(&mut broker, location);
            let db_name = model
                .global
                .iter()
                .rev()
                .find(|l| l.key == "persistence_file")
                .map_or("mosquitto.db".to_string(), |l| l.value());
            Kept {
                mosquitto_db: location.join(db_name),
                redb: location.join("saguin.redb"),
            }
        });
    let mut root = Mapping::new();
    put(&mut root, "broker", broker);
    if !model.bridges.is_empty() {
        let mut blocks = Mapping::new();
        for bridge in &model.bridges {
            let mut converted = bridges::convert(bridge, host, &base)?;
            outcomes.append(&mut converted.outcomes);
            put(&mut blocks, &converted.name, converted.block);
        }
        put(&mut root, "bridges", blocks);
    }
    for (line, outcome) in files.notes {
        outcomes.push((line, outcome));
    }

    // The report: every option of mosquitto.conf in the order met, then
    // the acl_file's lines.
    let mut conf_report = Report::default();
    for line in &lines {
        let said: Vec<&str> = outcomes
            .iter()
            .filter(|(l, _)| l == line)
            .map(|(_, o)| o.as_str())
            .collect();
        let outcome = match said.as_slice() {
            [] => "not carried".to_string(),
            _ => said.join("; "),
        };
        conf_report.note_option(line, outcome);
    }
    conf_report.notes.append(&mut report.notes);

    let mut written = vec![(
        CONFIG_FILE.to_string(),
        super::header(written_at, conf) + &crate::config::resolved::yaml_block(&root),
    )];
    if let Some(text) = acl_yaml {
        written.push((ACL_FILE.to_string(), text));
    }
    written.extend(files.copies);
    Ok(Plan {
        files: written,
        report: conf_report,
        persistence: kept,
    })
}

/// Which of a model's lines go where.
fn model(lines: &[Line]) -> Result<Model, Failure> {
    let per_listener = match lines
        .iter()
        .rev()
        .find(|l| l.key == "per_listener_settings")
    {
        Some(line) => boolean(line)?,
        None => false,
    };
    let mut m = Model {
        per_listener,
        global: Vec::new(),
        security: Security::default(),
        default_listener: None,
        listeners: Vec::new(),
        bridges: Vec::new(),
    };
    // Bridge options follow their `connection`; listener options their
    // `listener`, or the default listener before the first.
    let mut in_bridge = false;
    for line in lines {
        let key = line.key.as_str();
        match key {
            "listener" => {
                let port = line
                    .args
                    .first()
                    .and_then(|p| p.parse::<u16>().ok())
                    .filter(|_| line.args.len() <= 2)
                    .ok_or_else(|| line.fail("listener takes a port and an optional address, host name or (with port 0) Unix socket path"))?;
                if port == 0 && line.args.len() != 2 {
                    return Err(line.fail("port 0 is a Unix socket, and needs its path: listener 0 /run/mosquitto/mqtt.sock"));
                }
                m.listeners.push(Listener::new(
                    Some(line.clone()),
                    port,
                    line.args.get(1).cloned(),
                ));
                in_bridge = false;
            }
            "connection" => {
                m.bridges.push(Bridge {
                    line: line.clone(),
                    options: Vec::new(),
                });
                in_bridge = true;
            }
            _ if in_bridge && bridges::KEYS.contains(&key) => {
                m.bridges
                    .last_mut()
                    .expect("a bridge is open")
                    .options
                    .push(line.clone());
            }
            _ if bridges::KEYS.contains(&key) => {
                return Err(line.fail(format!(
                    "{key} is a bridge's option and comes after a connection line"
                )));
            }
            _ if listeners::is_listener_key(key)
                || (per_listener && SECURITY_KEYS.contains(&key)) =>
            {
                let listener = match m.listeners.last_mut() {
                    Some(listener) => listener,
                    None => m
                        .default_listener
                        .get_or_insert_with(|| Listener::new(None, 1883, None)),
                };
                if key == "port" {
                    listener.port = line
                        .args
                        .first()
                        .and_then(|p| p.parse().ok())
                        .ok_or_else(|| line.fail("port takes a number from 1 to 65535"))?;
                }
                if key == "bind_address" {
                    listener.host = line.args.first().cloned();
                }
                if SECURITY_KEYS.contains(&key) {
                    take_security(&mut listener.security, line)?;
                }
                listener.options.push(line.clone());
            }
            _ if SECURITY_KEYS.contains(&key) => {
                take_security(&mut m.security, line)?;
                m.global.push(line.clone());
            }
            _ => m.global.push(line.clone()),
        }
    }
    Ok(m)
}

fn take_security(security: &mut Security, line: &Line) -> Result<(), Failure> {
    let path = || PathBuf::from(line.value());
    match line.key.as_str() {
        "password_file" => security.password_file = Some((path(), line.clone())),
        "acl_file" => security.acl_file = Some((path(), line.clone())),
        "allow_anonymous" => security.allow_anonymous = Some((boolean(line)?, line.clone())),
        _ => {}
    }
    Ok(())
}

/// The keys one place's security options came to.
#[derive(Default)]
struct Keys {
    /// The copy this broker reads.
    password_file: Option<PathBuf>,
    allow_anonymous: Option<bool>,
}

/// The password files a migration copies, each read first.
struct Files<'a> {
    dir: &'a Path,
    /// Source paths and the name each copy took.
    taken: Vec<(PathBuf, String)>,
    copies: Vec<(String, String)>,
    notes: Vec<(Line, String)>,
}

impl Files<'_> {
    fn new(dir: &Path) -> Files<'_> {
        Files {
            dir,
            taken: Vec::new(),
            copies: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The path of this broker's copy of the password file `line` names.
    fn copy(&mut self, source: &Path, line: &Line) -> Result<PathBuf, Failure> {
        if let Some((_, name)) = self.taken.iter().find(|(s, _)| s == source) {
            let copy = self.dir.join(name);
            self.notes.push((
                line.clone(),
                format!("became a password_file: the same copy, {}", copy.display()),
            ));
            return Ok(copy);
        }
        let read = PasswordFile::load(source).map_err(|mut errors| {
            // The first fault is enough to refuse the conversion with.
            let e = errors.remove(0);
            let plain = e.why.contains("plain-text");
            let fix = if plain {
                "; mosquitto_passwd -U FILE hashes a file of plain passwords"
            } else {
                ""
            };
            Failure::at(&e.path, e.lines.first().copied(), format!("{}{fix}", e.why))
        })?;
        let text = std::fs::read_to_string(source)
            .map_err(|e| line.fail(format!("{} cannot be read: {e}", source.display())))?;
        let stem = source
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .filter(|n| !n.ends_with(".yaml") && n != REPORT_FILE)
            .unwrap_or_else(|| "passwd".into());
        let name = unique(
            &mut self.taken.iter().map(|(_, n)| n.clone()).collect(),
            &stem,
        );
        let copy = self.dir.join(&name);
        let kinds = kinds(&read);
        self.notes.push((
            line.clone(),
            format!(
                "copied to {} ({} users: {kinds}), read as mosquitto wrote it",
                copy.display(),
                read.user_count()
            ),
        ));
        self.taken.push((source.to_path_buf(), name.clone()));
        self.copies.push((name, text));
        Ok(copy)
    }
}

/// How many entries of each hash kind a file holds, for the report.
fn kinds(file: &PasswordFile) -> String {
    let mut counts = [0usize; 3];
    for user in file.users() {
        let at = match file.get(user) {
            Some(PasswordHash::Sha512 { .. }) => 0,
            Some(PasswordHash::Pbkdf2Sha512 { .. }) => 1,
            _ => 2,
        };
        counts[at] += 1;
    }
    let names = ["$6$", "$7$", "$argon2id$"];
    let said: Vec<String> = names
        .iter()
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    match said.is_empty() {
        true => "none".into(),
        false => said.join(", "),
    }
}

/// The keys `security` comes to under `at`, its password file copied.
fn security_keys(
    at: &str,
    security: &Security,
    files: &mut Files<'_>,
    outcomes: &mut Vec<(Line, String)>,
) -> Result<Keys, Failure> {
    let mut keys = Keys::default();
    if let Some((source, line)) = &security.password_file {
        keys.password_file = Some(files.copy(source, line)?);
        outcomes.push((line.clone(), format!("became {at}.password_file")));
    }
    if let Some((allow, line)) = &security.allow_anonymous {
        keys.allow_anonymous = Some(*allow);
        outcomes.push((line.clone(), format!("became {at}.allow_anonymous {allow}")));
    }
    Ok(keys)
}

/// Where `allow_anonymous` was written.
fn allow_anonymous_lines(model: &Model) -> impl Iterator<Item = &Line> {
    model
        .global
        .iter()
        .chain(
            model
                .default_listener
                .iter()
                .chain(&model.listeners)
                .flat_map(|l| &l.options),
        )
        .filter(|l| l.key == "allow_anonymous")
}

fn strip_allow_anonymous(mqtt: &mut Mapping) {
    mqtt.remove("allow_anonymous");
    let Some(Value::Mapping(listen)) = mqtt.get_mut("listen") else {
        return;
    };
    for (_, doors) in listen.iter_mut() {
        let Value::Sequence(doors) = doors else {
            continue;
        };
        for door in doors.iter_mut().filter_map(Value::as_mapping_mut) {
            door.remove("allow_anonymous");
        }
    }
}

/// `wanted`, or it with `-2`, `-3`... where taken; then taken.
fn unique(taken: &mut Vec<String>, wanted: &str) -> String {
    let mut name = wanted.to_string();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{wanted}-{n}");
        n += 1;
    }
    taken.push(name.clone());
    name
}

/// A listener's `max_connections`; `None` for no bound.
fn listener_connections(listener: &Listener) -> Result<Option<u64>, Failure> {
    let Some(line) = listener
        .options
        .iter()
        .rev()
        .find(|l| l.key == "max_connections")
    else {
        return Ok(None);
    };
    match line.value().parse::<i64>() {
        Ok(n) if n < 0 => Ok(None),
        Ok(n) => Ok(Some(n as u64)),
        Err(_) => Err(line.fail("max_connections takes a whole number, -1 for no bound")),
    }
}

struct Persistence {
    on: bool,
    location: PathBuf,
}

/// What one broker-wide option becomes.
fn global(
    line: &Line,
    limits: &mut Mapping,
    log_level: &mut Option<(&'static str, u8)>,
    persistence: &mut Option<Persistence>,
    base: &Path,
) -> Result<String, Failure> {
    let value = line.value();
    let number = || -> Result<u64, Failure> {
        value
            .parse::<u64>()
            .map_err(|_| line.fail(format!("{} takes a whole number", line.key)))
    };
    let state = persistence.get_or_insert_with(|| Persistence {
        on: false,
        location: base.to_path_buf(),
    });
    Ok(match line.key.as_str() {
        "per_listener_settings" => "carried: each listener's password_file and allow_anonymous became its door's".into(),
        "password_file" | "acl_file" => return Ok(String::new()),
        "allow_anonymous" => return Ok(String::new()),
        "include_dir" => match Path::new(&value).is_absolute() {
            true => "read: its .conf files in mosquitto's order, their options reported above".into(),
            false => format!("read: its .conf files in mosquitto's order, their options reported above; read against {}", base.display()),
        },
        "persistence" => {
            state.on = boolean(line)?;
            match state.on {
                true => format!("became broker.storage: a redb provider {} keeping sessions and retained messages (broker.session.storage and broker.retained.storage), every acknowledged write on disk before its acknowledgement; what mosquitto.db holds is carried into it (the lines about that file below)", state.location.join("saguin.redb").display()),
                false => "carried: sessions and retained messages live in memory until the broker stops".into(),
            }
        }
        "persistence_location" => {
            let note = listeners::absolute(base, line).1;
            format!("the redb provider's file is saguin.redb in it{}; the broker's user must be able to write there, and a file in a mosquitto package's directory goes if that package is purged", note.unwrap_or_default())
        }
        "persistence_file" => "read: the file mosquitto's data is carried from; the redb provider's file is saguin.redb".into(),
        "autosave_interval" | "autosave_on_changes" => "not carried: every write is made durable before it is acknowledged, so there is nothing to save at intervals".into(),
        "max_keepalive" => {
            put(limits, "max_keepalive", format!("{}s", number()?));
            "became broker.limits.max_keepalive".into()
        }
        "max_packet_size" => {
            let n = number()?;
            put(limits, "max_message_size", keep_smaller(limits, n));
            "became broker.limits.max_message_size (the whole packet, as here)".into()
        }
        "message_size_limit" if number()? == 0 => "nothing to carry: mosquitto's default, no limit; here broker.limits.max_message_size is 1MiB unless set".into(),
        "message_size_limit" => {
            // mosquitto bounds the payload; this broker the whole packet.
            let n = number()? + PACKET_OVERHEAD_BYTES;
            put(limits, "max_message_size", keep_smaller(limits, n));
            format!("became broker.limits.max_message_size {n} bytes: the whole packet is bounded here, so the payload's bound and {PACKET_OVERHEAD_BYTES} bytes for topic and properties; differs: a publish over it closes the connection (0x95) where mosquitto answered 0x97 and went on")
        }
        "max_queued_bytes" if number()? == 0 => "nothing to carry: no bound in mosquitto; here broker.limits.session_queue_bytes bounds what a session holds (1MiB unless set)".into(),
        "max_queued_bytes" => {
            put(limits, "session_queue_bytes", number()?);
            "became broker.limits.session_queue_bytes (what a session holds unacknowledged, in flight and queued)".into()
        }
        "max_queued_messages" => "not carried: sessions are bounded in bytes here, broker.limits.session_queue_bytes (1MiB unless set); past it a QoS 1 or 2 delivery is not queued, as past mosquitto's count".into(),
        "max_inflight_messages" | "max_inflight_bytes" => "not carried: a client's Receive Maximum sets the window; what a session holds is bounded by broker.limits.session_queue_bytes".into(),
        "persistent_client_expiration" => {
            let seconds = expiration_seconds(line)?;
            let written = match seconds % 86_400 {
                0 => format!("{}d", seconds / 86_400),
                _ => format!("{}h", seconds / 3_600),
            };
            put(limits, "max_session_expiry", written);
            "became broker.limits.max_session_expiry: the longest any session outlives its connection here, MQTT 5's included".into()
        }
        "retain_available" if value == "false" => "ACTION: not carried: retained messages are always available; an acl_file role with broker: features and deny: [retained] takes them away from a user".into(),
        "retain_available" => "carried: retained messages are available".into(),
        "log_type" => {
            let (level, rank) = match value.as_str() {
                "debug" | "all" => ("debug", 4),
                "information" | "notice" => ("info", 3),
                "warning" => ("warn", 2),
                "error" | "none" => ("error", 1),
                _ => ("info", 0),
            };
            if rank > 0 && log_level.is_none_or(|(_, r)| rank > r) {
                *log_level = Some((level, rank));
            }
            match rank {
                0 => "not carried: no log kind of its own here; subscriptions are logged at debug".into(),
                _ => LOG_LEVEL_NOTE.into(),
            }
        }
        "log_dest" => match line.args.first().map(String::as_str) {
            Some("stdout") => "carried: the log goes to standard output".into(),
            Some("stderr") => "differs: the log goes to standard output, and the init system keeps it".into(),
            Some("syslog") => "not carried: the log goes to standard output, which systemd's journal and procd's logread keep".into(),
            Some("file") => "ACTION: not carried: the log goes to standard output; have the service manager keep it (journalctl -u saguin, logread -e saguin) or redirect it to the file".into(),
            Some("topic") => "not carried: no $SYS log topics are published".into(),
            _ => "not carried: the log goes to standard output".into(),
        },
        "log_timestamp" | "log_timestamp_format" | "log_facility" | "connection_messages" => "not carried: every log line carries its time, and connections are logged at info".into(),
        "pid_file" => "not carried: the Debian and OpenWrt services track the process themselves; write broker.pid_file with a directory the broker's user can write if yours needs one".into(),
        "user" => "not carried: the broker never changes user; its packages run it as the saguin user".into(),
        "sys_interval" => "not carried: no $SYS tree is published; the operations listener's /metrics serves the broker's figures (broker.operations)".into(),
        "queue_qos0_messages" => "not carried: QoS 0 is never queued for an absent session".into(),
        "upgrade_outgoing_qos" | "allow_duplicate_messages" | "check_retain_source" => "not carried: MQTT's own rule holds".into(),
        "set_tcp_nodelay" => "not carried: every socket is answered without Nagle's delay already".into(),
        "memory_limit" => "not carried: memory is bounded by the configuration's limits, computed and logged at startup".into(),
        "clientid_prefixes" => "ACTION: not carried: an acl_file's users: entries with client_ids: say which client ids may carry a name".into(),
        "allow_zero_length_clientid" | "auto_id_prefix" => "not carried: a client without an id is given one for a session that ends with its connection".into(),
        "psk_file" => "ACTION: not carried: TLS with pre-shared keys is not served; use certificates".into(),
        "auth_plugin" | "plugin" | "global_plugin" => "ACTION: not carried: plugins are not loaded; password_file and acl_file are what decide".into(),
        key if key.starts_with("auth_opt_") || key.starts_with("plugin_opt_") => "not carried: plugins are not loaded".into(),
        key if key.starts_with("websockets_") => "not carried: a ws door logs as every door does, and bounds an upgrade's headers itself".into(),
        _ => "not carried: not an option of mosquitto 2.0 this migration knows; check what it did by hand".into(),
    })
}

/// What a `log_type` naming a level says, its level put in once known.
const LOG_LEVEL_NOTE: &str = "the most detailed level any log_type names";

/// What a packet holds beside its payload, at this broker's default
/// bounds: the topic, properties and headers.
const PACKET_OVERHEAD_BYTES: u64 = 16 * 1024;

fn keep_smaller(limits: &Mapping, n: u64) -> u64 {
    limits
        .get("max_message_size")
        .and_then(Value::as_u64)
        .map_or(n, |old| old.min(n))
}

/// A session must be able to hold one packet of the largest size.
fn fit_session_queue(limits: &mut Mapping) {
    let Some(largest) = limits.get("max_message_size").and_then(Value::as_u64) else {
        return;
    };
    let queue = limits
        .get("session_queue_bytes")
        .and_then(Value::as_u64)
        .unwrap_or(1024 * 1024);
    if queue < largest {
        put(limits, "session_queue_bytes", largest);
    }
}

/// mosquitto's `<n><h|d|w|m|y>`, in seconds.
fn expiration_seconds(line: &Line) -> Result<u64, Failure> {
    let value = line.value();
    let fail = || {
        line.fail("persistent_client_expiration is a whole number and one of h, d, w, m (months) or y, such as 14d")
    };
    let unit = value.chars().last().ok_or_else(fail)?;
    let n: u64 = value[..value.len() - 1].parse().map_err(|_| fail())?;
    let seconds = match unit {
        'h' => 3_600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        'm' => 30 * 86_400,
        'y' => 365 * 86_400,
        _ => return Err(fail()),
    };
    Ok(n * seconds)
}

/// `broker.storage` with one redb provider in `location`, keeping the
/// sessions and retained messages.
fn storage(broker: &mut Mapping, location: &Path) {
    let mut local = Mapping::new();
    put(&mut local, "type", "redb");
    put(
        &mut local,
        "file_path",
        location.join("saguin.redb").display().to_string(),
    );
    put(&mut local, "max_bytes", "256MiB");
    let mut providers = Mapping::new();
    put(&mut providers, PROVIDER_NAME, local);
    let mut storage = Mapping::new();
    put(&mut storage, "default", "local");
    put(&mut storage, "default_retention_period", "7d");
    put(&mut storage, "default_retention_bytes", "64MiB");
    put(&mut storage, "providers", providers);
    put(broker, "storage", storage);
    for block in ["session", "retained"] {
        let mut keeps = Mapping::new();
        put(&mut keeps, "storage", PROVIDER_NAME);
        put(broker, block, keeps);
    }
}
