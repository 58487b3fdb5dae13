//! The lab's private CA and the certificates it signs (ring-backed rcgen), written to
//! `<dir>/tls/`, and the `[tls]` settings clients use with them.

use std::fs;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, Error, ExtendedKeyUsagePurpose,
    IsCa, KeyPair, KeyUsagePurpose,
};

use super::LabError;
use super::state::{io_error, write_file};
use crate::TlsSettings;

/// Subdirectory of the lab's CA and certificates.
pub(super) const TLS_DIR: &str = "tls";

/// The `[tls]` table of a TLS lab: its CA, and the client certificate every node requires.
pub(super) fn tls_settings(dir: &Path) -> TlsSettings {
    let tls = dir.join(TLS_DIR);
    TlsSettings {
        ca_file: Some(tls.join("ca.crt")),
        cert_file: Some(tls.join("client.crt")),
        key_file: Some(tls.join("client.key")),
        server_name: None,
    }
}

/// Writes a fresh CA, a certificate for the nodes (server and, for replication and Sentinel
/// links, client) and one for clients, all for 127.0.0.1 and localhost.
pub(super) fn write_certificates(dir: &Path) -> Result<(), LabError> {
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    let tls = dir.join(TLS_DIR);
    fs::create_dir_all(&tls).map_err(io_error("create TLS directory", &tls))?;
    let failed = |error: rcgen::Error| LabError::Certificates(error.to_string());
    let ca = authority().map_err(failed)?;
    write_file(&tls.join("ca.crt"), &ca.pem())?;
    for (name, usages) in [
        ("node", vec![ServerAuth, ClientAuth]),
        ("client", vec![ClientAuth]),
    ] {
        let (certificate, key) = leaf(&ca, name, usages).map_err(failed)?;
        write_file(&tls.join(format!("{name}.crt")), &certificate)?;
        write_file(&tls.join(format!("{name}.key")), &key)?;
    }
    Ok(())
}

fn authority() -> Result<CertifiedIssuer<'static, KeyPair>, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "quorumlock lab CA");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate()?)
}

/// A certificate and its private key, both PEM.
fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    usages: Vec<ExtendedKeyUsagePurpose>,
) -> Result<(String, String), Error> {
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("quorumlock lab {name}"));
    params.extended_key_usages = usages;
    let key = KeyPair::generate()?;
    let certificate = params.signed_by(&key, ca)?;
    Ok((certificate.pem(), key.serialize_pem()))
}
