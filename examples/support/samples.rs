//! Latency samples of the request benchmarks, for the histograms of `examples/bench_plot.rs`
//! (`--samples FILE`). With `BENCH_SAMPLES=FILE` set, each request benchmark appends one JSON
//! line per series to FILE: `{"bench":…,"series":"zlink"|"baseline","samples_us":[…]}`
//! (several runs append; start from a fresh file). Unset, nothing is written; never stdout.
//!
//! Included with `#[path]` by the benchmarks that record samples.

#![allow(dead_code)] // each program uses a part

use std::io::Write;

/// The series of a benchmark's own samples.
pub const ZLINK: &str = "zlink";
/// The series of its baseline's samples.
pub const BASELINE: &str = "baseline";

/// Appends `samples_us` (µs, one per request) of `series` of `bench` to `$BENCH_SAMPLES`.
///
/// # Panics
/// When the file cannot be written (a benchmark run asked for it).
pub fn write(bench: &str, series: &str, samples_us: &[f64]) {
    let Some(path) = std::env::var_os("BENCH_SAMPLES").filter(|p| !p.is_empty()) else {
        return;
    };
    let mut line = format!(
        "{{\"bench\":{},\"series\":{},\"samples_us\":[",
        serde_json::Value::from(bench),
        serde_json::Value::from(series)
    );
    for (i, s) in samples_us.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        line += &format!("{s:.1}");
    }
    line += "]}\n";
    // One write of the whole line, appended.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("BENCH_SAMPLES={}: {e}", path.to_string_lossy()));
}

/// The values recorded in an HDR histogram, each as often as it was recorded (µs).
pub fn of_histogram(h: &hdrhistogram::Histogram<u64>) -> Vec<f64> {
    h.iter_recorded()
        .flat_map(|v| {
            std::iter::repeat_n(v.value_iterated_to() as f64, v.count_at_value() as usize)
        })
        .collect()
}
