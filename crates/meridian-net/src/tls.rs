//! TLS configuration: PEM files → rustls server and client configurations, the one place
//! every TLS listener (RESP, HTTP, S3) and the peer links get theirs.
//!
//! [`TlsSettings`] holds Redis's settings (`tls-cert-file`, `tls-key-file`,
//! `tls-ca-cert-file`, `tls-auth-clients`, `tls-protocols`, `tls-ciphersuites`);
//! [`server_config`] turns them into a [`rustls::ServerConfig`] and [`TlsServer`] keeps the
//! current one behind a lock so `CONFIG SET` can [`TlsServer::reload`] the files without a
//! restart. Guarantees:
//!
//! - rustls only, with the `ring` provider; TLS 1.2 and 1.3 (or what `tls-protocols` names).
//! - A reload either installs a configuration built completely from the new files or changes
//!   nothing: a bad file leaves the running configuration, and its error says which file.
//!   Connections already open keep the configuration they were accepted with.
//! - With `tls-auth-clients yes` a client without a certificate chaining to the CA is refused
//!   in the handshake; `optional` accepts one without a certificate but refuses a bad one.
//! - Peer links ([`PeerTls`], Redis's `tls-cluster yes`) are mutually authenticated: each end
//!   presents the node certificate and refuses the other unless its certificate chains to the
//!   cluster CA (`tls-ca-cert-file`), whatever `tls-auth-clients` says. Peers are dialled by
//!   address, so the name in a peer's certificate is not checked (as Redis's cluster bus does
//!   not): the CA is the trust boundary, and the cluster-secret handshake inside the session
//!   then proves which node it is.

use crate::NetError;
use parking_lot::RwLock;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme, SupportedProtocolVersion,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Redis's `tls-auth-clients`: whether clients must present a certificate signed by the CA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// Clients present no certificate (none is asked for).
    No,
    /// Every client must present a certificate chaining to `tls-ca-cert-file` (Redis's
    /// default).
    #[default]
    Yes,
    /// A certificate is asked for and checked when given, but not required.
    Optional,
}

impl ClientAuth {
    /// Parses Redis's spelling: `yes`, `no` or `optional` (any case).
    pub fn parse(s: &str) -> Result<Self, NetError> {
        match s.to_ascii_lowercase().as_str() {
            "yes" => Ok(Self::Yes),
            "no" => Ok(Self::No),
            "optional" => Ok(Self::Optional),
            _ => Err(tls_err(
                "tls-auth-clients",
                format!("'{s}' is not yes, no or optional"),
            )),
        }
    }

    /// Redis's spelling, as `CONFIG GET` answers it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::No => "no",
            Self::Yes => "yes",
            Self::Optional => "optional",
        }
    }
}

/// Where a TLS listener's material is and how it negotiates (Redis's `tls-*` settings).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificate chain the server presents (PEM; leaf first).
    pub cert_file: PathBuf,
    /// The private key of that certificate (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// The CA certificates client certificates must chain to (PEM); required unless
    /// `auth_clients` is `No`.
    pub ca_cert_file: Option<PathBuf>,
    /// Whether clients must present a certificate.
    pub auth_clients: ClientAuth,
    /// Space-separated protocol names (`TLSv1.2 TLSv1.3`); empty: both.
    pub protocols: String,
    /// Colon-separated TLS 1.3 suite names (`TLS_AES_128_GCM_SHA256:...`, OpenSSL's names as
    /// Redis takes them, or rustls's `TLS13_` ones); empty: rustls's defaults. TLS 1.2 suites
    /// are not restricted by it (Redis's `tls-ciphers` is not supported).
    pub ciphersuites: String,
}

/// The ring provider restricted to `ciphersuites` (TLS 1.3 names; TLS 1.2 suites stay).
fn provider(ciphersuites: &str) -> Result<Arc<CryptoProvider>, NetError> {
    // Deprecated only because ring has no post-quantum key exchange; ring is chosen on
    // purpose (aws-lc-rs needs cmake and a C build), so X25519 and the NIST curves it is.
    #[allow(deprecated)]
    let mut p = rustls::crypto::ring::default_provider();
    let wanted: Vec<String> = ciphersuites
        .split([':', ' ', ','])
        .filter(|s| !s.is_empty())
        .map(|s| s.to_ascii_uppercase().replacen("TLS_", "TLS13_", 1))
        .collect();
    if wanted.is_empty() {
        return Ok(Arc::new(p));
    }
    for name in &wanted {
        let known = p
            .cipher_suites
            .iter()
            .any(|s| s.suite().as_str() == Some(name.as_str()));
        if !known {
            return Err(tls_err(
                "tls-ciphersuites",
                format!(
                    "unknown TLS 1.3 suite '{}' (known: TLS_AES_128_GCM_SHA256, \
                     TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256)",
                    name.replacen("TLS13_", "TLS_", 1)
                ),
            ));
        }
    }
    p.cipher_suites.retain(|s| {
        s.version() != &rustls::version::TLS13
            || wanted
                .iter()
                .any(|w| s.suite().as_str() == Some(w.as_str()))
    });
    Ok(Arc::new(p))
}

/// The versions `tls-protocols` names (`TLSv1.2`, `TLSv1.3`); empty: both.
fn protocols(s: &str) -> Result<Vec<&'static SupportedProtocolVersion>, NetError> {
    let mut versions = Vec::new();
    for name in s.split_whitespace() {
        let v = match name.to_ascii_lowercase().as_str() {
            "tlsv1.2" => &rustls::version::TLS12,
            "tlsv1.3" => &rustls::version::TLS13,
            _ => {
                return Err(tls_err(
                    "tls-protocols",
                    format!("'{name}' is not supported (TLSv1.2 and TLSv1.3 are)"),
                ));
            }
        };
        if !versions.contains(&v) {
            versions.push(v);
        }
    }
    if versions.is_empty() {
        versions = vec![&rustls::version::TLS13, &rustls::version::TLS12];
    }
    Ok(versions)
}

fn tls_err(what: impl Into<String>, reason: impl ToString) -> NetError {
    NetError::Tls {
        what: what.into(),
        reason: reason.to_string(),
    }
}

/// Reads every certificate in a PEM file (at least one).
pub fn load_certs(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, NetError> {
    let what = || format!("{setting} {}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_err(what(), e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err(what(), e))?;
    if certs.is_empty() {
        return Err(tls_err(what(), "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// Reads the private key of a PEM file.
pub fn load_key(path: &Path, setting: &str) -> Result<PrivateKeyDer<'static>, NetError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| tls_err(format!("{setting} {}", path.display()), e))
}

/// A root store of every certificate in a CA file.
pub fn load_roots(path: &Path, setting: &str) -> Result<Arc<RootCertStore>, NetError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path, setting)? {
        roots
            .add(cert)
            .map_err(|e| tls_err(format!("{setting} {}", path.display()), e))?;
    }
    Ok(Arc::new(roots))
}

/// Builds a server configuration from `s`; `auth_clients` overrides `s.auth_clients` (the
/// HTTP listeners ask for no client certificate).
pub fn server_config(s: &TlsSettings, auth_clients: ClientAuth) -> Result<ServerConfig, NetError> {
    let provider = provider(&s.ciphersuites)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&protocols(&s.protocols)?)
        .map_err(|e| tls_err("tls-protocols/tls-ciphersuites", e))?;
    let builder = match auth_clients {
        ClientAuth::No => builder.with_no_client_auth(),
        ClientAuth::Yes | ClientAuth::Optional => {
            let ca = s.ca_cert_file.as_deref().ok_or_else(|| {
                tls_err(
                    "tls-ca-cert-file",
                    "needed to verify client certificates (or set tls-auth-clients no)",
                )
            })?;
            let mut v = WebPkiClientVerifier::builder_with_provider(
                load_roots(ca, "tls-ca-cert-file")?,
                provider,
            );
            if auth_clients == ClientAuth::Optional {
                v = v.allow_unauthenticated();
            }
            let verifier = v.build().map_err(|e| tls_err("tls-ca-cert-file", e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let certs = load_certs(&s.cert_file, "tls-cert-file")?;
    let key = load_key(&s.key_file, "tls-key-file")?;
    builder
        .with_single_cert(certs, key)
        .map_err(|e| tls_err("tls-cert-file/tls-key-file", e))
}

/// A client configuration trusting the CAs of `ca_file`, presenting `identity` (certificate
/// and key files) when given. What tests, `meridian` tools and peer links connect with.
pub fn client_config(
    ca_file: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientConfig, NetError> {
    let provider = provider("")?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&protocols("")?)
        .map_err(|e| tls_err("client", e))?
        .with_root_certificates(load_roots(ca_file, "CA file")?);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert, "certificate")?, load_key(key, "key")?)
            .map_err(|e| tls_err("client certificate", e)),
    }
}

/// What peer links encrypt with: an acceptor for connections from peers and a connector for
/// connections to them, both with the node certificate and the cluster CA.
#[derive(Clone)]
pub struct PeerTls {
    /// Accepts a peer: its certificate must chain to the cluster CA.
    pub acceptor: TlsAcceptor,
    /// Connects to a peer: presents the node certificate, checks the peer's chain.
    pub connector: TlsConnector,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls")
    }
}

impl PeerTls {
    /// Builds both ends from `s`, which must name a CA (`tls-ca-cert-file`).
    pub fn new(s: &TlsSettings) -> Result<Self, NetError> {
        let ca = s.ca_cert_file.as_deref().ok_or_else(|| {
            tls_err(
                "tls-ca-cert-file",
                "peer links (tls-cluster) need the cluster CA both ends' certificates chain to",
            )
        })?;
        let server = server_config(s, ClientAuth::Yes)?;
        let provider = provider(&s.ciphersuites)?;
        let chain_only = ChainOnlyVerifier {
            inner: WebPkiServerVerifier::builder_with_provider(
                load_roots(ca, "tls-ca-cert-file")?,
                provider.clone(),
            )
            .build()
            .map_err(|e| tls_err("tls-ca-cert-file", e))?,
        };
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&protocols(&s.protocols)?)
            .map_err(|e| tls_err("tls-protocols/tls-ciphersuites", e))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(chain_only))
            .with_client_auth_cert(
                load_certs(&s.cert_file, "tls-cert-file")?,
                load_key(&s.key_file, "tls-key-file")?,
            )
            .map_err(|e| tls_err("tls-cert-file/tls-key-file", e))?;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// The name a peer at `addr` is dialled by (not checked against its certificate).
    pub fn server_name(addr: std::net::SocketAddr) -> ServerName<'static> {
        ServerName::IpAddress(addr.ip().into())
    }
}

/// Checks a peer's certificate chain against the cluster CA and accepts it whatever name it
/// carries: a peer is dialled by an address its certificate need not list.
#[derive(Debug)]
struct ChainOnlyVerifier {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain before the name, so a name error means the chain is good.
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A TLS listener's settings and the configurations built from them, replaced together by
/// [`reload`](Self::reload). Cheap to read: one lock per accepted connection.
#[derive(Debug)]
pub struct TlsServer {
    current: RwLock<Built>,
    /// Whether peer links use TLS too (`tls-cluster`): then every reload must build them.
    peers: bool,
}

#[derive(Debug)]
struct Built {
    settings: TlsSettings,
    /// With `settings.auth_clients` (RESP).
    resp: Arc<ServerConfig>,
    /// Without client certificates (HTTP and S3).
    https: Arc<ServerConfig>,
    /// Peer links', when they use TLS.
    peer: Option<PeerTls>,
}

impl Built {
    fn new(settings: TlsSettings, peers: bool) -> Result<Self, NetError> {
        Ok(Self {
            resp: Arc::new(server_config(&settings, settings.auth_clients)?),
            https: Arc::new(server_config(&settings, ClientAuth::No)?),
            peer: peers.then(|| PeerTls::new(&settings)).transpose()?,
            settings,
        })
    }
}

impl TlsServer {
    /// Loads `settings`' files; fails (saying which file) if any is missing or bad.
    pub fn new(settings: TlsSettings) -> Result<Self, NetError> {
        Self::build(settings, false)
    }

    /// As [`new`](Self::new), and peer links use TLS too: `settings` must name the cluster CA.
    pub fn with_peers(settings: TlsSettings) -> Result<Self, NetError> {
        Self::build(settings, true)
    }

    fn build(settings: TlsSettings, peers: bool) -> Result<Self, NetError> {
        Ok(Self {
            current: RwLock::new(Built::new(settings, peers)?),
            peers,
        })
    }

    /// What the next peer connection encrypts with; `None` when peer links are plaintext.
    pub fn peer(&self) -> Option<PeerTls> {
        self.current.read().peer.clone()
    }

    /// The settings in force.
    pub fn settings(&self) -> TlsSettings {
        self.current.read().settings.clone()
    }

    /// An acceptor for the next RESP connection (the configuration in force now).
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().resp.clone())
    }

    /// An acceptor for the next HTTPS connection: the same certificate, no client
    /// certificates asked for.
    pub fn https_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().https.clone())
    }

    /// Rebuilds from `settings` (rereading every file) and installs the result for new
    /// connections; on error nothing changes.
    pub fn reload(&self, settings: TlsSettings) -> Result<(), NetError> {
        let built = Built::new(settings, self.peers)?;
        *self.current.write() = built;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_are_redis_spellings() {
        assert_eq!(protocols("TLSv1.2").unwrap(), vec![&rustls::version::TLS12]);
        assert_eq!(protocols("tlsv1.3 TLSv1.3").unwrap().len(), 1);
        assert_eq!(protocols("").unwrap().len(), 2);
        assert!(matches!(protocols("TLSv1.1"), Err(NetError::Tls { .. })));
    }

    #[test]
    fn ciphersuites_restrict_tls13_only() {
        let p = provider("TLS_AES_256_GCM_SHA384").unwrap();
        let tls13: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13)
            .collect();
        assert_eq!(tls13.len(), 1);
        assert!(
            p.cipher_suites
                .iter()
                .any(|s| s.version() == &rustls::version::TLS12)
        );
        assert!(provider("TLS_NOPE").is_err());
    }

    #[test]
    fn auth_clients_parses_redis_values() {
        assert_eq!(ClientAuth::parse("YES").unwrap(), ClientAuth::Yes);
        assert_eq!(ClientAuth::parse("optional").unwrap(), ClientAuth::Optional);
        assert!(ClientAuth::parse("maybe").is_err());
    }
}
