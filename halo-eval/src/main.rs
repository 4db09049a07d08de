//! `halo-eval` binary: parses arguments and calls [`halo_eval::cli::run`].

fn main() {
    std::process::exit(halo_eval::cli::run());
}
