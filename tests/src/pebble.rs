//! Pebble, the ACME test server Let's Encrypt publishes (Debian's
//! `pebble`), with `pebble-challtestsrv` as the DNS server it resolves
//! names with: every name resolves to the one address a test chooses, so
//! that the CA's validation reaches the node the test means it to.
//!
//! Each instance has ports, files and a CA of its own: the directory's
//! certificate is signed by a CA made here, which `[acme] ca` names.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::ports::free_port;
use crate::tls::TestCa;

/// How a Pebble instance is set up.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Where its directory and management interface listen: loopback, or
    /// the address containers reach the machine at.
    pub listen: Ipv4Addr,
    /// Where the CA sends HTTP-01 validations (every node listens there).
    pub http_port: u16,
    /// Where it sends TLS-ALPN-01 validations.
    pub tls_port: u16,
    /// What every name resolves to: the node the validations reach.
    pub validate_at: Ipv4Addr,
    /// The lifetime of the certificates it issues, in seconds; `None`: 90
    /// days, as Let's Encrypt's.
    pub validity: Option<u64>,
}

/// A running Pebble and its DNS server.
#[derive(Debug)]
pub struct Pebble {
    /// The directory URL, for `[acme] directory`.
    pub directory: String,
    /// The CA of the directory's certificate, for `[acme] ca`.
    pub ca_file: PathBuf,
    /// The root of the certificates it issues (random, made at its
    /// start), for `[acme] issuers`.
    pub issuers_file: PathBuf,
    management: SocketAddr,
    listen: Ipv4Addr,
    ca: Arc<rustls::ClientConfig>,
    log: PathBuf,
    children: Vec<Child>,
    _dir: tempfile::TempDir,
}

/// Whether Pebble is installed (tests/run.sh installs it).
pub fn available() -> bool {
    crate::has_program("pebble") && crate::has_program("pebble-challtestsrv")
}

impl Pebble {
    /// Starts Pebble, without its random waits before validating, without
    /// reusing authorizations (each order is validated) and without
    /// refusing good nonces; returns once its directory answers.
    pub async fn start(setup: Setup) -> Pebble {
        let dir = tempfile::tempdir().expect("a directory for Pebble");
        let ca = TestCa::new("pebble directory CA");
        let listen = setup.listen.to_string();
        let leaf = ca.write_leaf(dir.path(), "directory", &[listen.as_str(), "localhost"]);
        let ca_file = ca.write_pem(dir.path());
        let (acme, management, dns, dns_management) =
            (free_port(), free_port(), free_port(), free_port());
        let config = dir.path().join("pebble.json");
        let validity = format!(
            ", \"certificateValidityPeriod\": {}",
            setup.validity.unwrap_or(90 * 86_400)
        );
        std::fs::write(
            &config,
            format!(
                "{{\"pebble\": {{\"listenAddress\": \"{listen}:{acme}\", \"managementListenAddress\": \"{listen}:{management}\", \
                 \"certificate\": {:?}, \"privateKey\": {:?}, \"httpPort\": {}, \"tlsPort\": {}, \
                 \"ocspResponderURL\": \"\", \"externalAccountBindingRequired\": false{validity}}}}}",
                leaf.cert.display().to_string(),
                leaf.key.display().to_string(),
                setup.http_port,
                setup.tls_port,
            ),
        )
        .expect("write Pebble's configuration");
        let log = dir.path().join("pebble.log");
        let out = || {
            std::fs::File::options()
                .create(true)
                .append(true)
                .open(&log)
                .expect("a log")
        };
        let dns_server = Command::new("pebble-challtestsrv")
            .args([
                "-defaultIPv4",
                &setup.validate_at.to_string(),
                "-defaultIPv6",
                "",
            ])
            .args(["-dns01", &format!("127.0.0.1:{dns}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .args(["-management", &format!("127.0.0.1:{dns_management}")])
            .stdin(Stdio::null())
            .stdout(out())
            .stderr(out())
            .spawn()
            .expect("pebble-challtestsrv starts");
        let pebble = Command::new("pebble")
            .arg("-config")
            .arg(&config)
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_AUTHZREUSE", "0")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdin(Stdio::null())
            .stdout(out())
            .stderr(out())
            .spawn()
            .expect("pebble starts");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der.clone()).expect("the CA as a root");
        let issuers_file = dir.path().join("issuers.pem");
        let pebble = Pebble {
            directory: format!("https://{listen}:{acme}/dir"),
            ca_file,
            issuers_file,
            management: SocketAddr::from((setup.listen, management)),
            listen: setup.listen,
            ca: client(roots),
            log,
            children: vec![dns_server, pebble],
            _dir: dir,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let dns_up = SocketAddr::from(([127, 0, 0, 1], dns_management));
        while tokio::net::TcpStream::connect((setup.listen, acme))
            .await
            .is_err()
            || tokio::net::TcpStream::connect(dns_up).await.is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "Pebble did not start: {}",
                pebble.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let root = pebble.root().await;
        std::fs::write(&pebble.issuers_file, root).expect("write Pebble's root");
        pebble
    }

    /// The root of the certificates Pebble issues, PEM: fetched from its
    /// management interface, which answers a moment after its directory.
    async fn root(&self) -> Vec<u8> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match get(
                self.management,
                &self.ca,
                &self.listen.to_string(),
                "/roots/0",
            )
            .await
            {
                Ok(root) => return root,
                Err(e) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "Pebble's root: {e:#}\n{}",
                    self.log()
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What Pebble and its DNS server logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Orders Pebble received so far (one log line each).
    pub fn orders(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("orders in the db"))
            .count()
    }

    /// Accounts made at Pebble so far (one log line each).
    pub fn accounts(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("accounts in memory"))
            .count()
    }

    /// A client that trusts the certificates Pebble issues (its root of
    /// the moment, fetched from its management interface), offering
    /// `http/1.1` and never resuming: each handshake shows the certificate
    /// served now.
    pub async fn issued_roots(&self) -> Arc<rustls::ClientConfig> {
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        let answer = self.root().await;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&answer).flatten() {
            roots.add(cert).expect("Pebble's root");
        }
        assert!(!roots.is_empty(), "Pebble gave no root");
        client(roots)
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn client(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    crate::tls::client_trusting(roots, &[b"http/1.1"])
}

/// `GET path` from Pebble's management interface.
async fn get(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    name: &str,
    path: &str,
) -> anyhow::Result<Vec<u8>> {
    let (answer, _, _) = crate::tls::get(addr, Arc::clone(config), name, path).await?;
    anyhow::ensure!(answer.status.is_success(), "{} from {path}", answer.status);
    Ok(answer.body.to_vec())
}
