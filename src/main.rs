//! The `quorumlock` command: everything is in the library's `cli` module.

fn main() -> std::process::ExitCode {
    quorumlock::cli::main()
}
