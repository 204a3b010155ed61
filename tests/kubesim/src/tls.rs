//! The generated certificate authority, per-cluster serving certificates and kubeconfig files.
//!
//! It owns key material and the kubeconfig text. It must not open sockets.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Errors while making certificates or writing kubeconfigs.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen failed.
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls rejected the generated material.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// Writing a file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// A self-signed CA that signs one serving certificate per cluster.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    /// PEM of the CA certificate, embedded in kubeconfigs.
    pub ca_pem: String,
}

/// Shows the CA certificate, never its private key.
impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("ca_pem", &self.ca_pem)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// Generates a fresh CA.
    pub fn generate() -> Result<Authority, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kubesim-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let ca_pem = cert.pem();
        Ok(Authority {
            issuer: Issuer::new(params, key),
            ca_pem,
        })
    }

    /// A rustls server configuration for a cluster reached at `ip` (and `localhost`).
    pub fn server_config(
        &self,
        cluster: &str,
        ip: IpAddr,
    ) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), format!("{cluster}.kubesim")])?;
        params.subject_alt_names.push(SanType::IpAddress(ip));
        params
            .distinguished_name
            .push(DnType::CommonName, format!("kubesim-{cluster}"));
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, private)?;
        // HTTP/1.1 only: watches are chunked responses, which is what kube clients expect there.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Kubeconfig text for one cluster and one bearer token. `ca_pem` is None for plain HTTP.
pub fn kubeconfig(
    cluster: &str,
    server: &str,
    ca_pem: Option<&str>,
    user: &str,
    token: &str,
    namespace: &str,
) -> String {
    let ca = match ca_pem {
        Some(pem) => format!(
            "    certificate-authority-data: {}\n",
            base64::engine::general_purpose::STANDARD.encode(pem)
        ),
        None => String::new(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster}\n  cluster:\n    server: {server}\n{ca}users:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: {cluster}\n  context:\n    cluster: {cluster}\n    user: {user}\n    namespace: {namespace}\ncurrent-context: {cluster}\npreferences: {{}}\n"
    )
}

/// Writes `text` to `path` (mode 0600: it holds a token).
pub fn write_private(path: &Path, text: &str) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| TlsError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}
