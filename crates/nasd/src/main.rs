//! `nasd`: the command line. Thin: parses flags, calls the drive, client and lab libraries,
//! prints. Errors go to stderr with what failed, and the exit status is non-zero.
//!
//! # Layout
//! - [`cmd_drive`]: `nasd drive init|run|info`, `nasd partition ...`, `nasd key rotate`.
//! - [`cmd_obj`]: `nasd obj ...` and `nasd cap mint`.
//! - [`bench`]: `nasd bench drive`.
//! - [`cmd_lab`]: `nasd lab ...` (the seeds' experiments).
//! - [`parse`]: flag value parsers (durations, protections, sizes).

/// `print!` to stdout that ends the process quietly when stdout is a closed pipe
/// (`nasd obj getattr ... | head -2`) instead of panicking, and with an error otherwise.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}

/// `println!` with [`out!`]'s handling of a closed stdout.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            $crate::stdout_failed(e);
        }
    }};
}

/// A failed write to stdout: a closed pipe ends the process with success (the reader has
/// what it wanted), anything else is an error.
fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("nasd: writing to stdout: {e}");
    std::process::exit(1);
}

mod bench;
mod cmd_drive;
mod cmd_lab;
mod cmd_obj;
mod parse;

use clap::{Parser, Subcommand};

/// Secure network-attached storage in the line of CMU's NASD.
#[derive(Parser, Debug)]
#[command(name = "nasd", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create and run a drive; ask it what it is.
    #[command(subcommand)]
    Drive(cmd_drive::DriveCmd),
    /// Object operations against a drive (seed 002 Table 1).
    #[command(subcommand)]
    Obj(cmd_obj::ObjCmd),
    /// Capabilities: mint one from a working key file.
    #[command(subcommand)]
    Cap(cmd_obj::CapCmd),
    /// Partition operations (seed 002 Table 2), authorized by the drive key.
    #[command(subcommand)]
    Partition(cmd_drive::PartitionCmd),
    /// Key management (seed 002 Table 6).
    #[command(subcommand)]
    Key(cmd_drive::KeyCmd),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// The seeds' experiments rerun on nasd's code.
    Lab(cmd_lab::LabArgs),
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Drive(c) => cmd_drive::run_drive(c),
        Cmd::Obj(c) => runtime()?.block_on(cmd_obj::run_obj(c)),
        Cmd::Cap(c) => cmd_obj::run_cap(c),
        Cmd::Partition(c) => runtime()?.block_on(cmd_drive::run_partition(c)),
        Cmd::Key(c) => runtime()?.block_on(cmd_drive::run_key(c)),
        Cmd::Bench(c) => bench::run(c),
        Cmd::Lab(a) => cmd_lab::run(a),
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("nasd: {e:#}");
        std::process::exit(1);
    }
}
