//! Charts of `scripts/bench` output, as SVG files a reader sees at a glance (linked from
//! `docs/PERFORMANCE.md`).
//!
//! Reads the JSON lines of one or more `scripts/bench` runs (files, or stdin when none is given;
//! lines that are not a benchmark figure are skipped) and writes into `--out-dir` (default
//! `docs/`):
//! - `bench-ratios.svg`: every figure that has a same-run baseline, as its ratio to that
//!   baseline (log scale, 1 = as fast as the baseline), green where ZLink does at least as well
//!   as the baseline (throughput ratio ≥ 1, a cost or latency ratio ≤ 1), orange otherwise. With
//!   several runs the bar is the median ratio and a whisker spans the lowest to the highest.
//! - `bench-latency.svg`: each benchmark with `p50_us` / `p99_us` figures, ZLink next to its
//!   baseline (µs, log scale; medians over the runs).
//! - with `--samples FILE` (the request latencies the benchmarks wrote with
//!   `BENCH_SAMPLES=FILE`, `examples/support/samples.rs`): `bench-latency-hist.svg`, a latency
//!   histogram per request benchmark, ZLink over its baseline (log-spaced bins, share of the
//!   requests per bin; all runs together).
//!
//! Usage: `BENCH_SAMPLES=target/bench-samples.jsonl scripts/bench > target/bench.jsonl` then
//! `cargo run --release --example bench_plot -- target/bench.jsonl [more runs…]
//! --samples target/bench-samples.jsonl`.
//! SVG text only, so no font or image library is needed.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, ensure};
use clap::Parser;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Deserialize;

/// Command line.
#[derive(Parser)]
#[command(about = "SVG charts of scripts/bench JSON lines (docs/bench-*.svg)")]
struct Args {
    /// JSON-lines files of `scripts/bench` runs (stdin when none).
    files: Vec<PathBuf>,
    /// Directory the SVG files are written to.
    #[arg(long, default_value = "docs")]
    out_dir: PathBuf,
    /// A note under the titles (the machine, the commit, the number of runs).
    #[arg(long, default_value = "")]
    note: String,
    /// Latency samples written by the benchmarks (`BENCH_SAMPLES=FILE scripts/bench`): adds
    /// the histograms.
    #[arg(long)]
    samples: Option<PathBuf>,
}

/// One line of a samples file (`examples/support/samples.rs`).
#[derive(Deserialize)]
struct SampleLine {
    bench: String,
    series: String,
    samples_us: Vec<f64>,
}

/// One JSON line of `scripts/bench`.
#[derive(Deserialize)]
struct Line {
    bench: String,
    metric: String,
    value: f64,
    baseline: Option<f64>,
}

/// The values of one figure (`bench` + `metric`) over the runs, in input order.
#[derive(Default)]
struct Figure {
    values: Vec<f64>,
    baselines: Vec<f64>,
}

/// Whether a larger value of `metric` is better (throughput) or worse (latency, memory).
fn higher_is_better(metric: &str) -> bool {
    metric.contains("per_s")
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut text = String::new();
    if args.files.is_empty() {
        std::io::stdin().read_to_string(&mut text)?;
    }
    for f in &args.files {
        text += &std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        text.push('\n');
    }
    // Figures in first-seen order (the order scripts/bench runs them).
    let mut order: Vec<(String, String)> = Vec::new();
    let mut figures: BTreeMap<(String, String), Figure> = BTreeMap::new();
    for line in text.lines() {
        let Ok(l) = serde_json::from_str::<Line>(line) else {
            continue;
        };
        let key = (l.bench, l.metric);
        let f = figures.entry(key.clone()).or_insert_with(|| {
            order.push(key.clone());
            Figure::default()
        });
        f.values.push(l.value);
        if let Some(b) = l.baseline {
            f.baselines.push(b);
        }
    }
    ensure!(!figures.is_empty(), "no benchmark JSON lines in the input");
    std::fs::create_dir_all(&args.out_dir)?;

    let ratios: Vec<Ratio> = order
        .iter()
        .filter_map(|key| Ratio::of(key, &figures[key]))
        .collect();
    let path = args.out_dir.join("bench-ratios.svg");
    plot_ratios(&path, &ratios, &args.note)?;
    eprintln!("bench_plot: {} ({} figures)", path.display(), ratios.len());

    let latencies: Vec<Latency> = order
        .iter()
        .filter(|(_, metric)| metric == "p50_us")
        .filter_map(|(bench, _)| Latency::of(bench, &figures))
        // A line without a baseline is itself a baseline (raw_*), drawn next to its user.
        .filter(|l| l.base_p50.is_some() || l.base_p99.is_some())
        .collect();
    let path = args.out_dir.join("bench-latency.svg");
    plot_latency(&path, &latencies, &args.note)?;
    eprintln!(
        "bench_plot: {} ({} benchmarks)",
        path.display(),
        latencies.len()
    );

    if let Some(file) = &args.samples {
        let hists = read_samples(file)?;
        let path = args.out_dir.join("bench-latency-hist.svg");
        plot_histograms(&path, &hists, &args.note)?;
        eprintln!(
            "bench_plot: {} ({} benchmarks)",
            path.display(),
            hists.len()
        );
    }
    Ok(())
}

/// A request benchmark's latency samples and its baseline's, all runs together (µs).
struct Samples {
    bench: String,
    zlink: Vec<f64>,
    baseline: Vec<f64>,
}

fn read_samples(file: &PathBuf) -> anyhow::Result<Vec<Samples>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut out: Vec<Samples> = Vec::new();
    for (no, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let l: SampleLine = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a samples line", file.display(), no + 1))?;
        let i = match out.iter().position(|s| s.bench == l.bench) {
            Some(i) => i,
            None => {
                out.push(Samples {
                    bench: l.bench.clone(),
                    zlink: Vec::new(),
                    baseline: Vec::new(),
                });
                out.len() - 1
            }
        };
        let keep = l
            .samples_us
            .into_iter()
            .filter(|v| v.is_finite() && *v > 0.0);
        match l.series.as_str() {
            "baseline" => out[i].baseline.extend(keep),
            _ => out[i].zlink.extend(keep),
        }
    }
    out.retain(|s| !s.zlink.is_empty() || !s.baseline.is_empty());
    ensure!(!out.is_empty(), "no samples in {}", file.display());
    Ok(out)
}

/// How a ratio compares with its baseline.
#[derive(Clone, Copy)]
enum Verdict {
    /// Better than the baseline by more than [`NOISE`].
    Better,
    /// Within [`NOISE`] of the baseline either way.
    Par,
    /// Worse than the baseline by more than [`NOISE`].
    Worse,
}

/// Ratios this close to 1 are shown as equal (the shared machines vary more than this).
const NOISE: f64 = 0.1;

/// A figure's ratio to its same-run baseline, over the runs.
struct Ratio {
    label: String,
    median: f64,
    low: f64,
    high: f64,
    verdict: Verdict,
}

impl Ratio {
    /// `None` for a figure without a baseline, or with a zero one (a goal of 0, e.g. growth).
    fn of((bench, metric): &(String, String), f: &Figure) -> Option<Self> {
        let ratios: Vec<f64> = f
            .values
            .iter()
            .zip(&f.baselines)
            .filter(|(v, b)| **b > 0.0 && **v > 0.0)
            .map(|(v, b)| v / b)
            .collect();
        if ratios.is_empty() {
            return None;
        }
        let median = median(&ratios);
        // Above 1 = better for throughput, worse for a latency or a cost.
        let gain = if higher_is_better(metric) {
            median
        } else {
            1.0 / median
        };
        let verdict = if gain > 1.0 + NOISE {
            Verdict::Better
        } else if gain < 1.0 / (1.0 + NOISE) {
            Verdict::Worse
        } else {
            Verdict::Par
        };
        Some(Self {
            label: format!("{bench} {metric}"),
            median,
            low: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            high: ratios.iter().copied().fold(0.0, f64::max),
            verdict,
        })
    }
}

/// A benchmark's p50 and p99 latency and those of its baseline (medians over the runs).
struct Latency {
    bench: String,
    p50: f64,
    p99: f64,
    base_p50: Option<f64>,
    base_p99: Option<f64>,
}

impl Latency {
    fn of(bench: &str, figures: &BTreeMap<(String, String), Figure>) -> Option<Self> {
        let get = |metric: &str| figures.get(&(bench.to_owned(), metric.to_owned()));
        let (p50, p99) = (get("p50_us")?, get("p99_us")?);
        let base = |f: &Figure| (!f.baselines.is_empty()).then(|| median(&f.baselines));
        Some(Self {
            bench: bench.to_owned(),
            p50: median(&p50.values),
            p99: median(&p99.values),
            base_p50: base(p50),
            base_p99: base(p99),
        })
    }
}

const BETTER: RGBColor = RGBColor(46, 139, 87);
const PAR: RGBColor = RGBColor(120, 144, 156);
const WORSE: RGBColor = RGBColor(230, 126, 34);
const ZLINK: RGBColor = RGBColor(52, 101, 164);
const BASE: RGBColor = RGBColor(160, 160, 160);

/// Pixels per bar row.
const ROW: u32 = 22;
/// Width of the charts.
const WIDTH: u32 = 1000;

/// Draws the title and the note; the area below them.
fn titled<'a>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    title: &str,
    note: &str,
) -> anyhow::Result<DrawingArea<SVGBackend<'a>, Shift>> {
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    if note.is_empty() {
        return Ok(root);
    }
    let (top, rest) = root.split_vertically(22);
    top.draw(&Text::new(
        note.to_owned(),
        (10, 4),
        ("sans-serif", 13).into_font().color(&BLACK.mix(0.7)),
    ))?;
    Ok(rest)
}

/// Log-scale axis bounds covering `lo..=hi` and 1, padded (room for the value labels).
fn log_bounds(lo: f64, hi: f64) -> (f64, f64) {
    (lo.min(1.0) / 1.5, hi.max(1.0) * 3.0)
}

/// Row `i` of `n` counted from the top (the chart's y axis grows upwards).
fn row(i: usize, n: usize) -> usize {
    n - 1 - i
}

/// An axis or bar value: no decimals from 10 up.
fn number(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}")
    } else if x >= 1.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn plot_ratios(path: &PathBuf, ratios: &[Ratio], note: &str) -> anyhow::Result<()> {
    let n = ratios.len().max(1);
    let height = 120 + ROW * n as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let area = titled(
        &root,
        "scripts/bench: ZLink / baseline measured in the same run",
        note,
    )?;
    let lo = ratios.iter().map(|r| r.low).fold(1.0, f64::min);
    let hi = ratios.iter().map(|r| r.high).fold(1.0, f64::max);
    let (x0, x1) = log_bounds(lo, hi);
    let labels: Vec<&str> = ratios.iter().map(|r| r.label.as_str()).collect();
    let mut chart = ChartBuilder::on(&area)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d((x0..x1).log_scale(), (0..n).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(format!(
            "ZLink / baseline (log scale): green better, orange worse, grey within {:.0} % \
             (throughput: above 1 is better; latency, memory: below 1)",
            NOISE * 100.0
        ))
        .x_label_formatter(&|x| format!("{}×", number(*x)))
        .y_labels(n)
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) if *i < n => labels[row(*i, n)].to_owned(),
            _ => String::new(),
        })
        .draw()?;
    chart.draw_series(ratios.iter().enumerate().map(|(i, r)| {
        let color = match r.verdict {
            Verdict::Better => BETTER,
            Verdict::Par => PAR,
            Verdict::Worse => WORSE,
        };
        let i = row(i, n);
        let mut bar = Rectangle::new(
            [
                (1.0, SegmentValue::Exact(i)),
                (r.median, SegmentValue::Exact(i + 1)),
            ],
            color.filled(),
        );
        bar.set_margin(3, 3, 0, 0);
        bar
    }))?;
    // Whiskers over the runs (only where there were several).
    chart.draw_series(
        ratios
            .iter()
            .enumerate()
            .filter(|(_, r)| r.high > r.low)
            .map(|(i, r)| {
                let i = row(i, n);
                PathElement::new(
                    vec![
                        (r.low, SegmentValue::CenterOf(i)),
                        (r.high, SegmentValue::CenterOf(i)),
                    ],
                    BLACK.stroke_width(2),
                )
            }),
    )?;
    chart.draw_series(ratios.iter().enumerate().map(|(i, r)| {
        // Right of the bar's end or of 1, whichever is further right.
        Text::new(
            format!("{:.2}×", r.median),
            (
                r.median.max(r.high).max(1.0) * 1.03,
                SegmentValue::CenterOf(row(i, n)),
            ),
            TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
        )
    }))?;
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, SegmentValue::Exact(0)), (1.0, SegmentValue::Exact(n))],
        BLACK.stroke_width(1),
    )))?;
    root.present()?;
    Ok(())
}

fn plot_latency(path: &PathBuf, latencies: &[Latency], note: &str) -> anyhow::Result<()> {
    // Four bars per benchmark: p50, baseline p50, p99, baseline p99.
    let rows: Vec<(String, f64, RGBColor)> = latencies
        .iter()
        .flat_map(|l| {
            let mut v = vec![(format!("{} p50", l.bench), l.p50, ZLINK)];
            if let Some(b) = l.base_p50 {
                v.push(("  baseline p50".to_owned(), b, BASE));
            }
            v.push((format!("{} p99", l.bench), l.p99, ZLINK));
            if let Some(b) = l.base_p99 {
                v.push(("  baseline p99".to_owned(), b, BASE));
            }
            v
        })
        .collect();
    let n = rows.len().max(1);
    let height = 120 + ROW * n as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let area = titled(
        &root,
        "scripts/bench: request latency p50 / p99 (blue ZLink, grey its baseline)",
        note,
    )?;
    let lo = rows.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let hi = rows.iter().map(|r| r.1).fold(1.0, f64::max);
    let (x0, x1) = log_bounds(if lo.is_finite() { lo } else { 1.0 }, hi);
    let mut chart = ChartBuilder::on(&area)
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d((x0..x1).log_scale(), (0..n).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("µs (log scale)")
        .x_label_formatter(&|x| number(*x))
        .y_labels(n)
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) if *i < n => rows[row(*i, n)].0.clone(),
            _ => String::new(),
        })
        .draw()?;
    chart.draw_series(rows.iter().enumerate().map(|(i, (_, v, color))| {
        let i = row(i, n);
        let mut bar = Rectangle::new(
            [
                (x0, SegmentValue::Exact(i)),
                (*v, SegmentValue::Exact(i + 1)),
            ],
            color.filled(),
        );
        bar.set_margin(3, 3, 0, 0);
        bar
    }))?;
    chart.draw_series(rows.iter().enumerate().map(|(i, (_, v, _))| {
        Text::new(
            format!("{} µs", number(*v)),
            (*v * 1.03, SegmentValue::CenterOf(row(i, n))),
            TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
        )
    }))?;
    root.present()?;
    Ok(())
}

/// Log-spaced histogram bins over the range of every series of a panel.
const BINS: usize = 60;

/// Share of `v` (percent) in each of the [`BINS`] log-spaced bins from `lo` to `hi`.
fn histogram(v: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    let mut counts = vec![0u64; BINS];
    let span = (hi / lo).ln();
    for x in v {
        let at = ((x / lo).ln() / span * BINS as f64) as usize;
        counts[at.min(BINS - 1)] += 1;
    }
    let n = v.len().max(1) as f64;
    counts.iter().map(|c| *c as f64 * 100.0 / n).collect()
}

/// The `q` quantile of `v` (nearest rank); 0 for no samples.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn plot_histograms(path: &PathBuf, hists: &[Samples], note: &str) -> anyhow::Result<()> {
    const PANEL: u32 = 240;
    let height = 60 + PANEL * hists.len() as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let area = titled(
        &root,
        "scripts/bench: request latency histograms (blue ZLink, grey its baseline)",
        note,
    )?;
    for (panel, h) in area.split_evenly((hists.len(), 1)).iter().zip(hists) {
        let all = h.zlink.iter().chain(&h.baseline);
        let lo = all.clone().copied().fold(f64::INFINITY, f64::min) * 0.95;
        let hi = all.copied().fold(0.0, f64::max) * 1.05;
        let series = [(&h.baseline, BASE, "baseline"), (&h.zlink, ZLINK, "ZLink")];
        let bins: Vec<Vec<f64>> = series
            .iter()
            .map(|(v, _, _)| histogram(v, lo, hi))
            .collect();
        let top = bins.iter().flatten().copied().fold(1.0, f64::max) * 1.1;
        let caption = series
            .iter()
            .rev()
            .filter(|(v, _, _)| !v.is_empty())
            .map(|(v, _, name)| {
                format!(
                    "{name}: n={} p50 {} p99 {} µs",
                    v.len(),
                    number(quantile(v, 0.5)),
                    number(quantile(v, 0.99))
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let mut chart = ChartBuilder::on(panel)
            .margin(10)
            .caption(format!("{} ({caption})", h.bench), ("sans-serif", 14))
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("µs (log scale)")
            .y_desc("% of requests")
            .x_label_formatter(&|x| number(*x))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        let edge = |i: usize| lo * (hi / lo).powf(i as f64 / BINS as f64);
        for ((_, color, _), shares) in series.iter().zip(&bins) {
            chart.draw_series(
                shares
                    .iter()
                    .enumerate()
                    .filter(|(_, share)| **share > 0.0)
                    .map(|(i, share)| {
                        Rectangle::new(
                            [(edge(i), 0.0), (edge(i + 1), *share)],
                            color.mix(0.6).filled(),
                        )
                    }),
            )?;
        }
    }
    root.present()?;
    Ok(())
}
