//! The `picket` command: run a node, check a configuration, or try the demo.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use picket::config::{Config, Overrides};
use picket::node::{self, Listeners, Node, Options};
use picket::{demo, shutdown, socket_proxy};

/// The allocator: jemalloc, whose background thread gives memory that
/// has stayed free back to the system (`dirty_decay_ms`, 10 s). With
/// glibc's, the memory a flood of connections took stayed with the node
/// after they closed (`tests/bench/flood_memory.sh`): freed in the middle
/// of its heaps, it could never be trimmed.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Picket: an HTTP gateway that runs as a cluster, one node per machine.
///
/// Each node proxies traffic, bounds how long it waits for every upstream,
/// and keeps replicas that fail to connect out of its own rotation.
#[derive(Debug, Parser)]
#[command(name = "picket", version, after_help = ENVIRONMENT)]
struct Cli {
    /// Log format: `human` lines, or one JSON object per line.
    #[arg(long, global = true, env = "PICKET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,

    /// Which logs to write, in tracing's filter syntax: `info`, `debug`,
    /// `picket=debug,hyper=info`. rustls and quinn_proto are held to errors
    /// unless named: their warnings are per connection or packet, and a
    /// client causes them at will.
    #[arg(long, global = true, env = "PICKET_LOG", default_value = "info", value_parser = log_filter)]
    log: String,

    #[command(subcommand)]
    command: Command,
}

/// Every environment variable the binary reads, for `--help`.
const ENVIRONMENT: &str = "\
Environment:
  PICKET_CONFIG                      run: the configuration file (--config)
  PICKET_NODE_NAME                   the node's name (--name)
  PICKET_LISTEN, PICKET_LISTEN_TLS   where the proxy listens, plain and HTTPS
  PICKET_ADMIN                       the status API and metrics (--admin)
  PICKET_ADVERTISE                   the gossip address peers reach (--advertise)
  PICKET_WORKERS                     threads serving traffic (--workers)
  PICKET_ACCESS_LOG                  \"stdout\", \"off\" or a file (--access-log)
  PICKET_CLUSTER_KEY                 the cluster key(s), instead of [cluster] key_file
  PICKET_RUNTIME_BREAKER_THRESHOLD, PICKET_RUNTIME_BREAKER_COOLDOWN,
  PICKET_RUNTIME_BREAKER_DISABLED    the breaker in front of runtime APIs
  PICKET_LOG, PICKET_LOG_FORMAT      which logs, and how (--log, --log-format)
  SSL_CERT_FILE                      extra CA certificates for https:// upstreams (--extra-ca)
  HTTP_PROXY, HTTPS_PROXY, NO_PROXY  forward proxies for external hosts (lower case too)
  DOCKER_HOST                        the Docker engine, without [runtime] endpoint
  POD_NAMESPACE                      Kubernetes: the namespace, without [runtime] namespace
  KUBECONFIG, KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT
                                     Kubernetes: the API server, without [runtime] api
  PICKET_SOCKET_PROXY_LISTEN, PICKET_DOCKER_SOCKET, PICKET_SOCKET_PROXY_HEADER_TIMEOUT,
  PICKET_SOCKET_PROXY_IDLE_TIMEOUT, PICKET_SOCKET_PROXY_MAX_CONNECTIONS,
  PICKET_SOCKET_PROXY_WORKERS        socket-proxy: its flags

A flag wins over its variable; both win over the configuration file.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a node on a configuration file; reloads it when it changes and on SIGHUP.
    Run {
        /// The TOML configuration file.
        #[arg(short, long, env = "PICKET_CONFIG")]
        config: PathBuf,
        #[command(flatten)]
        node: NodeFlags,
    },
    /// Validate a configuration file and print the effective configuration,
    /// with every inherited value and where it came from.
    Check {
        /// The TOML configuration file.
        file: PathBuf,
        #[command(flatten)]
        node: NodeFlags,
    },
    /// A read-only proxy of the local Docker engine for the Picket nodes of
    /// a swarm: GET of allow-listed paths only, everything else 403.
    SocketProxy {
        /// Where the proxy listens.
        #[arg(
            long,
            env = "PICKET_SOCKET_PROXY_LISTEN",
            default_value = "0.0.0.0:2375"
        )]
        listen: SocketAddr,
        /// The engine's socket.
        #[arg(
            long,
            env = "PICKET_DOCKER_SOCKET",
            default_value = "/var/run/docker.sock"
        )]
        socket: PathBuf,
        /// Time a client has to send a complete request head (from accept
        /// for its first request); past it the connection is closed.
        #[arg(
            long,
            env = "PICKET_SOCKET_PROXY_HEADER_TIMEOUT",
            value_parser = positive_duration,
            default_value_t = humantime::Duration::from(socket_proxy::Bounds::DEFAULT.header_read)
        )]
        header_timeout: humantime::Duration,
        /// Time a kept-alive connection may wait between requests. A
        /// response in progress, such as the event stream, is never cut.
        #[arg(
            long,
            env = "PICKET_SOCKET_PROXY_IDLE_TIMEOUT",
            value_parser = positive_duration,
            default_value_t = humantime::Duration::from(socket_proxy::Bounds::DEFAULT.idle)
        )]
        idle_timeout: humantime::Duration,
        /// Connections open at once. At the limit the proxy stops accepting
        /// until one closes; further clients wait in the listen backlog.
        #[arg(
            long,
            env = "PICKET_SOCKET_PROXY_MAX_CONNECTIONS",
            default_value_t = socket_proxy::Bounds::DEFAULT.max_connections
        )]
        max_connections: NonZeroUsize,
        /// Threads serving the proxy.
        #[arg(
            long,
            env = "PICKET_SOCKET_PROXY_WORKERS",
            default_value_t = 2,
            value_parser = clap::value_parser!(u16).range(1..=64)
        )]
        workers: u16,
    },
    /// Ask a node's admin listener for `/healthz`: exit 0 when it answers
    /// 200 within 2 s. For container health checks (an image `FROM
    /// scratch` has no curl).
    Health {
        /// The node's admin listener; `0.0.0.0` means this machine.
        #[arg(long, env = "PICKET_ADMIN", default_value = "127.0.0.1:9900")]
        admin: SocketAddr,
    },
    /// Print a fresh random cluster key (base64 of 32 bytes), for
    /// `[cluster] key_file` or PICKET_CLUSTER_KEY.
    GenKey,
    /// Run a three-node cluster on loopback with demo upstreams in the same
    /// process: three healthy replicas on `/`, a slow one on `/slow`, a
    /// refusing one on `/refused`; node 3 sees `/` differently.
    Demo {
        /// Where node 1's proxy listens; nodes 2 and 3 take the next ports.
        #[arg(long, env = "PICKET_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Where node 1's status API listens; nodes 2 and 3 take the next ports.
        #[arg(long, env = "PICKET_ADMIN", default_value = "127.0.0.1:9900")]
        admin: SocketAddr,
        /// Where node 1's gossip listens (UDP); nodes 2 and 3 take the next
        /// ports. Not 7946, which a Docker engine in a swarm holds.
        #[arg(long, default_value = "127.0.0.1:17946")]
        gossip: SocketAddr,
        /// Where node 1's QUIC feed listens; nodes 2 and 3 take the next ports.
        #[arg(long, default_value = "127.0.0.1:9901")]
        feed: SocketAddr,
    },
    /// Watch the cluster from a node's feed: `picket-tui`, built in, so that
    /// an image holding this one binary has both (`picket tui --help`).
    #[command(disable_help_flag = true)]
    Tui {
        /// `picket-tui`'s arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

/// Per-deployment settings; each wins over the configuration file.
#[derive(Debug, Args)]
struct NodeFlags {
    /// The node's name (default: the file's `[node] name`, else the hostname).
    #[arg(long, env = "PICKET_NODE_NAME")]
    name: Option<String>,
    /// Where the proxy listens (default: the file's `[node] listen`, else 0.0.0.0:8080).
    #[arg(long, env = "PICKET_LISTEN")]
    listen: Option<SocketAddr>,
    /// Where the proxy serves HTTPS (default: the file's `[node]
    /// listen_tls`, else nowhere); needs a `[[certificate]]`.
    #[arg(long, env = "PICKET_LISTEN_TLS")]
    listen_tls: Option<SocketAddr>,
    /// Where `/healthz`, `/readyz` and `/metrics` listen (default: the file's
    /// `[node] admin`, else 127.0.0.1:9900).
    #[arg(long, env = "PICKET_ADMIN")]
    admin: Option<SocketAddr>,
    /// The address peers reach this node's gossip at (default: the file's
    /// `[cluster] advertise`, else derived).
    #[arg(long, env = "PICKET_ADVERTISE")]
    advertise: Option<SocketAddr>,
    /// Threads serving proxied traffic (default: the file's `[node] workers`,
    /// else one per CPU).
    #[arg(long, env = "PICKET_WORKERS", value_parser = clap::value_parser!(u16).range(picket::config::WORKERS_RANGE))]
    workers: Option<u16>,
    /// A PEM file of extra CA certificates trusted for `https://` upstreams,
    /// besides the Mozilla roots built in (default: SSL_CERT_FILE, when
    /// set). Read by hand rather than bound by clap: a machine-wide
    /// SSL_CERT_FILE would show in every usage line as if it were asked for.
    #[arg(long)]
    extra_ca: Option<PathBuf>,
    /// Consecutive unanswered calls that open a runtime API endpoint's
    /// breaker (default: the file's `[runtime] breaker.failures`, else 2).
    /// Once named `--runtime-breaker-threshold`, which still works.
    #[arg(long, alias = "runtime-breaker-threshold", env = "PICKET_RUNTIME_BREAKER_FAILURES", value_parser = clap::value_parser!(u32).range(picket::config::RUNTIME_BREAKER_FAILURES_RANGE))]
    runtime_breaker_failures: Option<u32>,
    /// `PICKET_RUNTIME_BREAKER_THRESHOLD`, the variable's name before the
    /// runtime breaker's `threshold` became `failures` as the route
    /// breaker's is: still read, the new name winning.
    #[arg(long = "legacy-runtime-breaker-threshold", hide = true, env = "PICKET_RUNTIME_BREAKER_THRESHOLD", value_parser = clap::value_parser!(u32).range(picket::config::RUNTIME_BREAKER_FAILURES_RANGE))]
    legacy_runtime_breaker_threshold: Option<u32>,
    /// How long an open runtime breaker refuses every call, as "30s"
    /// (default: the file's `[runtime] breaker.cooldown`, else 30s).
    #[arg(long, env = "PICKET_RUNTIME_BREAKER_COOLDOWN", value_parser = runtime_breaker_cooldown)]
    runtime_breaker_cooldown: Option<std::time::Duration>,
    /// Where each request's line goes: "stdout", "off" or a file (default:
    /// the file's `[node] access_log`, else stdout).
    #[arg(long, env = "PICKET_ACCESS_LOG", value_parser = access_log_target)]
    access_log: Option<picket::config::AccessLogTarget>,
    /// No breaker in front of runtime API endpoints (true/false, 1/0, yes/no, on/off).
    #[arg(long, env = "PICKET_RUNTIME_BREAKER_DISABLED", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true")]
    runtime_breaker_disabled: Option<bool>,
}

/// `--access-log`: "stdout", "off", or a file.
fn access_log_target(text: &str) -> Result<picket::config::AccessLogTarget, String> {
    use picket::config::AccessLogTarget;
    Ok(match text {
        "stdout" => AccessLogTarget::Stdout,
        "off" => AccessLogTarget::Off,
        "" => return Err("\"stdout\", \"off\" or a file's path".into()),
        path => AccessLogTarget::File(PathBuf::from(path)),
    })
}

/// The arguments for `picket-tui` when this run is one: the binary called
/// `picket-tui` (a link to it), or `picket tui …`.
fn tui_args(args: impl IntoIterator<Item = OsString>) -> Option<Vec<OsString>> {
    let args: Vec<OsString> = args.into_iter().collect();
    let program = args.first()?;
    let called = std::path::Path::new(program)
        .file_name()
        .is_some_and(|name| name == "picket-tui");
    if called {
        return Some(args);
    }
    (args.get(1)? == "tui").then(|| {
        std::iter::once(OsString::from("picket tui"))
            .chain(args.into_iter().skip(2))
            .collect()
    })
}

/// A runtime breaker cool-down within its bounds: a duration (`2m`,
/// `120s`), or a bare number of seconds (`120`), as operators write it in
/// an environment variable.
fn runtime_breaker_cooldown(text: &str) -> Result<std::time::Duration, String> {
    let (min, max) = picket::config::RUNTIME_BREAKER_COOLDOWN_RANGE;
    let value = match text.trim().parse::<u64>() {
        Ok(seconds) => std::time::Duration::from_secs(seconds),
        Err(_) => humantime::parse_duration(text).map_err(|e| e.to_string())?,
    };
    if value < min || value > max {
        return Err(format!(
            "{text} is out of range: {} to {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(value)
}

impl NodeFlags {
    fn overrides(&self) -> Overrides {
        Overrides {
            name: self.name.clone(),
            listen: self.listen,
            listen_tls: self.listen_tls,
            admin: self.admin,
            workers: self.workers.map(usize::from),
            advertise: self.advertise,
            runtime_breaker_failures: self
                .runtime_breaker_failures
                .or(self.legacy_runtime_breaker_threshold),
            runtime_breaker_cooldown: self.runtime_breaker_cooldown,
            runtime_breaker_disabled: self.runtime_breaker_disabled,
            access_log: self.access_log.clone(),
        }
    }
}

fn main() -> ExitCode {
    // `picket tui …`, or this binary under the name `picket-tui`: the
    // terminal view, before any logging is set up (its screen is the
    // terminal).
    if let Some(args) = tui_args(std::env::args_os()) {
        return picket_tui::cli::main(args);
    }
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log);
    let result = match cli.command {
        Command::Check { file, node } => return check(&file, &node),
        Command::Run { config, node } => run(config, &node),
        Command::Demo {
            listen,
            admin,
            gossip,
            feed,
        } => run_demo(demo::Ports {
            proxy: listen,
            admin,
            gossip,
            feed,
        }),
        Command::SocketProxy {
            listen,
            socket,
            header_timeout,
            idle_timeout,
            max_connections,
            workers,
        } => run_socket_proxy(
            listen,
            socket,
            socket_proxy::Bounds {
                header_read: header_timeout.into(),
                idle: idle_timeout.into(),
                max_connections,
            },
            usize::from(workers),
        ),
        Command::Health { admin } => health(admin),
        Command::Tui { args } => {
            return picket_tui::cli::main(
                std::iter::once(OsString::from("picket tui")).chain(args),
            );
        }
        Command::GenKey => match picket::gossip::keys::generate() {
            Some(key) => {
                println!("{key}");
                Ok(())
            }
            None => Err(anyhow::anyhow!("no randomness available for a key")),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("picket: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Libraries that warn once per connection or packet about what a client
/// sent (rustls: an IP address as SNI; quinn-proto, under the feed: a
/// packet that fails to decrypt): a client could write the log at will,
/// so they are held to errors unless the filter names them.
const CLIENT_DRIVEN: &[&str] = &["rustls", "quinn_proto"];

/// The filter `text` asks for, with [`CLIENT_DRIVEN`] libraries held to
/// errors where it does not name them; an error when it is not a filter.
fn log_filter(text: &str) -> Result<String, String> {
    let mut directives = text.trim().to_string();
    for library in CLIENT_DRIVEN {
        let named = text
            .split(',')
            .any(|d| d.trim().split(['=', ':', '[']).next() == Some(*library));
        if !named {
            if !directives.is_empty() {
                directives.push(',');
            }
            directives.push_str(library);
            directives.push_str("=error");
        }
    }
    tracing_subscriber::EnvFilter::try_new(&directives)
        .map(|_| directives)
        .map_err(|e| format!("{text:?} is not a log filter: {e}"))
}

fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::new(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        // Values from outside (labels, names, headers) never break a line.
        LogFormat::Human => builder.fmt_fields(picket::logging::EscapedFields).init(),
        LogFormat::Json => builder.json().with_current_span(false).init(),
    }
}

fn check(file: &std::path::Path, flags: &NodeFlags) -> ExitCode {
    match Config::load(file) {
        Ok(mut config) => {
            config.apply(&flags.overrides());
            if let Some(problem) = config.edge_problem() {
                eprintln!("{problem}");
                return ExitCode::FAILURE;
            }
            print!("{}", picket::config::render(&config));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: PathBuf, flags: &NodeFlags) -> anyhow::Result<()> {
    let mut config = Config::load(&path)?;
    let overrides = flags.overrides();
    config.apply(&overrides);
    if let Some(problem) = config.edge_problem() {
        anyhow::bail!(problem);
    }
    if let picket::config::AccessLogTarget::File(path) = &config.node.access_log.value {
        picket::access::open(path)
            .with_context(|| format!("opening the access log {}", path.display()))?;
    }
    let proxy_env = picket::upstream::ProxyEnv::from_env();
    if let Some(env) = &proxy_env {
        let at = |proxy: Option<&picket::upstream::ForwardProxy>| {
            proxy.map_or("none".to_string(), |p| p.target.authority())
        };
        tracing::info!(
            http = at(env.http.as_ref()),
            https = at(env.https.as_ref()),
            no_proxy = env.no_proxy.join(","),
            "external hosts are reached through forward proxies"
        );
    }
    let options = Options {
        config_path: Some(path),
        overrides,
        tls: picket::tls::client_config(
            flags
                .extra_ca
                .clone()
                .or_else(|| std::env::var_os("SSL_CERT_FILE").map(PathBuf::from))
                .as_deref(),
        )?,
        drain: node::DEFAULT_DRAIN,
        proxy_env,
        gossip_transport: None,
        ticket_clock: None,
    };
    runtime(config.node.workers.value)?.block_on(serve(config, options))
}

/// `picket health`: one GET of `/healthz`, bounded.
fn health(admin: SocketAddr) -> anyhow::Result<()> {
    use std::io::Write as _;
    let addr = if admin.ip().is_unspecified() {
        SocketAddr::new(
            if admin.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            },
            admin.port(),
        )
    } else {
        admin
    };
    let wait = std::time::Duration::from_secs(2);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, wait)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(wait))?;
    stream.set_write_timeout(Some(wait))?;
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let line = status_line(&mut stream)?;
    let line = String::from_utf8_lossy(&line);
    match line.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        other => Err(anyhow::anyhow!(
            "{addr}/healthz answered {}",
            other.unwrap_or("nothing")
        )),
    }
}

/// The status line of an answer, however the stream cuts it: read until
/// its end of line, the end of the stream, or [`STATUS_LINE_MAX`] bytes.
fn status_line(stream: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    while line.len() < STATUS_LINE_MAX && !line.contains(&b'\n') {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        line.extend_from_slice(&buf[..n]);
    }
    if let Some(end) = line.iter().position(|&b| b == b'\n') {
        line.truncate(end);
    }
    Ok(line)
}

/// The longest status line `picket health` reads.
const STATUS_LINE_MAX: usize = 1024;

fn run_demo(first: demo::Ports) -> anyhow::Result<()> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    // A key of the demo's own, for the demo's lifetime.
    let key = tempfile_key()?;
    let result = runtime(workers)?.block_on(async {
        let upstreams = demo::start_upstreams().await?;
        let (trigger, shutdown) = shutdown::channel();
        let mut nodes = Vec::new();
        for i in 0..3 {
            let ports = demo::ports(first, i);
            let config = Config::parse(
                &format!("demo-{}", i + 1),
                &demo::config_text(&upstreams, i, first, &key.0),
            )?;
            // A busy port is named with the flag that moves it.
            let busy = |what: &str, flag: &str, addr: SocketAddr| {
                format!("demo node {}: binding its {what} on {addr}; `{flag}` moves node 1's (the others take the next ports)", i + 1)
            };
            let listeners = Listeners::bind(ports.proxy, ports.admin)
                .with_context(|| {
                    format!(
                        "{} or its status API on {}; `--admin` moves that",
                        busy("proxy", "--listen", ports.proxy),
                        ports.admin
                    )
                })?
                .with_gossip(ports.gossip)
                .with_context(|| busy("gossip (UDP)", "--gossip", ports.gossip))?
                .with_feed(ports.feed)
                .with_context(|| busy("QUIC feed (UDP)", "--feed", ports.feed))?;
            let options = Options {
                config_path: None,
                overrides: Overrides::default(),
                tls: picket::tls::client_config(None)?,
                drain: std::time::Duration::from_secs(1),
                proxy_env: None,
                gossip_transport: None,
        ticket_clock: None,
            };
            let node = Node::new(config, options);
            nodes.push(tokio::spawn(node::run(listeners, node, shutdown.clone())));
        }
        println!("{}", demo::banner(first));
        wait_for_stop_signal().await;
        trigger.fire();
        for node in nodes {
            node.await??;
        }
        Ok(())
    });
    drop(key);
    result
}

/// A cluster key in a file of its own, removed when dropped.
struct TempKey(PathBuf);

impl Drop for TempKey {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tempfile_key() -> anyhow::Result<TempKey> {
    let key = picket::gossip::keys::generate().context("no randomness for a demo key")?;
    let path = std::env::temp_dir().join(format!("picket-demo-{}.key", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    std::io::Write::write_all(&mut file, format!("{key}\n").as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(TempKey(path))
}

/// A duration of more than zero: a zero timeout would close every
/// connection at once.
fn positive_duration(text: &str) -> Result<humantime::Duration, String> {
    match text.parse::<humantime::Duration>() {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("must be more than zero".to_string()),
        Err(error) => Err(format!("{error} (a duration such as `30s` or `2m`)")),
    }
}

fn run_socket_proxy(
    listen: SocketAddr,
    socket: PathBuf,
    bounds: socket_proxy::Bounds,
    workers: usize,
) -> anyhow::Result<()> {
    runtime(workers)?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        tracing::info!(
            %listen,
            socket = %socket.display(),
            header_timeout = ?bounds.header_read,
            idle_timeout = ?bounds.idle,
            max_connections = bounds.max_connections,
            workers,
            "socket proxy serving, read-only"
        );
        let (trigger, shutdown) = shutdown::channel();
        tokio::spawn(async move {
            wait_for_stop_signal().await;
            trigger.fire();
        });
        socket_proxy::serve(
            listener,
            socket_proxy::SocketProxy::new(socket, bounds),
            shutdown,
        )
        .await;
        Ok(())
    })
}

fn runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // One worker: a single-threaded scheduler, nothing to steal or
    // synchronise. More: tokio's work-stealing scheduler.
    let mut builder = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers);
        builder
    };
    builder.thread_name("picket-worker").enable_all().build()
}

/// Runs a node until SIGINT or SIGTERM, then drains.
async fn serve(config: Config, options: Options) -> anyhow::Result<()> {
    let mut listeners = Listeners::bind(config.node.listen.value, config.node.admin.value)?;
    if let Some(listen_tls) = &config.node.listen_tls {
        listeners = listeners.with_tls(listen_tls.value)?;
    }
    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(async move {
        wait_for_stop_signal().await;
        tracing::info!("stop signal received; draining");
        trigger.fire();
    });
    let node: Arc<Node> = Node::new(config, options);
    node::run(listeners, node, shutdown)
        .await
        .context("node failed")
}

async fn wait_for_stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{OsString, STATUS_LINE_MAX, log_filter, status_line, tui_args};

    /// A stream that gives `chunk` bytes at a time.
    struct Trickle<'a> {
        rest: &'a [u8],
        chunk: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.chunk.min(buf.len()).min(self.rest.len());
            buf[..n].copy_from_slice(&self.rest[..n]);
            self.rest = &self.rest[n..];
            Ok(n)
        }
    }

    #[test]
    fn health_reads_the_status_line_however_it_is_cut() {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        for chunk in 1..answer.len() {
            let mut stream = Trickle {
                rest: answer,
                chunk,
            };
            let line = status_line(&mut stream).unwrap();
            assert_eq!(line, b"HTTP/1.1 200 OK\r", "{chunk} bytes a read");
        }
        // An endless line stops at the bound.
        let long = vec![b'x'; 10 * STATUS_LINE_MAX];
        let mut stream = Trickle {
            rest: &long,
            chunk: 100,
        };
        let line = status_line(&mut stream).unwrap();
        assert!(line.len() >= STATUS_LINE_MAX && line.len() < STATUS_LINE_MAX + 256);
        // Nothing at all is an empty line, not a wait.
        let mut stream = Trickle {
            rest: b"",
            chunk: 1,
        };
        assert!(status_line(&mut stream).unwrap().is_empty());
    }

    fn args(all: &[&str]) -> Vec<OsString> {
        all.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_terminal_view_runs_as_a_subcommand_or_under_its_own_name() {
        assert_eq!(
            tui_args(args(&["/picket", "tui", "--once", "127.0.0.1:9901"])),
            Some(args(&["picket tui", "--once", "127.0.0.1:9901"]))
        );
        assert_eq!(
            tui_args(args(&["/usr/local/bin/picket-tui", "--help"])),
            Some(args(&["/usr/local/bin/picket-tui", "--help"]))
        );
        assert_eq!(tui_args(args(&["picket", "run"])), None);
        // Only the first argument names the subcommand.
        assert_eq!(tui_args(args(&["picket", "check", "tui"])), None);
        assert_eq!(tui_args(args(&["picket"])), None);
        assert_eq!(tui_args(Vec::new()), None);
    }

    #[test]
    fn client_driven_libraries_are_held_to_errors_unless_named() {
        const HELD: &str = "rustls=error,quinn_proto=error";
        assert_eq!(log_filter("info"), Ok(format!("info,{HELD}")));
        assert_eq!(
            log_filter("picket=debug,hyper=info"),
            Ok(format!("picket=debug,hyper=info,{HELD}"))
        );
        assert_eq!(log_filter(""), Ok(HELD.to_string()));
        assert_eq!(
            log_filter("rustls=debug").as_deref(),
            Ok("rustls=debug,quinn_proto=error")
        );
        assert_eq!(
            log_filter("info,rustls::server=warn,quinn_proto[x]=warn").as_deref(),
            Ok("info,rustls::server=warn,quinn_proto[x]=warn")
        );
        // A library whose name starts with rustls' is not rustls.
        assert_eq!(
            log_filter("rustls_pemfile=debug"),
            Ok(format!("rustls_pemfile=debug,{HELD}"))
        );
    }

    #[test]
    fn a_filter_that_is_none_is_refused() {
        let error = log_filter("info,picket=loud").unwrap_err();
        assert!(
            error.contains("\"info,picket=loud\" is not a log filter"),
            "{error}"
        );
    }
}
