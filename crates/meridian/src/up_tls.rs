//! The certificates of `meridian up --tls` and `meridian tls gen`: a private CA made for the
//! run, a certificate per node (valid for `localhost` and the node's loopback address) and
//! one client certificate, written as PEM files (`ca.crt`, `NAME.crt`/`NAME.key`,
//! `client.crt`/`client.key`; keys owner-only) into one directory.
//!
//! The CA's key is written too (`ca.key`, owner-only), so `meridian tls gen --ca DIR` can
//! issue more certificates from it later: one per machine of a cluster, all chaining to one
//! CA.

use anyhow::Context;
use clap::Args;
use meridian_net::tls_certs::{CertAuthority, write_pair};
use meridian_server::config::RespSection;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The subject of the CAs made here (a reused CA must carry it: issued certificates name it).
const CA_NAME: &str = "Meridian development CA";

/// A run's CA and where its files are.
pub(crate) struct RunTls {
    ca: CertAuthority,
    /// The directory of every file.
    pub(crate) dir: PathBuf,
    /// The CA certificate clients trust (`--cacert`).
    pub(crate) ca_file: PathBuf,
    /// The client certificate and key (`--cert`, `--key`).
    pub(crate) client: (PathBuf, PathBuf),
}

impl RunTls {
    /// Makes the CA and the client certificate, written into `dir`.
    pub(crate) fn create(dir: &Path) -> anyhow::Result<Self> {
        let ca = CertAuthority::new(CA_NAME)?;
        let (ca_file, _) = write_pair(dir, "ca", ca.pem())
            .with_context(|| format!("writing {}", dir.display()))?;
        Self::with_ca(dir, ca, ca_file)
    }

    /// Reuses the CA an earlier `tls gen` or `up --tls` wrote into `ca_dir` (its `ca.crt`
    /// and `ca.key`), copying its certificate (not its key) into `dir`, and makes the client
    /// certificate there.
    fn reuse(dir: &Path, ca_dir: &Path) -> anyhow::Result<Self> {
        let read = |name: &str| {
            let path = ca_dir.join(name);
            std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
        };
        let pem = meridian_net::tls_certs::CertPem {
            cert: read("ca.crt")?,
            key: read("ca.key")?,
        };
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let ca_file = dir.join("ca.crt");
        if ca_file != ca_dir.join("ca.crt") {
            std::fs::write(&ca_file, &pem.cert)
                .with_context(|| format!("writing {}", ca_file.display()))?;
        }
        let ca = CertAuthority::load(CA_NAME, pem)?;
        Self::with_ca(dir, ca, ca_file)
    }

    fn with_ca(dir: &Path, ca: CertAuthority, ca_file: PathBuf) -> anyhow::Result<Self> {
        let client = ca.issue("meridian-client", &["meridian-client"])?;
        let client = write_pair(dir, "client", &client)?;
        Ok(Self {
            ca,
            dir: dir.to_path_buf(),
            ca_file,
            client,
        })
    }

    /// Issues `name`'s certificate (for `localhost`, 127.0.0.1 and `ip`), writes it, and
    /// points `resp`'s TLS settings at it and the CA (clients must present a certificate of
    /// the CA, Redis's default).
    pub(crate) fn configure_node(
        &self,
        name: &str,
        ip: IpAddr,
        resp: &mut RespSection,
    ) -> anyhow::Result<()> {
        let ip = ip.to_string();
        let cert = self.ca.issue(name, &["localhost", "127.0.0.1", &ip])?;
        let (crt, key) = write_pair(&self.dir, name, &cert)
            .with_context(|| format!("writing {name}'s certificate"))?;
        resp.tls_cert_file = Some(crt);
        resp.tls_key_file = Some(key);
        resp.tls_ca_cert_file = Some(self.ca_file.clone());
        resp.tls_auth_clients = "yes".into();
        Ok(())
    }

    /// The `redis-cli` flags of a TLS client of this run.
    pub(crate) fn redis_cli_flags(&self) -> String {
        format!(
            "--tls --cacert {} --cert {} --key {}",
            self.ca_file.display(),
            self.client.0.display(),
            self.client.1.display()
        )
    }
}

/// Flags of `meridian tls gen`.
#[derive(Args, Debug)]
#[command(after_help = "\
EXAMPLE:
    meridian tls gen --dir ./tls
    meridian node --port 0 --tls-port 6380 --tls-cert-file tls/node.crt \\
        --tls-key-file tls/node.key --tls-ca-cert-file tls/ca.crt
    redis-cli --tls --cacert tls/ca.crt --cert tls/client.crt --key tls/client.key -p 6380 PING")]
pub struct TlsGenArgs {
    /// Where to write ca.crt, ca.key, node.crt, node.key, client.crt and client.key.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// DNS names and IP addresses the node certificate is valid for (repeatable)
    /// [default: localhost and 127.0.0.1].
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
    /// Issue from the CA an earlier `meridian tls gen` wrote into DIR (its ca.crt and
    /// ca.key) instead of making a new one: one certificate per machine, one cluster CA.
    #[arg(long, value_name = "DIR")]
    ca: Option<PathBuf>,
}

/// `meridian tls gen`: a CA (or the one of `--ca`), a node certificate and a client
/// certificate.
pub fn gen_cmd(args: TlsGenArgs) -> anyhow::Result<()> {
    let run = match &args.ca {
        Some(ca_dir) => RunTls::reuse(&args.dir, ca_dir)?,
        None => RunTls::create(&args.dir)?,
    };
    let names: Vec<&str> = if args.names.is_empty() {
        vec!["localhost", "127.0.0.1"]
    } else {
        args.names.iter().map(String::as_str).collect()
    };
    let node = run.ca.issue("meridian-node", &names)?;
    write_pair(&args.dir, "node", &node)?;
    let ca_key = if args.ca.is_some() { "" } else { "ca.key," };
    println!(
        "wrote {}/{{ca.crt,{ca_key}node.crt,node.key,client.crt,client.key}}",
        args.dir.display()
    );
    Ok(())
}
