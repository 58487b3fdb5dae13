//! The `quorumlock` command: everything is in the library's `cli` module.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    quorumlock::cli::main()
}
