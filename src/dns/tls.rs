//! TLS for DNS over TLS (RFC 7858): the server certificate and the rustls
//! server configuration.
//!
//! [`CertStore`] loads a certificate chain and its private key from PEM
//! files, checks that they belong together and hands the current pair to
//! every new handshake. [`CertStore::reload`], driven by [`watch`], swaps in
//! changed files: new handshakes get the new certificate, established
//! connections keep theirs, and broken files leave the old pair in place.
//! [`server_config`] builds the rustls configuration on the ring provider,
//! advertising ALPN `dot` (RFC 8310).
//!
//! This module must not know DNS: framing and answering stay in `server`,
//! which runs its connection loop over the streams this configuration
//! accepts. It opens no sockets.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::ring;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, ServerConfig};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::filewatch::{FileWatch, Kept, Offer};

/// The ALPN protocol id of DNS over TLS (RFC 8310 section 8.1).
pub(crate) const ALPN_DOT: &[u8] = b"dot";

/// [`watch`] polls no more often than this, whatever it is asked.
pub(crate) const MIN_POLL: Duration = Duration::from_millis(100);

/// Where the server certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, end-entity certificate first.
    pub cert: PathBuf,
    /// PEM private key of the end-entity certificate: PKCS#8
    /// (`PRIVATE KEY`), PKCS#1 RSA (`RSA PRIVATE KEY`) or SEC1 EC
    /// (`EC PRIVATE KEY`), unencrypted. It may be the same file as `cert`.
    pub key: PathBuf,
}

/// Why a certificate could not be loaded. Each message names the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A file is not well-formed PEM.
    #[error("{}: malformed PEM: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: pem::Error,
    },
    /// The certificate file holds no `CERTIFICATE` section.
    #[error("{}: no certificate (PEM CERTIFICATE section) found", path.display())]
    NoCertificate {
        /// The certificate file.
        path: PathBuf,
    },
    /// The end-entity certificate is not a parsable X.509 certificate.
    #[error("{}: bad certificate: {source}", path.display())]
    BadCertificate {
        /// The certificate file.
        path: PathBuf,
        /// The cause.
        source: rustls::Error,
    },
    /// The key file holds no private key section.
    #[error(
        "{}: no private key found (expected a PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY section)",
        path.display()
    )]
    NoPrivateKey {
        /// The key file.
        path: PathBuf,
    },
    /// The key file holds only an encrypted private key.
    #[error("{}: the private key is encrypted; an unencrypted key is needed", path.display())]
    EncryptedKey {
        /// The key file.
        path: PathBuf,
    },
    /// The private key is not one ring can sign with (RSA, ECDSA P-256 or
    /// P-384, Ed25519), or its encoding is broken.
    #[error("{}: unsupported or malformed private key: {source}", path.display())]
    UnsupportedKey {
        /// The key file.
        path: PathBuf,
        /// The cause.
        source: rustls::Error,
    },
    /// The private key is not the key of the end-entity certificate.
    #[error(
        "the private key in {} does not match the certificate in {}",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// rustls refused the configuration (the provider lacks the protocol
    /// versions; not expected with ring).
    #[error("TLS configuration: {0}")]
    Config(#[source] rustls::Error),
}

/// The server certificate new handshakes get, swappable at run time.
///
/// It is the rustls certificate resolver: every handshake takes the pair
/// current at that moment, so [`CertStore::reload`] changes what new
/// connections see and nothing else.
pub(crate) struct CertStore {
    files: TlsFiles,
    current: ArcSwap<CertifiedKey>,
    /// The file bytes behind `current`; the lock also serialises reloads.
    loaded: Mutex<Loaded>,
}

/// File contents as read, compared to tell a change from a touch.
#[derive(PartialEq, Eq)]
struct Loaded {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl CertStore {
    /// Reads and checks `files`: the chain must hold a certificate, the key
    /// must be one ring supports and must match the first certificate.
    pub(crate) fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let loaded = read(files)?;
        let key = certified_key(files, &loaded)?;
        Ok(Self {
            files: files.clone(),
            current: ArcSwap::from_pointee(key),
            loaded: Mutex::new(loaded),
        })
    }

    /// Rereads the files. Returns `Ok(false)` when their bytes are those
    /// already loaded (a touch is not a change), `Ok(true)` when a new pair
    /// was checked and now serves new handshakes. On error the previous
    /// certificate stays in use and the same files are retried next call.
    pub(crate) fn reload(&self) -> Result<bool, TlsError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let now = read(&self.files)?;
        if now == *loaded {
            return Ok(false);
        }
        let key = certified_key(&self.files, &now)?;
        self.current.store(Arc::new(key));
        *loaded = now;
        Ok(true)
    }

    /// The certificate and key new handshakes get now.
    #[cfg(test)]
    pub(crate) fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// The files this store reads.
    pub(crate) fn files(&self) -> &TlsFiles {
        &self.files
    }
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The rustls server configuration for DNS over TLS: ring provider, TLS 1.2
/// and 1.3, no client authentication, certificates from `store`, ALPN
/// `dot` advertised.
///
/// A client that offers no ALPN is served; one that offers ALPN without
/// `dot` is refused by rustls (RFC 7301 `no_application_protocol`).
pub(crate) fn server_config(store: Arc<CertStore>) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![ALPN_DOT.to_vec()];
    Ok(Arc::new(config))
}

/// Watches `store`'s files until `shutdown` (notify, and a poll every
/// `every`, at least [`MIN_POLL`]), reloading when their bytes change.
///
/// `on_reload` hears of state changes, not of every poll:
/// - `Ok(true)`: a new certificate was loaded (logged at info);
/// - `Err(_)`: the files are broken and the previous certificate stays
///   (logged at warn, naming the file); the same error after later changes
///   is not repeated;
/// - `Ok(false)`: after an error, the files are back to the certificate
///   in use (logged at info).
///
/// Unchanged files are not reported.
pub(crate) async fn watch(
    store: Arc<CertStore>,
    every: Duration,
    shutdown: CancellationToken,
    mut on_reload: impl FnMut(Result<bool, TlsError>),
) {
    let files = store.files();
    let cert = files.cert.display().to_string();
    let mut changes = FileWatch::new(
        vec![files.cert.clone(), files.key.clone()],
        every.max(MIN_POLL),
    );
    // The first look reloads: files changed since `CertStore::load` are not
    // missed, and the same bytes are no change.
    let mut kept = Kept::new(());
    loop {
        tokio::select! {
            () = changes.changed() => {}
            () = shutdown.cancelled() => return,
        }
        let polled = store.clone();
        let outcome = match tokio::task::spawn_blocking(move || polled.reload()).await {
            Ok(outcome) => outcome,
            Err(e) => {
                warn!(error = %e, %cert, "TLS certificate reload task failed; no longer watching");
                return;
            }
        };
        let changed = outcome.as_ref().is_ok_and(|c| *c);
        match kept.offer(outcome.map(drop)) {
            Offer::Replaced { .. } if changed => {
                info!(%cert, "TLS certificate reloaded");
                on_reload(Ok(true));
            }
            Offer::Replaced { recovered: true } => {
                info!(%cert, "TLS certificate files are back to the certificate in use");
                on_reload(Ok(false));
            }
            Offer::Replaced { recovered: false } | Offer::StillFailing(_) => {}
            Offer::Failed(e) => {
                warn!(error = %e, "TLS certificate reload failed; keeping the previous certificate");
                on_reload(Err(e));
            }
        }
    }
}

/// Reads both files. The certificate is read again after the key and the
/// pair retried if it changed meanwhile, so files replaced together (a
/// Kubernetes Secret volume swaps both at once) are not seen half old, half
/// new.
fn read(files: &TlsFiles) -> Result<Loaded, TlsError> {
    let mut cert = read_file(&files.cert)?;
    let mut key = read_file(&files.key)?;
    for _ in 0..3 {
        let again = read_file(&files.cert)?;
        if again == cert {
            break;
        }
        cert = again;
        key = read_file(&files.key)?;
    }
    Ok(Loaded { cert, key })
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Parses and checks one certificate chain and key.
fn certified_key(files: &TlsFiles, loaded: &Loaded) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(&loaded.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: files.cert.clone(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: files.cert.clone(),
        });
    }
    let key = match PrivateKeyDer::from_pem_slice(&loaded.key) {
        Ok(key) => key,
        Err(_) if encrypted(&loaded.key) => {
            return Err(TlsError::EncryptedKey {
                path: files.key.clone(),
            });
        }
        Err(pem::Error::NoItemsFound) => {
            return Err(TlsError::NoPrivateKey {
                path: files.key.clone(),
            });
        }
        Err(source) => {
            return Err(TlsError::Pem {
                path: files.key.clone(),
                source,
            });
        }
    };
    let signer =
        ring::sign::any_supported_type(&key).map_err(|source| TlsError::UnsupportedKey {
            path: files.key.clone(),
            source,
        })?;
    let certified = CertifiedKey::new(chain, signer);
    match certified.keys_match() {
        // Unknown: the key cannot give its public half. ring's keys all
        // can; accepting it anyway is what rustls's own loader does.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
            })
        }
        Err(source) => Err(TlsError::BadCertificate {
            path: files.cert.clone(),
            source,
        }),
    }
}

/// Whether PEM text holds an encrypted key: PKCS#8 `ENCRYPTED PRIVATE KEY`
/// or a legacy OpenSSL `Proc-Type: 4,ENCRYPTED` header.
fn encrypted(pem: &[u8]) -> bool {
    let has = |needle: &[u8]| pem.windows(needle.len()).any(|w| w == needle);
    has(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") || has(b"Proc-Type: 4,ENCRYPTED")
}

#[cfg(test)]
mod tests;
