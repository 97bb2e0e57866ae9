//! Real clients through a node, each beside the same client straight at
//! the same kind of peer, in the same test: what the client ends up with
//! through the node (commits, installed files, image ids, hashes of what
//! a browser received) must be what it ends up with direct.
//!
//! - `git` over smart HTTP, against `git http-backend` run as CGI: clone,
//!   fetch, and a push of 25 MB of incompressible files.
//! - `pip install --require-hashes` into a fresh virtual environment, from
//!   a PEP 503 index of real wheels (downloaded by `tests/run.sh`, served
//!   from 127.0.0.1).
//! - `docker push` and `docker pull` of a 50 MB image built `FROM
//!   scratch`, against Debian's `docker-registry`.
//! - headless Chromium loading a page of 50 assets (0 B to 5 MiB), an
//!   event stream and a WebSocket, over plain HTTP/1.1 and over HTTPS with
//!   HTTP/2, hashing every asset with `crypto.subtle`.
//!
//! Each test prints how long the client took direct and through the node;
//! the figures are not asserted beyond generous bounds. Every name a test
//! makes (directories, images, repositories, profiles) is unique to the
//! run and removed at its end.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use picket_tests::node::{TestNode, route};
use picket_tests::real_clients::cgi::GitHttp;
use picket_tests::real_clients::files::StaticFiles;
use picket_tests::real_clients::page::{self, Asset, Browser, Page, Script};
use picket_tests::real_clients::registry::{self, Registry};
use picket_tests::real_clients::{Ran, command, run, try_run, unique};
use picket_tests::tls::TestCa;
use picket_tests::{docker, has_program, require};
use tokio::time::Instant;

/// The bound of one client command: far over what each takes here.
const COMMAND: Duration = Duration::from_secs(90);

fn sha256(bytes: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `length` bytes of seeded noise: incompressible, and the same for the
/// same seed.
fn noise(seed: u64, length: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut bytes = vec![0; length];
    rng.fill(&mut bytes);
    bytes
}

fn temp_dir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&unique(what))
        .tempdir()
        .expect("a temporary directory")
}

/// Prints a client's durations, direct and through the node (`None`: the
/// step failed, or was not reached).
fn print_durations(client: &str, steps: &[(&str, Option<Duration>, Option<Duration>)]) {
    let shown = |took: &Option<Duration>| took.map_or("failed".to_string(), |t| format!("{t:?}"));
    for (step, direct, through) in steps {
        println!(
            "{client} {step}: direct {}, through the node {}",
            shown(direct),
            shown(through)
        );
    }
}

// ---------------------------------------------------------------- git

/// `git` with the test's own `HOME`, no system configuration, and fixed
/// names and dates, so that the same tree makes the same commit id.
struct Git {
    home: PathBuf,
}

impl Git {
    fn command(&self, dir: &Path, args: &[&str]) -> tokio::process::Command {
        let mut git = command("git", args);
        git.current_dir(dir)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "Picket Tests")
            .env("GIT_AUTHOR_EMAIL", "tests@picket.invalid")
            .env("GIT_COMMITTER_NAME", "Picket Tests")
            .env("GIT_COMMITTER_EMAIL", "tests@picket.invalid")
            .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z")
            // A transfer that stalls (a lost last piece) fails in seconds
            // rather than at the command's bound.
            .env("GIT_HTTP_LOW_SPEED_LIMIT", "1000")
            .env("GIT_HTTP_LOW_SPEED_TIME", "10");
        git
    }

    async fn run(&self, dir: &Path, args: &[&str]) -> Result<Ran, String> {
        try_run(&mut self.command(dir, args), COMMAND).await
    }

    async fn must(&self, dir: &Path, args: &[&str]) -> String {
        run(&mut self.command(dir, args), COMMAND)
            .await
            .stdout
            .trim()
            .to_string()
    }

    /// Writes `files` (name, seed, length) of noise into `dir` and commits
    /// them; the new commit's id.
    async fn commit_noise(
        &self,
        dir: &Path,
        message: &str,
        files: &[(&str, u64, usize)],
    ) -> String {
        for (name, seed, length) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
            std::fs::write(path, noise(*seed, *length)).expect("write a file");
        }
        self.must(dir, &["add", "-A"]).await;
        self.must(dir, &["commit", "-q", "-m", message]).await;
        self.must(dir, &["rev-parse", "HEAD"]).await
    }
}

/// What a clone, a fetch and a push ended with: commit ids, or why a step
/// failed.
#[derive(Debug, PartialEq)]
struct GitOutcome {
    cloned: Result<String, String>,
    fetched: Result<String, String>,
    pushed: Result<String, String>,
    /// What the server's `main` is after the push.
    served: String,
}

async fn git_through(
    git: &Git,
    addr: SocketAddr,
    repository: &str,
    served: &Path,
    seed: &Path,
    work: &Path,
) -> (GitOutcome, [Option<Duration>; 3]) {
    let mut took = [None; 3];
    let unreached = || Err("not reached".to_string());
    let mut outcome = GitOutcome {
        cloned: unreached(),
        fetched: unreached(),
        pushed: unreached(),
        served: String::new(),
    };
    let url = format!("http://{addr}/{repository}");
    let parent = work.parent().expect("a parent");
    let target = work.to_str().expect("a UTF-8 path");
    outcome.cloned = match git.run(parent, &["clone", "-q", &url, target]).await {
        Ok(ran) => {
            took[0] = Some(ran.elapsed);
            Ok(git.must(work, &["rev-parse", "HEAD"]).await)
        }
        Err(e) => Err(e),
    };
    if outcome.cloned.is_ok() {
        // The server moves on; the clone fetches that.
        let server = served.join(repository);
        git.must(
            seed,
            &["push", "-q", server.to_str().expect("UTF-8"), "main"],
        )
        .await;
        outcome.fetched = match git.run(work, &["fetch", "-q", "origin"]).await {
            Ok(ran) => {
                took[1] = Some(ran.elapsed);
                Ok(git.must(work, &["rev-parse", "origin/main"]).await)
            }
            Err(e) => Err(e),
        };
    }
    if outcome.fetched.is_ok() {
        git.must(work, &["merge", "-q", "--ff-only", "origin/main"])
            .await;
        let big: Vec<(String, u64)> = (0..5).map(|i| (format!("big/{i}.bin"), 300 + i)).collect();
        let files: Vec<(&str, u64, usize)> = big
            .iter()
            .map(|(name, seed)| (name.as_str(), *seed, 5 << 20))
            .collect();
        let commit = git.commit_noise(work, "25 MB of noise", &files).await;
        outcome.pushed = match git.run(work, &["push", "-q", "origin", "main"]).await {
            Ok(ran) => {
                took[2] = Some(ran.elapsed);
                Ok(commit)
            }
            Err(e) => Err(e),
        };
    }
    outcome.served = git
        .must(&served.join(repository), &["rev-parse", "main"])
        .await;
    (outcome, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_clone_fetch_and_push_through_the_node_match_direct() {
    if !require("git", has_program("git")) {
        return;
    }
    let dir = temp_dir("git");
    let (home, served, seed) = (
        dir.path().join("home"),
        dir.path().join("served"),
        dir.path().join("seed"),
    );
    for d in [&home, &served, &seed] {
        std::fs::create_dir_all(d).unwrap();
    }
    let git = Git { home: home.clone() };

    // A repository of 8 MB of noise, served twice: direct.git straight,
    // node.git through the node; then a second commit the clones fetch.
    git.must(&seed, &["init", "-q", "-b", "main"]).await;
    let files: Vec<(String, u64)> = (0..4).map(|i| (format!("base/{i}.bin"), 100 + i)).collect();
    let files: Vec<(&str, u64, usize)> = files
        .iter()
        .map(|(name, s)| (name.as_str(), *s, 2 << 20))
        .collect();
    let base = git.commit_noise(&seed, "base", &files).await;
    for repository in ["direct.git", "node.git"] {
        let bare = served.join(repository);
        let bare = bare.to_str().unwrap();
        git.must(
            &served,
            &["clone", "-q", "--bare", seed.to_str().unwrap(), bare],
        )
        .await;
        git.must(Path::new(bare), &["config", "http.receivepack", "true"])
            .await;
    }
    let update = git
        .commit_noise(
            &seed,
            "update",
            &[
                ("update/0.bin", 200, 1 << 20),
                ("update/1.bin", 201, 3 << 19),
            ],
        )
        .await;

    let cgi = GitHttp::start(&served, &home).await;
    let node = TestNode::start(&route("git", "/", &[cgi.addr], ""));
    let (direct, direct_took) = git_through(
        &git,
        cgi.addr,
        "direct.git",
        &served,
        &seed,
        &dir.path().join("direct"),
    )
    .await;
    let (through, node_took) = git_through(
        &git,
        node.proxy,
        "node.git",
        &served,
        &seed,
        &dir.path().join("node"),
    )
    .await;
    print_durations(
        "git",
        &[
            ("clone (8 MB)", direct_took[0], node_took[0]),
            ("fetch (2.5 MB)", direct_took[1], node_took[1]),
            ("push (25 MB)", direct_took[2], node_took[2]),
        ],
    );
    let stderr = cgi.stderr();
    assert_eq!(
        direct.cloned,
        Ok(base.clone()),
        "direct; CGI stderr: {stderr}"
    );
    assert_eq!(
        direct.fetched,
        Ok(update.clone()),
        "direct; CGI stderr: {stderr}"
    );
    assert!(
        direct.pushed.is_ok(),
        "direct: {direct:?}; CGI stderr: {stderr}"
    );
    assert_eq!(Ok(&direct.served), direct.pushed.as_ref(), "direct");
    assert_eq!(
        through, direct,
        "git through the node ended elsewhere than direct; CGI stderr: {stderr}"
    );
    // What the server holds is whole.
    git.must(&served.join("node.git"), &["fsck", "--no-progress"])
        .await;
    node.stop().await;
}

// ---------------------------------------------------------------- pip

/// Where `tests/run.sh` downloads the wheels.
fn wheel_dir() -> PathBuf {
    std::env::var_os("PICKET_WHEELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/picket-wheels"))
}

/// PEP 503's normalized project name.
fn normalized(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Writes a PEP 503 index of `wheels` under `root` (`simple/`, and the
/// files under `files/`); the lines of a requirements file that pins each
/// to its version and hash.
fn write_index(root: &Path, wheels: &[PathBuf]) -> Vec<String> {
    let mut projects: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut requirements = Vec::new();
    std::fs::create_dir_all(root.join("files")).unwrap();
    for wheel in wheels {
        let file = wheel.file_name().unwrap().to_str().unwrap().to_string();
        let bytes = std::fs::read(wheel).unwrap();
        let hash = sha256(&bytes);
        std::fs::write(root.join("files").join(&file), &bytes).unwrap();
        let mut parts = file.split('-');
        let (name, version) = (parts.next().unwrap(), parts.next().unwrap());
        requirements.push(format!(
            "{}=={version} --hash=sha256:{hash}",
            normalized(name)
        ));
        projects
            .entry(normalized(name))
            .or_default()
            .push((file, hash));
    }
    let mut top = String::from("<!DOCTYPE html><html><body>\n");
    for (project, files) in &projects {
        top.push_str(&format!("<a href=\"{project}/\">{project}</a>\n"));
        let mut page = String::from("<!DOCTYPE html><html><body>\n");
        for (file, hash) in files {
            page.push_str(&format!(
                "<a href=\"../../files/{file}#sha256={hash}\">{file}</a>\n"
            ));
        }
        page.push_str("</body></html>\n");
        let dir = root.join("simple").join(project);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), page).unwrap();
    }
    top.push_str("</body></html>\n");
    std::fs::write(root.join("simple").join("index.html"), top).unwrap();
    requirements
}

/// Every installed distribution's `RECORD` (each installed file and its
/// hash) under `venv`, by distribution: the files in `site-packages`, not
/// the scripts beside the interpreter (whose first line names it).
fn records(venv: &Path) -> BTreeMap<String, String> {
    let mut records = BTreeMap::new();
    let lib = venv.join("lib");
    for python in std::fs::read_dir(&lib).unwrap().flatten() {
        let site = python.path().join("site-packages");
        let Ok(entries) = std::fs::read_dir(&site) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".dist-info")
                && let Ok(record) = std::fs::read_to_string(entry.path().join("RECORD"))
            {
                let mut lines: Vec<&str> =
                    record.lines().filter(|l| !l.starts_with("../")).collect();
                lines.sort_unstable();
                records.insert(name, lines.join("\n"));
            }
        }
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_install_with_hashes_through_the_node_matches_direct() {
    if !require("python3", has_program("python3")) {
        return;
    }
    let wheels: Vec<PathBuf> = std::fs::read_dir(wheel_dir())
        .map(|entries| {
            let mut wheels: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "whl"))
                .collect();
            wheels.sort();
            wheels
        })
        .unwrap_or_default();
    let wanted = format!(
        "the wheels tests/run.sh downloads into {}",
        wheel_dir().display()
    );
    if !require(&wanted, wheels.len() >= 3) {
        return;
    }
    let dir = temp_dir("pip");
    let requirements = write_index(&dir.path().join("index"), &wheels);
    let requirements_file = dir.path().join("requirements.txt");
    std::fs::write(&requirements_file, requirements.join("\n") + "\n").unwrap();
    let index = StaticFiles::start(&dir.path().join("index")).await;
    let node = TestNode::start(&route("index", "/", &[index.addr], ""));

    // Two fresh environments, made side by side.
    let venvs = [dir.path().join("direct"), dir.path().join("node")];
    let made: Vec<_> = venvs
        .iter()
        .map(|venv| {
            let mut python = command(
                "python3",
                ["-m".as_ref(), "venv".as_ref(), venv.as_os_str()],
            );
            async move { run(&mut python, COMMAND).await }
        })
        .collect();
    futures_util::future::join_all(made).await;

    let mut took = Vec::new();
    let mut installed = Vec::new();
    let mut served = Vec::new();
    for (venv, addr) in venvs.iter().zip([index.addr, node.proxy]) {
        let before = index.served();
        let mut pip = command(
            venv.join("bin/python").to_str().unwrap(),
            [
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--no-input",
                "--no-compile",
                "--only-binary=:all:",
                "--require-hashes",
                "--retries",
                "0",
                "--timeout",
                "15",
                "--index-url",
                &format!("http://{addr}/simple/"),
                "-r",
                requirements_file.to_str().unwrap(),
            ],
        );
        pip.env("PIP_CONFIG_FILE", "/dev/null");
        let outcome = try_run(&mut pip, COMMAND).await;
        took.push(outcome.as_ref().ok().map(|r| r.elapsed));
        installed.push(outcome.map(|_| records(venv)));
        served.push(index.served() - before);
    }
    print_durations("pip", &[("install (10 MB of wheels)", took[0], took[1])]);
    let direct = installed[0].as_ref().expect("pip install direct");
    assert!(
        direct.len() >= wheels.len(),
        "installed direct: {:?}",
        direct.keys()
    );
    match &installed[1] {
        Ok(through) => {
            let differ: Vec<&String> = direct
                .keys()
                .chain(through.keys())
                .filter(|d| direct.get(*d) != through.get(*d))
                .collect();
            assert!(
                differ.is_empty(),
                "installed through the node unlike direct: {differ:?}"
            );
        }
        Err(e) => panic!("pip install through the node failed where direct worked: {e}"),
    }
    // Every install fetched the index pages and the wheels from here: no
    // cache stood in.
    assert!(
        served.iter().all(|n| *n > wheels.len()),
        "files served per install: {served:?}"
    );
    // And what was installed imports.
    let mut python = command(
        venvs[1].join("bin/python").to_str().unwrap(),
        [
            "-c",
            "import babel, dateutil.parser, six; print(babel.Locale('fr').get_display_name())",
        ],
    );
    let said = run(&mut python, COMMAND).await.stdout;
    assert_eq!(said.trim(), "français");
    node.stop().await;
}

// ---------------------------------------------------------------- docker

/// Image tags this test made: removed when dropped, whatever happened.
struct Tags(Vec<String>);

impl Drop for Tags {
    fn drop(&mut self) {
        for tag in &self.0 {
            let _ = docker::docker(&["rmi", "--force", tag]);
        }
    }
}

/// `docker ARGS` within the command bound; how long it took, or why it
/// failed.
async fn docker_timed(args: &[&str]) -> Result<Ran, String> {
    try_run(&mut command("docker", args), COMMAND).await
}

/// The digest `docker push` printed.
fn pushed_digest(ran: &Ran) -> Option<String> {
    ran.stdout
        .split_whitespace()
        .skip_while(|word| *word != "digest:")
        .nth(1)
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_push_and_pull_through_the_node_match_direct() {
    if !require("a Docker engine", docker::available()) {
        return;
    }
    if !require(
        "docker-registry (Debian's package)",
        has_program(registry::PROGRAM),
    ) {
        return;
    }
    // An image of 50 MB of noise in two layers, and a file that makes it
    // this run's own.
    let context = temp_dir("docker-context");
    let name = unique("image");
    std::fs::write(context.path().join("a.bin"), noise(500, 30 << 20)).unwrap();
    std::fs::write(context.path().join("b.bin"), noise(501, 20 << 20)).unwrap();
    std::fs::write(context.path().join("name"), &name).unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        "FROM scratch\nCOPY a.bin /a.bin\nCOPY b.bin /b.bin\nCOPY name /name\n",
    )
    .unwrap();
    let source = format!("{name}:source");
    let mut tags = Tags(vec![source.clone()]);
    let built = docker_timed(&[
        "build",
        "-q",
        "-t",
        &source,
        context.path().to_str().unwrap(),
    ])
    .await
    .expect("docker build");
    drop(context);
    let image = built.stdout.trim().to_string();

    let (direct_registry, node_registry) = tokio::join!(
        Registry::start(Duration::from_secs(10)),
        Registry::start(Duration::from_secs(10))
    );
    let node = TestNode::start(&route("registry", "/", &[node_registry.addr], ""));
    let direct = format!("{}/{name}:t", direct_registry.addr);
    let through = format!("127.0.0.1:{}/{name}:t", node.proxy.port());
    tags.0.extend([direct.clone(), through.clone()]);
    for tag in [&direct, &through] {
        docker::docker(&["tag", &source, tag]).unwrap();
    }

    let direct_push = docker_timed(&["push", &direct]).await;
    let node_push = docker_timed(&["push", &through]).await;
    // Gone from here, so that the pulls fetch every layer.
    for tag in &tags.0 {
        docker::docker(&["rmi", tag]).unwrap();
    }
    let mut pulls = Vec::new();
    for tag in [&direct, &through] {
        let pulled = docker_timed(&["pull", "-q", tag]).await;
        let id = docker::docker(&["image", "inspect", "--format", "{{.Id}}", tag]);
        let _ = docker::docker(&["rmi", tag]);
        pulls.push((pulled, id));
    }
    let took = |ran: &Result<Ran, String>| ran.as_ref().ok().map(|r| r.elapsed);
    print_durations(
        "docker",
        &[
            ("push (50 MB image)", took(&direct_push), took(&node_push)),
            ("pull (50 MB image)", took(&pulls[0].0), took(&pulls[1].0)),
        ],
    );
    let logs = format!(
        "registry logs, direct:\n{}\nbehind the node:\n{}",
        direct_registry.log(),
        node_registry.log()
    );
    let direct_push = direct_push.expect("docker push direct");
    let digest = pushed_digest(&direct_push).expect("a digest from docker push");
    match &node_push {
        Ok(ran) => assert_eq!(
            pushed_digest(ran).as_ref(),
            Some(&digest),
            "pushed through the node: {}",
            ran.stdout
        ),
        Err(e) => panic!("docker push through the node failed where direct worked: {e}\n{logs}"),
    }
    assert_eq!(
        pulls[0].1.as_deref(),
        Ok(image.as_str()),
        "pulled direct: {:?}",
        pulls[0].0
    );
    assert_eq!(
        pulls[1].1.as_deref(),
        Ok(image.as_str()),
        "pulled through the node: {:?}\n{logs}",
        pulls[1].0
    );
    // The same blobs fetched for the pull: a layer cut short would have
    // been fetched again (the engine retries, and the pull still
    // succeeds). Manifests are left out: the engine may take the one it
    // pulled direct from its own cache (the digest is the same).
    let fetched = |registry: &Registry| {
        let mut gets = registry.requests(&format!("GET /v2/{name}/blobs/"));
        gets.sort();
        gets
    };
    let direct_gets = fetched(&direct_registry);
    let everything = |registry: &Registry| registry.requests("GET").join("\n");
    assert!(
        direct_gets.len() >= 4,
        "the direct pull's blobs (three layers and a configuration): {direct_gets:?}"
    );
    assert_eq!(
        fetched(&node_registry),
        direct_gets,
        "the pull through the node asked for other things than direct; \
         direct:\n{}\nthrough the node:\n{}",
        everything(&direct_registry),
        everything(&node_registry)
    );
    // Generous: the engine tries HTTPS first, which the node's plain port
    // may make wait.
    for (what, ran) in [("push", &node_push), ("pull", &pulls[1].0)] {
        let elapsed = took(ran).unwrap_or_default();
        assert!(
            elapsed < Duration::from_secs(60),
            "{what} through the node took {elapsed:?}"
        );
    }
    node.stop().await;
    drop(tags);
}

// ---------------------------------------------------------------- browser

/// The asset sizes: 0 B, then 49 from 1 B to 5 MiB, about evenly apart on
/// a log scale, a few moved onto buffer edges.
fn asset_sizes() -> Vec<usize> {
    let top = 5.0 * 1024.0 * 1024.0_f64;
    let mut sizes: Vec<usize> = std::iter::once(0)
        .chain((0..49).map(|i| top.powf(f64::from(i) / 48.0).round() as usize))
        .collect();
    for (at, edge) in [(30, 16_384), (31, 16_385), (36, 65_536), (37, 65_537)] {
        sizes[at] = edge;
    }
    sizes
}

const EVENTS: usize = 5;

fn messages() -> Vec<(bool, usize)> {
    vec![
        (true, 0),
        (true, 5),
        (false, 0),
        (false, 1),
        (false, 125),
        (false, 126),
        (true, 70_000),
        (false, 65_536),
        (false, 1 << 20),
    ]
}

/// What a page's report says, set against what the test served and
/// sent: what went wrong, empty when everything matched.
fn judge(report: &serde_json::Value, expected: &BTreeMap<String, (usize, String)>) -> Vec<String> {
    let mut wrong = Vec::new();
    if let Some(failed) = report.get("failed") {
        return vec![format!("the script failed: {failed}")];
    }
    if report["secure"] != serde_json::json!(true) {
        wrong.push("not a secure context".into());
    }
    let assets = report["assets"].as_array().cloned().unwrap_or_default();
    if assets.len() != expected.len() {
        wrong.push(format!("{} assets reported", assets.len()));
    }
    for asset in &assets {
        let name = asset["name"].as_str().unwrap_or_default();
        let Some((size, hash)) = expected.get(name) else {
            wrong.push(format!("unknown asset {name}"));
            continue;
        };
        if asset["status"] != 200 || asset["sha256"].as_str() != Some(hash) {
            wrong.push(format!(
                "asset {name} ({size} B): got status {}, {} B, error {}",
                asset["status"], asset["size"], asset["error"]
            ));
        }
    }
    let events: Vec<String> = (1..=EVENTS)
        .map(|i| format!("{i}:{}", page::event_data(i)))
        .collect();
    if report["events"]["got"] != serde_json::json!(events) {
        wrong.push(format!("events: {}", report["events"]));
    }
    let echoes: Vec<String> = messages()
        .iter()
        .enumerate()
        .map(|(i, (text, length))| sha256(&page::message(i, *text, *length)))
        .collect();
    if report["socket"]["echoes"] != serde_json::json!(echoes)
        || !report["socket"]["error"].is_null()
    {
        wrong.push(format!(
            "WebSocket: error {}, {} of {} echoes, matching: {}",
            report["socket"]["error"],
            report["socket"]["echoes"]
                .as_array()
                .map_or(0, |echoes| echoes.len()),
            echoes.len(),
            report["socket"]["echoes"] == serde_json::json!(echoes)
        ));
    }
    wrong
}

/// Opens `url` in Chromium and waits for its report: the report, and how
/// long from the start to the report.
async fn browse(page: &Page, url: &str) -> (serde_json::Value, Duration) {
    let start = Instant::now();
    let browser = Browser::open(url);
    let report = page.report(Duration::from_secs(60)).await;
    let took = start.elapsed();
    let log = browser.log();
    browser.close().await;
    let report = report.unwrap_or_else(|| panic!("no report from {url} within 60 s:\n{log}"));
    (report, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_over_http1_and_http2_through_the_node_matches_direct() {
    if !require("chromium", has_program(page::BROWSER)) {
        return;
    }
    let mut expected = BTreeMap::new();
    let assets: Vec<Asset> = asset_sizes()
        .into_iter()
        .enumerate()
        .map(|(i, size)| {
            let body = Bytes::from(noise(1_000 + i as u64, size));
            let name = format!("{i:02}-{size}.bin");
            expected.insert(name.clone(), (size, sha256(&body)));
            Asset {
                name,
                body,
                chunked: i % 2 == 1,
            }
        })
        .collect();
    let ca = TestCa::new("real clients CA");
    let certificates = temp_dir("chromium-certificates");
    let leaf = ca.write_leaf(certificates.path(), "edge", &["127.0.0.1", "localhost"]);
    let script = Script {
        events: EVENTS,
        messages: messages(),
        within: Duration::from_secs(30),
    };
    let page = Page::start(assets, script, ca.server_config(&["127.0.0.1"])).await;
    let node = TestNode::start(&format!(
        "[node]\nlisten_tls = \"127.0.0.1:0\"\n{}\n{}",
        leaf.table(),
        route("page", "/", &[page.plain], "")
    ));
    let node_tls = node.tls.expect("an HTTPS listener");

    let mut failures = Vec::new();
    for (scheme, protocol, direct, through) in [
        ("http", "http/1.1", page.plain, node.proxy),
        ("https", "h2", page.tls, node_tls),
    ] {
        let mut seen = Vec::new();
        for addr in [direct, through] {
            let (report, took) = browse(&page, &format!("{scheme}://{addr}/")).await;
            let mut wrong = judge(&report, &expected);
            if report["page"] != protocol {
                wrong.push(format!("page over {}, not {protocol}", report["page"]));
            }
            println!(
                "chromium {scheme}://{addr}/: page over {}, resources over {}, {} assets, \
                 {} events, {} echoes, secure: {}; {} problems",
                report["page"],
                report["protocols"],
                report["assets"].as_array().map_or(0, Vec::len),
                report["events"]["got"].as_array().map_or(0, Vec::len),
                report["socket"]["echoes"].as_array().map_or(0, Vec::len),
                report["secure"],
                wrong.len()
            );
            seen.push((wrong, report["protocols"].clone(), took));
        }
        print_durations(
            &format!("chromium over {scheme} ({protocol}):"),
            &[(
                "page, 50 assets, events, WebSocket",
                Some(seen[0].2),
                Some(seen[1].2),
            )],
        );
        let (direct_wrong, through_wrong) = (&seen[0].0, &seen[1].0);
        assert!(
            direct_wrong.is_empty(),
            "direct over {scheme}: {direct_wrong:#?}"
        );
        if !through_wrong.is_empty() || seen[0].1 != seen[1].1 {
            failures.push(format!(
                "through the node over {scheme}: protocols {} (direct {}): {through_wrong:#?}",
                seen[1].1, seen[0].1
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    node.stop().await;
}
