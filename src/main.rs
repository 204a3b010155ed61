//! The `clusterset-dns` binary: see [`clusterset_dns::cli`].
//!
//! It also chooses the allocator: mimalloc. Loading a large zones directory
//! is mostly YAML parsing, which allocates and frees small objects on every
//! core; with glibc's malloc 1,000,000 endpoints took about twice as long
//! to `/ready` and left the parser's freed memory resident in per-thread
//! arenas (`cargo bench --bench index_scale`). Its arenas are committed
//! lazily (a compile-time default, `.cargo/config.toml`, since the first
//! allocation comes before `main`) and freed memory is purged at once.

use std::process::ExitCode;

use libmimalloc_sys::{mi_option_set, mi_option_t};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in `mimalloc.h` (the v3 sources that
/// libmimalloc-sys builds); a test checks it against the linked library.
const PURGE_DELAY: mi_option_t = 15;

/// Freed memory is given back at once: what the server holds is its data,
/// not what a load once needed. (The parsing threads go idle after a load,
/// so a delayed purge would not run for their pages.)
fn tune_allocator() {
    #[allow(unsafe_code)]
    // SAFETY: a plain setter of mimalloc's option table, called before any
    // other thread exists.
    unsafe {
        mi_option_set(PURGE_DELAY, 0);
    }
}

fn main() -> anyhow::Result<ExitCode> {
    tune_allocator();
    clusterset_dns::cli::main()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mi_option_arena_eager_commit` in `mimalloc.h`.
    const ARENA_EAGER_COMMIT: mi_option_t = 4;

    #[test]
    fn the_allocator_is_built_and_tuned_as_documented() {
        #[allow(unsafe_code)]
        // SAFETY: plain getters of mimalloc's option table.
        let (eager, delay) = unsafe {
            (
                libmimalloc_sys::mi_option_get(ARENA_EAGER_COMMIT),
                libmimalloc_sys::mi_option_get(PURGE_DELAY),
            )
        };
        assert_eq!(
            (eager, delay),
            (0, 1000),
            "lazy arenas from .cargo/config.toml; mimalloc v3's purge_delay default, 1000 ms"
        );
        tune_allocator();
        #[allow(unsafe_code)]
        // SAFETY: as above.
        let after = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(after, 0);
    }
}
