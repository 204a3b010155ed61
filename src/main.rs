//! The `clusterset-dns` binary: see [`clusterset_dns::cli`].

use std::process::ExitCode;

fn main() -> anyhow::Result<ExitCode> {
    clusterset_dns::cli::main()
}
