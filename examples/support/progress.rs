//! Progress of a long run people wait for (the benchmarks, the demo drivers), always on stderr:
//! an `indicatif` bar where stderr is a terminal, one plain line per step otherwise (CI logs stay
//! readable; `eprintln!`, so a test that runs a driver's code captures them). Nothing goes to stdout, so the benchmarks' JSON lines stay clean; a stdout line
//! printed while a bar is shown goes through [`out`], so the bar does not tear it.
//!
//! Included with `#[path]` by the programs that use it (one progress per process, the
//! process's own: a child process a benchmark starts does not start one).
//! `ZLINK_PROGRESS=plain` forces the plain lines on a terminal, `ZLINK_PROGRESS=off` silences
//! both.

#![allow(dead_code)] // each program uses a part

use std::fmt::Display;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How the progress is shown.
enum Show {
    Bar(ProgressBar),
    Lines,
    Off,
}

/// The run's progress: `done` of `total` steps of the program `name`.
struct Progress {
    name: String,
    total: u64,
    done: u64,
    started: Instant,
    show: Show,
}

/// The process's progress (one run per process; `None` before [`start`] and after [`finish`]).
static CURRENT: Mutex<Option<Progress>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(Option<&mut Progress>) -> R) -> R {
    let mut guard = CURRENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(guard.as_mut())
}

/// Starts the progress of the program `name`, which runs `total` steps.
pub fn start(name: &str, total: u64) {
    let mode = std::env::var("ZLINK_PROGRESS").unwrap_or_default();
    let show = match mode.as_str() {
        "off" => Show::Off,
        "plain" => Show::Lines,
        _ if std::io::stderr().is_terminal() => {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:.bold} [{bar:30.cyan/blue}] {pos}/{len} {elapsed:>4} {wide_msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(name.to_owned());
            bar.enable_steady_tick(Duration::from_millis(200));
            Show::Bar(bar)
        }
        _ => Show::Lines,
    };
    *CURRENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Progress {
        name: name.to_owned(),
        total,
        done: 0,
        started: Instant::now(),
        show,
    });
}

/// Begins the next step, `what` (the previous step, if any, is done).
pub fn step(what: impl Display) {
    with(|p| {
        let Some(p) = p else { return };
        match &p.show {
            Show::Bar(bar) => {
                bar.set_position(p.done);
                bar.set_message(what.to_string());
            }
            Show::Lines => {
                eprintln!(
                    "{} [{}/{}] {what} (at {:.1} s)",
                    p.name,
                    p.done + 1,
                    p.total,
                    p.started.elapsed().as_secs_f64()
                );
            }
            Show::Off => {}
        }
        p.done += 1;
    });
}

/// Prints `line` on stdout (a benchmark's JSON line, a driver's check) without tearing the bar.
pub fn out(line: impl Display) {
    with(|p| match p.map(|p| &p.show) {
        Some(Show::Bar(bar)) => bar.suspend(|| println!("{line}")),
        _ => println!("{line}"),
    });
}

/// Prints a note on stderr (above the bar where there is one).
pub fn note(line: impl Display) {
    with(|p| match p.map(|p| &p.show) {
        Some(Show::Bar(bar)) => bar.println(line.to_string()),
        _ => eprintln!("{line}"),
    });
}

/// The run is over: the bar is cleared, and a line gives the steps and the total time.
pub fn finish() {
    let mut guard = CURRENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(p) = guard.take() else { return };
    if let Show::Bar(bar) = &p.show {
        bar.finish_and_clear();
    }
    if !matches!(p.show, Show::Off) {
        eprintln!(
            "{}: {} steps in {:.1} s",
            p.name,
            p.done,
            p.started.elapsed().as_secs_f64()
        );
    }
}
