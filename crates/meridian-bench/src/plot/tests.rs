//! Tests of the plots: the files written, their data ranges and the colour assignment.

use super::axes::fmt_num;
use super::render::{render_rgb, with_suffix};
use super::style::Dash;
use super::throughput::throughput_points;
use super::*;
use crate::stats::{MAX_LATENCY_US, SIGNIFICANT_DIGITS};

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

fn histogram(samples_us: &[u64]) -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, MAX_LATENCY_US, SIGNIFICANT_DIGITS).unwrap();
    for &s in samples_us {
        h.saturating_record(s);
    }
    h
}

/// Width and height from the PNG's IHDR chunk (which must come first).
fn png_dimensions(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 33, "PNG too short: {} bytes", bytes.len());
    assert_eq!(bytes[..8], PNG_SIGNATURE, "not a PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "first chunk is not IHDR");
    let be = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    (be(16), be(20))
}

/// Checks both files of `paths` (as returned for `base`) and returns the SVG text.
fn check_outputs(base: &Path, paths: &[PathBuf], size: (u32, u32), texts: &[&str]) -> String {
    assert_eq!(paths, [with_suffix(base, "png"), with_suffix(base, "svg")]);
    let png = std::fs::read(&paths[0]).unwrap();
    assert_eq!(png_dimensions(&png), size);
    let svg = std::fs::read_to_string(&paths[1]).unwrap();
    assert!(svg.contains("<svg"), "no <svg element");
    assert!(svg.trim_end().ends_with("</svg>"), "SVG not closed");
    assert!(
        svg.contains(&format!("width=\"{}\" height=\"{}\"", size.0, size.1)),
        "SVG size is not {size:?}"
    );
    for text in texts {
        assert!(svg.contains(text), "SVG lacks the text {text:?}");
    }
    svg
}

/// Number of distinct colours drawn by `fig` in its pixel buffer, and the number of dark
/// (text or axis) pixels in the title band.
fn pixel_stats(fig: &impl Figure) -> (usize, usize) {
    let (w, _) = fig.size();
    let pixels = render_rgb(fig, Path::new("test")).unwrap();
    let mut colours: Vec<[u8; 3]> = pixels.chunks(3).map(|c| [c[0], c[1], c[2]]).collect();
    let title_dark = colours[..(w * TITLE_HEIGHT) as usize]
        .iter()
        .filter(|c| c.iter().all(|&v| v < 100))
        .count();
    colours.sort_unstable();
    colours.dedup();
    (colours.len(), title_dark)
}

/// The size of a line figure whose legend lists `labels`.
fn with_legend(labels: &[&str]) -> (u32, u32) {
    (1000 + legend_width(labels.iter().copied()), 600)
}

/// The x of the SVG text element holding exactly `text`.
fn svg_text_x(svg: &str, text: &str) -> i32 {
    let at = svg
        .find(&format!(">\n{text}\n<"))
        .unwrap_or_else(|| panic!("no text {text:?}"));
    let open = svg[..at].rfind("<text").unwrap();
    let x = &svg[open..at];
    let x = &x[x.find(" x=\"").unwrap() + 4..];
    x[..x.find('"').unwrap()].parse().unwrap()
}

fn percentiles(scale_us: u64) -> Vec<u64> {
    (1..=99u64).map(|p| scale_us + p * scale_us / 50).collect()
}

#[test]
fn latency_cdf_writes_png_and_svg_with_title_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("nested/dir/cdf");
    let local = histogram(&(1..=1000).map(|i| 200 + i).collect::<Vec<_>>());
    let remote = histogram(&(1..=1000).map(|i| 80_000 + 37 * i).collect::<Vec<_>>());
    let series = [
        CdfSeries {
            label: "local".into(),
            histogram: &local,
        },
        CdfSeries {
            label: "remote".into(),
            histogram: &remote,
        },
    ];
    let paths = latency_cdf(&base, "read latency CDF", &series).unwrap();
    let svg = check_outputs(
        &base,
        &paths,
        with_legend(&["remote (n=1000)"]),
        &[
            "read latency CDF",
            "local (n=1000)",
            "remote (n=1000)",
            "latency (ms, log scale)",
        ],
    );
    // One line per series, in the palette's first two colours.
    assert!(svg.contains("<polyline"), "no line drawn");
    assert!(
        svg.contains("#4E79A7") && svg.contains("#F28E2B"),
        "series colours missing"
    );
    assert!(!svg.contains("no data"));
    // Ticks of the log axis cover 0.2 ms .. 120 ms.
    for tick in [">\n0.2\n<", ">\n1\n<", ">\n100\n<"] {
        assert!(svg.contains(tick), "x tick {tick:?} missing");
    }
}

#[test]
fn png_text_is_rendered_with_the_embedded_font() {
    let h = histogram(&[1_000, 2_000, 3_000]);
    let fig = CdfFigure {
        title: "title text".into(),
        lines: vec![CdfLine {
            label: "a".into(),
            count: h.len(),
            points: cdf_points(&h),
        }],
    };
    let (colours, title_dark) = pixel_stats(&fig);
    assert!(
        title_dark > 100,
        "title band has only {title_dark} dark pixels"
    );
    // White, black, greys of the grid and anti-aliased text, the series colour.
    assert!(colours > 10, "only {colours} distinct colours drawn");
}

#[test]
fn output_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let h = histogram(&[5, 50, 500, 5_000, 50_000]);
    let series = [CdfSeries {
        label: "s".into(),
        histogram: &h,
    }];
    let a = latency_cdf(&dir.path().join("a"), "t", &series).unwrap();
    let b = latency_cdf(&dir.path().join("b"), "t", &series).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            std::fs::read(x).unwrap(),
            std::fs::read(y).unwrap(),
            "{x:?} != {y:?}"
        );
    }
}

#[test]
fn latency_cdf_without_data_draws_a_no_data_note() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("empty");
    let paths = latency_cdf(&base, "nothing here", &[]).unwrap();
    check_outputs(&base, &paths, (1000, 600), &["nothing here", "no data"]);

    let empty = histogram(&[]);
    let series = [CdfSeries {
        label: "idle-client".into(),
        histogram: &empty,
    }];
    let paths = latency_cdf(&base, "still nothing", &series).unwrap();
    check_outputs(
        &base,
        &paths,
        (1000, 600),
        &["still nothing", "no data", "idle-client"],
    );
}

#[test]
fn latency_cdf_single_sample_zero_and_empty_series_work() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("one");
    let one = histogram(&[1_500]);
    let zero = histogram(&[0]);
    let empty = histogram(&[]);
    let huge = histogram(&[u64::MAX]);
    let series = [
        CdfSeries {
            label: "one".into(),
            histogram: &one,
        },
        CdfSeries {
            label: "zero".into(),
            histogram: &zero,
        },
        CdfSeries {
            label: "empty".into(),
            histogram: &empty,
        },
        CdfSeries {
            label: "saturated".into(),
            histogram: &huge,
        },
    ];
    let paths = latency_cdf(&base, "edge cases", &series).unwrap();
    check_outputs(
        &base,
        &paths,
        with_legend(&["saturated (n=1)"]),
        &[
            "one (n=1)",
            "zero (n=1)",
            "empty (no data)",
            "saturated (n=1)",
        ],
    );
}

#[test]
fn box_plots_draw_a_grid_of_facets() {
    let dir = tempfile::tempdir().unwrap();
    let labels = ["ind1", "ind2", "lt_qqer", "lt_rec"];
    let facet = |title: &str, scale: u64| BoxFacet {
        title: title.into(),
        boxes: labels
            .iter()
            .enumerate()
            .map(|(i, l)| BoxSpec {
                label: l.to_string(),
                percentiles_us: percentiles(scale * (i as u64 + 1)),
            })
            .collect(),
    };
    let facets = [
        facet("read · local", 300),
        facet("read · remote", 40_000),
        facet("update · local", 500),
        facet("update · remote", 90_000),
    ];
    for log_y in [false, true] {
        let base = dir.path().join(format!("box-{log_y}"));
        let paths = box_plots(&base, "latency by strategy", &facets, log_y).unwrap();
        let mut texts = vec!["latency by strategy", "read · local", "update · remote"];
        texts.extend(labels);
        let svg = check_outputs(&base, &paths, (1000, 50 + 2 * 550), &texts);
        // 4 boxes × 4 facets, each a filled rectangle in its label's colour.
        assert_eq!(svg.matches("fill=\"#4E79A7\"").count(), 4, "ind1 boxes");
        assert_eq!(
            svg.matches("fill=\"#59A14F\"").count(),
            0,
            "unexpected fifth colour"
        );
        assert!(!svg.contains("no data"));
    }
    // Three facets: one row of three, wider.
    let base = dir.path().join("box3");
    let paths = box_plots(&base, "three", &facets[..3], true).unwrap();
    check_outputs(&base, &paths, (1260, 600), &["three"]);
    // One facet: one row.
    let base = dir.path().join("box1");
    let paths = box_plots(&base, "one", &facets[..1], false).unwrap();
    check_outputs(&base, &paths, (1000, 600), &["one", "ind1"]);
}

#[test]
fn box_plots_without_data_draw_no_data_notes() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("none");
    let paths = box_plots(&base, "no facets", &[], true).unwrap();
    check_outputs(&base, &paths, (1000, 600), &["no facets", "no data"]);

    let facets = [
        BoxFacet {
            title: "empty facet".into(),
            boxes: vec![],
        },
        BoxFacet {
            title: "partly empty".into(),
            boxes: vec![
                BoxSpec {
                    label: "ind1".into(),
                    percentiles_us: vec![],
                },
                BoxSpec {
                    label: "ind2".into(),
                    percentiles_us: percentiles(1_000),
                },
            ],
        },
        BoxFacet {
            title: "only empty boxes".into(),
            boxes: vec![BoxSpec {
                label: "lt_rec".into(),
                percentiles_us: vec![],
            }],
        },
    ];
    for log_y in [false, true] {
        let paths = box_plots(&base, "some empty", &facets, log_y).unwrap();
        let svg = check_outputs(
            &base,
            &paths,
            (1260, 600),
            &[
                "empty facet",
                "partly empty",
                "only empty boxes",
                "ind1",
                "ind2",
                "lt_rec",
            ],
        );
        assert_eq!(
            svg.matches("no data").count(),
            3,
            "one note per empty facet or box"
        );
    }
}

#[test]
fn box_plots_accept_degenerate_percentiles() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("flat");
    let facets = [BoxFacet {
        title: "flat".into(),
        boxes: vec![
            BoxSpec {
                label: "zeros".into(),
                percentiles_us: vec![0; 99],
            },
            BoxSpec {
                label: "single".into(),
                percentiles_us: vec![1_500; 99],
            },
        ],
    }];
    for log_y in [false, true] {
        let paths = box_plots(&base, "flat boxes", &facets, log_y).unwrap();
        check_outputs(&base, &paths, (1000, 600), &["zeros", "single"]);
    }
}

#[test]
fn box_plots_refuse_malformed_percentiles_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("bad");
    let short = [BoxFacet {
        title: "f".into(),
        boxes: vec![BoxSpec {
            label: "ind1".into(),
            percentiles_us: vec![1, 2, 3],
        }],
    }];
    let err = box_plots(&base, "t", &short, false).unwrap_err();
    let BenchError::Plot { reason } = err else {
        panic!("not a Plot error: {err:?}")
    };
    assert!(
        reason.contains("ind1") && reason.contains("3 entries"),
        "{reason}"
    );

    let mut decreasing = percentiles(100);
    decreasing[50] = 0;
    let unsorted = [BoxFacet {
        title: "f".into(),
        boxes: vec![BoxSpec {
            label: "ind2".into(),
            percentiles_us: decreasing,
        }],
    }];
    let err = box_plots(&base, "t", &unsorted, true).unwrap_err();
    let BenchError::Plot { reason } = err else {
        panic!("not a Plot error: {err:?}")
    };
    assert!(
        reason.contains("non-decreasing") && reason.contains("p51"),
        "{reason}"
    );

    assert!(!with_suffix(&base, "png").exists() && !with_suffix(&base, "svg").exists());
}

#[test]
fn throughput_over_time_writes_png_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("tput");
    let series = [
        ThroughputSeries {
            label: "ind1".into(),
            per_second: vec![0, 0, 900, 1_000, 1_050, 980, 1_010],
            measured: None,
        },
        ThroughputSeries {
            label: "lt_rec".into(),
            per_second: vec![0, 0, 400, 420],
            measured: None,
        },
    ];
    let paths = throughput_over_time(&base, "throughput", &series).unwrap();
    let svg = check_outputs(
        &base,
        &paths,
        with_legend(&["lt_rec"]),
        &[
            "throughput",
            "ind1",
            "lt_rec",
            "ops/s",
            "time since run start (s)",
        ],
    );
    assert!(svg.contains("#4E79A7") && svg.contains("#F28E2B"));
    // The y axis reaches a round value above the peak.
    assert!(svg.contains(">\n1200\n<"), "y tick 1200 missing");
}

#[test]
fn throughput_edge_cases_work() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("tput-edge");
    let paths = throughput_over_time(&base, "no series", &[]).unwrap();
    check_outputs(&base, &paths, (1000, 600), &["no series", "no data"]);

    let empty = [ThroughputSeries {
        label: "idle".into(),
        per_second: vec![],
        measured: None,
    }];
    let paths = throughput_over_time(&base, "empty series", &empty).unwrap();
    check_outputs(&base, &paths, (1000, 600), &["no data", "idle"]);

    let series = [
        ThroughputSeries {
            label: "one bucket".into(),
            per_second: vec![7],
            measured: None,
        },
        ThroughputSeries {
            label: "zeros".into(),
            per_second: vec![0, 0, 0],
            measured: None,
        },
        ThroughputSeries {
            label: "idle".into(),
            per_second: vec![],
            measured: None,
        },
    ];
    let paths = throughput_over_time(&base, "edges", &series).unwrap();
    check_outputs(
        &base,
        &paths,
        with_legend(&["idle (no data)"]),
        &["one bucket", "zeros", "idle (no data)"],
    );

    let zeros = [ThroughputSeries {
        label: "all zero".into(),
        per_second: vec![0; 5],
        measured: None,
    }];
    let paths = throughput_over_time(&base, "zero", &zeros).unwrap();
    check_outputs(&base, &paths, with_legend(&["all zero"]), &["all zero"]);
}

/// The demo's CDF has 16 curves (4 modes × 2 ops × local/remote): every curve gets its
/// own colour and dash, and the legend sits in its own panel, right of every curve.
#[test]
fn many_curves_stay_distinct_and_the_legend_hides_none() {
    let styles: Vec<SeriesStyle> = (0..30).map(series_style).collect();
    for (i, a) in styles.iter().enumerate() {
        for b in &styles[..i] {
            assert_ne!(a, b, "line {i} repeats a style");
        }
    }
    assert_eq!(styles[9].dash, Dash::Solid);
    assert_eq!(styles[10].dash, Dash::Dashed);
    assert_eq!(styles[20].dash, Dash::Dotted);

    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("cdf16");
    let hists: Vec<Histogram<u64>> = (0..16u64)
        .map(|i| {
            let scale = if i % 2 == 0 { 100 } else { 100_000 };
            histogram(&(1..=200).map(|k| scale + k * (i + 1)).collect::<Vec<_>>())
        })
        .collect();
    let labels: Vec<String> = (0..16).map(|i| format!("mode{} op {i}", i / 4)).collect();
    let series: Vec<CdfSeries<'_>> = labels
        .iter()
        .zip(&hists)
        .map(|(label, h)| CdfSeries {
            label: label.clone(),
            histogram: h,
        })
        .collect();
    let paths = latency_cdf(&base, "sixteen", &series).unwrap();
    let entries: Vec<String> = labels.iter().map(|l| format!("{l} (n=200)")).collect();
    let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
    let svg = check_outputs(&base, &paths, with_legend(&refs), &refs);
    // Every legend entry is right of the plot (which spans x < 1000).
    for entry in &refs {
        assert!(svg_text_x(&svg, entry) >= 1000, "{entry} over the plot");
    }
}

/// The warm-up is not a line at 0 ops/s: buckets before the measured interval are left
/// out, a cut bucket is scaled to its measured part, and the band is shaded and named.
#[test]
fn throughput_leaves_the_warmup_out() {
    let s = ThroughputSeries {
        label: "ops/s".into(),
        per_second: vec![0, 0, 50, 100, 100, 30],
        measured: Some((2.5, 5.3)),
    };
    let want = [
        (2.5, 100.0),
        (3.0, 100.0),
        (3.0, 100.0),
        (4.0, 100.0),
        (4.0, 100.0),
        (5.0, 100.0),
        (5.0, 100.0),
        (5.3, 100.0),
    ];
    let got = throughput_points(&s);
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((x, y), (gx, gy)) in want.into_iter().zip(got) {
        assert!((x - gx).abs() < 1e-9 && (y - gy).abs() < 1e-6, "{gx},{gy}");
    }
    // A sliver after the warm-up is too short to be a rate.
    let sliver = ThroughputSeries {
        measured: Some((2.9, 6.0)),
        ..s.clone()
    };
    assert_eq!(throughput_points(&sliver)[0], (3.0, 100.0));

    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("tput-warm");
    let run = ThroughputSeries {
        label: "ops/s".into(),
        per_second: [vec![0; 5], vec![1_000; 10]].concat(),
        measured: Some((5.0, 15.0)),
    };
    let points = throughput_points(&run);
    assert!(
        points.iter().all(|&(x, y)| x >= 5.0 && y == 1_000.0),
        "{points:?}"
    );
    let paths = throughput_over_time(&base, "warm", &[run]).unwrap();
    check_outputs(&base, &paths, with_legend(&["ops/s"]), &["warm-up"]);
}

#[test]
fn paths_append_the_suffix_and_bad_bases_are_refused() {
    assert_eq!(
        with_suffix(Path::new("out/run.1"), "png"),
        PathBuf::from("out/run.1.png")
    );
    let err = throughput_over_time(Path::new("/"), "t", &[]).unwrap_err();
    assert!(matches!(err, BenchError::Io { .. }), "{err:?}");

    // A base below a regular file: the directory cannot be created.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = throughput_over_time(&file.join("plot"), "t", &[]).unwrap_err();
    let BenchError::Io { path, .. } = err else {
        panic!("not an Io error: {err:?}")
    };
    assert_eq!(path, file.display().to_string());
}

#[test]
fn axes_have_round_ticks() {
    assert_eq!(fmt_num(0.001), "0.001");
    assert_eq!(fmt_num(0.2 + 0.1), "0.3");
    assert_eq!(fmt_num(2.5), "2.5");
    assert_eq!(fmt_num(150.0), "150");
    assert_eq!(fmt_num(3_600_000.0), "3600000");
    assert_eq!(fmt_num(0.0), "0");

    let log = log_axis(0.23, 87.0, 0.001);
    let labels: Vec<String> = log.ticks.iter().map(|&t| log.label(t)).collect();
    assert_eq!(
        labels,
        ["0.2", "0.5", "1", "2", "5", "10", "20", "50", "100"]
    );
    // A single value still spans a range, with at least two ticks.
    let single = log_axis(1.0, 1.0, 0.001);
    assert!(
        single.lo < 0.0 && single.hi > 0.0 && single.ticks.len() >= 2,
        "{single:?}"
    );
    // Wide ranges keep only powers of ten.
    let wide = log_axis(0.0, 3.6e6, 0.001);
    assert_eq!(wide.ticks.len(), 11, "{wide:?}");

    let lin = linear_axis_from_zero(1_050.0);
    let labels: Vec<String> = lin.ticks.iter().map(|&t| lin.label(t)).collect();
    assert_eq!(lin.hi, 1_200.0);
    assert_eq!(labels.first().map(String::as_str), Some("0"));
    assert_eq!(labels.last().map(String::as_str), Some("1200"));
}

#[test]
fn xy_lines_draw_log_and_linear_axes_with_markers() {
    let dir = tempfile::tempdir().unwrap();
    let series = [
        XySeries {
            label: "fast".into(),
            points: vec![(0.0, 31.0), (1.0, 32.0), (2.0, 35.0)],
        },
        XySeries {
            label: "backlog".into(),
            points: vec![(0.0, 31.0), (1.0, 0.0), (2.0, 90_000.0), (3.0, f64::NAN)],
        },
    ];
    for log_y in [true, false] {
        let axes = XyAxes {
            title: "latency over time".into(),
            x_desc: "time (s)".into(),
            y_desc: "latency (ms)".into(),
            log_y,
            markers: vec![1.5, 99.0],
        };
        let base = dir.path().join(format!("xy-{log_y}"));
        let paths = xy_lines(&base, &axes, &series).unwrap();
        let svg = check_outputs(
            &base,
            &paths,
            with_legend(&["backlog"]),
            &["latency over time", "fast", "backlog", "time (s)"],
        );
        assert!(svg.contains("#4E79A7") && svg.contains("#F28E2B"));
        if log_y {
            assert!(svg.contains(">\n100000\n<"), "log tick 100000 missing");
        }
    }
    let empty = [XySeries {
        label: "idle".into(),
        points: vec![(0.0, 0.0)],
    }];
    let axes = XyAxes {
        title: "t".into(),
        x_desc: "x".into(),
        y_desc: "y".into(),
        log_y: true,
        markers: vec![],
    };
    let base = dir.path().join("xy-empty");
    let paths = xy_lines(&base, &axes, &empty).unwrap();
    check_outputs(&base, &paths, (1000, 600), &["no data", "idle"]);
}
