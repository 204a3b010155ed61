//! What the allocator is told about the server's phases.
//!
//! The binary allocates with mimalloc (`src/main.rs`). A load parses YAML
//! on every core and frees most of what it allocates; in the steady state
//! a change frees and reallocates a little. The two want opposite policies,
//! measured with `cargo bench --bench index_scale` (1,000,000 endpoints):
//! returning freed memory at once keeps a load's garbage out of the
//! resident set (about 30 B per endpoint), but during changes every page
//! freed and taken again costs a decommit and a recommit (system calls on
//! the model task's path; in one series of runs a delay of 0 ms gave one
//! change a p99 of 140–480 µs against about 25 µs with 60 s, a difference
//! this VM's noise does not always show). So freed memory is returned at
//! once until the first load is over, and then only after a minute.
//!
//! Only process-wide allocator options are touched: when mimalloc is not
//! the global allocator (the test binaries), they change nothing. It must
//! not depend on anything else in the crate.

use std::ffi::c_long;

use libmimalloc_sys::{mi_collect, mi_option_set, mi_option_t};

/// `mi_option_purge_delay` in `mimalloc.h` (the v3 sources libmimalloc-sys
/// builds); a test checks it against the linked library.
pub(crate) const PURGE_DELAY: mi_option_t = 15;

/// Delay, in ms, before freed memory goes back to the system once loaded.
pub(crate) const STEADY_PURGE_DELAY_MS: c_long = 60_000;

fn set_purge_delay(ms: c_long) {
    #[allow(unsafe_code)]
    // SAFETY: a plain setter of mimalloc's option table (an atomic store).
    unsafe {
        mi_option_set(PURGE_DELAY, ms);
    }
}

/// Start-up: memory freed while loading goes back to the system at once.
pub fn loading() {
    set_purge_delay(0);
}

/// After bulk parsing on rayon's threads: each returns the pages its heap
/// no longer uses (an idle thread would otherwise keep them).
pub(crate) fn after_parallel_work() {
    rayon::broadcast(|_| {
        #[allow(unsafe_code)]
        // SAFETY: collects the calling thread's own heap.
        unsafe {
            mi_collect(true);
        }
    });
}

/// The first load is over: freed memory is kept for reuse and returned to
/// the system only after [`STEADY_PURGE_DELAY_MS`].
pub fn steady() {
    set_purge_delay(STEADY_PURGE_DELAY_MS);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_linked_mimallocs() {
        let get = || {
            #[allow(unsafe_code)]
            // SAFETY: a plain getter of mimalloc's option table.
            unsafe {
                libmimalloc_sys::mi_option_get(PURGE_DELAY)
            }
        };
        assert_eq!(get(), 1000, "mimalloc v3's purge_delay default, 1000 ms");
        loading();
        assert_eq!(get(), 0);
        steady();
        assert_eq!(get(), STEADY_PURGE_DELAY_MS);
    }
}
