//! Which path answers what, and who may ask.
//!
//! `/health` answers anybody. Every other route asks who is calling, in
//! this order: a password (HTTP Basic) checked against the door's
//! operators, which ends there whether it is right or wrong; on a TLS
//! door with `client_ca_file`, the name of the client certificate the
//! handshake verified; on a Unix socket only, the `X-Saguin-Principal` a
//! proxy in front of it set; and otherwise nobody, which the door itself
//! vouches for - a socket by its file permissions, a loopback port by
//! where it is, and then only when the request addressed this broker by
//! an IP address or `localhost`. A certificate's name and a proxy's are
//! weighed alike: a name the operators file holds reaches its routes, any
//! other name `/metrics` alone; a verified certificate that names nobody
//! is such a stranger, not nobody. A password is checked off this
//! thread, at most so many at once ([`PasswordChecks`]).
//!
//! A route that changes something (a `POST`) is served only to a request
//! no web page of another site could have sent: one carrying
//! `X-Saguin-Request`, which a page elsewhere cannot set without asking
//! first, and nothing (`Origin`, `Sec-Fetch-Site`) saying it came from
//! elsewhere.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64ct::{Base64, Encoding};

use super::http::{Request, Response};
use super::link::{Ask, Link};
use super::operators::{Check, Operators, Reloadable};
use super::password_checks::PasswordChecks;
use super::wear::{Wear, WearMeter};
use super::{json, metrics, process, v1};

/// Every route that takes a credential, as a password file's scope names
/// them.
pub const ROUTES: &[&str] = &[
    "/metrics",
    super::backup::ROUTE,
    "/v1/operations/acl",
    "/v1/operations/config",
    "/v1/operations/consumers",
    "/v1/operations/position-lost",
    "/v1/operations/queues",
    "/v1/operations/refused",
    "/v1/operations/sessions",
    "/v1/operations/users",
];

/// The route a queue's name follows.
const QUEUES: &str = "/v1/operations/queues/";

/// The queue a path under [`QUEUES`] names.
fn queue_named(path: &str) -> Option<&str> {
    path.strip_prefix(QUEUES)
        .filter(|name| !name.is_empty() && !name.contains('/'))
}

/// `404` for a path no route answers, and `405` naming what is allowed
/// for a route asked with another method: whether or not the request
/// announced a body, which is refused only after this.
fn route_takes(request: &Request) -> Result<(), Response> {
    let path = request.path.as_str();
    let known = path == "/health"
        || path == super::page::PATH
        || ROUTES.contains(&path)
        || queue_named(path).is_some();
    if !known {
        return Err(Response::text(404, "no such route\n"));
    }
    // The backup is the one route that writes, and so the one that takes POST.
    let (allowed, allow): (&[&str], &str) = if path == super::backup::ROUTE {
        (&["POST"], "POST")
    } else {
        (&["GET", "HEAD"], "GET, HEAD")
    };
    if allowed.contains(&request.method.as_str()) {
        return Ok(());
    }
    Err(Response::text(405, format!("{path} answers {allow}\n")).with_header("Allow", allow))
}

/// Rows a `/v1` list carries at most; the body says how many there were.
pub const MAX_ROWS: usize = 100;

const CHALLENGE: &str = "Basic realm=\"saguin\", charset=\"UTF-8\"";
const PRINCIPAL_HEADER: &str = "x-saguin-principal";
/// The header a request that changes something carries: a page of
/// another site can send it only once a preflight this listener never
/// answers has allowed it.
pub const REQUEST_HEADER: &str = "X-Saguin-Request";

/// Which kind of door a connection came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorKind {
    Tcp,
    Unix,
}

/// The door a request arrived at, read off the connection.
#[derive(Debug, Clone)]
pub struct Door {
    pub name: String,
    pub kind: DoorKind,
    /// The door's own operators, or the block's.
    pub operators: Option<Arc<Reloadable>>,
    /// A TCP door's TLS, whose handshake comes before anything is read.
    pub tls: Option<Arc<super::server::ServedTls>>,
    /// What this connection's client certificate named, once its
    /// handshake, or the proxy in front of a Unix door, verified one.
    pub certificate: Option<Certified>,
    /// A Unix door whose connections start with a PROXY v2 header.
    pub proxy_protocol: bool,
}

/// What a client certificate the handshake verified says of its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Certified {
    /// Its Common Name, or its first DNS name.
    Named(String),
    /// Neither: a caller the authority vouched for without naming.
    Unnamed,
}

/// The state the routes share on the operations thread.
pub struct Service {
    pub link: Link,
    pub min_scrape_interval: Duration,
    /// The last scrape computed.
    scrape: RefCell<Option<Scraped>>,
    /// Each provider's readings of what it wrote, by provider index.
    wear: RefCell<Vec<WearMeter>>,
    started: Instant,
    /// The configuration this process resolved.
    pub resolved: Arc<super::ResolvedConfig>,
    checks: PasswordChecks,
}

impl Service {
    /// `password_checks` is the most password checks pending at once.
    pub fn new(link: Link, min_scrape_interval: Duration, password_checks: usize) -> Service {
        let service = Service {
            link,
            min_scrape_interval,
            scrape: RefCell::new(None),
            wear: RefCell::new(Vec::new()),
            started: Instant::now(),
            resolved: Arc::default(),
            checks: PasswordChecks::new(password_checks),
        };
        // The rate's window opens with the uptime's.
        service.wear_figures();
        service
    }

    /// The response to `request` arriving at `door`.
    pub async fn respond(&self, request: &Request, door: &Door) -> Response {
        let path = request.path.as_str();
        if let Err(refusal) = route_takes(request) {
            return refusal;
        }
        if request.announces_body {
            return Response::text(413, "no route here takes a request body\n");
        }
        if path == super::backup::ROUTE {
            if let Err(refusal) = from_no_other_site(request, door) {
                return refusal;
            }
            if let Err(refusal) = self.authorize(request, door).await {
                return refusal;
            }
            let now_unix_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            return super::backup::backup(&self.link.backups, request, now_unix_ms).await;
        }
        if path == "/health" {
            return self.health();
        }
        if let Err(refusal) = self.authorize(request, door).await {
            return refusal;
        }
        if let Some(name) = queue_named(path) {
            return self.queue(name).await;
        }
        match path {
            super::page::PATH => super::page::response(request),
            "/metrics" => self.metrics(request).await,
            "/v1/operations/consumers" => {
                let ask = |reply| Ask::Consumers {
                    max_rows: MAX_ROWS,
                    reply,
                };
                self.listed(ask, |v: &Vec<_>| v1::consumers(v)).await
            }
            "/v1/operations/sessions" => {
                let ask = |reply| Ask::Sessions {
                    max_rows: MAX_ROWS,
                    reply,
                };
                let doors = &self.link.mqtt_doors;
                self.listed(ask, |view| v1::sessions(view, doors)).await
            }
            "/v1/operations/position-lost" => {
                let ask = |reply| Ask::Losses {
                    max_rows: MAX_ROWS,
                    reply,
                };
                self.listed(ask, v1::position_lost).await
            }
            "/v1/operations/refused" => {
                let ask = |reply| Ask::Refused {
                    max_rows: MAX_ROWS,
                    reply,
                };
                self.listed(ask, v1::refused).await
            }
            "/v1/operations/acl" => self.acl(request).await,
            "/v1/operations/config" => self.config(request),
            "/v1/operations/users" => {
                let doors = &self.link.mqtt_doors;
                let render = |a: &Arc<_>| v1::users(a, doors, MAX_ROWS);
                self.listed(Ask::Authentication, render).await
            }
            _ => Response::text(404, "no such route\n"),
        }
    }

    /// Asks the executor with `make` and renders the answer as JSON.
    async fn listed<T>(
        &self,
        make: impl FnOnce(smol::channel::Sender<T>) -> Ask,
        render: impl FnOnce(&T) -> String,
    ) -> Response {
        match self.link.ask(make).await {
            Some(view) => Response::json(200, render(&view)),
            None => busy(),
        }
    }

    /// `?user=` names the user asked about, once; `&client_id=` resolves
    /// a rule written with `%c`.
    async fn acl(&self, request: &Request) -> Response {
        let users = request.query_values("user");
        let [user] = users.as_slice() else {
            return Response::text(400, "name one user: ?user=<name>[&client_id=<id>]\n");
        };
        let ids = request.query_values("client_id");
        if ids.len() > 1 {
            return Response::text(400, "name at most one client_id\n");
        }
        let ask = |reply| Ask::Acl {
            user: user.clone(),
            client_id: ids.first().cloned(),
            reply,
        };
        self.listed(ask, String::clone).await
    }

    /// The resolved configuration, or the sections `?section=` names,
    /// composed into one object; a name that is no section is `400`.
    fn config(&self, request: &Request) -> Response {
        let asked = request.query_values("section");
        if asked.is_empty() {
            return Response::json(200, self.resolved.whole.clone());
        }
        let mut parts = Vec::with_capacity(asked.len());
        for name in &asked {
            let found = self.resolved.sections.iter().find(|(n, _)| n == name);
            let Some((_, json)) = found else {
                let names: Vec<&str> = self.resolved.sections.iter().map(|(n, _)| *n).collect();
                let text = format!(
                    "no section {name:?}: the sections are {}\n",
                    names.join(", ")
                );
                return Response::text(400, &text);
            };
            // Each is `{"<name>":...}`: its braces come off to compose.
            parts.push(&json[1..json.len() - 1]);
        }
        parts.dedup();
        Response::json(200, format!("{{{}}}", parts.join(",")))
    }

    /// A queue that is not configured is 404, naming none that are.
    async fn queue(&self, written: &str) -> Response {
        let Some(name) = super::http::percent_decode(written) else {
            return Response::text(404, "no such queue\n");
        };
        let ask = |reply| Ask::Queue {
            name: name.clone(),
            max_rows: MAX_ROWS,
            reply,
        };
        match self.link.ask(ask).await {
            Some(Some(view)) => Response::json(200, v1::queue(&name, &view)),
            Some(None) => Response::text(404, "no such queue\n"),
            None => busy(),
        }
    }

    /// 200 when a restart would not help; 503 when it would: the executor
    /// or a storage thread stopped, or a provider's device failed it, and
    /// then the failed providers and their files are named.
    fn health(&self) -> Response {
        let failed: Vec<String> = self
            .link
            .providers
            .iter()
            .filter_map(|p| {
                let failure = (p.failure)()?;
                Some(format!(
                    "{{\"provider\":{},\"file\":{}}}",
                    json::string(&p.name),
                    json::string(&failure.path.display().to_string())
                ))
            })
            .collect();
        if !failed.is_empty() {
            let body = format!(
                "{{\"status\":\"unavailable\",\"failed\":[{}]}}",
                failed.join(",")
            );
            Response::json(503, body)
        } else if (self.link.healthy)() {
            Response::json(200, "{\"status\":\"ok\"}".to_string())
        } else {
            Response::json(503, "{\"status\":\"unavailable\"}".to_string())
        }
    }

    /// Each provider's writes now, and the rate of the last day.
    fn wear_figures(&self) -> Vec<Wear> {
        let at_ms = self.started.elapsed().as_millis() as u64;
        let mut meters = self.wear.borrow_mut();
        let providers = &self.link.providers;
        meters.resize_with(providers.len(), WearMeter::new);
        providers
            .iter()
            .zip(meters.iter_mut())
            .map(|(provider, meter)| {
                let written = (provider.written_bytes)();
                let rate = written.and_then(|bytes| meter.observe(at_ms, bytes));
                Wear::new(written, rate, provider.device_endurance_bytes)
            })
            .collect()
    }

    /// The catalogue, recomputed at most once per `min_scrape_interval`;
    /// a scrape sooner than that is answered with the last one, and
    /// `Age` says how old it is. Gzipped for a client that accepts it,
    /// once per scrape computed.
    async fn metrics(&self, request: &Request) -> Response {
        let cached = self.scrape.borrow().clone();
        let scraped = match cached {
            Some(scraped) if scraped.at.elapsed() < self.min_scrape_interval => scraped,
            _ => {
                let Some(scrape) = self.link.ask(Ask::Observe).await else {
                    return busy();
                };
                let mut channel_bytes = Vec::with_capacity(self.link.providers.len());
                for provider in &self.link.providers {
                    channel_bytes.push(provider.ask_channel_bytes().await);
                }
                let figures = metrics::Figures {
                    broker_id: &self.link.broker_id,
                    uptime_s: self.started.elapsed().as_secs_f64(),
                    observation: &scrape.observation,
                    bridges: &scrape.bridges,
                    channel_bytes: &channel_bytes,
                    providers: &self.link.providers,
                    process: process::read(),
                    doors: &self.link.mqtt_doors,
                    wear: &self.wear_figures(),
                };
                let scraped = Scraped {
                    at: Instant::now(),
                    plain: Arc::new(metrics::render(&figures).into_bytes()),
                    gzipped: Arc::default(),
                };
                *self.scrape.borrow_mut() = Some(scraped.clone());
                scraped
            }
        };
        let age_s = scraped.at.elapsed().as_secs().to_string();
        let content_type = "text/plain; version=0.0.4; charset=utf-8";
        let gzip = request
            .header("accept-encoding")
            .is_some_and(super::gzip::accepted);
        let response = if gzip {
            let body = scraped
                .gzipped
                .get_or_init(|| super::gzip::compress_at(&scraped.plain, METRICS_GZIP_LEVEL));
            Response::bytes(200, content_type, body.clone()).with_header("Content-Encoding", "gzip")
        } else {
            Response::bytes(200, content_type, scraped.plain.to_vec())
        };
        response
            .with_header("Age", age_s)
            .with_header("Vary", "Accept-Encoding")
    }
}

/// One scrape computed: its text, and the text gzipped once somebody
/// asked for that.
#[derive(Clone)]
struct Scraped {
    at: Instant,
    plain: Arc<Vec<u8>>,
    gzipped: Arc<std::sync::OnceLock<Vec<u8>>>,
}

/// miniz_oxide's default level: a scrape is compressed on the listener's
/// thread, once a scrape, so the cheaper level of the two that shrink a
/// catalogue about alike.
const METRICS_GZIP_LEVEL: u8 = 6;

fn busy() -> Response {
    Response::text(
        503,
        "the broker did not answer in time; try again shortly\n",
    )
}

fn challenge(body: &str) -> Response {
    Response::text(401, format!("{body}\n")).with_header("WWW-Authenticate", CHALLENGE)
}

fn forbidden(body: impl std::fmt::Display) -> Response {
    Response::text(403, format!("{body}\n"))
}

impl Service {
    /// `Ok` when the caller may read `request.path` at `door`.
    async fn authorize(&self, request: &Request, door: &Door) -> Result<(), Response> {
        let operators = door.operators.as_ref().map(|file| file.current());
        match request.header("authorization") {
            Some(value) => {
                self.authorize_password(value, operators, &door.name, &request.path)
                    .await
            }
            None => authorize_unnamed(request, door, operators.as_deref()),
        }
    }

    async fn authorize_password(
        &self,
        value: &str,
        operators: Option<Arc<Operators>>,
        door: &str,
        path: &str,
    ) -> Result<(), Response> {
        let Some((name, password)) = basic_credential(value) else {
            return Err(challenge("the Authorization header is not HTTP Basic"));
        };
        let accepted = match &operators {
            None => false,
            Some(ops) if ops.remembered(&name, &password) => true,
            Some(ops) => {
                let checked = self.checks.check(ops.clone(), name.clone(), password, door);
                match checked.await {
                    Some(check) => check == Check::Accepted,
                    None => return Err(checks_busy(self.checks.most())),
                }
            }
        };
        if !accepted {
            // The log says a credential failed and never what it was.
            log::warn!("operations door {door}: a credential was rejected for {path}");
            return Err(challenge("the credential was rejected"));
        }
        if operators.is_some_and(|ops| ops.reaches(&name, path)) {
            Ok(())
        } else {
            Err(forbidden(format!(
                "this credential does not reach {path}; its routes are the third field of its line in the operators file"
            )))
        }
    }
}

fn checks_busy(most: usize) -> Response {
    Response::text(
        503,
        format!("{most} password checks are already pending; try again shortly\n"),
    )
    .with_header("Retry-After", "1")
}

/// Who a request with no password names, and whether that reaches
/// `request.path`.
fn authorize_unnamed(
    request: &Request,
    door: &Door,
    operators: Option<&Operators>,
) -> Result<(), Response> {
    let path = request.path.as_str();
    match &door.certificate {
        Some(Certified::Named(name)) => {
            return authorize_principal(name, operators, &door.name, path)
        }
        Some(Certified::Unnamed) if reached_by_strangers(path) => return Ok(()),
        Some(Certified::Unnamed) => {
            return Err(forbidden(format!(
                "a client certificate that names nobody reaches /metrics alone, not {path}; issue it with a Common Name the operators file holds"
            )))
        }
        None => {}
    }
    if door.kind == DoorKind::Unix && !door.proxy_protocol {
        // Only a socket carries somebody else's word: its permissions
        // decide who may speak to it. Elsewhere the header is not read,
        // nor behind a PROXY header, where the bytes of the request are
        // the proxy's client's own and only the certificate the header
        // carries speaks for anybody.
        if let Some(name) = request.header(PRINCIPAL_HEADER).map(str::trim) {
            if !name.is_empty() {
                return authorize_principal(name, operators, &door.name, path);
            }
        }
    }
    if operators.is_some() {
        return Err(challenge("this listener needs a credential"));
    }
    if door.kind == DoorKind::Tcp {
        addresses_this_broker(request)?;
    }
    Ok(())
}

/// Refuses a request that changes something when a web page of another
/// site could have sent it: one without [`REQUEST_HEADER`], or whose
/// browser says, by `Sec-Fetch-Site` or `Origin`, that it came from
/// elsewhere. A page of this very door (its `Origin` the door's scheme
/// and the `Host` asked for) is not elsewhere.
fn from_no_other_site(request: &Request, door: &Door) -> Result<(), Response> {
    let raw = |name: &str| {
        request
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).trim().to_string())
    };
    if let Some(site) = raw("sec-fetch-site") {
        if !site.eq_ignore_ascii_case("same-origin") && !site.eq_ignore_ascii_case("none") {
            return Err(forbidden(format!(
                "a request that changes something is refused from a web page of another site, and this browser said Sec-Fetch-Site: {site:?}; send it with saguin backup or curl"
            )));
        }
    }
    if let Some(origin) = raw("origin") {
        let scheme = if door.tls.is_some() { "https" } else { "http" };
        let own = raw("host").map(|host| format!("{scheme}://{host}"));
        if !own.is_some_and(|own| own.eq_ignore_ascii_case(&origin)) {
            return Err(forbidden(format!(
                "a request that changes something is refused from a web page of another site, and this one's Origin is {origin:?}; send it with saguin backup or curl"
            )));
        }
    }
    if raw(&REQUEST_HEADER.to_ascii_lowercase()).is_none_or(|value| value.is_empty()) {
        return Err(forbidden(format!(
            "a request that changes something carries {REQUEST_HEADER} (any value), which a web page of another site cannot send; saguin backup sends it, and curl takes -H '{REQUEST_HEADER}: backup'"
        )));
    }
    Ok(())
}

/// What a name the operators file does not hold reaches: `/metrics`, and
/// the page, which shows no more than that to it.
fn reached_by_strangers(path: &str) -> bool {
    path == "/metrics" || path == super::page::PATH
}

fn authorize_principal(
    name: &str,
    operators: Option<&Operators>,
    door: &str,
    path: &str,
) -> Result<(), Response> {
    if name.chars().any(char::is_control) {
        log::warn!("operations door {door}: refused a principal holding a control character");
        return Err(forbidden(
            "a principal holding a control character names nobody",
        ));
    }
    let listed = operators.filter(|ops| ops.knows(name));
    let reaches = match listed {
        Some(ops) => ops.reaches(name, path),
        // A name the file does not hold is scraped and nothing more.
        None => reached_by_strangers(path),
    };
    if reaches {
        Ok(())
    } else {
        Err(forbidden(format!(
            "{name:?} does not reach {path}; a name reaches the /v1 routes once the operators file holds it"
        )))
    }
}

/// The name and password of an HTTP Basic credential.
fn basic_credential(value: &str) -> Option<(String, Vec<u8>)> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = Base64::decode_vec(encoded.trim()).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let name = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((name, decoded[colon + 1..].to_vec()))
}

/// Refuses a request with no credential that asked for this broker by a
/// name: a page whose domain re-resolves to this address (DNS rebinding)
/// is sent with the name it was loaded by, which is the one thing it
/// cannot forge.
fn addresses_this_broker(request: &Request) -> Result<(), Response> {
    let Some(host) = request.header("host") else {
        return Ok(());
    };
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let is_ip = name.parse::<std::net::IpAddr>().is_ok();
    if is_ip || name.eq_ignore_ascii_case("localhost") {
        return Ok(());
    }
    Err(forbidden(format!(
        "a request without a credential is served only when it addresses this broker by IP address or localhost, and this one asked for {host:?}; set broker.operations.password_file to serve callers who use a name"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            path: "/metrics".into(),
            query: String::new(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            keep_alive: false,
            announces_body: false,
        }
    }

    fn door(kind: DoorKind) -> Door {
        Door {
            name: "d".into(),
            kind,
            operators: None,
            tls: None,
            certificate: None,
            proxy_protocol: false,
        }
    }

    /// A TCP door whose operators are `prometheus` (scraping only) and
    /// `oncall` (everything), reached by a connection whose certificate
    /// said `certificate`.
    fn certified_door(certificate: Certified) -> Door {
        let text = format!(
            "{}:/metrics\n{}\n",
            crate::ops::operators::hash_line("prometheus", "p", b"test-salt-12"),
            crate::ops::operators::hash_line("oncall", "o", b"test-salt-12"),
        );
        let operators = Operators::parse("ops.passwd", &text, ROUTES).unwrap();
        Door {
            operators: Some(Reloadable::new(Arc::new(operators))),
            certificate: Some(certificate),
            ..door(DoorKind::Tcp)
        }
    }

    fn service() -> Service {
        let (link, _asks) = Link::new("t".into(), Arc::new(|| true), Vec::new());
        Service::new(link, Duration::from_secs(60), 1)
    }

    fn authorize(request: &Request, door: &Door) -> Result<(), Response> {
        smol::block_on(service().authorize(request, door))
    }

    fn asks(path: &str, headers: &[(&str, &str)], door: &Door) -> u16 {
        let mut request = request(headers);
        request.path = path.into();
        match authorize(&request, door) {
            Ok(()) => 200,
            Err(refusal) => refusal.status,
        }
    }

    #[test]
    fn a_certificate_s_name_is_weighed_as_the_operators_file_weighs_it() {
        let sessions = "/v1/operations/sessions";
        let oncall = certified_door(Certified::Named("oncall".into()));
        assert_eq!(asks("/metrics", &[], &oncall), 200);
        assert_eq!(asks(sessions, &[], &oncall), 200);
        // A scoped operator keeps its scope.
        let scraper = certified_door(Certified::Named("prometheus".into()));
        assert_eq!(asks("/metrics", &[], &scraper), 200);
        assert_eq!(asks(sessions, &[], &scraper), 403);
        // A name the file does not hold is scraped and nothing more.
        let stranger = certified_door(Certified::Named("grafana-agent".into()));
        assert_eq!(asks("/metrics", &[], &stranger), 200);
        assert_eq!(asks(sessions, &[], &stranger), 403);
        // A certificate naming nobody is a stranger, not the trusted nobody.
        let unnamed = certified_door(Certified::Unnamed);
        assert_eq!(asks("/metrics", &[], &unnamed), 200);
        assert_eq!(asks(sessions, &[], &unnamed), 403);
        // A control character names nobody at all.
        let control = certified_door(Certified::Named("on\u{7}call".into()));
        assert_eq!(asks("/metrics", &[], &control), 403);
    }

    #[test]
    fn a_password_offered_beside_a_certificate_decides_alone() {
        let oncall = certified_door(Certified::Named("oncall".into()));
        let wrong = format!("Basic {}", Base64::encode_string(b"oncall:wrong"));
        assert_eq!(asks("/metrics", &[("authorization", &wrong)], &oncall), 401);
        let scraper = format!("Basic {}", Base64::encode_string(b"prometheus:p"));
        let sessions = "/v1/operations/sessions";
        assert_eq!(asks(sessions, &[("authorization", &scraper)], &oncall), 403);
    }

    #[test]
    fn a_caller_with_no_name_must_address_the_broker_by_ip_or_localhost() {
        let tcp = door(DoorKind::Tcp);
        for host in ["127.0.0.1:9090", "localhost", "[::1]:9090", "LOCALHOST:1"] {
            assert!(
                authorize(&request(&[("host", host)]), &tcp).is_ok(),
                "{host}"
            );
        }
        let refused = authorize(&request(&[("host", "evil.example:9090")]), &tcp).unwrap_err();
        assert_eq!(refused.status, 403);
        // A socket is exempt: no browser opens one.
        assert!(authorize(&request(&[("host", "evil.example")]), &door(DoorKind::Unix)).is_ok());
    }

    #[test]
    fn behind_a_proxy_header_a_principal_header_names_nobody() {
        let mut socket = door(DoorKind::Unix);
        let claim = [("x-saguin-principal", "oncall")];
        // A plain socket believes the claim: a name no file holds is a
        // stranger, who reaches /metrics alone.
        assert_eq!(asks("/v1/operations/sessions", &claim, &socket), 403);
        socket.proxy_protocol = true;
        // Behind the header the claim is ignored: nobody, whom the socket
        // vouches for when it has no operators.
        assert_eq!(asks("/v1/operations/sessions", &claim, &socket), 200);
        let guarded = Door {
            kind: DoorKind::Unix,
            proxy_protocol: true,
            certificate: None,
            ..certified_door(Certified::Unnamed)
        };
        assert_eq!(asks("/metrics", &claim, &guarded), 401);
    }

    #[test]
    fn a_post_is_served_only_when_no_other_site_could_have_sent_it() {
        let post = |headers: &[(&str, &str)], door: &Door| {
            let mut request = request(headers);
            request.method = "POST".into();
            from_no_other_site(&request, door).map_err(|r| r.status)
        };
        let tcp = door(DoorKind::Tcp);
        let ours = ("x-saguin-request", "1");
        assert_eq!(post(&[ours], &tcp), Ok(()));
        assert_eq!(post(&[], &tcp), Err(403));
        assert_eq!(post(&[("x-saguin-request", " ")], &tcp), Err(403));
        let host = ("host", "127.0.0.1:9090");
        assert_eq!(
            post(&[host, ("origin", "http://127.0.0.1:9090"), ours], &tcp),
            Ok(())
        );
        assert_eq!(
            post(&[host, ("origin", "HTTP://127.0.0.1:9090"), ours], &tcp),
            Ok(())
        );
        for origin in [
            "https://127.0.0.1:9090",
            "http://127.0.0.1:9091",
            "null",
            "http://evil.example",
        ] {
            assert_eq!(
                post(&[host, ("origin", origin), ours], &tcp),
                Err(403),
                "{origin}"
            );
        }
        assert_eq!(
            post(&[("origin", "http://127.0.0.1:9090"), ours], &tcp),
            Err(403),
            "no Host"
        );
        for site in ["same-origin", "none", "Same-Origin"] {
            assert_eq!(
                post(&[("sec-fetch-site", site), ours], &tcp),
                Ok(()),
                "{site}"
            );
        }
        for site in ["cross-site", "same-site", ""] {
            assert_eq!(
                post(&[("sec-fetch-site", site), ours], &tcp),
                Err(403),
                "{site}"
            );
        }
    }

    #[test]
    fn basic_credentials_are_decoded() {
        assert_eq!(
            basic_credential("Basic YTpiOmM="),
            Some(("a".to_string(), b"b:c".to_vec()))
        );
        assert_eq!(basic_credential("Bearer x"), None);
        assert_eq!(basic_credential("Basic !!"), None);
    }
}

#[cfg(test)]
mod health_tests {
    use super::*;
    use crate::ops::Provider;
    use crate::store::{CommitStats, Failure};

    fn provider(name: &str, failure: Option<Arc<Failure>>) -> Provider {
        Provider {
            name: name.into(),
            kind: "redb",
            max_bytes: 1 << 20,
            publish_commit_max_records: None,
            commits: Arc::new(CommitStats::default),
            channel_bytes: Arc::new(|_| false),
            written_bytes: Arc::new(|| None),
            device_endurance_bytes: None,
            failure: Arc::new(move || failure.clone()),
        }
    }

    fn health(healthy: bool, providers: Vec<Provider>) -> Response {
        let (link, _asks) = Link::new("t".into(), Arc::new(move || healthy), providers);
        Service::new(link, Duration::from_secs(60), 1).health()
    }

    #[test]
    fn a_provider_whose_device_failed_is_named_with_its_file() {
        let failure = Arc::new(Failure {
            provider: "disk".into(),
            path: "/data/disk.redb.journal".into(),
            action: "write and sync a journal frame".into(),
            cause: "Input/output error (os error 5)".into(),
            remedy: "restart".into(),
        });
        let answer = health(
            true,
            vec![provider("mem", None), provider("disk", Some(failure))],
        );
        assert_eq!(answer.status, 503);
        assert_eq!(
            String::from_utf8(answer.body).unwrap(),
            r#"{"status":"unavailable","failed":[{"provider":"disk","file":"/data/disk.redb.journal"}]}"#
        );
        let answer = health(true, vec![provider("mem", None)]);
        assert_eq!(
            (answer.status, answer.body),
            (200, br#"{"status":"ok"}"#.to_vec())
        );
        let answer = health(false, vec![provider("mem", None)]);
        assert_eq!(
            (answer.status, answer.body),
            (503, br#"{"status":"unavailable"}"#.to_vec())
        );
    }
}
