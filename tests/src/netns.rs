//! Test hosts with their own address: a network namespace joined to this
//! one by a veth pair, where a test runs upstreams and drops packets.
//!
//! Needs root, `ip` and `iptables`. Everything a host creates is removed
//! when it is dropped.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A host in a network namespace.
#[derive(Debug)]
pub struct Host {
    pub name: String,
    /// This host's address, reachable from the test.
    pub addr: Ipv4Addr,
    link: String,
    children: Vec<Child>,
}

fn run(program: &str, args: &[&str]) -> std::io::Result<()> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if output.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
    })
}

impl Host {
    /// Whether this machine can make test hosts.
    pub fn available() -> bool {
        is_root() && crate::has_program("ip") && crate::has_program("iptables")
    }

    pub fn create() -> std::io::Result<Host> {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id() % 100_000;
        let name = format!("pkt{pid}n{n}");
        let link = format!("pk{pid}v{n}");
        let inside = format!("{link}i");
        // A /30 per host: 10.(100 + pid % 100).(n / 64).(n % 64 * 4).
        let (a, b, c) = (
            100 + (pid % 100) as u8,
            (n / 64) as u8,
            ((n % 64) * 4) as u8,
        );
        let gateway = Ipv4Addr::new(10, a, b, c + 1);
        let addr = Ipv4Addr::new(10, a, b, c + 2);
        let host = Host {
            name: name.clone(),
            addr,
            link: link.clone(),
            children: Vec::new(),
        };
        run("ip", &["netns", "add", &name])?;
        run(
            "ip",
            &[
                "link", "add", &link, "type", "veth", "peer", "name", &inside,
            ],
        )?;
        run("ip", &["link", "set", &inside, "netns", &name])?;
        run(
            "ip",
            &["addr", "add", &format!("{gateway}/30"), "dev", &link],
        )?;
        run("ip", &["link", "set", &link, "up"])?;
        let exec = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &name];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        exec(&["ip", "addr", "add", &format!("{addr}/30"), "dev", &inside])?;
        exec(&["ip", "link", "set", &inside, "up"])?;
        exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(host)
    }

    /// The host's own `/etc/hosts`, as programs started in it afterwards
    /// read it (`ip netns exec` mounts `/etc/netns/<name>/hosts` over
    /// `/etc/hosts` for them). Written in place, so that a change reaches
    /// programs already running; removed when the host drops.
    pub fn hosts(&self, text: &str) -> std::io::Result<()> {
        let dir = Path::new("/etc/netns").join(&self.name);
        std::fs::create_dir_all(&dir)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("hosts"))?;
        std::io::Write::write_all(&mut file, text.as_bytes())
    }

    /// Runs a program inside the host; it is killed when the host drops.
    pub fn spawn(&mut self, program: &Path, args: &[&str]) -> std::io::Result<()> {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?;
        self.children.push(child);
        Ok(())
    }

    /// Starts the test upstream binary on `port`, answering as `name`, and
    /// waits until it accepts connections.
    pub async fn upstream(
        &mut self,
        binary: &Path,
        port: u16,
        name: &str,
    ) -> std::io::Result<SocketAddr> {
        let addr = SocketAddr::from((self.addr, port));
        self.spawn(binary, &["--listen", &addr.to_string(), "--name", name])?;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(addr);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(std::io::Error::other(format!(
            "upstream in {} never listened on {addr}",
            self.name
        )))
    }

    fn iptables(&self, action: &str, port: u16) -> std::io::Result<()> {
        let port = port.to_string();
        run(
            "ip",
            &[
                "netns", "exec", &self.name, "iptables", action, "INPUT", "-p", "tcp", "--dport",
                &port, "-j", "DROP",
            ],
        )
    }

    /// Drops every TCP packet to `port`: connects hang.
    pub fn drop_packets(&self, port: u16) -> std::io::Result<()> {
        self.iptables("-A", port)
    }

    /// Stops dropping packets to `port`.
    pub fn heal(&self, port: u16) -> std::io::Result<()> {
        self.iptables("-D", port)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = run("ip", &["netns", "del", &self.name]);
        let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(&self.name));
        let _ = run("ip", &["link", "del", &self.link]);
    }
}

/// Drops every UDP datagram to and from a port on loopback while it lives:
/// a node's gossip cut off from its peers, nothing else touched. Needs
/// what [`Host::available`] checks.
#[derive(Debug)]
pub struct LoopbackUdpCut(u16);

impl LoopbackUdpCut {
    fn rule(action: &str, port: u16, way: &str) -> std::io::Result<()> {
        let port = port.to_string();
        run(
            "iptables",
            &[
                action, "INPUT", "-i", "lo", "-p", "udp", way, &port, "-j", "DROP",
            ],
        )
    }

    pub fn new(port: u16) -> std::io::Result<LoopbackUdpCut> {
        LoopbackUdpCut::rule("-I", port, "--dport")?;
        // Built before the second rule, so that a failure removes the first.
        let cut = LoopbackUdpCut(port);
        LoopbackUdpCut::rule("-I", port, "--sport")?;
        Ok(cut)
    }
}

impl Drop for LoopbackUdpCut {
    fn drop(&mut self) {
        let _ = LoopbackUdpCut::rule("-D", self.0, "--dport");
        let _ = LoopbackUdpCut::rule("-D", self.0, "--sport");
    }
}
