//! Fuzzes the decoding of what peers send inside frames: the message envelope with every
//! replication, cluster, transaction, blob and pub/sub message (`envelope::decode::<Msg>`,
//! postcard), and the handshake frames (`Challenge`, `Hello`, `Welcome`).
//!
//! Properties: a body that decodes re-encodes to one that decodes and re-encodes to the same
//! bytes (the payload length is carried through), and the handshake frames round-trip the same way.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_net::envelope::{self, Challenge, Envelope, Hello, Welcome};
use meridian_replication::Msg;

fn messages(data: &[u8]) {
    let Ok((env, payload)) = envelope::decode::<Msg>(data) else {
        return;
    };
    let body = envelope::encode(&env, usize::MAX).expect("a decoded envelope encodes");
    let mut body = body.to_vec();
    body[..4].copy_from_slice(&(payload as u32).to_be_bytes());
    let (back, back_payload): (Envelope<Msg>, usize) =
        envelope::decode(&body).expect("a re-encoded envelope decodes");
    // Compared as encodings, not values: a message may carry a NaN (a score increment),
    // which is not equal to itself.
    let again = envelope::encode(&back, usize::MAX).expect("encodes");
    assert_eq!(&again[4..], &body[4..], "re-encoding is not stable");
    assert_eq!(back_payload, payload);
    assert_eq!(envelope::encoded_len(&env), body.len());
}

fn handshake(data: &[u8]) {
    if let Ok(c) = Challenge::decode(data) {
        assert_eq!(Challenge::decode(&c.encode()).ok(), Some(c));
    }
    if let Ok(h) = Hello::decode(data) {
        assert_eq!(Hello::decode(&h.encode()).ok(), Some(h));
    }
    if let Ok(w) = Welcome::decode(data) {
        assert_eq!(Welcome::decode(&w.encode()).ok(), Some(w));
    }
}

fuzz_target!(|data: &[u8]| {
    messages(data);
    handshake(data);
});
