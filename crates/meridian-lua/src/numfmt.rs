//! C's `%.<precision>g` for Lua numbers: how Redis turns a Lua number into a command argument
//! (`%.17g`, every double round-trips) and how Lua and lua-cjson print them (`%.14g`).

/// `x` formatted as C's `printf("%.<precision>g", x)` (`precision` clamped to 1..=17):
/// the shortest of fixed and exponent notation, trailing zeros removed, `inf`, `-inf`, `nan`
/// (`-nan` for a negative NaN, as glibc prints it).
pub fn format_g(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let p = precision.clamp(1, 17);
    // Rounded to p significant digits, in exponent form: "d.ddde[-]x".
    let sci = format!("{:.*e}", p - 1, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let mantissa = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        strip_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

/// Removes a fraction's trailing zeros, and the point if nothing is left after it.
fn strip_zeros(s: &str) -> &str {
    if !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::format_g;

    #[test]
    fn matches_printf_g() {
        let cases: &[(f64, usize, &str)] = &[
            (0.0, 17, "0"),
            (-0.0, 17, "-0"),
            (10.0, 17, "10"),
            (2.14, 17, "2.1400000000000001"),
            (2.14, 14, "2.14"),
            (0.1, 17, "0.10000000000000001"),
            (1e20, 17, "1e+20"),
            (123456789012345678.0, 17, "1.2345678901234568e+17"),
            (12345678901234567.0, 17, "12345678901234568"),
            (1e-5, 14, "1e-05"),
            (0.0001, 14, "0.0001"),
            (1.5, 1, "2"),
            (-2.5e-300, 14, "-2.5e-300"),
            (f64::INFINITY, 17, "inf"),
            (f64::NEG_INFINITY, 14, "-inf"),
            (100.0, 2, "1e+02"),
        ];
        for &(x, p, want) in cases {
            assert_eq!(format_g(x, p), want, "{x} at %.{p}g");
        }
    }
}
