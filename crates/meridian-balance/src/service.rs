//! The service-time model of a replica's read workers (spec §0): `real` serves a read from
//! the engine as fast as it goes; `fixed` and `exp` make each read occupy a worker for a
//! modelled time on the node's clock (virtual in the simulator), so the replica-choice study
//! runs in the simulator and on a real cluster alike.
//!
//! Times are parsed from decimal text straight into whole microseconds (no float on the
//! way), so `Display` prints back exactly what was parsed: at most three decimals of a
//! millisecond are accepted. `exp` draws are clamped to `[1 µs, SERVICE_MAX_US]`.

use crate::Micros;
use rand::Rng;
use rand_distr::{Distribution, Exp};

/// Longest modelled service time accepted (60 s).
pub const SERVICE_MAX_US: Micros = 60_000_000;

/// What the parser tells a user who wrote something else.
const FORMS: &str = "expected `real`, `fixed:MS` or `exp:MS` (MS in milliseconds, e.g. `fixed:30` or \
                     `exp:0.5`, greater than 0 and at most 60000, at most 3 decimals)";

/// A service-time model. Written `real`, `fixed:MS` or `exp:MS` (milliseconds, fractions
/// allowed, at most 60 000).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ServiceModel {
    /// The engine's own time.
    #[default]
    Real,
    /// Every read takes this long.
    Fixed {
        /// Service time, microseconds.
        us: Micros,
    },
    /// Exponentially distributed service times.
    Exp {
        /// Mean service time, microseconds.
        mean_us: Micros,
    },
}

impl ServiceModel {
    /// Whether reads are served at the engine's own speed.
    pub fn is_real(self) -> bool {
        matches!(self, ServiceModel::Real)
    }

    /// A service time drawn from the model (`None` for `real`).
    pub fn sample(self, rng: &mut impl Rng) -> Option<Micros> {
        match self {
            ServiceModel::Real => None,
            ServiceModel::Fixed { us } => Some(us),
            ServiceModel::Exp { mean_us } => {
                let mean = mean_us.max(1) as f64;
                let drawn = match Exp::new(1.0 / mean) {
                    Ok(exp) => exp.sample(rng),
                    Err(_) => mean,
                };
                Some(clamp_us(drawn))
            }
        }
    }

    /// The model slowed down `factor` times (`real` stays `real`).
    pub fn scaled(self, factor: u32) -> ServiceModel {
        let k = Micros::from(factor.max(1));
        let scale = |t: Micros| t.saturating_mul(k).min(SERVICE_MAX_US);
        match self {
            ServiceModel::Real => ServiceModel::Real,
            ServiceModel::Fixed { us } => ServiceModel::Fixed { us: scale(us) },
            ServiceModel::Exp { mean_us } => ServiceModel::Exp {
                mean_us: scale(mean_us),
            },
        }
    }
}

/// A drawn time in whole microseconds within `[1, SERVICE_MAX_US]` (NaN counts as the
/// shortest; the cast is exact once the value is clamped).
fn clamp_us(us: f64) -> Micros {
    if us.is_nan() || us < 1.0 {
        1
    } else if us >= SERVICE_MAX_US as f64 {
        SERVICE_MAX_US
    } else {
        us.round() as Micros
    }
}

/// `MS` (a decimal number of milliseconds, at most 3 decimals) in microseconds, within
/// `(0, SERVICE_MAX_US]`.
fn parse_ms(text: &str) -> Option<Micros> {
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, f),
        None => (text, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) || frac.len() > 3 {
        return None;
    }
    if text.ends_with('.') {
        return None;
    }
    // Leading zeros are harmless, but a long run of them must not overflow the integer.
    let int = int.trim_start_matches('0');
    if int.len() > 6 {
        return None;
    }
    let whole: Micros = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut micros: Micros = 0;
    for (i, b) in frac.bytes().enumerate() {
        micros += Micros::from(b - b'0') * 10u64.pow(2 - i as u32);
    }
    let us = whole.checked_mul(1000)?.checked_add(micros)?;
    (1..=SERVICE_MAX_US).contains(&us).then_some(us)
}

/// `us` as milliseconds with no trailing zeros (`30000` → `30`, `500` → `0.5`).
struct Ms(Micros);

impl std::fmt::Display for Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ms, us) = (self.0 / 1000, self.0 % 1000);
        if us == 0 {
            return write!(f, "{ms}");
        }
        let frac = format!("{us:03}");
        write!(f, "{ms}.{}", frac.trim_end_matches('0'))
    }
}

impl std::fmt::Display for ServiceModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ServiceModel::Real => f.write_str("real"),
            ServiceModel::Fixed { us } => write!(f, "fixed:{}", Ms(us)),
            ServiceModel::Exp { mean_us } => write!(f, "exp:{}", Ms(mean_us)),
        }
    }
}

impl std::str::FromStr for ServiceModel {
    type Err = String;

    fn from_str(s: &str) -> Result<ServiceModel, String> {
        let text = s.trim();
        if text.eq_ignore_ascii_case("real") {
            return Ok(ServiceModel::Real);
        }
        let bad = || format!("invalid service_model `{s}`: {FORMS}");
        let (kind, ms) = text.split_once(':').ok_or_else(bad)?;
        let us = parse_ms(ms.trim()).ok_or_else(bad)?;
        match kind.trim().to_ascii_lowercase().as_str() {
            "fixed" => Ok(ServiceModel::Fixed { us }),
            "exp" => Ok(ServiceModel::Exp { mean_us: us }),
            _ => Err(bad()),
        }
    }
}

impl serde::Serialize for ServiceModel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ServiceModel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ServiceModel, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!("real".parse(), Ok(ServiceModel::Real));
        assert_eq!(" REAL ".parse(), Ok(ServiceModel::Real));
        assert_eq!("fixed:30".parse(), Ok(ServiceModel::Fixed { us: 30_000 }));
        assert_eq!("exp:0.5".parse(), Ok(ServiceModel::Exp { mean_us: 500 }));
        assert_eq!("exp:.25".parse(), Ok(ServiceModel::Exp { mean_us: 250 }));
        assert_eq!("fixed:0.001".parse(), Ok(ServiceModel::Fixed { us: 1 }));
        assert_eq!(
            "fixed:60000".parse(),
            Ok(ServiceModel::Fixed { us: SERVICE_MAX_US })
        );
        assert_eq!("fixed:007".parse(), Ok(ServiceModel::Fixed { us: 7_000 }));
    }

    #[test]
    fn rejects_bad_inputs_naming_the_forms() {
        for bad in [
            "",
            "fixed",
            "fixed:",
            "fixed:0",
            "fixed:0.0",
            "fixed:-1",
            "fixed:NaN",
            "exp:inf",
            "exp:1e3",
            "fixed:60000.001",
            "fixed:99999999999999999999",
            "fixed:1.2345",
            "fixed:abc",
            "fixed:1.",
            "fixed:.",
            "slow:3",
            "exp:+3",
            "exp:1..2",
            "fixed:30ms",
        ] {
            let err = bad.parse::<ServiceModel>().expect_err(bad);
            assert!(
                err.contains("fixed:MS") && err.contains("exp:MS"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn displays_milliseconds() {
        assert_eq!(ServiceModel::Real.to_string(), "real");
        assert_eq!(ServiceModel::Fixed { us: 30_000 }.to_string(), "fixed:30");
        assert_eq!(ServiceModel::Exp { mean_us: 500 }.to_string(), "exp:0.5");
        assert_eq!(
            ServiceModel::Fixed { us: 1_234_567 }.to_string(),
            "fixed:1234.567"
        );
        assert_eq!(ServiceModel::Fixed { us: 1_050 }.to_string(), "fixed:1.05");
    }

    #[test]
    fn serde_uses_the_text_form() {
        let m = ServiceModel::Exp { mean_us: 2_500 };
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, "\"exp:2.5\"");
        assert_eq!(serde_json::from_str::<ServiceModel>(&json).unwrap(), m);
        assert!(serde_json::from_str::<ServiceModel>("\"fixed:0\"").is_err());
    }

    proptest! {
        #[test]
        fn display_round_trips(us in 1..=SERVICE_MAX_US, exp: bool) {
            let m = if exp { ServiceModel::Exp { mean_us: us } } else { ServiceModel::Fixed { us } };
            prop_assert_eq!(m.to_string().parse::<ServiceModel>(), Ok(m));
        }

        #[test]
        fn garbage_never_panics(s in ".{0,24}") {
            if let Ok(m) = s.parse::<ServiceModel>() {
                prop_assert_eq!(m.to_string().parse::<ServiceModel>(), Ok(m));
            }
        }
    }

    #[test]
    fn samples_stay_in_range() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        assert_eq!(ServiceModel::Real.sample(&mut rng), None);
        assert_eq!(
            ServiceModel::Fixed { us: 30_000 }.sample(&mut rng),
            Some(30_000)
        );
        let m = ServiceModel::Exp { mean_us: 2_000 };
        let draws: Vec<Micros> = (0..20_000).map(|_| m.sample(&mut rng).unwrap()).collect();
        assert!(draws.iter().all(|&d| (1..=SERVICE_MAX_US).contains(&d)));
        let mean = draws.iter().sum::<u64>() as f64 / draws.len() as f64;
        assert!((mean - 2_000.0).abs() < 100.0, "mean {mean}");
        // The largest mean: draws above 60 s are clamped, never beyond.
        let big = ServiceModel::Exp {
            mean_us: SERVICE_MAX_US,
        };
        assert!((0..1_000).all(|_| big.sample(&mut rng).unwrap() <= SERVICE_MAX_US));
        // A zero mean (built by hand, not parsed) still gives at least 1 µs.
        let zero = ServiceModel::Exp { mean_us: 0 };
        assert!((0..100).all(|_| zero.sample(&mut rng).unwrap() >= 1));
    }

    #[test]
    fn scaled_multiplies_and_saturates() {
        let f = ServiceModel::Fixed { us: 30_000 };
        assert_eq!(f.scaled(10), ServiceModel::Fixed { us: 300_000 });
        assert_eq!(f.scaled(0), f);
        assert_eq!(f.scaled(1), f);
        assert_eq!(
            f.scaled(u32::MAX),
            ServiceModel::Fixed { us: SERVICE_MAX_US }
        );
        let e = ServiceModel::Exp { mean_us: 500 };
        assert_eq!(e.scaled(3), ServiceModel::Exp { mean_us: 1_500 });
        assert_eq!(ServiceModel::Real.scaled(5), ServiceModel::Real);
        let huge = ServiceModel::Fixed { us: u64::MAX };
        assert_eq!(huge.scaled(2), ServiceModel::Fixed { us: SERVICE_MAX_US });
    }
}
