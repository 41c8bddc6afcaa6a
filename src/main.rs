//! The `tagpin` binary: parse the command line, set up logging, run, pick the exit code.
//! Everything else lives in the library, so tests drive the same code the binary runs.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = tagpin::cli::Cli::parse();
    tagpin::cli::init_logging(&cli);
    if cli.command.uses_git() {
        // SAFETY: no thread has been started yet; the runtime is built below.
        if let Err(e) = unsafe { tagpin::git::set_network_timeouts() } {
            tracing::warn!("cannot set Git network timeouts: {e}");
        }
    }
    let mut builder = if cli.command.is_one_shot() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(tagpin::cli::Exit::Fatal as u8);
        }
    };
    let (exit, report) = runtime.block_on(tagpin::cli::run_keeping_report(cli));
    // Printed already; the process is about to end and the system takes its memory back, so
    // the report (for `plan`, every file's text, rewrite and diff) is not freed piece by piece.
    std::mem::forget(report);
    // Work still under way was abandoned (a reconcile past the grace period after SIGTERM,
    // on a blocking thread): the process exits without waiting for it. The runtime is not
    // shut down first: that would wake the abandoned work into timers that are going away,
    // and each would panic ("context is being shutdown") on its way out. Returning from
    // `main` flushes stdout; the system takes the threads and memory back.
    std::mem::forget(runtime);
    ExitCode::from(exit as u8)
}
