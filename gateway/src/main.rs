//! `halo-gateway` binary: parses arguments and calls [`halo_gateway::cli::run`].

fn main() {
    std::process::exit(halo_gateway::cli::run());
}
