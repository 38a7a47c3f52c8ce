//! The cluster CA and the manager's certificate. `nasd manager init` makes a CA (ECDSA P-256,
//! rcgen) and signs a server certificate for `localhost`, `127.0.0.1`, `::1` and any extra
//! names; clients trust only that CA (its DER file is named in their config). Sessions are
//! TLS 1.3 only, with the ring provider.
//!
//! Files under `DIR/tls/` (DER; the directory 0700, every file 0600 like all of the manager's
//! files, `nasd_private`): `ca.der`, `ca.key`, `server.der`, `server.key`.

use crate::{MgrError, MgrResult};
use nasd_proto::manager::MgrStatus;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::Path;
use std::sync::Arc;

fn err(what: &str, e: impl std::fmt::Display) -> MgrError {
    MgrError::new(MgrStatus::Internal, format!("{what}: {e}"))
}

fn write_private(path: &Path, bytes: &[u8]) -> MgrResult<()> {
    nasd_private::write_file(path, bytes).map_err(|e| err("writing", e))
}

/// The CA's parameters: the same every time, so a CA loaded again from its key
/// ([`issue`]) names itself as the one that was made.
fn ca_params() -> MgrResult<rcgen::CertificateParams> {
    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa};
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| err("CA params", e))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "nasd cluster CA");
    ca.distinguished_name = dn;
    Ok(ca)
}

/// Creates the CA and the server certificate in `dir/tls/`.
pub fn generate(dir: &Path, extra_names: &[String]) -> MgrResult<()> {
    let tls = dir.join("tls");
    nasd_private::create_dir(&tls).map_err(|e| err("creating the tls directory", e))?;
    let ca_key = rcgen::KeyPair::generate().map_err(|e| err("CA key", e))?;
    let ca_cert = ca_params()?
        .self_signed(&ca_key)
        .map_err(|e| err("CA certificate", e))?;
    write_private(&tls.join("ca.der"), ca_cert.der())?;
    write_private(&tls.join("ca.key"), &ca_key.serialize_der())?;
    server_certificate(&tls, &ca_cert, &ca_key, extra_names)
}

/// Gives the manager in `dir` the cluster CA of the one in `from` and a server certificate
/// of its own from that CA, for loopback and `extra_names` (another manager of the same
/// cluster, [`crate::setup::join`]): clients that trust the CA trust both.
pub fn issue(from: &Path, dir: &Path, extra_names: &[String]) -> MgrResult<()> {
    let (src, tls) = (from.join("tls"), dir.join("tls"));
    nasd_private::create_dir(&tls).map_err(|e| err("creating the tls directory", e))?;
    let read = |n: &str| {
        std::fs::read(src.join(n))
            .map_err(|e| err(&format!("reading {}", src.join(n).display()), e))
    };
    let (ca_der, ca_key_der) = (read("ca.der")?, zeroize::Zeroizing::new(read("ca.key")?));
    let ca_key = rcgen::KeyPair::try_from(ca_key_der.as_slice()).map_err(|e| err("CA key", e))?;
    let ca_cert = ca_params()?
        .self_signed(&ca_key)
        .map_err(|e| err("CA certificate", e))?;
    write_private(&tls.join("ca.der"), &ca_der)?;
    write_private(&tls.join("ca.key"), &ca_key_der)?;
    server_certificate(&tls, &ca_cert, &ca_key, extra_names)
}

/// Signs the server's key pair and certificate (`server.key`, `server.der` in `tls`) for
/// loopback and `extra_names`.
fn server_certificate(
    tls: &Path,
    ca_cert: &rcgen::Certificate,
    ca_key: &rcgen::KeyPair,
    extra_names: &[String],
) -> MgrResult<()> {
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    names.extend(extra_names.iter().cloned());
    let srv_key = KeyPair::generate().map_err(|e| err("server key", e))?;
    let mut srv = CertificateParams::new(names).map_err(|e| err("server params", e))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "nasd manager");
    srv.distinguished_name = dn;
    let srv_cert = srv
        .signed_by(&srv_key, ca_cert, ca_key)
        .map_err(|e| err("server certificate", e))?;
    write_private(&tls.join("server.der"), srv_cert.der())?;
    write_private(&tls.join("server.key"), &srv_key.serialize_der())?;
    Ok(())
}

/// The server side of TLS 1.3 from the files in `dir/tls/`.
pub fn server_config(dir: &Path) -> MgrResult<Arc<rustls::ServerConfig>> {
    let tls = dir.join("tls");
    let read = |n: &str| {
        std::fs::read(tls.join(n))
            .map_err(|e| err(&format!("reading {}", tls.join(n).display()), e))
    };
    let cert = CertificateDer::from(read("server.der")?);
    let ca = CertificateDer::from(read("ca.der")?);
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(read("server.key")?));
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .map_err(|e| err("TLS versions", e))?
    .with_no_client_auth()
    .with_single_cert(vec![cert, ca], key)
    .map_err(|e| err("server certificate", e))?;
    Ok(Arc::new(cfg))
}
