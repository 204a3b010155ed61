//! The `clusterset-dns` binary: see [`clusterset_dns::cli`].
//!
//! It also chooses the allocator: mimalloc. Loading a large zones directory
//! is mostly YAML parsing, which allocates and frees small objects on every
//! core; with glibc's malloc 1,000,000 endpoints took about twice as long
//! to `/ready` and left the parser's freed memory resident in per-thread
//! arenas (`cargo bench --bench index_scale`). When it returns freed memory
//! is [`clusterset_dns::memory`]'s.

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    clusterset_dns::memory::loading();
    clusterset_dns::cli::main()
}
