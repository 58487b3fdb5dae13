//! TLS client construction: the rustls client configuration of a `[tls]` table, built by
//! every client the engine opens and by the lab's control client, and built once when the
//! file is loaded so that a wrong path is reported then. Errors name the key at fault.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::{ConfigError, TlsSettings, invalid};

impl TlsSettings {
    /// The rustls client configuration these settings describe (ring only), for a client
    /// that speaks TLS to the same servers as the engine. Errors name the key at fault.
    pub fn client_config(&self) -> Result<ClientConfig, ConfigError> {
        rustls_config(self)
    }
}

/// The rustls client configuration of a `[tls]` table. Errors name the key at fault.
fn rustls_config(settings: &TlsSettings) -> Result<ClientConfig, ConfigError> {
    let identity = client_identity(settings)?;
    // ring only: asking rustls for "the" default provider would fail if another dependency
    // ever enabled a second one.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = Arc::new(root_store(settings.ca_file.as_deref())?);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| invalid("tls", error.to_string()))?;
    let builder = match &settings.server_name {
        None => builder.with_root_certificates(roots),
        Some(name) => {
            let verifier = FixedName::new(name, roots, provider)?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
        }
    };
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|error| {
            invalid(
                "tls.key_file",
                format!("does not fit tls.cert_file: {error}"),
            )
        }),
    }
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The client certificate chain and key for mutual TLS, when both are configured.
fn client_identity(settings: &TlsSettings) -> Result<Option<Identity>, ConfigError> {
    match (&settings.cert_file, &settings.key_file) {
        (None, None) => Ok(None),
        (Some(cert_file), Some(key_file)) => Ok(Some((
            certificates("tls.cert_file", cert_file)?,
            private_key(key_file)?,
        ))),
        (Some(_), None) => Err(invalid(
            "tls.key_file",
            "is needed with tls.cert_file (the client certificate's private key)",
        )),
        (None, Some(_)) => Err(invalid(
            "tls.cert_file",
            "is needed with tls.key_file (the client certificate it belongs to)",
        )),
    }
}

fn root_store(ca_file: Option<&Path>) -> Result<RootCertStore, ConfigError> {
    let mut roots = RootCertStore::empty();
    let certificates = match ca_file {
        Some(path) => certificates("tls.ca_file", path)?,
        None => {
            let loaded = rustls_native_certs::load_native_certs();
            if loaded.certs.is_empty() {
                let reason = loaded
                    .errors
                    .first()
                    .map_or("none found".to_string(), ToString::to_string);
                return Err(invalid(
                    "tls.ca_file",
                    format!(
                        "not given, and the system's root certificates cannot be used ({reason}); set it to your CA's PEM file"
                    ),
                ));
            }
            loaded.certs
        }
    };
    for certificate in certificates {
        roots.add(certificate).map_err(|error| {
            invalid(
                "tls.ca_file",
                format!("holds a certificate rustls rejects: {error}"),
            )
        })?;
    }
    Ok(roots)
}

fn read(key: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    fs::read(path).map_err(|error| invalid(key, format!("cannot read {}: {error}", path.display())))
}

fn certificates(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let pem = read(key, path)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| invalid(key, format!("{} is not valid PEM: {error}", path.display())))?;
    if certificates.is_empty() {
        return Err(invalid(
            key,
            format!(
                "{} holds no PEM certificate (BEGIN CERTIFICATE)",
                path.display()
            ),
        ));
    }
    Ok(certificates)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, ConfigError> {
    let pem = read("tls.key_file", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|error| {
        invalid(
            "tls.key_file",
            format!(
                "{} holds no usable PEM private key: {error}",
                path.display()
            ),
        )
    })
}

/// Checks every server certificate against one configured name instead of the host dialled:
/// fred connects to the IP address Sentinel reports, which a certificate for a DNS name does
/// not cover.
#[derive(Debug)]
struct FixedName {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl FixedName {
    fn new(
        name: &str,
        roots: Arc<RootCertStore>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, ConfigError> {
        let name = ServerName::try_from(name.to_string()).map_err(|error| {
            invalid(
                "tls.server_name",
                format!("`{name}` is not a DNS name or IP address: {error}"),
            )
        })?;
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|error| invalid("tls.ca_file", error.to_string()))?;
        Ok(FixedName { inner, name })
    }
}

impl ServerCertVerifier for FixedName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _dialled: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .verify_tls12_signature(message, certificate, signature)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .verify_tls13_signature(message, certificate, signature)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_tls_key() {
        let missing = TlsSettings {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let message = rustls_config(&missing).err().map(|e| e.to_string());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("tls.ca_file") && m.contains("cannot read")),
            "{message:?}"
        );
        let half = TlsSettings {
            cert_file: Some("/nonexistent/client.pem".into()),
            ..Default::default()
        };
        let message = rustls_config(&half).err().map(|e| e.to_string());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("tls.key_file")),
            "{message:?}"
        );
    }
}
