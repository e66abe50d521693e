//! The TLS files a `rediss://` connection uses, as the environment names them: read, and
//! checked to hold what each must before any handshake, so a wrong file is named at start.

use super::{CA_FILE_ENV, CLIENT_CERT_ENV, CLIENT_KEY_ENV, ConnectError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};

/// TLS files named by the environment (all PEM). Only meaningful with a `rediss://` URL.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsFiles {
    /// Trust exactly these CAs for the server's certificate instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain and key for mutual TLS; both or neither.
    pub client_cert: Option<PathBuf>,
    /// The private key of `client_cert`.
    pub client_key: Option<PathBuf>,
}

impl TlsFiles {
    /// Reads [`CA_FILE_ENV`], [`CLIENT_CERT_ENV`] and [`CLIENT_KEY_ENV`] (empty means unset).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConnectError> {
        let path = |var: &str| {
            lookup(var)
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from)
        };
        let files = Self {
            ca_file: path(CA_FILE_ENV),
            client_cert: path(CLIENT_CERT_ENV),
            client_key: path(CLIENT_KEY_ENV),
        };
        match (&files.client_cert, &files.client_key) {
            (Some(_), None) => Err(ConnectError::TlsSettings(format!(
                "{CLIENT_CERT_ENV} is set without {CLIENT_KEY_ENV}: mutual TLS needs both"
            ))),
            (None, Some(_)) => Err(ConnectError::TlsSettings(format!(
                "{CLIENT_KEY_ENV} is set without {CLIENT_CERT_ENV}: mutual TLS needs both"
            ))),
            _ => Ok(files),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// The files' contents, checked to hold what each must: certificates, a key.
    pub(super) fn load(&self) -> Result<redis::TlsCertificates, ConnectError> {
        let root_cert = self
            .ca_file
            .as_deref()
            .map(|p| read_certificates(CA_FILE_ENV, p))
            .transpose()?;
        let client_tls = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read_certificates(CLIENT_CERT_ENV, cert)?,
                client_key: read_key(key)?,
            }),
            _ => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}

fn read_file(var: &'static str, path: &Path) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|e| ConnectError::TlsFile {
        var,
        path: path.to_owned(),
        reason: format!("cannot read it: {e}"),
    })
}

/// The file's bytes, once it is known to hold at least one PEM certificate and nothing
/// malformed: an empty trust store would fail every handshake with a misleading message.
fn read_certificates(var: &'static str, path: &Path) -> Result<Vec<u8>, ConnectError> {
    let pem = read_file(var, path)?;
    let bad = |reason: String| ConnectError::TlsFile {
        var,
        path: path.to_owned(),
        reason,
    };
    let count = CertificateDer::pem_slice_iter(&pem)
        .try_fold(0usize, |n, c| c.map(|_| n + 1))
        .map_err(|e| bad(format!("malformed PEM: {e}")))?;
    if count == 0 {
        return Err(bad("no PEM certificate in it".to_owned()));
    }
    Ok(pem)
}

fn read_key(path: &Path) -> Result<Vec<u8>, ConnectError> {
    let pem = read_file(CLIENT_KEY_ENV, path)?;
    // The parser's message never includes key material.
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| ConnectError::TlsFile {
        var: CLIENT_KEY_ENV,
        path: path.to_owned(),
        reason: format!("no usable PEM private key: {e}"),
    })?;
    Ok(pem)
}
