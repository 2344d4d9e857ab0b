//! The state of one timeline record (spec `timeline.md` §1): its [`Version`], its master
//! ([`ReplicaRef`]), its [`Content`] and the origin DCs of its last writes, plus the record's
//! storage encoding.
//!
//! Guarantees:
//! - [`Version`]s are totally ordered, lexicographically by `(generation, mepoch, seq)`, and
//!   print as `gen.mepoch.seq` (`1700000000000000.0.5`); [`Version::from_str`] parses exactly
//!   that form (three decimal numbers, nothing else) and refuses anything else with an error
//!   that names the offending part, so `display → parse` is the identity;
//! - [`encode_record`] writes a format byte ([`RECORD_FORMAT`]) then postcard: varints
//!   throughout, so a record costs its value plus ~15 bytes. The format byte differs from the
//!   eventual store's `OBJECT_FORMAT`, so an eventual object is never taken for a timeline
//!   record;
//! - [`decode_record`] never panics: empty input, an unknown format byte, a truncated or
//!   malformed body and trailing bytes are all a [`DecodeError`].

use bytes::Bytes;
use meridian_core::{DcId, NodeId};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The first byte of a stored timeline record's encoding (format 1 of the timeline family;
/// chosen apart from the eventual store's `OBJECT_FORMAT = 1`).
pub const RECORD_FORMAT: u8 = 0x21;

/// A record's version: compared lexicographically by `(generation, mepoch, seq)` (the field
/// order, so the derived `Ord` is the spec's order), printed `gen.mepoch.seq`.
///
/// The spec calls the first field `gen`, which is a reserved word in Rust 2024, so the field is
/// `generation`; serde and the text form still call it `gen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Version {
    /// The generation: set by an insert, or by a re-insert after a delete, to
    /// `max(now_us, old_gen + 1)` (microseconds of the creator's clock).
    #[serde(rename = "gen")]
    pub generation: u64,
    /// The master epoch: bumped only by a forced re-master (§7), which fences the old master.
    pub mepoch: u32,
    /// The update number within the generation, from 1.
    pub seq: u64,
}

impl Version {
    /// The version `generation.mepoch.seq`.
    pub const fn new(generation: u64, mepoch: u32, seq: u64) -> Version {
        Version {
            generation,
            mepoch,
            seq,
        }
    }

    /// The order replicas merge by ([`super::merge`]): `(mepoch, generation, seq)`. A forced
    /// re-master's higher epoch thus outranks every version of the deposed master's epoch,
    /// new generations included.
    pub const fn precedence(&self) -> (u32, u64, u64) {
        (self.mepoch, self.generation, self.seq)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.generation, self.mepoch, self.seq)
    }
}

/// Why a text is not a [`Version`]. Each message quotes the text (cut to 64 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseVersionError {
    /// The text is not three parts separated by dots.
    #[error(
        "invalid version `{text}`: expected gen.mepoch.seq, three decimal numbers such as 1700000000000000.0.5"
    )]
    Shape {
        /// The text (cut).
        text: String,
    },
    /// A part is empty or holds something other than the digits 0–9.
    #[error("invalid version `{text}`: {part} is not a decimal number")]
    NotANumber {
        /// The text (cut).
        text: String,
        /// Which part: `gen`, `mepoch` or `seq`.
        part: &'static str,
    },
    /// A part is a number too large for its field.
    #[error("invalid version `{text}`: {part} exceeds {max}")]
    OutOfRange {
        /// The text (cut).
        text: String,
        /// Which part: `gen`, `mepoch` or `seq`.
        part: &'static str,
        /// The field's largest value.
        max: u64,
    },
}

impl FromStr for Version {
    type Err = ParseVersionError;

    /// Parses `gen.mepoch.seq`: exactly three non-empty runs of ASCII digits separated by
    /// dots. No sign, no spaces, no other separators.
    fn from_str(s: &str) -> Result<Version, ParseVersionError> {
        let text = || s.chars().take(64).collect::<String>();
        let mut parts = s.split('.');
        let (Some(g), Some(m), Some(q), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ParseVersionError::Shape { text: text() });
        };
        let number = |digits: &str, part: &'static str, max: u64| {
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ParseVersionError::NotANumber { text: text(), part });
            }
            match digits.parse::<u64>() {
                Ok(n) if n <= max => Ok(n),
                _ => Err(ParseVersionError::OutOfRange {
                    text: text(),
                    part,
                    max,
                }),
            }
        };
        let generation = number(g, "gen", u64::MAX)?;
        let mepoch = number(m, "mepoch", u64::from(u32::MAX))?;
        let seq = number(q, "seq", u64::MAX)?;
        Ok(Version {
            generation,
            mepoch: u32::try_from(mepoch).expect("checked against u32::MAX above"),
            seq,
        })
    }
}

/// One replica of a key: a node and its DC. A record's master is one of the key's N
/// primaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaRef {
    /// The node.
    pub node: NodeId,
    /// The node's DC.
    pub dc: DcId,
}

impl fmt::Display for ReplicaRef {
    /// `n3@dc1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.node, self.dc)
    }
}

/// What a record holds: a value, or the marker a delete leaves. A timeline record has exactly
/// one content, never siblings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Content {
    /// A value.
    Value(Bytes),
    /// A delete marker (kept for `tombstone_grace`, §5).
    Tombstone,
}

impl Content {
    /// Whether this is a delete marker.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Content::Tombstone)
    }

    /// The value, if this is one.
    pub fn value(&self) -> Option<&Bytes> {
        match self {
            Content::Value(v) => Some(v),
            Content::Tombstone => None,
        }
    }
}

/// One replica's state of a key in a timeline bucket (§1). Replicas copy whole records, and a
/// replica keeps the record with the larger [`Version`] ([`super::merge`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Record {
    /// The value or tombstone.
    pub content: Content,
    /// The version the master issued for this content.
    pub ver: Version,
    /// The replica that accepts writes of this key. Written by the previous master when the
    /// mastership migrates, so it travels inside an ordinary replicated write.
    pub master: ReplicaRef,
    /// The origin DCs of the last writes, newest first, at most T (`migration_threshold`) of
    /// them. Every replica keeps it, so the migration rule survives master changes.
    pub recent: Vec<DcId>,
}

impl Record {
    /// Whether the record is a delete marker.
    pub fn is_tombstone(&self) -> bool {
        self.content.is_tombstone()
    }
}

/// Why stored bytes are not a timeline record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No bytes at all.
    #[error("stored timeline record is empty")]
    Empty,
    /// The first byte is not [`RECORD_FORMAT`].
    #[error("stored timeline record has unknown format {0:#04x} (expected {RECORD_FORMAT:#04x})")]
    UnknownFormat(u8),
    /// The body is truncated or malformed.
    #[error("stored timeline record does not decode: {0}")]
    Malformed(String),
    /// A whole record decoded, and bytes were left over.
    #[error("stored timeline record has {0} trailing bytes")]
    Trailing(usize),
}

/// Encodes a record for storage: [`RECORD_FORMAT`], then postcard.
pub fn encode_record(r: &Record) -> Bytes {
    let mut out = vec![RECORD_FORMAT];
    out.extend(postcard::to_allocvec(r).expect("records always serialize"));
    Bytes::from(out)
}

/// Decodes what [`encode_record`] produced. Any other input is an error, never a panic.
pub fn decode_record(bytes: &[u8]) -> Result<Record, DecodeError> {
    match bytes.split_first() {
        Some((&RECORD_FORMAT, body)) => match postcard::take_from_bytes::<Record>(body) {
            Ok((r, [])) => Ok(r),
            Ok((_, rest)) => Err(DecodeError::Trailing(rest.len())),
            Err(e) => Err(DecodeError::Malformed(e.to_string())),
        },
        Some((&other, _)) => Err(DecodeError::UnknownFormat(other)),
        None => Err(DecodeError::Empty),
    }
}

/// [`decode_record`] of a shared buffer: the same records and the same verdicts on any
/// input, but a value is a slice of `bytes`, not a copy (a read's decode copied every value
/// it returned).
pub fn decode_record_shared(bytes: &Bytes) -> Result<Record, DecodeError> {
    match split_value(bytes) {
        Some((value, tail)) => match postcard::take_from_bytes::<RecordTail>(tail) {
            Ok((t, [])) => Ok(Record {
                content: value.map_or(Content::Tombstone, Content::Value),
                ver: t.ver,
                master: t.master,
                recent: t.recent,
            }),
            // Whatever is wrong, the full decoder says it in its own words.
            _ => decode_record(bytes),
        },
        None => decode_record(bytes),
    }
}

/// Everything of a [`Record`] after its content, in its field order.
#[derive(Deserialize)]
struct RecordTail {
    ver: Version,
    master: ReplicaRef,
    recent: Vec<DcId>,
}

/// A stored record's content (its value as a slice of `bytes`, `None` for a tombstone) and
/// the bytes after it; `None` when the format byte or the content does not parse.
fn split_value(bytes: &Bytes) -> Option<(Option<Bytes>, &[u8])> {
    let (&RECORD_FORMAT, body) = bytes.split_first()? else {
        return None;
    };
    // Postcard: the variant index as a varint (0 Value, 1 Tombstone), then a value's length
    // as a varint and its bytes.
    let (variant, rest) = postcard::take_from_bytes::<u32>(body).ok()?;
    match variant {
        0 => {
            let (len, rest) = postcard::take_from_bytes::<u64>(rest).ok()?;
            let len = usize::try_from(len).ok().filter(|&l| l <= rest.len())?;
            let start = bytes.len() - rest.len();
            Some((Some(bytes.slice(start..start + len)), &rest[len..]))
        }
        1 => Some((None, rest)),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any version (the whole range of every field).
    pub(crate) fn any_version() -> impl Strategy<Value = Version> {
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(g, m, s)| Version::new(g, m, s))
    }

    /// Any record with a few DCs and nodes.
    pub(crate) fn any_record() -> impl Strategy<Value = Record> {
        let content = prop_oneof![
            1 => Just(Content::Tombstone),
            4 => prop::collection::vec(any::<u8>(), 0..24)
                .prop_map(|v| Content::Value(Bytes::from(v))),
        ];
        (
            content,
            any_version(),
            (0u32..6, 0u32..3),
            prop::collection::vec(0u32..3, 0..5),
        )
            .prop_map(|(content, ver, (node, dc), recent)| Record {
                content,
                ver,
                master: ReplicaRef {
                    node: NodeId(node),
                    dc: DcId(dc),
                },
                recent: recent.into_iter().map(DcId).collect(),
            })
    }

    fn record() -> Record {
        Record {
            content: Content::Value(Bytes::from_static(b"alice")),
            ver: Version::new(1_700_000_000_000_000, 2, 5),
            master: ReplicaRef {
                node: NodeId(3),
                dc: DcId(1),
            },
            recent: vec![DcId(1), DcId(0), DcId(1)],
        }
    }

    #[test]
    fn versions_order_by_generation_then_mepoch_then_seq() {
        let v = Version::new;
        assert!(v(1, 0, 9) < v(2, 0, 1));
        assert!(v(1, 0, 9) < v(1, 1, 1));
        assert!(v(1, 1, 1) < v(1, 1, 2));
        assert!(v(2, 0, 1) > v(1, u32::MAX, u64::MAX));
    }

    #[test]
    fn version_text_form() {
        let v = Version::new(1_700_000_000, 0, 5);
        assert_eq!(v.to_string(), "1700000000.0.5");
        assert_eq!("1700000000.0.5".parse::<Version>(), Ok(v));
        assert_eq!("0.0.0".parse::<Version>(), Ok(Version::new(0, 0, 0)));
        let max = Version::new(u64::MAX, u32::MAX, u64::MAX);
        assert_eq!(max.to_string().parse::<Version>(), Ok(max));
    }

    #[test]
    fn bad_version_text_names_the_problem() {
        for bad in ["", "1", "1.2", "1.2.3.4", "1..3", "1.2.", ".1.2", "..."] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?}");
        }
        let err = |s: &str| s.parse::<Version>().unwrap_err().to_string();
        assert!(
            err("1.2").contains("expected gen.mepoch.seq"),
            "{}",
            err("1.2")
        );
        assert!(err("1.x.3").contains("mepoch is not a decimal number"));
        assert!(err("+1.0.3").contains("gen is not a decimal number"));
        assert!(err("1.0.-3").contains("seq is not a decimal number"));
        assert!(err(" 1.0.3").contains("gen is not a decimal number"));
        assert!(err("1.0.3 ").contains("seq is not a decimal number"));
        assert!(err("1.4294967296.3").contains("mepoch exceeds 4294967295"));
        assert!(err("18446744073709551616.0.1").contains("gen exceeds"));
        let long = "9".repeat(1000);
        assert!(err(&long).len() < 200, "the error cuts the quoted text");
    }

    #[test]
    fn replica_ref_prints_node_at_dc() {
        assert_eq!(record().master.to_string(), "n3@dc1");
    }

    #[test]
    fn encoding_is_compact_and_round_trips() {
        let r = record();
        let bytes = encode_record(&r);
        assert_eq!(bytes[0], RECORD_FORMAT);
        // format + content (variant, length, 5 bytes) + version (8-byte varint gen, 1, 1)
        // + master (1, 1) + recent (length, 3 × 1).
        assert_eq!(bytes.len(), 1 + 7 + 10 + 2 + 4);
        assert_eq!(decode_record(&bytes), Ok(r));
        let tomb = Record {
            content: Content::Tombstone,
            ..record()
        };
        assert_eq!(decode_record(&encode_record(&tomb)), Ok(tomb));
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(decode_record(&[]), Err(DecodeError::Empty));
        assert_eq!(
            decode_record(&[1, 0, 0]),
            Err(DecodeError::UnknownFormat(1))
        );
        assert!(matches!(
            decode_record(&[RECORD_FORMAT]),
            Err(DecodeError::Malformed(_))
        ));
        assert!(matches!(
            decode_record(&[RECORD_FORMAT, 9, 9, 9]),
            Err(DecodeError::Malformed(_))
        ));
        // A huge length prefix does not allocate or panic.
        let mut huge = vec![RECORD_FORMAT, 0];
        huge.extend([0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode_record(&huge).is_err());
        let mut trailing = encode_record(&record()).to_vec();
        trailing.push(0);
        assert_eq!(decode_record(&trailing), Err(DecodeError::Trailing(1)));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn version_text_round_trips(v in any_version()) {
            prop_assert_eq!(v.to_string().parse::<Version>(), Ok(v));
        }

        #[test]
        fn version_parse_never_panics_and_accepts_only_canonical_digits(s in "[0-9.+ a-]{0,30}") {
            match s.parse::<Version>() {
                Ok(v) => {
                    // Accepted text is three digit runs; it prints back the same up to
                    // leading zeros.
                    prop_assert!(s.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
                    prop_assert_eq!(s.split('.').count(), 3);
                    let trimmed: Vec<String> = s
                        .split('.')
                        .map(|p| p.trim_start_matches('0'))
                        .map(|p| if p.is_empty() { "0".to_owned() } else { p.to_owned() })
                        .collect();
                    prop_assert_eq!(v.to_string(), trimmed.join("."));
                }
                Err(e) => prop_assert!(e.to_string().starts_with("invalid version")),
            }
        }

        #[test]
        fn records_round_trip(r in any_record()) {
            prop_assert_eq!(decode_record(&encode_record(&r)), Ok(r.clone()));
            prop_assert_eq!(decode_record_shared(&encode_record(&r)), Ok(r));
        }

        /// The shared decoder is the full one, verdicts included, on any input: encodings,
        /// their prefixes, and random bytes behind the format byte.
        #[test]
        fn the_shared_decoder_agrees_with_the_full_one(
            r in any_record(),
            cut in any::<prop::sample::Index>(),
            mut noise in prop::collection::vec(any::<u8>(), 0..48),
        ) {
            let bytes = encode_record(&r);
            let prefix = bytes.slice(..cut.index(bytes.len() + 1));
            prop_assert_eq!(decode_record_shared(&prefix), decode_record(&prefix));
            if let Some(first) = noise.first_mut() {
                *first = RECORD_FORMAT;
            }
            let noise = Bytes::from(noise);
            prop_assert_eq!(decode_record_shared(&noise), decode_record(&noise));
        }

        #[test]
        fn every_strict_prefix_and_any_extension_is_an_error(
            r in any_record(),
            extra in prop::collection::vec(any::<u8>(), 1..8),
        ) {
            let bytes = encode_record(&r);
            for len in 0..bytes.len() {
                prop_assert!(decode_record(&bytes[..len]).is_err(), "prefix of {} bytes", len);
            }
            let mut longer = bytes.to_vec();
            longer.extend(extra);
            prop_assert!(decode_record(&longer).is_err());
        }

        #[test]
        fn random_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..48)) {
            let _ = decode_record(&bytes);
            if let Some(first) = bytes.first_mut() {
                *first = RECORD_FORMAT;
            }
            if let Ok(r) = decode_record(&bytes) {
                // Whatever decodes is a well-formed record that encodes again.
                prop_assert_eq!(decode_record(&encode_record(&r)), Ok(r));
            }
        }
    }
}
