//! Connect checks of external hosts and static replicas: red within one
//! check interval when refused, green when accepted, through HTTP_PROXY
//! when set, and no timer at all when nothing needs checking. (Checks of
//! `https://` hosts: tls_checks.rs; requests through proxies:
//! forward_proxy.rs.)

use std::path::Path;
use std::time::Duration;

use picket::config::{Config, Overrides};
use picket::node::{self, Listeners, Options};
use picket::upstream::ProxyEnv;
use picket_proto::Heart;
use picket_tests::node::{TestNode, eventually, route};
use picket_tests::upstream::{Behaviour, Upstream, refused_addr};

const CHECKS: &str = "[global]\ncheck_every = \"1s\"\ncheck_timeout = \"500ms\"\n";

fn external(name: &str, url: &str) -> String {
    format!("[[route]]\nname = \"{name}\"\npath_prefix = \"/{name}\"\nupstream = \"{url}\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_hosts_are_red_when_refusing_and_green_when_accepting() {
    let accepting = Upstream::start("billing", Behaviour::Echo).await;
    let refusing = refused_addr().await;
    let config = format!(
        "{CHECKS}{}{}",
        external("up", &format!("http://{}", accepting.addr)),
        external("down", &format!("http://{refusing}"))
    );
    let node = TestNode::start(&config);
    eventually(
        "down is red within one check interval",
        Duration::from_millis(1500),
        || node.verdict("down").is_some_and(|v| v.heart == Heart::Red),
    )
    .await;
    eventually("up is green", Duration::from_millis(1500), || {
        node.verdict("up")
            .is_some_and(|v| v.heart == Heart::Green && *v.reason == *"host accepts connections")
    })
    .await;
    // The refusing host comes up: green within one interval (plus the probe).
    let back = Upstream::on(
        tokio::net::TcpListener::bind(refusing).await.unwrap(),
        "back",
        Behaviour::Echo,
    );
    eventually("down turns green", Duration::from_millis(2500), || {
        node.verdict("down")
            .is_some_and(|v| v.heart == Heart::Green)
    })
    .await;
    // A host that accepts and then refuses: red within one interval.
    drop(accepting);
    eventually("up turns red", Duration::from_millis(1500), || {
        node.verdict("up").is_some_and(|v| v.heart == Heart::Red)
    })
    .await;
    drop(back);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_http_proxy_the_proxy_is_dialled() {
    let proxy = Upstream::start("proxy", Behaviour::Echo).await;
    let proxy_url = format!("http://{}", proxy.addr);
    let env = ProxyEnv::from_vars(|name| match name {
        "HTTP_PROXY" => Some(proxy_url.clone()),
        "NO_PROXY" => Some("localhost".into()),
        _ => None,
    })
    .unwrap();
    // A name that resolves nowhere: only dialling the proxy can pass.
    let config = format!("{CHECKS}{}", external("billing", "http://billing.invalid"));
    let parsed = Config::parse("test.toml", &config).unwrap();
    let listeners =
        Listeners::bind(([127, 0, 0, 1], 0).into(), ([127, 0, 0, 1], 0).into()).unwrap();
    let options = Options {
        config_path: None,
        overrides: Overrides::default(),
        tls: picket::tls::client_config(None).unwrap(),
        drain: Duration::from_secs(1),
        proxy_env: Some(env),
        gossip_transport: None,
        ticket_clock: None,
    };
    let running = node::start(listeners, parsed, options).unwrap();
    let board = std::sync::Arc::clone(running.node.board());
    eventually("green through the proxy", Duration::from_secs(3), || {
        board
            .snapshot()
            .iter()
            .any(|v| *v.route == *"billing" && v.heart == Heart::Green)
    })
    .await;
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_target_to_check_no_timer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("picket.toml");
    std::fs::write(&path, CHECKS).unwrap();
    let node = TestNode::start_file(Path::new(&path));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!node.node().checker().running(), "no route: no timer");

    let replica = Upstream::start("static", Behaviour::Echo).await;
    std::fs::write(
        &path,
        format!("{CHECKS}{}", route("static", "/", &[replica.addr], "")),
    )
    .unwrap();
    eventually(
        "a static replica starts the timer",
        Duration::from_secs(5),
        || node.node().checker().running(),
    )
    .await;

    std::fs::write(&path, CHECKS).unwrap();
    eventually(
        "the last target gone stops it",
        Duration::from_secs(5),
        || !node.node().checker().running(),
    )
    .await;
    node.stop().await;
}
