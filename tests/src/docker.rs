//! Containers on the machine's Docker engine, as a test's own hosts: its
//! own network, its own containers of the project's test upstream (in an
//! image built `FROM scratch` here, since nothing can be pulled), all
//! removed when dropped.

use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, UnixStream};
use tokio::task::JoinHandle;

/// The image of the test upstream, tagged `:1` and `:2` (two images of
/// one program, for a service running two versions). Both carry a
/// healthcheck (exec form: a scratch image has no shell) that containers
/// turn off unless they ask for one.
pub const IMAGE: &str = "picket-test-upstream";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `docker ARGS`; its stdout, trimmed, or why it failed.
pub fn docker(args: &[&str]) -> Result<String, String> {
    let output = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Whether a Docker engine answers here.
pub fn available() -> bool {
    crate::has_program("docker") && docker(&["info", "--format", "{{.ServerVersion}}"]).is_ok()
}

/// Builds the test upstream's images once per test process.
pub fn images() -> &'static str {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let binary = crate::binaries::test_upstream_static();
        let context = tempfile::tempdir().expect("a build context");
        std::fs::copy(&binary, context.path().join("upstream")).expect("copy the static binary");
        for version in ["1", "2"] {
            let dockerfile = format!(
                "FROM scratch\nCOPY upstream /upstream\nLABEL picket-test-version={version}\n\
                 HEALTHCHECK --interval=1s --timeout=1s --retries=1 CMD [\"/upstream\", \"--check\"]\n\
                 ENTRYPOINT [\"/upstream\"]\n"
            );
            std::fs::write(context.path().join("Dockerfile"), dockerfile).expect("write the Dockerfile");
            let tag = format!("{IMAGE}:{version}");
            let path = context.path().to_str().expect("UTF-8 path");
            docker(&["build", "-q", "-t", &tag, path]).expect("build the test image");
        }
    });
    IMAGE
}

/// How a verdict shows the test upstream's image `:version`: its tag and
/// the start of its image ID on this engine (`sha256:` and 12 hex digits).
pub fn image_label(version: &str) -> String {
    let tag = format!("{}:{version}", images());
    let id = docker(&["image", "inspect", "--format", "{{.Id}}", &tag]).expect("the image's ID");
    let start = id.get(..19).expect("a sha256 image ID");
    format!("{tag}@{start}")
}

/// A network of the test's own.
#[derive(Debug)]
pub struct Network {
    pub name: String,
}

impl Network {
    pub fn create() -> Network {
        Network::with_driver("bridge")
    }

    /// An overlay network, for Swarm services (the engine must be in a swarm).
    pub fn create_overlay() -> Network {
        Network::with_driver("overlay")
    }

    fn with_driver(driver: &str) -> Network {
        let name = format!(
            "picket-t{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        docker(&[
            "network",
            "create",
            "-d",
            driver,
            "--label",
            "picket-test=1",
            &name,
        ])
        .expect("create a test network");
        Network { name }
    }
}

/// The local engine in a swarm for the test's lifetime: made a one-node
/// swarm (on loopback) if it was in none, and taken out again when dropped.
#[derive(Debug)]
pub struct Swarm {
    made: bool,
}

impl Swarm {
    pub fn join() -> Swarm {
        let state = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"])
            .expect("the engine's swarm state");
        match state.as_str() {
            "active" => Swarm { made: false },
            "inactive" => {
                docker(&["swarm", "init", "--advertise-addr", "127.0.0.1"]).expect("swarm init");
                Swarm { made: true }
            }
            other => panic!("the engine's swarm is {other}"),
        }
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        if self.made {
            let _ = docker(&["swarm", "leave", "--force"]);
        }
    }
}

/// A Swarm service of the test upstream (`:1`, no healthcheck), removed
/// when dropped.
#[derive(Debug)]
pub struct Service {
    pub name: String,
}

impl Service {
    pub fn create(network: &Network, replicas: u32) -> Service {
        images();
        let name = format!("{}-{}", network.name, NEXT.fetch_add(1, Ordering::SeqCst));
        let replicas = replicas.to_string();
        let image = format!("{IMAGE}:1");
        docker(&[
            "service",
            "create",
            "-d",
            "--name",
            &name,
            "--network",
            &network.name,
            "--replicas",
            &replicas,
            "--no-healthcheck",
            "--label",
            "picket-test=1",
            &image,
            "--listen",
            "0.0.0.0:8080",
            "--name",
            &name,
        ])
        .expect("create a test service");
        Service { name }
    }

    pub fn scale(&self, replicas: u32) {
        docker(&[
            "service",
            "scale",
            "-d",
            &format!("{}={replicas}", self.name),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = docker(&["service", "rm", &self.name]);
        // The tasks' containers go after the service; the network only after them.
        for _ in 0..100 {
            let left = docker(&[
                "ps",
                "-aq",
                "--filter",
                &format!("label=com.docker.swarm.service.name={}", self.name),
            ]);
            if left.is_ok_and(|ids| ids.is_empty()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = docker(&["network", "rm", &self.name]);
    }
}

/// How a test container is started.
#[derive(Debug, Clone, Default)]
pub struct Spec<'a> {
    /// Its compose service label.
    pub service: &'a str,
    /// `:1` or `:2`.
    pub version: &'a str,
    /// A healthcheck: `Some(true)` one that passes, `Some(false)` one that
    /// fails, `None` none.
    pub healthy: Option<bool>,
}

/// A running test container.
#[derive(Debug)]
pub struct Container {
    pub name: String,
}

impl Container {
    /// Starts the test upstream on port 8080 of `network`, answering as its
    /// name.
    pub fn run(network: &Network, spec: &Spec<'_>) -> Container {
        images();
        let name = format!("{}-{}", network.name, NEXT.fetch_add(1, Ordering::SeqCst));
        let label = format!("com.docker.compose.service={}", spec.service);
        let image = format!(
            "{IMAGE}:{}",
            if spec.version.is_empty() {
                "1"
            } else {
                spec.version
            }
        );
        let mut args: Vec<String> = [
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            &network.name,
            "--label",
            &label,
            "--label",
            "picket-test=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // A passing check connects to the upstream itself; a failing one to a closed port.
        match spec.healthy {
            None => args.push("--no-healthcheck".into()),
            Some(true) => {}
            Some(false) => args.extend(["-e".into(), "PICKET_TEST_CHECK=127.0.0.1:9".into()]),
        }
        args.extend([
            image,
            "--listen".into(),
            "0.0.0.0:8080".into(),
            "--name".into(),
            name.clone(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&args).expect("run a test container");
        Container { name }
    }

    fn act(&self, action: &str) {
        docker(&[action, &self.name]).unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn stop(&self) {
        docker(&["stop", "-t", "0", &self.name]).unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn start(&self) {
        self.act("start");
    }

    pub fn kill(&self) {
        self.act("kill");
    }

    pub fn pause(&self) {
        self.act("pause");
    }

    pub fn unpause(&self) {
        self.act("unpause");
    }

    /// Its address on its network, while it runs.
    pub fn ip(&self) -> Option<IpAddr> {
        docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &self.name,
        ])
        .ok()?
        .parse()
        .ok()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.name]);
    }
}

/// The Picket image of `deploy/Dockerfile`, built once per test process
/// around a static `picket`; returns its tag.
pub fn picket_image() -> &'static str {
    const TAG: &str = "picket:test";
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let binary = crate::binaries::picket_static();
        let context = tempfile::tempdir().expect("a build context");
        std::fs::copy(&binary, context.path().join("picket")).expect("copy the static binary");
        let dockerfile =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/Dockerfile");
        std::fs::copy(&dockerfile, context.path().join("Dockerfile")).expect("copy the Dockerfile");
        let path = context.path().to_str().expect("UTF-8 path");
        docker(&["build", "-q", "-t", TAG, path]).expect("build the Picket image");
    });
    TAG
}

/// A TCP relay to the engine's socket that the test can cut and restore:
/// the node's only way to the engine.
#[derive(Debug)]
pub struct Relay {
    pub port: u16,
    accepting: Option<JoinHandle<()>>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    pub async fn start() -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let port = listener.local_addr().expect("relay address").port();
        let mut relay = Relay {
            port,
            accepting: None,
            connections: Arc::default(),
        };
        relay.accept(listener);
        relay
    }

    fn accept(&mut self, listener: TcpListener) {
        let connections = Arc::clone(&self.connections);
        self.accepting = Some(tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let task = tokio::spawn(async move {
                    if let Ok(mut engine) = UnixStream::connect("/var/run/docker.sock").await {
                        let _ = copy_bidirectional(&mut client, &mut engine).await;
                    }
                });
                connections.lock().expect("relay connections").push(task);
            }
        }));
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&mut self) {
        if let Some(task) = self.accepting.take() {
            task.abort();
        }
        for task in self
            .connections
            .lock()
            .expect("relay connections")
            .drain(..)
        {
            task.abort();
        }
    }

    pub async fn restore(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("bind the relay again");
        self.accept(listener);
    }
}

impl Relay {
    /// The endpoint a node's `[runtime] endpoint` names.
    pub fn endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }
}
