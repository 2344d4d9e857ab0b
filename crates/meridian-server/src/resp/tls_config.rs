//! Redis's `tls-*` parameters in `CONFIG GET` and `CONFIG SET`.
//!
//! `CONFIG GET` answers the settings in force (empty when the node has no certificate).
//! `CONFIG SET tls-cert-file`, `tls-key-file`, `tls-ca-cert-file`, `tls-auth-clients`,
//! `tls-protocols` and `tls-ciphersuites` reread the files and replace the configuration new
//! TLS connections get, as Redis does; connections already open keep theirs. The new
//! settings are built in full before anything is applied, so a bad file fails the whole
//! `CONFIG SET` and changes nothing. `tls-port` and `tls-cluster` changes need a restart.

use crate::resp::context::RespContext;
use meridian_net::tls::{ClientAuth, TlsSettings};
use std::path::PathBuf;

/// The parameters that `CONFIG SET` may change.
const SETTABLE: [&str; 6] = [
    "tls-cert-file",
    "tls-key-file",
    "tls-ca-cert-file",
    "tls-auth-clients",
    "tls-protocols",
    "tls-ciphersuites",
];

/// Whether `name` is a `tls-*` parameter `CONFIG SET` changes here.
pub(super) fn handles(name: &[u8]) -> bool {
    SETTABLE
        .iter()
        .any(|p| name.eq_ignore_ascii_case(p.as_bytes()))
}

/// The `tls-*` parameters and their values, for `CONFIG GET`.
pub(super) fn params(ctx: &RespContext) -> Vec<(&'static str, String)> {
    let s = ctx.tls().map(|t| t.server.settings()).unwrap_or_default();
    let path = |p: &std::path::Path| p.display().to_string();
    let auth = if ctx.tls().is_some() {
        s.auth_clients.as_str()
    } else {
        // Redis's default, reported though no TLS listener uses it.
        ClientAuth::Yes.as_str()
    };
    vec![
        ("tls-port", ctx.tls_port().to_string()),
        ("tls-cert-file", path(&s.cert_file)),
        ("tls-key-file", path(&s.key_file)),
        (
            "tls-ca-cert-file",
            s.ca_cert_file.as_deref().map(path).unwrap_or_default(),
        ),
        ("tls-auth-clients", auth.into()),
        ("tls-protocols", s.protocols),
        ("tls-ciphersuites", s.ciphersuites),
        ("tls-cluster", yes_no(peer_links_tls(ctx)).into()),
    ]
}

/// Whether peer links use TLS (`tls-cluster`, fixed at start).
fn peer_links_tls(ctx: &RespContext) -> bool {
    ctx.tls().is_some_and(|t| t.server.peer().is_some())
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Records `name = value` into `pending` (the settings in force, on first use). An error is
/// the reason, for `CONFIG SET`'s message.
pub(super) fn stage(
    ctx: &RespContext,
    pending: &mut Option<TlsSettings>,
    name: &[u8],
    value: &[u8],
) -> Result<(), String> {
    let t = ctx.tls().ok_or(
        "this node has no TLS certificate: set resp.tls-cert-file and resp.tls-key-file in \
         its configuration and restart it",
    )?;
    let s = pending.get_or_insert_with(|| t.server.settings());
    let text = std::str::from_utf8(value)
        .map_err(|_| "argument must be UTF-8 text".to_string())?
        .to_string();
    let is = |p: &str| name.eq_ignore_ascii_case(p.as_bytes());
    if is("tls-cert-file") {
        s.cert_file = PathBuf::from(text);
    } else if is("tls-key-file") {
        s.key_file = PathBuf::from(text);
    } else if is("tls-ca-cert-file") {
        s.ca_cert_file = (!text.is_empty()).then(|| PathBuf::from(text));
    } else if is("tls-auth-clients") {
        s.auth_clients = ClientAuth::parse(&text).map_err(|e| e.to_string())?;
    } else if is("tls-protocols") {
        s.protocols = text;
    } else if is("tls-ciphersuites") {
        s.ciphersuites = text;
    }
    Ok(())
}

/// Rereads the files of `settings` and installs them for new connections; on error (the
/// reason, naming the file) nothing changes.
pub(super) fn apply(ctx: &RespContext, settings: TlsSettings) -> Result<(), String> {
    let t = ctx.tls().ok_or("this node has no TLS certificate")?;
    t.server.reload(settings).map_err(|e| e.to_string())?;
    tracing::info!("TLS configuration reloaded (CONFIG SET)");
    Ok(())
}
