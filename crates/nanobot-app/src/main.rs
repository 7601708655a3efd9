//! `nanobot`: the command-line bot.
#![allow(clippy::print_stderr)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: the async runtime could not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async {
        let mut out = std::io::stdout();
        let mut err = std::io::stderr();
        nanobot_app::cli::run_cli(&args, &mut out, &mut err).await
    });
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
