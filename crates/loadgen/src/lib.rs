//! `tines bench`: an HTTP/1.1 load generator in the class of wrk, wrk2 and ab, over TCP or
//! TLS (`https://`, `tls`).
//!
//! One entry, `main(prog, argv) -> exit status`, shared by the standalone
//! `tines-bench` binary and the Python extension (`tines bench`, run with the
//! GIL released). Its flags are its own (clap, `args`), outside the server's
//! settings registry. `engine` runs one mio event loop per thread; `stats`
//! keeps HDR histograms and the per-second timeline; `report` prints the text
//! summary and the JSON document; `html` writes the self-contained report.
//! The counting rules are in docs/bench.md and at the top of `engine::tally`.

use std::io::{IsTerminal, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Parser;

pub mod args;
pub mod engine;
pub mod html;
pub mod report;
pub mod schedule;
pub mod signal;
pub mod stats;
pub mod target;
pub mod tls;

pub use args::{Args, Config};
use stats::{Stats, Timeline, TimelinePoint};

/// A usage error: one line on stderr, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

/// Exit status for a usage error (bad flag, URL, host, scheme).
pub const EXIT_USAGE: i32 = 2;
/// Exit status when no request got a 2xx/3xx answer.
pub const EXIT_ALL_FAILED: i32 = 1;

/// The results of one run.
#[derive(Debug)]
pub struct Outcome {
    /// Merged figures of all threads.
    pub stats: Stats,
    /// One point per second after the warm-up (the last one may be partial).
    pub timeline: Vec<TimelinePoint>,
    /// From the end of the warm-up to the last thread's stop.
    pub elapsed: Duration,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
}

/// Runs the load described by `config`; `progress` draws the live line on stderr.
pub fn execute(config: &Config, progress: bool) -> Outcome {
    let shared = engine::shared(config.threads);
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    let measure_start = start + config.warmup;
    let clock = engine::Clock {
        start,
        measure_start,
        deadline: config.duration.map(|d| measure_start + d),
    };
    let mut timeline = Timeline::new(config.threads);
    let mut stats = Stats::default();
    let mut ended = start;
    let mut startup_error = None;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.threads)
            .map(|index| {
                let tx = tx.clone();
                let shared = &shared;
                scope.spawn(move || {
                    let connections = engine::share(config.connections, config.threads, index);
                    engine::Worker::new(index, connections, config, shared, clock, tx)
                        .map(engine::Worker::run)
                })
            })
            .collect();
        drop(tx);
        let mut last_line = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(engine::Message::Second {
                    thread,
                    bucket,
                    done_before,
                }) => {
                    timeline.add(thread, bucket, done_before);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if signal::interrupted() {
                shared
                    .stop
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if progress && last_line.elapsed() >= Duration::from_millis(250) {
                last_line = Instant::now();
                progress_line(&shared, measure_start);
            }
        }
        for handle in handles {
            match handle.join() {
                Ok(Ok((thread_stats, thread_end))) => {
                    stats.merge(&thread_stats);
                    ended = ended.max(thread_end);
                }
                Ok(Err(error)) => startup_error = Some(error),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    if progress {
        eprint!("\r\x1b[K");
    }
    if let Some(error) = startup_error {
        eprintln!("tines bench: warning: a thread could not start: {error}");
    }
    let elapsed = ended.saturating_duration_since(measure_start);
    Outcome {
        stats,
        timeline: timeline.finish(elapsed),
        elapsed,
        interrupted: signal::interrupted(),
    }
}

fn progress_line(shared: &engine::Shared, measure_start: Instant) {
    use std::sync::atomic::Ordering::Relaxed;
    let requests: u64 = shared
        .progress
        .iter()
        .map(|p| p.requests.load(Relaxed))
        .sum();
    let errors: u64 = shared.progress.iter().map(|p| p.errors.load(Relaxed)).sum();
    let now = Instant::now();
    let mut err = std::io::stderr().lock();
    match now.checked_duration_since(measure_start) {
        None => {
            let _ = write!(
                err,
                "\r\x1b[Kwarming up ({:.1} s left)",
                (measure_start - now).as_secs_f64()
            );
        }
        Some(elapsed) => {
            let rate = requests as f64 / elapsed.as_secs_f64().max(1e-9);
            let _ = write!(
                err,
                "\r\x1b[K{:7.1} s  {requests} requests  {rate:.0} req/s  {errors} errors",
                elapsed.as_secs_f64()
            );
        }
    }
    let _ = err.flush();
}

/// The whole command: parse `argv` (without the program name), run, print;
/// returns the exit status. `prog` names the command in messages.
pub fn main(prog: &str, argv: &[String]) -> i32 {
    let command_name = prog.to_string();
    let parsed =
        Args::try_parse_from(std::iter::once(command_name.clone()).chain(argv.iter().cloned()));
    let args = match parsed {
        Ok(args) => args,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) {
                let _ = error.print();
                return 0;
            }
            let rendered = error.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            let message = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("{prog}: error: {message}");
            return EXIT_USAGE;
        }
    };
    if args.version {
        println!("{prog} {}", env!("CARGO_PKG_VERSION"));
        return 0;
    }
    let config = match Config::from_args(&args) {
        Ok(config) => config,
        Err(UsageError(message)) => {
            eprintln!("{prog}: error: {message}");
            return EXIT_USAGE;
        }
    };
    let outcome = {
        let _guard = signal::SigintGuard::install();
        execute(&config, std::io::stderr().is_terminal())
    };
    let mut out = std::io::stdout().lock();
    let printed = if args.json {
        writeln!(out, "{}", report::json(&config, &outcome))
    } else {
        out.write_all(report::text(&config, &outcome).as_bytes())
    };
    let _ = printed.and_then(|()| out.flush());
    if let Some(path) = &args.html {
        if let Err(error) = std::fs::write(path, html::render(&config, &outcome)) {
            eprintln!("{prog}: error: cannot write {}: {error}", path.display());
            return EXIT_USAGE;
        }
    }
    match report::failure_reason(&outcome) {
        Some(reason) => {
            eprintln!("{prog}: error: {reason}");
            EXIT_ALL_FAILED
        }
        None => 0,
    }
}
