//! Fuzzes large-object manifests (`meridian_blob::Manifest::decode`): the stored value that
//! says where an object's chunks are, read back from storage and from replicas.
//!
//! Properties: a manifest that decodes passes its own checks (chunk lengths add up to the
//! size, inline bytes are the size), re-encodes to one that decodes to the same manifest,
//! and its chunk offsets are increasing and end at the size; a value without the magic is
//! "not a manifest", never an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_blob::Manifest;

fuzz_target!(|data: &[u8]| {
    match Manifest::decode(data) {
        Ok(None) => assert!(!Manifest::is_manifest(data)),
        Ok(Some(m)) => {
            assert_eq!(Manifest::decode(&m.encode()).ok(), Some(Some(m.clone())));
            let offsets = m.offsets();
            assert_eq!(offsets.len(), m.chunks.len() + 1);
            assert!(offsets.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(
                offsets.last().copied(),
                Some(if m.inline.is_some() { 0 } else { m.size })
            );
        }
        Err(_) => assert!(Manifest::is_manifest(data)),
    }
});
