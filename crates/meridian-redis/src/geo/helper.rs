//! Distances on Redis's sphere, search shapes, and the cells a search looks in (Redis's
//! `geohash_helper.c`): the step estimated from the radius, the centre cell and the
//! neighbours worth scanning.
//!
//! As in [`super::hash`], every formula keeps Redis's order of operations so the same
//! inputs give the same `f64`s, and the same points are found.

use super::hash::{self, Area, Hash, Neighbors};

/// Redis's earth radius in metres (WGS-84's quadratic mean radius).
pub const EARTH_RADIUS_M: f64 = 6372797.560856;

/// Web Mercator's half width in metres: the step estimate starts from it.
const MERCATOR_MAX: f64 = 20037726.37;

/// Degrees to radians, as Redis's `D_R`.
const D_R: f64 = std::f64::consts::PI / 180.0;

fn deg_rad(d: f64) -> f64 {
    d * D_R
}

fn rad_deg(r: f64) -> f64 {
    r / D_R
}

/// The distance along a meridian between two latitudes.
pub fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// The Haversine distance in metres between two points (Redis's `geohashGetDistance`,
/// with its shortcut when the longitudes are the same).
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (deg_rad(lon1), deg_rad(lon2));
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (deg_rad(lat1), deg_rad(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// What a search covers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Extent {
    /// BYRADIUS / GEORADIUS: a radius, in the unit.
    Radius(f64),
    /// BYBOX: width and height, in the unit.
    Box {
        /// East-west size.
        width: f64,
        /// North-south size.
        height: f64,
    },
}

/// A search: a centre, an extent and its unit's size in metres.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// Centre longitude.
    pub lon: f64,
    /// Centre latitude.
    pub lat: f64,
    /// Metres per unit.
    pub conversion: f64,
    /// Radius or box.
    pub extent: Extent,
}

/// A bounding box: `[min_lon, min_lat, max_lon, max_lat]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// West edge.
    pub min_lon: f64,
    /// South edge.
    pub min_lat: f64,
    /// East edge.
    pub max_lon: f64,
    /// North edge.
    pub max_lat: f64,
}

impl Shape {
    /// The box around the shape (Redis's `geohashBoundingBox`): the longitude span is taken
    /// at the edge nearer the pole, where a metre spans more degrees.
    pub fn bounds(&self) -> Bounds {
        let (half_h, half_w) = match self.extent {
            Extent::Radius(r) => (r, r),
            Extent::Box { width, height } => (height / 2.0, width / 2.0),
        };
        let height = self.conversion * half_h;
        let width = self.conversion * half_w;
        let lat_delta = rad_deg(height / EARTH_RADIUS_M);
        let lon_delta_top = rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat + lat_delta).cos());
        let lon_delta_bottom =
            rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat - lat_delta).cos());
        let lon_delta = if self.lat < 0.0 {
            lon_delta_bottom
        } else {
            lon_delta_top
        };
        Bounds {
            min_lon: self.lon - lon_delta,
            min_lat: self.lat - lat_delta,
            max_lon: self.lon + lon_delta,
            max_lat: self.lat + lat_delta,
        }
    }

    /// The distance in metres from the centre to a point inside the shape, or `None` when the
    /// point is outside (Redis's `geoWithinShape`: a point exactly on the edge is inside).
    pub fn contains(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.extent {
            Extent::Radius(r) => {
                let d = distance(self.lon, self.lat, lon, lat);
                (d <= r * self.conversion).then_some(d)
            }
            Extent::Box { width, height } => {
                let (width_m, height_m) = (width * self.conversion, height * self.conversion);
                if lat_distance(lat, self.lat) > height_m / 2.0 {
                    return None;
                }
                if distance(lon, lat, self.lon, lat) > width_m / 2.0 {
                    return None;
                }
                Some(distance(self.lon, self.lat, lon, lat))
            }
        }
    }

    /// The radius (a box's half diagonal) in metres, for the step estimate.
    fn radius_m(&self) -> f64 {
        let r = match self.extent {
            Extent::Radius(r) => r,
            Extent::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        };
        r * self.conversion
    }
}

/// The cell step whose cells are about as large as the radius (Redis's
/// `geohashEstimateStepsByRadius`): one step coarser near the poles, two beyond 80°.
pub fn estimate_steps(range_m: f64, lat: f64) -> u8 {
    if range_m == 0.0 {
        return hash::STEP_MAX;
    }
    let mut range = range_m;
    let mut step: i32 = 1;
    // Terminates: a positive range doubles to MERCATOR_MAX in under 1100 rounds, and an
    // infinite or NaN one never enters.
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, i32::from(hash::STEP_MAX)) as u8
}

/// The cells a search scans: the centre's cell and the neighbours that may hold a point of
/// the shape, in Redis's order (centre, N, S, E, W, NE, NW, SE, SW); `None` for a neighbour
/// excluded.
pub fn search_cells(shape: &Shape) -> [Option<Hash>; 9] {
    let b = shape.bounds();
    let mut steps = estimate_steps(shape.radius_m(), shape.lat);
    let cell_at = |steps: u8| -> Option<(Hash, Neighbors, Area)> {
        let h = hash::encode(shape.lon, shape.lat, steps)?;
        Some((h, hash::neighbors(h), hash::decode_area(h)))
    };
    // The centre is always a valid position (checked, or decoded from a score).
    let Some((mut h, mut n, mut area)) = cell_at(steps) else {
        return [None; 9];
    };
    // When the shape reaches past a neighbour's far edge, the step is too fine: one coarser.
    let decrease = hash::decode_area(n.north).lat.max < b.max_lat
        || hash::decode_area(n.south).lat.min > b.min_lat
        || hash::decode_area(n.east).lon.max < b.max_lon
        || hash::decode_area(n.west).lon.min > b.min_lon;
    if steps > 1 && decrease {
        steps -= 1;
        if let Some(c) = cell_at(steps) {
            (h, n, area) = c;
        }
    }
    let mut cells = [
        Some(h),
        Some(n.north),
        Some(n.south),
        Some(n.east),
        Some(n.west),
        Some(n.north_east),
        Some(n.north_west),
        Some(n.south_east),
        Some(n.south_west),
    ];
    // Neighbours beyond the shape's bounds are useless.
    if steps >= 2 {
        const N: usize = 1;
        const S: usize = 2;
        const E: usize = 3;
        const W: usize = 4;
        const NE: usize = 5;
        const NW: usize = 6;
        const SE: usize = 7;
        const SW: usize = 8;
        let mut drop = |ids: [usize; 3]| ids.iter().for_each(|&i| cells[i] = None);
        if area.lat.min < b.min_lat {
            drop([S, SW, SE]);
        }
        if area.lat.max > b.max_lat {
            drop([N, NE, NW]);
        }
        if area.lon.min < b.min_lon {
            drop([W, SW, NW]);
        }
        if area.lon.max > b.max_lon {
            drop([E, SE, NE]);
        }
    }
    cells
}
