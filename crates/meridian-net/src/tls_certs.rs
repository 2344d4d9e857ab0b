//! Certificate generation for test and development deployments: a private CA
//! ([`CertAuthority`]) and certificates it signs, as PEM, for `meridian up --tls`,
//! `meridian tls gen` and the tests.
//!
//! Keys are ECDSA P-256 (ring). Every issued certificate is valid for both server and
//! client authentication, so one node certificate serves its listeners and, later, its peer
//! links' mutual TLS. Key files are written readable by their owner only.

use crate::NetError;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A certificate and its private key, PEM-encoded.
#[derive(Clone, Debug)]
pub struct CertPem {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

/// A self-signed CA that issues certificates. Lives in memory: save its [`pem`](Self::pem)
/// as the `tls-ca-cert-file` of the servers and clients that are to trust it.
pub struct CertAuthority {
    params: CertificateParams,
    key: KeyPair,
    pem: CertPem,
}

fn gen_err(what: &str, e: rcgen::Error) -> NetError {
    NetError::Tls {
        what: what.into(),
        reason: e.to_string(),
    }
}

impl CertAuthority {
    /// A new CA whose subject is `common_name`.
    pub fn new(common_name: &str) -> Result<Self, NetError> {
        let params = Self::params(common_name)?;
        let key = KeyPair::generate().map_err(|e| gen_err("CA key", e))?;
        let cert = params.self_signed(&key).map_err(|e| gen_err("CA", e))?;
        let pem = CertPem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        };
        Ok(Self { params, key, pem })
    }

    /// The CA made earlier by [`new`](Self::new) with the same `common_name`, from its
    /// certificate and key (PEM): what it issues chains to that certificate, whose subject
    /// the issued certificates name and whose key signs them.
    pub fn load(common_name: &str, pem: CertPem) -> Result<Self, NetError> {
        let params = Self::params(common_name)?;
        let key = KeyPair::from_pem(&pem.key).map_err(|e| gen_err("CA key", e))?;
        Ok(Self { params, key, pem })
    }

    /// A CA's certificate parameters: its subject and what its key may sign.
    fn params(common_name: &str) -> Result<CertificateParams, NetError> {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| gen_err("CA", e))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ok(params)
    }

    /// The CA's certificate and key.
    pub fn pem(&self) -> &CertPem {
        &self.pem
    }

    /// A certificate for `common_name`, valid for the DNS names and IP addresses `names`
    /// (`localhost`, `127.0.0.1`), signed by this CA.
    pub fn issue(&self, common_name: &str, names: &[&str]) -> Result<CertPem, NetError> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).map_err(|e| gen_err("certificate", e))?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().map_err(|e| gen_err("certificate key", e))?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| gen_err("certificate", e))?;
        Ok(CertPem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// Writes `pem` as `<dir>/<name>.crt` and `<dir>/<name>.key` (the key owner-only);
/// answers the two paths.
pub fn write_pair(dir: &Path, name: &str, pem: &CertPem) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &pem.cert)?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(&key)?.write_all(pem.key.as_bytes())?;
    Ok((cert, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{ClientAuth, TlsSettings, client_config, server_config};

    #[test]
    fn issued_certificates_load_as_server_and_client_identities() {
        let dir = tempfile_dir();
        let ca = CertAuthority::new("test CA").unwrap();
        let node = ca.issue("node", &["localhost", "127.0.0.1"]).unwrap();
        let (ca_crt, _) = write_pair(&dir, "ca", ca.pem()).unwrap();
        let (crt, key) = write_pair(&dir, "node", &node).unwrap();
        let settings = TlsSettings {
            cert_file: crt.clone(),
            key_file: key.clone(),
            ca_cert_file: Some(ca_crt.clone()),
            auth_clients: ClientAuth::Yes,
            ..TlsSettings::default()
        };
        server_config(&settings, ClientAuth::Yes).unwrap();
        client_config(&ca_crt, Some((&crt, &key))).unwrap();
        // A key that is not the certificate's is refused.
        let other = ca.issue("other", &["localhost"]).unwrap();
        let (_, other_key) = write_pair(&dir, "other", &other).unwrap();
        let mismatched = TlsSettings {
            key_file: other_key,
            ..settings
        };
        assert!(server_config(&mismatched, ClientAuth::No).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "meridian-tls-certs-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
