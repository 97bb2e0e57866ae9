//! Containers on the machine's Docker engine, as a test's own hosts: its
//! own network, its own containers of the project's test upstream (in an
//! image built `FROM scratch` here, since nothing can be pulled), all
//! removed when dropped.

use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, UnixStream};
use tokio::task::JoinHandle;

/// The repository of the test upstream's images, tagged `t<pid>-1` and
/// `t<pid>-2` (two images of one program, for a service running two
/// versions). Both carry a healthcheck (exec form: a scratch image has no
/// shell) that containers turn off unless they ask for one.
const UPSTREAM: &str = "picket-test-upstream";
/// The repository of the Picket image of `deploy/Dockerfile` as tests build
/// it, tagged `t<pid>`.
const PICKET: &str = "picket-test";

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

/// The images this test process built, and how many holds are on them.
struct Built {
    holds: usize,
    tags: Vec<String>,
}

static BUILT: Mutex<Built> = Mutex::new(Built {
    holds: 0,
    tags: Vec::new(),
});

fn built() -> std::sync::MutexGuard<'static, Built> {
    BUILT.lock().unwrap_or_else(|e| e.into_inner())
}

/// A hold on the images of this test process, under tags of its own: built
/// on the first hold, removed from the engine when the last hold is let go
/// (containers and services hold one while they exist).
#[derive(Debug)]
pub struct Images(());

impl Images {
    /// Holds the test upstream's images, building them if no one holds them.
    pub fn hold() -> Images {
        let mut built = built();
        if built.holds == 0 {
            build_upstream_images(&mut built);
        }
        built.holds += 1;
        Images(())
    }

    /// The test upstream's image `version` (`"1"` or `"2"`).
    pub fn upstream(&self, version: &str) -> String {
        format!("{UPSTREAM}:t{}-{version}", std::process::id())
    }

    /// How a verdict shows the test upstream's image `version`: its tag and
    /// the start of its image ID on this engine (`sha256:` and 12 hex
    /// digits).
    pub fn label(&self, version: &str) -> String {
        let tag = self.upstream(version);
        let id =
            docker(&["image", "inspect", "--format", "{{.Id}}", &tag]).expect("the image's ID");
        let start = id.get(..19).expect("a sha256 image ID");
        format!("{tag}@{start}")
    }

    /// The Picket image of `deploy/Dockerfile`, around the static `picket`
    /// binary (the terminal view built in); built on first use.
    pub fn picket(&self) -> String {
        let tag = format!("{PICKET}:t{}", std::process::id());
        let mut built = built();
        if !built.tags.contains(&tag) {
            let context = tempfile::tempdir().expect("a build context");
            std::fs::copy(crate::binaries::picket(), context.path().join("picket"))
                .expect("copy the static binary");
            let dockerfile =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/Dockerfile");
            std::fs::copy(&dockerfile, context.path().join("Dockerfile"))
                .expect("copy the Dockerfile");
            // The ACME cache's mount point, as deploy/build-image.sh makes it.
            {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(context.path().join("acme"))
                    .expect("the ACME cache's directory");
            }
            let path = context.path().to_str().expect("UTF-8 path");
            docker(&["build", "-q", "-t", &tag, path]).expect("build the Picket image");
            built.tags.push(tag.clone());
        }
        tag
    }
}

fn build_upstream_images(built: &mut Built) {
    let binary = crate::binaries::test_upstream();
    let context = tempfile::tempdir().expect("a build context");
    std::fs::copy(&binary, context.path().join("upstream")).expect("copy the static binary");
    for version in ["1", "2"] {
        let dockerfile = format!(
            "FROM scratch\nCOPY upstream /upstream\nLABEL picket-test-version={version}\n\
             HEALTHCHECK --interval=1s --timeout=1s --retries=1 CMD [\"/upstream\", \"--check\"]\n\
             ENTRYPOINT [\"/upstream\"]\n"
        );
        std::fs::write(context.path().join("Dockerfile"), dockerfile)
            .expect("write the Dockerfile");
        let tag = format!("{UPSTREAM}:t{}-{version}", std::process::id());
        let path = context.path().to_str().expect("UTF-8 path");
        docker(&["build", "-q", "-t", &tag, path]).expect("build the test image");
        built.tags.push(tag);
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        let mut built = built();
        built.holds -= 1;
        if built.holds == 0 {
            // A service's task containers may outlive it by a moment.
            for tag in std::mem::take(&mut built.tags) {
                let mut tries = 0;
                while let Err(error) = docker(&["rmi", &tag]) {
                    tries += 1;
                    if tries == 40 {
                        eprintln!("removing the test image {tag}: {error}");
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(250));
                }
            }
        }
    }
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
        let mut args = vec![
            "network",
            "create",
            "-d",
            driver,
            "--label",
            "picket-test=1",
        ];
        // A container of the test's own may join a Swarm service's network.
        if driver == "overlay" {
            args.push("--attachable");
        }
        args.push(&name);
        docker(&args).expect("create a test network");
        Network { name }
    }
}

/// The label a test puts on the node of a swarm it made.
const SWARM_LABEL: &str = "picket-test-swarm";

/// Holds on the swarm this test process made, and the networks the engine
/// had before: those it adds (`docker_gwbridge`) go with the swarm.
static SWARM: Mutex<(usize, Vec<String>)> = Mutex::new((0, Vec::new()));

/// A hold on a one-node swarm (on loopback) that the tests made: made on
/// the first hold, left, with the bridge network the engine made for it,
/// when the last is let go. The tests never touch a swarm they did not
/// make: an engine already in one (an operator's) is refused, loudly, and
/// in CI the test fails. A swarm a killed test run left behind carries
/// [`SWARM_LABEL`] on its node and is taken over.
#[derive(Debug)]
pub struct Swarm(());

/// The Swarm tests take turns: one of them stands up a swarm that is not
/// the tests', which no other may find (it would refuse it, and fail in
/// CI). A turn is a guard held for the whole test.
static SWARM_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits for this test's turn on the engine's swarm.
pub async fn swarm_turn() -> tokio::sync::MutexGuard<'static, ()> {
    SWARM_TURN.lock().await
}

/// [`swarm_turn`], for a test that runs no runtime of its own.
pub fn swarm_turn_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    SWARM_TURN.blocking_lock()
}

impl Swarm {
    /// A hold on a swarm of the tests' own; `None` (after saying why, or a
    /// panic in CI) when the engine is in a swarm the tests did not make.
    pub fn hold() -> Option<Swarm> {
        let mut swarm = SWARM.lock().unwrap_or_else(|e| e.into_inner());
        if swarm.0 == 0 {
            let state = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"])
                .expect("the engine's swarm state");
            match state.as_str() {
                "inactive" => {
                    swarm.1 = networks();
                    docker(&["swarm", "init", "--advertise-addr", "127.0.0.1"])
                        .expect("swarm init");
                    let labelled =
                        docker(&["info", "--format", "{{.Swarm.NodeID}}"]).and_then(|node| {
                            docker(&["node", "update", "--label-add", SWARM_LABEL, &node])
                        });
                    if let Err(error) = labelled {
                        leave(&swarm.1);
                        panic!("labelling the test swarm's node: {error}");
                    }
                }
                "active" if ours() => {
                    swarm.1 = networks()
                        .into_iter()
                        .filter(|n| n != "docker_gwbridge")
                        .collect();
                }
                other => {
                    let what = format!(
                        "an engine in no swarm (this one's swarm is {other:?}, and not one \
                         the tests made: they never deploy to, or leave, a swarm of someone else)"
                    );
                    crate::require(&what, false);
                    return None;
                }
            }
        }
        swarm.0 += 1;
        Some(Swarm(()))
    }
}

/// A swarm made to stand for an operator's: like [`Swarm`], but without
/// the tests' label, so that the tests' own holds refuse it. Left, with
/// the bridge network the engine made for it, when dropped. `None` when
/// the engine is already in a swarm.
#[derive(Debug)]
pub struct ForeignSwarm {
    networks: Vec<String>,
    _held: std::sync::MutexGuard<'static, (usize, Vec<String>)>,
}

impl ForeignSwarm {
    pub fn make() -> Option<ForeignSwarm> {
        // Waits for the tests' own swarm, if one is held, to be left.
        let held = loop {
            let held = SWARM.lock().unwrap_or_else(|e| e.into_inner());
            if held.0 == 0 {
                break held;
            }
            drop(held);
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        let state = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"])
            .expect("the engine's swarm state");
        if !crate::require("an engine in no swarm", state == "inactive") {
            return None;
        }
        let networks = networks();
        docker(&["swarm", "init", "--advertise-addr", "127.0.0.1"]).expect("swarm init");
        Some(ForeignSwarm {
            networks,
            _held: held,
        })
    }
}

impl Drop for ForeignSwarm {
    fn drop(&mut self) {
        leave(&self.networks);
    }
}

/// Leaves the swarm, and removes the bridge network the engine made for it
/// unless it was there before (in `before`).
fn leave(before: &[String]) {
    let _ = docker(&["swarm", "leave", "--force"]);
    let bridge = "docker_gwbridge".to_string();
    if !before.contains(&bridge)
        && networks().contains(&bridge)
        && let Err(error) = docker(&["network", "rm", &bridge])
    {
        eprintln!("removing {bridge} after the test swarm: {error}");
    }
}

/// Whether the engine's swarm is one the tests made.
fn ours() -> bool {
    docker(&[
        "node",
        "inspect",
        "self",
        "--format",
        "{{json .Spec.Labels}}",
    ])
    .is_ok_and(|labels| labels.contains(&format!("\"{SWARM_LABEL}\"")))
}

/// The engine's networks, by name.
fn networks() -> Vec<String> {
    docker(&["network", "ls", "--format", "{{.Name}}"])
        .map(|names| names.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

impl Drop for Swarm {
    fn drop(&mut self) {
        let mut swarm = SWARM.lock().unwrap_or_else(|e| e.into_inner());
        swarm.0 -= 1;
        if swarm.0 == 0 {
            leave(&swarm.1);
        }
    }
}

/// A Swarm service of the test upstream (`:1`, no healthcheck), removed
/// when dropped.
#[derive(Debug)]
pub struct Service {
    pub name: String,
    _images: Images,
}

impl Service {
    pub fn create(network: &Network, replicas: u32) -> Service {
        let images = Images::hold();
        let name = format!("{}-{}", network.name, NEXT.fetch_add(1, Ordering::SeqCst));
        let replicas = replicas.to_string();
        let image = images.upstream("1");
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
            // The test upstream ignores SIGTERM (PID 1, no handler): a
            // task being stopped is killed 2 s later, not after the
            // engine's 10 s. The node must have dropped it at the SIGTERM
            // either way.
            "--stop-grace-period",
            "2s",
            "--label",
            "picket-test=1",
            &image,
            "--listen",
            "0.0.0.0:8080",
            "--name",
            &name,
        ])
        .expect("create a test service");
        Service {
            name,
            _images: images,
        }
    }

    /// What the engine says of this service's tasks and their
    /// containers, for a failure message.
    pub fn engine_view(&self) -> String {
        let tasks = docker(&[
            "service",
            "ps",
            "--no-trunc",
            "--format",
            "{{.Name}} desired={{.DesiredState}} current={{.CurrentState}} {{.Error}}",
            &self.name,
        ]);
        let containers = docker(&[
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            &format!("label=com.docker.swarm.service.name={}", self.name),
            "--format",
            "{{.ID}} {{.Names}} {{.State}} {{.Status}}",
        ]);
        let show = |r: Result<String, String>| r.unwrap_or_else(|e| e);
        format!(
            "replicas in the spec: {:?}\ntasks:\n{}\ncontainers:\n{}",
            self.replicas(),
            show(tasks),
            show(containers)
        )
    }

    /// Sets the service's replicas, and sees the engine's spec say so: a
    /// scale the engine reports done but did not keep is asked again.
    pub fn scale(&self, replicas: u32) {
        for _ in 0..5 {
            docker(&[
                "service",
                "scale",
                "-d",
                &format!("{}={replicas}", self.name),
            ])
            .unwrap_or_else(|e| panic!("{e}"));
            for _ in 0..20 {
                if self.replicas() == Some(replicas) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        panic!(
            "the engine does not keep {replicas} replicas for {}: {:?}",
            self.name,
            self.replicas()
        );
    }

    /// The replicas of the service's spec, as the engine has it.
    pub fn replicas(&self) -> Option<u32> {
        docker(&[
            "service",
            "inspect",
            "-f",
            "{{.Spec.Mode.Replicated.Replicas}}",
            &self.name,
        ])
        .ok()?
        .trim()
        .parse()
        .ok()
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
    /// Its compose service label; empty: none.
    pub service: &'a str,
    /// Its compose project label: `None`, its network's name (a compose
    /// project's network is its own); `Some("")`: none, as a container
    /// that copies a service's label alone.
    pub project: Option<&'a str>,
    /// `:1` or `:2`.
    pub version: &'a str,
    /// A healthcheck: `Some(true)` one that passes, `Some(false)` one that
    /// fails, `None` none.
    pub healthy: Option<bool>,
    /// More labels (`picket.route.*`).
    pub labels: &'a [(&'a str, &'a str)],
}

/// A running test container.
#[derive(Debug)]
pub struct Container {
    pub name: String,
    _images: Images,
}

impl Container {
    /// Starts the test upstream on port 8080 of `network`, answering as its
    /// name.
    pub fn run(network: &Network, spec: &Spec<'_>) -> Container {
        let images = Images::hold();
        let name = format!("{}-{}", network.name, NEXT.fetch_add(1, Ordering::SeqCst));
        let image = images.upstream(if spec.version.is_empty() {
            "1"
        } else {
            spec.version
        });
        let mut args: Vec<String> = [
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            &network.name,
            "--label",
            "picket-test=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let project = spec.project.unwrap_or(&network.name);
        if !spec.service.is_empty() {
            args.extend([
                "--label".into(),
                format!("com.docker.compose.service={}", spec.service),
            ]);
        }
        if !project.is_empty() && !spec.service.is_empty() {
            args.extend([
                "--label".into(),
                format!("com.docker.compose.project={project}"),
            ]);
        }
        for (key, value) in spec.labels {
            args.extend(["--label".into(), format!("{key}={value}")]);
        }
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
        Container {
            name,
            _images: images,
        }
    }

    /// Starts the test upstream on port 8080 of `network`, answering as its
    /// name, with exactly `labels` besides the tests' own: made through
    /// the Engine API rather than the command line, so that a label may
    /// hold what the command line refuses (a space, CR, LF), as whoever
    /// reaches the engine's API can write it.
    pub fn run_with_labels(network: &Network, labels: &[(&str, &str)]) -> Container {
        let images = Images::hold();
        let name = format!("{}-{}", network.name, NEXT.fetch_add(1, Ordering::SeqCst));
        let mut all = serde_json::Map::new();
        all.insert("picket-test".into(), "1".into());
        for (key, value) in labels {
            all.insert((*key).into(), (*value).into());
        }
        let body = serde_json::json!({
            "Image": images.upstream("1"),
            "Cmd": ["--listen", "0.0.0.0:8080", "--name", name],
            "Labels": all,
            "Healthcheck": { "Test": ["NONE"] },
            "HostConfig": { "NetworkMode": network.name },
        });
        let output = Command::new("curl")
            .args([
                "-sS",
                "--fail-with-body",
                "--unix-socket",
                "/var/run/docker.sock",
            ])
            .args(["-H", "Content-Type: application/json", "-X", "POST"])
            .arg(format!("http://engine/containers/create?name={name}"))
            .arg("--data-binary")
            .arg(body.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("curl");
        assert!(
            output.status.success(),
            "create {name}: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let container = Container {
            name,
            _images: images,
        };
        container.start();
        container
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

    /// Waits, up to `within`, until its process accepts connections on
    /// port 8080: a container the engine reports started may not listen
    /// yet.
    pub async fn listening(&self, within: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if let Some(ip) = self.ip()
                && tokio::net::TcpStream::connect((ip, 8080)).await.is_ok()
            {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        false
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.name]);
    }
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
