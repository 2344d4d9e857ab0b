//! The search of a geo index (Redis's `membersOfAllNeighbors`): each cell
//! [`super::helper::search_cells`] chose is a range of scores, scanned in score order, every
//! member decoded and kept if the shape holds it.

use super::hash::{self, Hash};
use super::helper::{Shape, search_cells};
use crate::zsets::{Score, ZSet};
use bytes::Bytes;
use std::cmp::Ordering;

/// A member found by a search.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The member.
    pub member: Bytes,
    /// Its score (its 52-bit geohash).
    pub score: f64,
    /// Its decoded longitude.
    pub lon: f64,
    /// Its decoded latitude.
    pub lat: f64,
    /// Its distance from the shape's centre, in metres.
    pub dist: f64,
}

/// The scores of a cell's points: `min <= score < max` (Redis's `scoresOfGeoHashBox`).
fn score_range(h: Hash) -> (f64, f64) {
    let min = hash::align52(h);
    let max = hash::align52(Hash {
        bits: h.bits.wrapping_add(1),
        step: h.step,
    });
    (min as f64, max as f64)
}

/// The members of the index `z` inside `shape`, in Redis's order: cell by cell, each by score
/// then member, each cell's first entry found in O(log n). With `limit` (COUNT ... ANY), the
/// search stops once that many are found.
pub fn search(z: &ZSet, shape: &Shape, limit: Option<usize>) -> Vec<Found> {
    let cells = search_cells(shape);
    let mut found = Vec::new();
    let full = |found: &Vec<Found>| limit.is_some_and(|l| !found.is_empty() && found.len() >= l);
    let mut last: Option<usize> = None;
    for (i, cell) in cells.iter().enumerate() {
        let Some(cell) = *cell else { continue };
        // A huge radius makes adjacent neighbours the same cell: skip a repeat of the cell
        // scanned last (as Redis does, the centre is never compared).
        if let Some(l) = last
            && l != 0
            && cells[l] == Some(cell)
        {
            continue;
        }
        if full(&found) {
            break;
        }
        let (min, max) = score_range(cell);
        let Some(from) = Score::new(min) else {
            continue;
        };
        for (score, member) in z.iter_from(from, b"", false) {
            if score >= max {
                break;
            }
            let (lon, lat) = hash::decode_score(score);
            if let Some(dist) = shape.contains(lon, lat) {
                found.push(Found {
                    member: Bytes::copy_from_slice(member),
                    score,
                    lon,
                    lat,
                    dist,
                });
            }
            if full(&found) {
                break;
            }
        }
        last = Some(i);
    }
    found
}

/// Orders by distance, nearest first (`desc`: farthest first), keeping the search order
/// among equal distances.
pub fn sort_by_distance(found: &mut [Found], desc: bool) {
    found.sort_by(|a, b| {
        let o = a.dist.partial_cmp(&b.dist).unwrap_or(Ordering::Equal);
        if desc { o.reverse() } else { o }
    });
}
