//! Fuzzes causal contexts (`meridian_cluster::dvv::Clock::decode`): the opaque version-vector
//! bytes that HTTP and RESP clients hand back on writes, and that replicas then trust.
//!
//! Properties: decoding accepts only the canonical encoding (what decodes re-encodes to the
//! very same bytes; empty bytes are the empty clock), and the decoded clock behaves as a version vector: it descends from
//! itself and from the empty clock, and joining it with another decoded clock descends both.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use meridian_cluster::dvv::Clock;

#[derive(Debug, Arbitrary)]
struct Input {
    a: Vec<u8>,
    b: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let Ok(a) = Clock::decode(&input.a) else {
        return;
    };
    // Empty bytes are the empty clock (what a client without a context sends).
    if input.a.is_empty() {
        assert!(a.is_empty());
    } else {
        assert_eq!(a.encode(), input.a, "accepted a non-canonical context");
    }
    assert!(a.descends(&a) && a.descends(&Clock::new()));
    if let Ok(b) = Clock::decode(&input.b) {
        let mut j = a.clone();
        j.join(&b);
        assert!(j.descends(&a) && j.descends(&b));
        assert_eq!(Clock::decode(&j.encode()).ok(), Some(j));
    }
});
