//! `nanobot`: the command-line bot.
#![allow(clippy::print_stderr)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = match nanobot_app::cli::parse(&args) {
        Ok(cli) => cli,
        // Help, --version and usage errors (with suggestions), printed as clap prints them.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    nanobot_app::logging::init(cli.verbose, cli.quiet);
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
        nanobot_app::cli::run_parsed(cli, &mut out, &mut err).await
    });
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
