//! Peer authentication on TCP links: both ends of a connection prove they hold the cluster
//! secret before any message crosses it.
//!
//! The handshake (see [`crate::tcp`]): the accepting node sends a [`Challenge`] with a fresh
//! random nonce; the connecting node answers with a [`Hello`] carrying its own nonce and a
//! proof over both nonces and its node id; the accepting node checks it and answers with a
//! [`Welcome`] proving the secret in turn. Proofs are BLAKE3 keyed hashes under a key derived
//! from the secret, compared in constant time; the nonces make a recorded handshake useless
//! on another connection. There is no well-known key: a transport configured without a secret
//! gets a fresh random one ([`ClusterSecret::random`]), so nobody can reach it rather than
//! everybody.
//!
//! What this does not do: encrypt or sign the frames that follow. Someone on the path can
//! read them, or tamper with an established connection; keep peer links on a private network.
//!
//! [`Challenge`]: crate::envelope::Challenge
//! [`Hello`]: crate::envelope::Hello
//! [`Welcome`]: crate::envelope::Welcome

use crate::NetError;
use meridian_core::NodeId;

/// Bytes of a handshake nonce.
pub const NONCE_LEN: usize = 16;
/// A handshake nonce.
pub type Nonce = [u8; NONCE_LEN];
/// A handshake proof (a BLAKE3 keyed hash).
pub type Proof = [u8; 32];

const KEY_CONTEXT: &str = "meridian 2026-11 cluster secret for peer links v1";

/// Which end a proof is for, so one end's proof never passes as the other's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The connecting node's proof, in its `Hello`.
    Connector,
    /// The accepting node's proof, in its `Welcome`.
    Acceptor,
}

/// The key peer links are authenticated with. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret {
    key: [u8; 32],
}

impl ClusterSecret {
    /// Shortest secret accepted, in bytes.
    pub const MIN_LEN: usize = 16;
    /// Longest secret accepted, in bytes.
    pub const MAX_LEN: usize = 4096;

    /// The key derived from `secret` (between [`Self::MIN_LEN`] and [`Self::MAX_LEN`] bytes).
    pub fn new(secret: &[u8]) -> Result<ClusterSecret, NetError> {
        if !(Self::MIN_LEN..=Self::MAX_LEN).contains(&secret.len()) {
            return Err(NetError::Config(format!(
                "the cluster secret has {} bytes: it must have between {} and {}",
                secret.len(),
                Self::MIN_LEN,
                Self::MAX_LEN
            )));
        }
        Ok(ClusterSecret {
            key: blake3::derive_key(KEY_CONTEXT, secret),
        })
    }

    /// A fresh random secret nobody else knows: a transport holding it refuses every peer
    /// (the default of a transport configured without a secret).
    pub fn random() -> ClusterSecret {
        ClusterSecret {
            key: blake3::derive_key(KEY_CONTEXT, Self::random_text().as_bytes()),
        }
    }

    /// A fresh random secret, as text (64 hex digits), for a cluster one command starts.
    pub fn random_text() -> String {
        [nonce(), nonce()]
            .concat()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The proof `role`'s end sends: over the other end's nonce, its own, and its node id.
    pub(crate) fn proof(&self, role: Role, theirs: &Nonce, ours: &Nonce, node: NodeId) -> Proof {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(match role {
            Role::Connector => b"connector",
            Role::Acceptor => b"acceptor ",
        });
        h.update(theirs);
        h.update(ours);
        h.update(&node.0.to_be_bytes());
        *h.finalize().as_bytes()
    }

    /// Whether `proof` is what `node` at `role`'s end must send (constant-time comparison).
    pub(crate) fn verify(
        &self,
        role: Role,
        theirs: &Nonce,
        ours: &Nonce,
        node: NodeId,
        proof: &Proof,
    ) -> bool {
        blake3::Hash::from(self.proof(role, theirs, ours, node)) == blake3::Hash::from(*proof)
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

/// A fresh random nonce (from the OS-seeded thread RNG: a handshake must not be predictable,
/// and the simulator never opens TCP links, so nothing here needs replaying).
#[allow(clippy::disallowed_methods)]
pub(crate) fn nonce() -> Nonce {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_the_secret_the_nonces_the_node_and_the_role() {
        let s = ClusterSecret::new(b"correct horse battery").unwrap();
        let (a, b) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let p = s.proof(Role::Connector, &a, &b, NodeId(3));
        assert!(s.verify(Role::Connector, &a, &b, NodeId(3), &p));
        let other = ClusterSecret::new(b"correct horse battery!").unwrap();
        assert!(!other.verify(Role::Connector, &a, &b, NodeId(3), &p));
        assert!(!s.verify(Role::Acceptor, &a, &b, NodeId(3), &p));
        assert!(!s.verify(Role::Connector, &b, &a, NodeId(3), &p));
        assert!(!s.verify(Role::Connector, &a, &b, NodeId(4), &p));
        assert!(!ClusterSecret::random().verify(Role::Connector, &a, &b, NodeId(3), &p));
        assert!(ClusterSecret::random() != ClusterSecret::random());
        assert_ne!(nonce(), nonce());
    }

    #[test]
    fn short_or_huge_secrets_are_refused_and_debug_hides_the_key() {
        let e = ClusterSecret::new(b"short").unwrap_err().to_string();
        assert!(e.contains("between 16 and 4096"), "{e}");
        assert!(ClusterSecret::new(&vec![b'x'; 5000]).is_err());
        let s = ClusterSecret::new(b"0123456789abcdef").unwrap();
        assert_eq!(format!("{s:?}"), "ClusterSecret(<redacted>)");
        let text = ClusterSecret::random_text();
        assert_eq!(text.len(), 64);
        assert!(ClusterSecret::new(text.as_bytes()).is_ok());
        assert_ne!(text, ClusterSecret::random_text());
    }
}
