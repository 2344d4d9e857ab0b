//! Fuzzes the aws-chunked body decoder (`meridian_s3::chunked::ChunkedDecoder`): chunk-size
//! lines, chunk signatures, trailers, checksum trailers and trailer signatures, under an
//! arbitrary configuration, with the body arriving in arbitrary pieces.
//!
//! Properties: how the body is cut into reads changes nothing (same payload, same outcome,
//! same trailers); `decoded_len` counts exactly the bytes handed out; and a body encoded by
//! `encode_aws_chunked` (signed or not, with a checksum trailer or not) decodes back to its
//! payload with the matching configuration.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use meridian_fuzz::pieces;
use meridian_s3::chunked::{ChunkSigning, ChunkedConfig, ChunkedDecoder, encode_aws_chunked};
use meridian_s3::{ChecksumAlgorithm, S3Error};

#[derive(Debug, Arbitrary)]
struct Input {
    signed: bool,
    trailer: bool,
    checksum: Option<u8>,
    decoded_content_length: Option<u16>,
    max_chunk_size: Option<u16>,
    cuts: Vec<u16>,
    body: Vec<u8>,
}

fn signing() -> ChunkSigning {
    ChunkSigning {
        signing_key: [7; 32],
        timestamp: "20260101T000000Z".into(),
        scope: "20260101/us-east-1/s3/aws4_request".into(),
        seed_signature: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9".into(),
    }
}

fn algorithm(n: u8) -> ChecksumAlgorithm {
    use ChecksumAlgorithm::*;
    [Crc32, Crc32c, Crc64Nvme, Sha1, Sha256][usize::from(n % 5)]
}

fn config(input: &Input) -> ChunkedConfig {
    let mut cfg = ChunkedConfig {
        signing: input.signed.then(signing),
        trailer: input.trailer,
        trailer_checksum: input.checksum.map(algorithm),
        decoded_content_length: input.decoded_content_length.map(u64::from),
        ..ChunkedConfig::default()
    };
    if let Some(max) = input.max_chunk_size {
        cfg.max_chunk_size = u64::from(max);
    }
    cfg
}

/// Decodes `body` fed in `parts`: the payload and how it ended.
fn decode(cfg: ChunkedConfig, parts: &[&[u8]]) -> (Vec<u8>, Result<Vec<u8>, S3Error>) {
    let mut d = ChunkedDecoder::new(cfg);
    let mut payload = Vec::new();
    for part in parts {
        let mut out = Vec::new();
        let r = d.push(Bytes::copy_from_slice(part), &mut out);
        out.iter().for_each(|b| payload.extend_from_slice(b));
        assert_eq!(
            d.decoded_len(),
            payload.len() as u64,
            "decoded_len is not the output"
        );
        if let Err(e) = r {
            return (payload, Err(e));
        }
    }
    let end = d.finish().map(|t| format!("{t:?}").into_bytes());
    (payload, end)
}

fn same_outcome(a: &Result<Vec<u8>, S3Error>, b: &Result<Vec<u8>, S3Error>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (Err(x), Err(y)) => x.code == y.code,
        _ => false,
    }
}

fuzz_target!(|input: Input| {
    let cfg = config(&input);
    let (whole, end) = decode(cfg.clone(), &[&input.body]);
    let (split, split_end) = decode(cfg, &pieces(&input.body, &input.cuts));
    assert!(
        same_outcome(&end, &split_end),
        "at once {end:?}, in pieces {split_end:?}"
    );
    if end.is_ok() {
        assert_eq!(whole, split, "payload depends on the reads");
    }
    // Round trip: the input's bytes as a payload, cut into chunks at the cuts.
    let chunks = pieces(&input.body, &input.cuts);
    let sign = input.signed.then(signing);
    let checksum = input.checksum.map(algorithm);
    let encoded = encode_aws_chunked(&chunks, sign.as_ref(), checksum);
    let cfg = ChunkedConfig {
        signing: sign,
        trailer: checksum.is_some(),
        trailer_checksum: checksum,
        decoded_content_length: Some(input.body.len() as u64),
        ..ChunkedConfig::default()
    };
    let (payload, end) = decode(cfg, &[&encoded]);
    assert!(end.is_ok(), "own encoding refused: {end:?}");
    assert_eq!(payload, input.body);
});
