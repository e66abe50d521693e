//! Giving the heap back after large request bodies. glibc's allocator keeps memory freed by a
//! big request (the body, what is parsed from it, the broker call's arguments) in its arenas
//! for reuse, so without a trim a replica that served a few 60 MiB batches keeps hundreds of
//! megabytes it no longer uses. A trim after such a request returns the free pages.

/// A request whose body was at least this large trims the heap when it ends.
pub const TRIM_AFTER_BODY_BYTES: usize = 8 << 20;

/// Returns the allocator's free pages to the OS (glibc `malloc_trim`); a blocking call of a
/// few milliseconds, so callers run it off the async threads.
pub fn give_back_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // malloc_trim has no preconditions and only releases pages no allocation uses; nix does
    // not wrap it.
    #[allow(unsafe_code)]
    unsafe {
        nix::libc::malloc_trim(0);
    }
}
