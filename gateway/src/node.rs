//! A node: its listeners, proxy, admin thread and reloads, wired together.
//!
//! Entry points take bound listeners and a shutdown signal, so that tests
//! bind port 0 and run many nodes side by side in one process.
//!
//! ## Reloads
//! A reload swaps the route table and the certificates served to HTTPS
//! clients, and re-paces the connect checks; every other part (listeners,
//! client limits, feed, cluster, runtime) keeps the settings the node
//! started with. The reload's plan is decided against
//! what runs ([`Node::in_force`]), so its one log line names every setting
//! that differs from it and needs a restart, at every reload until the
//! node restarts or the file goes back.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::checks::{self, Checker};
use crate::config::declared::{self, Merged};
use crate::config::ownership;
use crate::config::{
    self, CertificateConfig, ClusterSettings, Config, NodeSettings, Overrides, ReloadPlan,
    RouteConfig, RuntimeKind, RuntimeSettings,
};
use crate::edge::{self, Certificates};
use crate::gossip::{self, Keys, Membership};
use crate::metrics::Metrics;
use crate::proxy::{Proxy, RouteContext, build_table};
use crate::shutdown::{self, Shutdown, Tasks, Trigger};
use crate::status::{AdminState, feed};
use crate::targets::{Catalog, Declarations, Link, docker, kube, swarm};
use crate::upstream::{Pools, ProxyEnv};
use crate::verdict::board::{self, Board};
use crate::{reload, server, status};

/// How long a stopping node lets requests in flight finish.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);
/// How long a stopping node waits for its own tasks (gossip, feed,
/// reload, checks, the runtime, …) once its connections have drained:
/// each ends at the shutdown signal, so this only bounds a stuck one.
pub const TASKS_DEADLINE: Duration = Duration::from_secs(5);

/// The node's listening sockets, bound before the node starts.
#[derive(Debug)]
pub struct Listeners {
    pub proxy: std::net::TcpListener,
    /// The proxy's HTTPS listener; bound at start from `[node] listen_tls`
    /// when `None`, and unused without it.
    pub proxy_tls: Option<std::net::TcpListener>,
    pub admin: std::net::TcpListener,
    /// Gossip (UDP); bound at start from `[cluster] gossip` when `None`.
    pub gossip: Option<std::net::UdpSocket>,
    /// The QUIC feed (UDP); bound at start from `[node] feed` when `None`,
    /// and unused when no feed is configured.
    pub feed: Option<std::net::UdpSocket>,
}

impl Listeners {
    pub fn bind(proxy: SocketAddr, admin: SocketAddr) -> io::Result<Listeners> {
        Ok(Listeners {
            proxy: bind(proxy)?,
            proxy_tls: None,
            admin: bind(admin)?,
            gossip: None,
            feed: None,
        })
    }

    /// Binds the feed's socket too.
    pub fn with_feed(mut self, feed: SocketAddr) -> io::Result<Listeners> {
        self.feed = Some(std::net::UdpSocket::bind(feed).map_err(|e| {
            io::Error::new(e.kind(), format!("binding the feed to {feed}/udp: {e}"))
        })?);
        Ok(self)
    }

    /// Binds the HTTPS listener too.
    pub fn with_tls(mut self, addr: SocketAddr) -> io::Result<Listeners> {
        self.proxy_tls = Some(bind(addr)?);
        Ok(self)
    }

    /// Binds the gossip socket too.
    pub fn with_gossip(mut self, gossip: SocketAddr) -> io::Result<Listeners> {
        self.gossip = Some(bind_udp(gossip)?);
        Ok(self)
    }
}

fn bind_udp(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    std::net::UdpSocket::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("binding gossip to {addr}/udp: {e}")))
}

fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket
        .bind(&addr.into())
        .map_err(|e| io::Error::new(e.kind(), format!("binding {addr}: {e}")))?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// What a node needs besides its configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// The file to reload on change and on SIGHUP; `None` never reloads.
    pub config_path: Option<PathBuf>,
    pub overrides: Overrides,
    pub tls: Arc<rustls::ClientConfig>,
    pub drain: Duration,
    /// `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY`: the forward proxies of
    /// external hosts, for their requests and their checks alike.
    pub proxy_env: Option<ProxyEnv>,
    /// A gossip transport to use instead of UDP (tests: chitchat's
    /// in-memory one).
    pub gossip_transport: Option<gossip::Wire>,
    /// The wall clock the session tickets' periods are read from (`None`:
    /// the system's; tests move their own).
    pub ticket_clock: Option<edge::tickets::WallClock>,
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// The file is what was last read and applied: nothing to do.
    Unchanged,
    Applied(ReloadPlan),
    /// The file is invalid; the running configuration stays. A file
    /// refused already is refused again with the same error, quietly.
    Refused(String),
}

struct Current {
    config: Config,
    /// The text last read from the file, applied or refused.
    text: Option<String>,
    /// Why that text was refused, if it was.
    refused: Option<String>,
    /// The file the cluster keys in use were read from (`None`: from the
    /// environment, or no keys).
    key_file: Option<PathBuf>,
    /// What the runtime declares: routes beside the file's, and their
    /// certificates.
    declared: Arc<Declarations>,
}

/// What the parts of a running node use now, each read from the part that
/// uses it: what a reload has taken effect on, and what waits for a
/// restart. `[global]` has no part of its own: its values reach the node
/// through the routes that inherit them and through the connect checks.
#[derive(Debug, Clone, PartialEq)]
pub struct InForce {
    /// Listeners, client limits, feed: as the node started.
    pub node: NodeSettings,
    /// As the node started.
    pub runtime: RuntimeSettings,
    /// As the node started; `key_file` is where the keys in use were read.
    pub cluster: Option<ClusterSettings>,
    /// The connect checks' period and bound.
    pub checks: checks::Settings,
    /// The route table, by name.
    pub routes: Vec<RouteConfig>,
    /// The certificates handshakes get, as last reloaded or rotated.
    pub certificates: Vec<CertificateConfig>,
    /// What the ACME part works on, as last reloaded.
    pub acme: Option<crate::config::AcmeSettings>,
}

/// One gateway node.
pub struct Node {
    proxy: Arc<Proxy>,
    ctx: RouteContext,
    board: Arc<Board>,
    checker: Arc<Checker>,
    admin: Arc<AdminState>,
    certificates: Arc<Certificates>,
    acme: Arc<crate::acme::Acme>,
    /// The configuration the node started on: what the parts that need a
    /// restart to change run on.
    started: Config,
    current: Mutex<Current>,
    options: Options,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A node on `config` (overrides already applied). Needs a tokio runtime.
    pub fn new(config: Config, options: Options) -> Arc<Node> {
        let metrics = Arc::new(Metrics::new());
        let ctx = RouteContext {
            node: config.node.name.value.as_str().into(),
            pools: Arc::new(Pools::default()),
            changes: Arc::new(crate::changes::Changes::default()),
            metrics: Arc::clone(&metrics),
            tls: Arc::clone(&options.tls),
            proxy_env: options.proxy_env.clone().map(Arc::new),
            catalog: Arc::new(Catalog::default()),
        };
        let checker = Arc::new(Checker::new(check_settings(&config)));
        let table = build_table(&config.routes, None, &ctx);
        metrics.table(config.routes.len(), 0, 0);
        let text = options
            .config_path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        let access_log = match crate::access::AccessLog::start(
            &config.node.access_log.value,
            config.node.access_log_format.value,
            metrics.access_log.clone(),
        ) {
            Ok(log) => log,
            Err(error) => {
                tracing::error!(%error, "no access log");
                None
            }
        };
        let challenges = Arc::new(crate::challenges::Challenges::default());
        let acme = Arc::new(crate::acme::Acme::new(
            config.acme.clone(),
            Arc::clone(&challenges),
        ));
        let proxy = Arc::new(
            Proxy::new(table, Arc::clone(&metrics))
                .with_access_log(access_log)
                .with_challenges(Arc::clone(&challenges)),
        );
        let board = Arc::new(Board::default());
        let certificates = Arc::new(
            Certificates::new(config.certificates.clone(), Arc::clone(&metrics))
                .with_challenges(challenges),
        );
        let admin = AdminState::new(
            &config.node.name.value,
            metrics,
            Arc::clone(&proxy),
            Arc::clone(&board),
            Arc::clone(&certificates),
        );
        let key_file = config.cluster.as_ref().and_then(|c| c.key_file.clone());
        Arc::new(Node {
            proxy,
            ctx,
            board,
            checker,
            admin: Arc::new(admin),
            certificates,
            acme,
            started: config.clone(),
            current: Mutex::new(Current {
                config,
                text,
                refused: None,
                key_file,
                declared: Arc::default(),
            }),
            options,
        })
    }

    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.ctx.metrics
    }

    pub fn pools(&self) -> &Arc<Pools> {
        &self.ctx.pools
    }

    /// This node's verdicts.
    pub fn board(&self) -> &Arc<Board> {
        &self.board
    }

    /// The connect checks of static replicas and external hosts.
    pub fn checker(&self) -> &Arc<Checker> {
        &self.checker
    }

    /// The certificates served to HTTPS clients.
    /// The node's ACME part: its settings and its certificates' states.
    pub fn acme(&self) -> &Arc<crate::acme::Acme> {
        &self.acme
    }

    pub fn certificates(&self) -> &Arc<Certificates> {
        &self.certificates
    }

    /// Where service routes get their replicas from the runtime.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.ctx.catalog
    }

    /// The cluster as this node knows it, once the node runs.
    pub fn membership(&self) -> Option<&Arc<Membership>> {
        self.admin.membership.get()
    }

    /// The configuration last applied: the file as last reloaded, with the
    /// overrides. Settings that need a restart may differ from what runs:
    /// see [`Node::in_force`].
    pub fn config(&self) -> Config {
        self.lock().config.clone()
    }

    /// What the node's parts use now.
    pub fn in_force(&self) -> InForce {
        let (key_file, hosts) = {
            let current = self.lock();
            (
                current.key_file.clone(),
                current.config.runtime.hosts.clone(),
            )
        };
        let mut routes: Vec<RouteConfig> = self
            .proxy
            .table()
            .values()
            .map(|route| route.config.clone())
            .collect();
        routes.sort_by(|a, b| a.name.cmp(&b.name));
        InForce {
            node: self.started.node.clone(),
            // What the runtime may claim applies at once; the rest of
            // `[runtime]` at restart.
            runtime: RuntimeSettings {
                hosts,
                ..self.started.runtime.clone()
            },
            cluster: self.started.cluster.clone().map(|cluster| ClusterSettings {
                key_file,
                ..cluster
            }),
            checks: self.checker.settings(),
            routes,
            certificates: self.certificates.load().entries.clone(),
            acme: self.acme.settings(),
        }
    }

    /// What the node runs on, as a configuration to compare a new one
    /// with: the one last applied, but the settings that need a restart
    /// as the node started with them.
    fn running(&self, current: &Current) -> Config {
        Config {
            node: self.started.node.clone(),
            // What the runtime may claim applies at once; the rest of
            // `[runtime]` at restart.
            runtime: RuntimeSettings {
                hosts: current.config.runtime.hosts.clone(),
                ..self.started.runtime.clone()
            },
            cluster: self.started.cluster.clone().map(|cluster| ClusterSettings {
                key_file: current.key_file.clone(),
                ..cluster
            }),
            certificates: self.certificates.load().entries.clone(),
            ..current.config.clone()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-reads the configuration file and applies it if it is valid
    /// ([`reload::judge`] decides). Logs one line for what happened;
    /// nothing when the file is unchanged.
    pub fn reload_from_file(&self) -> Reload {
        let Some(path) = &self.options.config_path else {
            return Reload::Unchanged;
        };
        let file = path.display().to_string();
        let read = reload::read_settled(path);
        let judged = {
            let current = self.lock();
            let last = reload::Last {
                text: current.text.as_deref(),
                refused: current.refused.as_deref(),
            };
            reload::judge(&file, read, last, &self.options.overrides)
        };
        match judged {
            reload::Judged::Unchanged => Reload::Unchanged,
            reload::Judged::Short(source) => {
                crate::resources::LOCAL.hit("reading the configuration", &source);
                Reload::Unchanged
            }
            reload::Judged::RefusedAgain(error) => Reload::Refused(error),
            reload::Judged::Refuse { error, text } => self.refuse(text, error),
            reload::Judged::Apply { config, text } => {
                {
                    let mut current = self.lock();
                    current.text = Some(text);
                    current.refused = None;
                }
                Reload::Applied(self.apply(*config))
            }
        }
    }

    /// Re-reads the cluster keys, so that a key rotates without a restart.
    fn reload_keys(&self, config: &Config) -> reload::KeyReload {
        let (Some(settings), Some(membership)) = (&config.cluster, self.membership()) else {
            return reload::KeyReload::Untouched;
        };
        if !membership.sealed() {
            return reload::KeyReload::Untouched;
        }
        let dir = self.options.config_path.as_deref().and_then(Path::parent);
        match gossip::keys::load(settings, dir) {
            Ok(Some(keys)) => {
                let labels = keys.labels();
                reload::KeyReload::Read(membership.set_keys(keys).then_some(labels))
            }
            Ok(None) => reload::KeyReload::Untouched,
            Err(error) => reload::KeyReload::Failed(error.to_string()),
        }
    }

    fn refuse(&self, text: Option<String>, error: String) -> Reload {
        {
            let mut current = self.lock();
            current.text = text;
            current.refused = Some(error.clone());
        }
        self.ctx.metrics.reload(false);
        tracing::warn!(%error, "configuration refused; the running configuration stays");
        Reload::Refused(error)
    }

    /// Swaps in a new validated configuration. Routes that did not change
    /// keep their replica health and pooled connections; requests in
    /// flight finish on the routes they started with. The connect checks
    /// take the new period from their next round, and the cluster keys are
    /// read again. The node's flag and environment overrides win over it,
    /// as at start. Logs one line, naming what needs a restart.
    pub fn apply(&self, mut config: Config) -> ReloadPlan {
        config.apply(&self.options.overrides);
        let mut current = self.lock();
        let plan = config::diff(&self.running(&current), &config);
        // Counted before the swap: whoever sees the new routes sees the
        // reload counted.
        self.ctx.metrics.reload(true);
        self.install(&config, &current.declared);
        self.certificates.replace(config.certificates.clone());
        self.acme.set(config.acme.clone());
        self.checker.set(check_settings(&config));
        let keys = self.reload_keys(&config);
        if let reload::KeyReload::Read(_) = keys {
            current.key_file = config.cluster.as_ref().and_then(|c| c.key_file.clone());
        }
        current.config = config;
        drop(current);
        self.ctx.changes.signal();
        reload::log(&plan, &keys);
        plan
    }
}

impl Node {
    /// Builds the route table from the file's routes and the runtime's
    /// ([`declared::merge`]: the ownership rule decides) and swaps it in,
    /// with the runtime's certificates the rule admits. Routes whose
    /// configuration did not change keep their replica health and pooled
    /// connections; the series of routes that went are forgotten (a route
    /// rebuilt under its name keeps its counters and resets its gauges
    /// itself). Logs one line per runtime route added, changed, removed
    /// or refused anew.
    fn install(&self, config: &Config, declared: &Declarations) {
        let old = self.proxy.table();
        let before = self.proxy.refused();
        let serving: Vec<RouteConfig> = old
            .values()
            .filter(|r| r.config.declared_by.is_some())
            .map(|r| r.config.clone())
            .collect();
        let merged = declared::merge(
            &config.routes,
            &declared.routes,
            declared::Against {
                global: &config.global,
                runtime: &self.started.runtime,
                hosts: &config.runtime.hosts,
                https: self.started.node.listen_tls.is_some(),
            },
            &serving,
        );
        let table = build_table(&merged.routes, Some(&old), &self.ctx);
        self.proxy.install(table, merged.refused.clone());
        self.admit_certificates(config, declared, &merged);
        let runtime = merged.claims.len();
        self.ctx
            .metrics
            .table(merged.routes.len() - runtime, runtime, merged.refused.len());
        for route in old.values() {
            let name = &route.config.name;
            if !merged.routes.iter().any(|r| r.name == *name) {
                let replicas: Vec<String> = route
                    .upstream
                    .replicas()
                    .iter()
                    .map(|r| r.label.clone())
                    .collect();
                self.ctx.metrics.forget_route(
                    name,
                    &replicas,
                    &crate::upstream::health::EjectReason::SLUGS,
                );
            }
        }
        log_runtime_changes(&serving, &merged, &before);
    }

    /// Serves the runtime's certificates for the names the ownership rule
    /// gives each, against what the file serves and the routes `merged`
    /// admitted.
    fn admit_certificates(&self, config: &Config, declared: &Declarations, merged: &Merged) {
        let file_certificates: Vec<(String, Vec<String>)> = config
            .certificates
            .iter()
            .map(|c| (edge::served::label(c), c.current.names.clone()))
            .chain(config.acme.iter().flat_map(|acme| {
                acme.certificates
                    .iter()
                    .map(|names| (names.first().cloned().unwrap_or_default(), names.clone()))
            }))
            .collect();
        let file = ownership::FileServes {
            routes: &config.routes,
            certificates: &file_certificates,
        };
        let admitted = declared
            .certificates
            .iter()
            .map(|certificate| {
                ownership::admit_certificate(
                    certificate.clone(),
                    &certificate.hosts,
                    certificate.tenant.as_deref(),
                    file,
                    &merged.claims,
                    &config.runtime.hosts,
                )
            })
            .collect();
        self.certificates.set_runtime(admitted);
    }

    /// Takes what the runtime declares now: its routes join the file's,
    /// and its certificates are served, as the ownership rule admits them.
    /// Nothing else is touched: other routes keep their objects, pools and
    /// health.
    pub fn apply_declared(&self, declarations: Arc<Declarations>) {
        let mut current = self.lock();
        self.install(&current.config, &declarations);
        current.declared = declarations;
        drop(current);
        self.ctx.changes.signal();
    }
}

/// One line per runtime route added, changed or removed (`serving` were
/// served before), and per refusal not in `before`.
fn log_runtime_changes(serving: &[RouteConfig], merged: &Merged, before: &[declared::Refused]) {
    let now: Vec<&RouteConfig> = merged.claims.iter().map(|c| &c.route).collect();
    for route in &now {
        match serving.iter().find(|r| r.name == route.name) {
            None => tracing::info!(
                route = %route.name,
                by = route.declared_by.as_deref().unwrap_or_default(),
                host = %route.host.as_ref().map(ToString::to_string).unwrap_or_default(),
                path = %route.path_prefix,
                "route added from the runtime"
            ),
            Some(old) if old != *route => tracing::info!(
                route = %route.name,
                by = route.declared_by.as_deref().unwrap_or_default(),
                "route changed by the runtime"
            ),
            Some(_) => {}
        }
    }
    for route in serving
        .iter()
        .filter(|r| !now.iter().any(|n| n.name == r.name))
    {
        tracing::info!(
            route = %route.name,
            by = route.declared_by.as_deref().unwrap_or_default(),
            "route removed by the runtime"
        );
    }
    for refusal in merged.refused.iter().filter(|r| !before.contains(r)) {
        tracing::warn!(
            route = %refusal.name,
            by = %refusal.declared_by,
            rule = refusal.rule.slug(),
            reason = %refusal.rule,
            "route from the runtime refused"
        );
    }
}

/// Follows what the runtime declares until `shutdown`: each change is
/// applied at once, on its own, never behind a reload of the file.
fn spawn_declared(node: &Arc<Node>, mut shutdown: Shutdown, tasks: &mut Tasks) {
    let node = Arc::clone(node);
    let mut declared = node.ctx.catalog.declared();
    tasks.spawn("runtime routes", async move {
        loop {
            tokio::select! {
                changed = declared.changed() => if changed.is_err() { return },
                () = shutdown.wait() => return,
            }
            let now = Arc::clone(&declared.borrow_and_update());
            node.apply_declared(now);
        }
    });
}

fn check_settings(config: &Config) -> checks::Settings {
    checks::Settings {
        every: config.global.check_every.value,
        timeout: config.global.check_timeout.value,
    }
}

/// A node started with [`start`].
#[derive(Debug)]
pub struct Running {
    pub proxy_addr: SocketAddr,
    /// The HTTPS listener, when the node has one.
    pub tls_addr: Option<SocketAddr>,
    pub admin_addr: SocketAddr,
    pub node: Arc<Node>,
    trigger: Trigger,
    task: JoinHandle<io::Result<()>>,
}

impl Running {
    /// Stops the node and waits until it has drained.
    pub async fn stop(self) -> io::Result<()> {
        self.trigger.fire();
        self.task.await.map_err(io::Error::other)?
    }
}

/// Starts a node in the current runtime.
pub fn start(mut listeners: Listeners, config: Config, options: Options) -> io::Result<Running> {
    if let (None, Some(listen_tls)) = (&listeners.proxy_tls, &config.node.listen_tls) {
        listeners.proxy_tls = Some(bind(listen_tls.value)?);
    }
    let tls_addr = match &listeners.proxy_tls {
        Some(listener) => Some(listener.local_addr()?),
        None => None,
    };
    let proxy_addr = listeners.proxy.local_addr()?;
    let admin_addr = listeners.admin.local_addr()?;
    let node = Node::new(config, options);
    let (trigger, shutdown) = shutdown::channel();
    let task = tokio::spawn(run(listeners, Arc::clone(&node), shutdown));
    Ok(Running {
        proxy_addr,
        tls_addr,
        admin_addr,
        node,
        trigger,
        task,
    })
}

/// Runs a node until `shutdown`, then drains.
pub async fn run(listeners: Listeners, node: Arc<Node>, shutdown: Shutdown) -> io::Result<()> {
    let proxy_listener = TcpListener::from_std(listeners.proxy)?;
    let keys = cluster_keys(&node).map_err(|e| io::Error::other(e.to_string()))?;
    let tls = match (listeners.proxy_tls, &node.started.node.listen_tls) {
        (_, None) => None,
        (listener, Some(listen_tls)) => {
            let listener = match listener {
                Some(listener) => listener,
                None => bind(listen_tls.value)?,
            };
            let config = edge::server_config(
                Arc::clone(&node.certificates),
                node.started.node.tls_groups.value.as_deref(),
                ticketer(&node, keys.as_ref())?,
            )
            .map_err(|e| io::Error::other(format!("TLS setup: {e}")))?;
            let listener = TcpListener::from_std(listener)?;
            let _ = node.admin.listen_tls.set(listener.local_addr()?);
            Some((listener, tokio_rustls::TlsAcceptor::from(config)))
        }
    };
    let admin_addr = listeners.admin.local_addr()?;
    let feed = match &node.started.node.feed {
        Some(settings) => {
            let dir = node.options.config_path.as_deref().and_then(Path::parent);
            let feed = feed::bind(settings, dir, &node.started.node.name.value, listeners.feed)
                .map_err(|e| io::Error::other(e.to_string()))?;
            tracing::info!(feed = %feed.addr, fingerprint = %feed.fingerprint, "feed listening (QUIC); clients pin this fingerprint");
            Some(feed)
        }
        None => None,
    };
    let mut tasks = Tasks::default();
    let membership = join_cluster(
        &node,
        keys,
        listeners.gossip,
        admin_addr,
        feed.as_ref(),
        &shutdown,
        &mut tasks,
    )
    .await
    .map_err(|e| io::Error::other(e.to_string()))?;
    if let Some(feed) = feed {
        feed::spawn(
            feed,
            membership.subscribe(),
            node.ctx.metrics.feed().clone(),
            shutdown.clone(),
            &mut tasks,
        );
    }
    crate::acme::spawn(
        Arc::clone(&node.acme),
        Arc::clone(&membership),
        Arc::clone(&node.certificates),
        Arc::clone(&node.ctx.metrics),
        node.started
            .cluster
            .as_ref()
            .map_or(Duration::ZERO, |c| c.gossip_interval * 10),
        shutdown.clone(),
        &mut tasks,
    );
    let _ = node.admin.membership.set(membership);
    let admin = spawn_admin(
        listeners.admin,
        Arc::clone(&node.admin),
        node.started.node.admin_max_connections.value,
        shutdown.clone(),
    )?;
    if let Some(path) = node.options.config_path.clone() {
        // The certificate files are read again on every reload too, even
        // when the configuration is what it was.
        let reloading = Arc::clone(&node);
        let reload = move || {
            reloading.reload_from_file();
            reloading.certificates().reread(crate::clock::now_unix());
        };
        reload::start(reload, path, shutdown.clone(), &mut tasks).await;
    }
    edge::rotation::spawn(Arc::clone(&node.certificates), shutdown.clone(), &mut tasks);
    spawn_access_log_reopen(&node.proxy, shutdown.clone(), &mut tasks);
    spawn_sweeper(Arc::clone(&node.ctx.pools), shutdown.clone(), &mut tasks);
    checks::supervise(
        Arc::clone(&node.checker),
        Arc::clone(&node.proxy),
        &node.ctx.changes,
        shutdown.clone(),
        &mut tasks,
    );
    spawn_runtime(&node, &shutdown, &mut tasks).await;
    board::spawn(
        Arc::clone(&node.board),
        Arc::clone(&node.proxy),
        &node.ctx.changes,
        shutdown.clone(),
        &mut tasks,
    );
    {
        let admin = Arc::clone(&node.admin);
        let mut shutdown = shutdown.clone();
        tasks.spawn("readiness", async move {
            shutdown.wait().await;
            admin
                .ready
                .store(false, std::sync::atomic::Ordering::Relaxed);
        });
    }
    node.admin
        .ready
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let limits = {
        let config = &node.started;
        let nofile = crate::resources::raise_fd_limit().unwrap_or(1024);
        let max_connections = config.node.max_connections.value.unwrap_or_else(|| {
            // The admin listener holds up to twice its limit for moments.
            crate::resources::default_max_connections(
                nofile,
                config.node.admin_max_connections.value.saturating_mul(2),
            )
        });
        tracing::info!(
            node = %config.node.name.value,
            listen = %proxy_listener.local_addr()?,
            listen_tls = node.admin.listen_tls.get().map(|a| a.to_string()),
            certificates = node.certificates.load().entries.len(),
            routes = node.config().routes.len(),
            max_connections,
            open_files_limit = nofile,
            "node serving"
        );
        server::ClientLimits {
            header: config.node.header_timeout.value,
            idle: config.node.idle_timeout.value,
            send: config.node.send_timeout.value,
            max_connections,
        }
    };
    server::serve(
        server::ProxyListeners {
            plain: proxy_listener,
            tls,
        },
        Arc::clone(&node.proxy),
        shutdown,
        node.options.drain,
        limits,
    )
    .await;
    tasks.join(TASKS_DEADLINE).await;
    tokio::task::spawn_blocking(move || admin.join())
        .await
        .map_err(io::Error::other)?
        .map_err(|_| io::Error::other("the admin thread panicked"))?;
    // The last lines of the access log, before the process ends (a
    // second at most: its writer never holds the node).
    if let Some(log) = node.proxy.access_log() {
        log.flush(Duration::from_secs(1));
    }
    tracing::info!("node stopped");
    Ok(())
}

/// The cluster keys, read once at start: gossip seals with them, the
/// edge derives its session tickets from them, and a reload replaces them
/// for both. `None` without a cluster or a key.
fn cluster_keys(node: &Node) -> Result<Option<Arc<ArcSwap<Keys>>>, gossip::ClusterError> {
    let Some(settings) = &node.started.cluster else {
        return Ok(None);
    };
    let dir = node.options.config_path.as_deref().and_then(Path::parent);
    Ok(gossip::keys::load(settings, dir)?.map(|keys| Arc::new(ArcSwap::from_pointee(keys))))
}

/// The edge's ticketer: from the cluster keys, so that a ticket resumes
/// on every node; from a key of this node's own without them.
fn ticketer(
    node: &Node,
    keys: Option<&Arc<ArcSwap<Keys>>>,
) -> io::Result<Arc<edge::tickets::Tickets>> {
    use edge::tickets::{Source, Tickets, WallClock};
    let no_randomness = || io::Error::other("TLS setup: the system gave no randomness");
    let source = match keys {
        Some(keys) => Source::Cluster(Arc::clone(keys)),
        None => Source::own().ok_or_else(no_randomness)?,
    };
    let clock = node
        .options
        .ticket_clock
        .clone()
        .unwrap_or_else(WallClock::system);
    Tickets::new(source, clock)
        .map(Arc::new)
        .ok_or_else(no_randomness)
}

/// Joins the configured cluster (or runs alone without one).
async fn join_cluster(
    node: &Arc<Node>,
    keys: Option<Arc<ArcSwap<Keys>>>,
    gossip: Option<std::net::UdpSocket>,
    admin: SocketAddr,
    feed: Option<&feed::Feed>,
    shutdown: &Shutdown,
    tasks: &mut Tasks,
) -> Result<Arc<Membership>, gossip::ClusterError> {
    let config = &node.started;
    let me = gossip::Me {
        info: picket_proto::NodeInfo {
            name: config.node.name.value.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            admin: admin.to_string(),
            feed: feed.map(|f| f.addr.to_string()),
            feed_fingerprint: feed.map(|f| f.fingerprint.clone()),
            runtime: config.runtime.kind.to_string(),
            started_unix_ms: crate::clock::now_unix_ms(),
        },
    };
    let wire = match (&node.options.gossip_transport, &config.cluster) {
        (Some(wire), _) => wire.clone(),
        (None, Some(settings)) => {
            let socket = match gossip {
                Some(socket) => socket,
                None => bind_udp(settings.gossip).map_err(|e| gossip::ClusterError::Gossip {
                    addr: settings.gossip,
                    message: e.to_string(),
                })?,
            };
            gossip::Wire::Udp(Arc::new(Mutex::new(Some(socket))))
        }
        (None, None) => gossip::Wire::Udp(Arc::new(Mutex::new(None))),
    };
    gossip::start(
        gossip::Joining {
            settings: config.cluster.as_ref(),
            keys,
            wire,
            me,
            verdicts: node.board.subscribe(),
            table: node.proxy.generation(),
            certificates: node.acme.subscribe(),
            metrics: Arc::clone(&node.ctx.metrics),
        },
        shutdown.clone(),
        tasks,
    )
    .await
}

/// Starts following the configured runtime, if any.
async fn spawn_runtime(node: &Arc<Node>, shutdown: &Shutdown, tasks: &mut Tasks) {
    let runtime = node.started.runtime.clone();
    if runtime.kind != RuntimeKind::None {
        spawn_declared(node, shutdown.clone(), tasks);
    }
    let link = Arc::new(Link::new(
        Arc::clone(&node.ctx.catalog),
        &runtime.breaker,
        Arc::clone(&node.board.runtime),
        Arc::clone(&node.ctx.changes),
        Arc::clone(&node.ctx.metrics),
    ));
    match runtime.kind {
        RuntimeKind::None => {}
        RuntimeKind::Docker => match docker::connect(runtime.endpoint.as_deref()) {
            Ok(client) => {
                let name = runtime
                    .endpoint
                    .clone()
                    .or_else(|| std::env::var("DOCKER_HOST").ok())
                    .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
                let engines = docker::Engines::new(Arc::clone(&link.catalog));
                tasks.spawn(
                    "docker",
                    docker::run(
                        docker::Engine {
                            gate: link.gates.get(&name),
                            name,
                            docker: client,
                        },
                        runtime.network.clone(),
                        engines,
                        link,
                        shutdown.clone(),
                    ),
                );
            }
            Err(error) => {
                tracing::error!(%error, "cannot reach the Docker engine; service routes have no replicas");
                link.silent("docker", &error);
            }
        },
        RuntimeKind::Swarm => {
            let engines = docker::Engines::new(Arc::clone(&link.catalog));
            swarm::spawn(
                runtime.proxies.clone(),
                runtime.network.clone(),
                engines,
                link,
                shutdown.clone(),
                tasks,
            );
        }
        RuntimeKind::Kubernetes => {
            let own = kube::namespace(&runtime);
            match kube::client(&runtime, &own, &link).await {
                Ok((client, gate)) => {
                    let watched = kube::watched(&runtime, &own);
                    kube::spawn(
                        client,
                        gate,
                        own,
                        runtime.ingress_class.clone(),
                        watched,
                        link,
                        shutdown.clone(),
                        tasks,
                    );
                }
                Err(error) => {
                    tracing::error!(%error, "no Kubernetes client; service routes have no replicas");
                    link.silent("kubernetes", &error);
                }
            }
        }
    }
}

/// The admin listener on a thread and runtime of its own.
fn spawn_admin(
    listener: std::net::TcpListener,
    state: Arc<AdminState>,
    max_connections: usize,
    shutdown: Shutdown,
) -> io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("picket-admin".into())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => status::serve(listener, state, max_connections, shutdown).await,
                    Err(error) => tracing::error!(%error, "admin listener unusable"),
                }
            });
        })
}

fn spawn_sweeper(pools: Arc<Pools>, mut shutdown: Shutdown, tasks: &mut Tasks) {
    tasks.spawn("pool sweeper", async move {
        let mut every = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = every.tick() => pools.sweep(),
                () = shutdown.wait() => return,
            }
        }
    });
}

/// Opens the access log file again on each SIGUSR1 (log rotation).
fn spawn_access_log_reopen(proxy: &Arc<Proxy>, mut shutdown: Shutdown, tasks: &mut Tasks) {
    if proxy.access_log().is_none() {
        return;
    }
    let Ok(mut usr1) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
    else {
        tracing::warn!("cannot listen for SIGUSR1: the access log is never reopened");
        return;
    };
    let proxy = Arc::clone(proxy);
    tasks.spawn("access log reopen", async move {
        loop {
            tokio::select! {
                Some(()) = usr1.recv() => {
                    if let Some(log) = proxy.access_log() {
                        log.reopen();
                    }
                }
                () = shutdown.wait() => return,
            }
        }
    });
}
