//! What the process costs, from `/proc/self` (Linux; elsewhere every figure is `None`):
//! resident memory now (`VmRSS`) and at its peak (`VmHWM`, which [`reset_peak`] brings back
//! to the current figure, as `echo 5 > /proc/self/clear_refs` does), and CPU time used.

/// A `kB` field of `/proc/self/status`, in bytes.
fn status_field(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status(&text, name)
}

fn parse_status(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())?;
    Some(kb * 1024)
}

/// Resident memory now, bytes.
pub fn rss() -> Option<u64> {
    status_field("VmRSS")
}

/// The resident-memory high-water mark, bytes.
pub fn peak_rss() -> Option<u64> {
    status_field("VmHWM")
}

/// Resets the high-water mark to the current resident memory; false when the kernel refused.
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", b"5").is_ok()
}

/// CPU time (user + system) of the process so far, seconds (clock ticks of 1/100 s, Linux's
/// `USER_HZ`).
pub fn cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces; the fields after its ')' are plain.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_stat_lines_parse() {
        let status = "Name:\tmeridian\nVmHWM:\t  20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(parse_status(status, "VmRSS"), Some(10 << 20));
        assert_eq!(parse_status(status, "VmHWM"), Some(20 << 20));
        assert_eq!(parse_status(status, "VmSwap"), None);
        let stat = "123 (a b) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(parse_stat(stat), Some(3.0));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_reports_its_memory() {
        if cfg!(target_os = "linux") {
            let rss = rss().unwrap();
            assert!(rss > 0);
            assert!(peak_rss().unwrap() >= rss / 2);
            assert!(cpu_seconds().is_some());
        }
    }
}
