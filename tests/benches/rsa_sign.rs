//! RSA-2048 signatures per second on one core with aws-lc-rs, the provider
//! Picket's TLS uses: the cost of a full handshake with an RSA
//! certificate. Beside `openssl speed -seconds 2 rsa2048` it says how much
//! of the handshake CPU gap to nginx is the signature (docs/benchmarks.md).
//!
//!   cargo bench -p picket-tests --bench rsa_sign
//!
//! Needs openssl (to make the key).

use std::process::Command;
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{RSA_PSS_SHA256, RsaKeyPair};
use tokio::time::Instant;

fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let key = dir.path().join("key.pem");
    let pkcs8 = dir.path().join("key.der");
    let openssl = |args: &[&str]| {
        let ran = Command::new("openssl")
            .args(args)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl runs");
        assert!(ran.success(), "openssl {args:?} failed");
    };
    let (key_path, pkcs8_path) = (key.to_string_lossy(), pkcs8.to_string_lossy());
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        &key_path,
    ]);
    openssl(&[
        "pkcs8",
        "-topk8",
        "-nocrypt",
        "-in",
        &key_path,
        "-outform",
        "DER",
        "-out",
        &pkcs8_path,
    ]);
    let der = std::fs::read(&pkcs8).expect("the key");
    let pair = RsaKeyPair::from_pkcs8(&der).expect("a PKCS#8 RSA key");
    let rng = SystemRandom::new();
    let mut signature = vec![0; pair.public_modulus_len()];
    let message = [7u8; 64];
    let started = Instant::now();
    let mut signed = 0u32;
    while started.elapsed() < Duration::from_secs(2) {
        pair.sign(&RSA_PSS_SHA256, &rng, &message, &mut signature)
            .expect("a signature");
        signed += 1;
    }
    let rate = f64::from(signed) / started.elapsed().as_secs_f64();
    println!("ring RSA-2048 (PSS, SHA-256): {rate:.0} signatures/s on one core");
}
