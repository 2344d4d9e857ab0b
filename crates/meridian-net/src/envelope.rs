//! The wire format of one message: an [`Envelope`] (kind, sender, body) encoded with `postcard`
//! into one frame, and the handshake frames that open every TCP connection ([`Challenge`],
//! [`Hello`], [`Welcome`]).
//!
//! Guarantees: decoding is strict (trailing bytes are an error), and an encoded envelope larger
//! than the frame maximum is refused before it is queued.

use crate::NetError;
use crate::auth::{ClusterSecret, Nonce, Proof, Role};
use crate::payload::Payload;
use bytes::Bytes;
use meridian_core::NodeId;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

/// What a node-to-node message type must be: serializable with serde, and sendable between
/// tasks. Blanket-implemented for every such type.
pub trait Message: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> Message for T {}

/// The role of an envelope in request/response multiplexing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// A request; the receiver answers with a `Response` carrying the same `id`.
    Request {
        /// Request id, unique per sender.
        id: u64,
    },
    /// The answer to the sender's request `id`.
    Response {
        /// The id of the request this answers.
        id: u64,
    },
    /// A message that expects no answer.
    OneWay,
}

/// One message on the wire: its kind, its sender, the application body, and an optional
/// out-of-band [`Payload`] that travels after the frame instead of inside it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope<M> {
    /// Request, response or one-way.
    pub kind: Kind,
    /// The sending node.
    pub from: NodeId,
    /// The application message.
    pub body: M,
    /// Bulk bytes sent beside the message (never part of its postcard encoding: on TCP they
    /// follow the frame, their length in its first four bytes).
    #[serde(skip)]
    pub payload: Option<Payload>,
}

impl<M> Envelope<M> {
    /// An envelope without a payload.
    pub fn new(kind: Kind, from: NodeId, body: M) -> Self {
        Self {
            kind,
            from,
            body,
            payload: None,
        }
    }
}

/// Length of the prefix of every frame body: the length of the payload that follows the
/// frame (big-endian `u32`, 0 for none).
pub const PAYLOAD_PREFIX: usize = 4;

/// Encodes `env` into a frame body: the payload length, then the postcard encoding. Refuses
/// a body or payload longer than `max` bytes.
pub fn encode<M: Serialize>(env: &Envelope<M>, max: usize) -> Result<Bytes, NetError> {
    let payload = env.payload.as_ref().map_or(0, |p| p.len());
    if payload > max as u64 {
        return Err(NetError::FrameTooLarge {
            len: usize::try_from(payload).unwrap_or(usize::MAX),
            max,
        });
    }
    let mut out = (payload as u32).to_be_bytes().to_vec();
    let out = postcard::to_extend(env, std::mem::take(&mut out))?;
    if out.len() > max {
        return Err(NetError::FrameTooLarge {
            len: out.len(),
            max,
        });
    }
    Ok(Bytes::from(out))
}

/// Decodes one frame body: the envelope (without its payload) and the length of the payload
/// that follows the frame. Trailing bytes are an error.
pub fn decode<M: DeserializeOwned>(frame: &[u8]) -> Result<(Envelope<M>, usize), NetError> {
    let (prefix, rest) = frame
        .split_first_chunk::<PAYLOAD_PREFIX>()
        .ok_or_else(|| NetError::Codec("frame shorter than its payload prefix".into()))?;
    let payload = u32::from_be_bytes(*prefix) as usize;
    Ok((decode_exact(rest)?, payload))
}

/// The size of `env` once encoded, in bytes, its payload included (what the WAN emulator's
/// bandwidth cap charges).
pub fn encoded_len<M: Serialize>(env: &Envelope<M>) -> usize {
    let payload = env.payload.as_ref().map_or(0, |p| p.len());
    PAYLOAD_PREFIX
        + postcard::experimental::serialized_size(env).unwrap_or(0)
        + usize::try_from(payload).unwrap_or(usize::MAX)
}

pub(crate) fn decode_exact<T: DeserializeOwned>(frame: &[u8]) -> Result<T, NetError> {
    let (value, rest) = postcard::take_from_bytes(frame)?;
    if !rest.is_empty() {
        return Err(NetError::Codec(format!(
            "{} trailing bytes after the message (peer running another message version?)",
            rest.len()
        )));
    }
    Ok(value)
}

/// Magic number opening every handshake frame ("MRDN").
pub const HELLO_MAGIC: u32 = 0x4d52_444e;

/// Version of the wire protocol spoken by this build (2: authenticated handshake; 3: a
/// CRC32C in every frame header; 4: out-of-band payloads after frames, and bulk lanes; 6: the
/// cluster metadata carries the ACL users and each member's TLS port, which a build before it
/// cannot decode, so the handshake refuses it by name instead).
pub const PROTOCOL_VERSION: u16 = 6;

/// Checks a handshake frame's magic number and protocol version.
fn check_header(what: &str, magic: u32, version: u16) -> Result<(), NetError> {
    if magic != HELLO_MAGIC {
        return Err(NetError::Codec(format!(
            "bad {what} magic {magic:#x}: not a Meridian node"
        )));
    }
    if version != PROTOCOL_VERSION {
        return Err(NetError::Codec(format!(
            "peer speaks protocol version {version}, this node speaks {PROTOCOL_VERSION}"
        )));
    }
    Ok(())
}

/// The first frame on every TCP connection, sent by the accepting node: a fresh nonce the
/// connecting node must prove the cluster secret over ([`crate::auth`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    /// Always [`HELLO_MAGIC`].
    pub magic: u32,
    /// The acceptor's [`PROTOCOL_VERSION`].
    pub version: u16,
    /// The acceptor's nonce.
    pub nonce: Nonce,
}

impl Challenge {
    /// A challenge with a fresh random nonce.
    pub fn new() -> Self {
        Self {
            magic: HELLO_MAGIC,
            version: PROTOCOL_VERSION,
            nonce: crate::auth::nonce(),
        }
    }

    /// Encodes the challenge as a frame body.
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).expect("Challenge always encodes"))
    }

    /// Decodes and validates a challenge frame.
    pub fn decode(frame: &[u8]) -> Result<Self, NetError> {
        let c: Challenge = decode_exact(frame)
            .map_err(|e| NetError::Codec(format!("bad challenge ({e}): not a Meridian node?")))?;
        check_header("challenge", c.magic, c.version)?;
        Ok(c)
    }
}

impl Default for Challenge {
    fn default() -> Self {
        Self::new()
    }
}

/// The connecting node's answer to a [`Challenge`]: who it is, its own nonce, and its proof of
/// the cluster secret over both nonces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Always [`HELLO_MAGIC`].
    pub magic: u32,
    /// The connector's [`PROTOCOL_VERSION`].
    pub version: u16,
    /// The connecting node.
    pub node: NodeId,
    /// The connector's nonce (the acceptor's [`Welcome`] proves the secret over it).
    pub nonce: Nonce,
    /// The connector's proof.
    pub proof: Proof,
    /// Which of the connector's connections to the acceptor this is: 0 for the control
    /// connection, 1.. for bulk connections (which carry payloads). It only decides where the
    /// acceptor sends replies, so it is not part of the proof.
    pub lane: u8,
}

impl Hello {
    /// `node`'s answer to `challenge` under `secret`, with a fresh nonce, for its control
    /// connection (see [`Hello::on_lane`]).
    pub fn new(node: NodeId, challenge: &Challenge, secret: &ClusterSecret) -> Self {
        let nonce = crate::auth::nonce();
        Self {
            magic: HELLO_MAGIC,
            version: PROTOCOL_VERSION,
            node,
            nonce,
            proof: secret.proof(Role::Connector, &challenge.nonce, &nonce, node),
            lane: 0,
        }
    }

    /// The same hello for connection `lane`.
    pub fn on_lane(mut self, lane: u8) -> Self {
        self.lane = lane;
        self
    }

    /// Whether the proof shows the cluster secret (checked by the acceptor).
    pub fn verify(&self, challenge: &Challenge, secret: &ClusterSecret) -> bool {
        secret.verify(
            Role::Connector,
            &challenge.nonce,
            &self.nonce,
            self.node,
            &self.proof,
        )
    }

    /// Encodes the handshake as a frame body.
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).expect("Hello always encodes"))
    }

    /// Decodes and validates a handshake frame (not its proof: see [`Hello::verify`]).
    pub fn decode(frame: &[u8]) -> Result<Self, NetError> {
        let hello: Hello = decode_exact(frame)
            .map_err(|e| NetError::Codec(format!("bad handshake ({e}): not a Meridian node?")))?;
        check_header("handshake", hello.magic, hello.version)?;
        Ok(hello)
    }
}

/// The accepting node's proof of the cluster secret over the connector's nonce: the
/// connector sends nothing else before it checks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The acceptor's proof.
    pub proof: Proof,
}

impl Welcome {
    /// `acceptor`'s answer to `hello` (which answered `challenge`).
    pub fn new(
        acceptor: NodeId,
        challenge: &Challenge,
        hello: &Hello,
        secret: &ClusterSecret,
    ) -> Self {
        Self {
            proof: secret.proof(Role::Acceptor, &hello.nonce, &challenge.nonce, acceptor),
        }
    }

    /// Whether `acceptor` proved the secret (checked by the connector).
    pub fn verify(
        &self,
        acceptor: NodeId,
        challenge: &Challenge,
        hello: &Hello,
        secret: &ClusterSecret,
    ) -> bool {
        secret.verify(
            Role::Acceptor,
            &hello.nonce,
            &challenge.nonce,
            acceptor,
            &self.proof,
        )
    }

    /// Encodes the welcome as a frame body.
    pub fn encode(&self) -> Bytes {
        Bytes::from(postcard::to_allocvec(self).expect("Welcome always encodes"))
    }

    /// Decodes a welcome frame.
    pub fn decode(frame: &[u8]) -> Result<Self, NetError> {
        decode_exact(frame).map_err(|e| NetError::Codec(format!("bad welcome ({e})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Get {
            key: Vec<u8>,
        },
        Put {
            key: Vec<u8>,
            value: Vec<u8>,
            ts: u64,
        },
        Ack,
    }

    fn msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(|key| Msg::Get { key }),
            (
                proptest::collection::vec(any::<u8>(), 0..64),
                proptest::collection::vec(any::<u8>(), 0..256),
                any::<u64>()
            )
                .prop_map(|(key, value, ts)| Msg::Put { key, value, ts }),
            Just(Msg::Ack),
        ]
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            any::<u64>().prop_map(|id| Kind::Request { id }),
            any::<u64>().prop_map(|id| Kind::Response { id }),
            Just(Kind::OneWay),
        ]
    }

    proptest! {
        #[test]
        fn envelopes_round_trip(kind in kind(), from in any::<u32>(), body in msg()) {
            let env = Envelope::new(kind, NodeId(from), body);
            let bytes = encode(&env, usize::MAX).unwrap();
            prop_assert_eq!(bytes.len(), encoded_len(&env));
            let (back, payload): (Envelope<Msg>, usize) = decode(&bytes).unwrap();
            prop_assert_eq!(back, env);
            prop_assert_eq!(payload, 0);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode::<Msg>(&bytes);
            let _ = Hello::decode(&bytes);
            let _ = Challenge::decode(&bytes);
            let _ = Welcome::decode(&bytes);
        }
    }

    /// A frame whose vector claims 2^60 elements: postcard (serde's `size_hint::cautious`)
    /// preallocates at most 1 MiB whatever a length prefix says, so decoding fails on the
    /// missing elements instead of reserving 2^64 bytes (a capacity-overflow panic, or an
    /// abort for want of memory, if it trusted the prefix).
    #[test]
    fn a_huge_claimed_vec_length_is_an_error_not_an_allocation() {
        let env = Envelope::new(Kind::OneWay, NodeId(1), Vec::<u128>::new());
        let mut bytes = encode(&env, usize::MAX).unwrap().to_vec();
        assert_eq!(bytes.pop(), Some(0), "the empty vector's length comes last");
        let mut len = 1u64 << 60;
        while len >= 0x80 {
            bytes.push((len as u8) | 0x80);
            len >>= 7;
        }
        bytes.push(len as u8);
        bytes.extend_from_slice(&[1, 2, 3]);
        assert!(matches!(
            decode::<Vec<u128>>(&bytes),
            Err(NetError::Codec(_))
        ));
        // The same for vectors of vectors and strings.
        assert!(decode::<Vec<Vec<u8>>>(&bytes).is_err());
        assert!(decode::<Vec<String>>(&bytes).is_err());
    }

    #[test]
    fn trailing_bytes_and_truncation_are_codec_errors() {
        let env = Envelope::new(Kind::OneWay, NodeId(1), Msg::Get { key: vec![1, 2] });
        let mut bytes = encode(&env, 1024).unwrap().to_vec();
        assert!(matches!(
            decode::<Msg>(&bytes[..bytes.len() - 1]),
            Err(NetError::Codec(_))
        ));
        bytes.push(0);
        assert!(matches!(decode::<Msg>(&bytes), Err(NetError::Codec(_))));
    }

    #[test]
    fn oversized_envelope_is_refused() {
        let env = Envelope::new(Kind::OneWay, NodeId(1), vec![0u8; 100]);
        assert!(matches!(
            encode(&env, 50),
            Err(NetError::FrameTooLarge { max: 50, .. })
        ));
        let small = Envelope {
            payload: Some(Payload::bytes(Bytes::from(vec![0u8; 51]))),
            ..Envelope::new(Kind::OneWay, NodeId(1), vec![0u8; 1])
        };
        assert!(
            matches!(
                encode(&small, 50),
                Err(NetError::FrameTooLarge { len: 51, max: 50 })
            ),
            "the payload counts against the maximum too"
        );
    }

    #[test]
    fn handshake_round_trips_and_rejects_strangers() {
        let secret = ClusterSecret::new(b"a cluster secret!").unwrap();
        let challenge = Challenge::new();
        assert_eq!(Challenge::decode(&challenge.encode()).unwrap(), challenge);
        let hello = Hello::new(NodeId(9), &challenge, &secret);
        assert_eq!(Hello::decode(&hello.encode()).unwrap(), hello);
        assert!(hello.verify(&challenge, &secret));
        assert!(
            !hello.verify(&Challenge::new(), &secret),
            "another connection's challenge"
        );
        assert!(!hello.verify(&challenge, &ClusterSecret::random()));
        let forged = Hello {
            node: NodeId(1),
            ..hello
        };
        assert!(
            !forged.verify(&challenge, &secret),
            "the proof names its node"
        );
        let welcome = Welcome::new(NodeId(2), &challenge, &hello, &secret);
        assert_eq!(Welcome::decode(&welcome.encode()).unwrap(), welcome);
        assert!(welcome.verify(NodeId(2), &challenge, &hello, &secret));
        assert!(!welcome.verify(NodeId(3), &challenge, &hello, &secret));
        let bad = Hello { magic: 1, ..hello };
        let bytes = postcard::to_allocvec(&bad).unwrap();
        assert!(matches!(Hello::decode(&bytes), Err(NetError::Codec(_))));
        let newer = Hello {
            version: PROTOCOL_VERSION + 1,
            ..hello
        };
        let bytes = postcard::to_allocvec(&newer).unwrap();
        assert!(matches!(Hello::decode(&bytes), Err(NetError::Codec(_))));
        let older = Challenge {
            version: 1,
            ..challenge
        };
        let bytes = postcard::to_allocvec(&older).unwrap();
        assert!(matches!(Challenge::decode(&bytes), Err(NetError::Codec(_))));
    }
}
