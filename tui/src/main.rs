//! `picket-tui`: every node's view of each route, side by side, from any
//! node's QUIC feed.

use std::process::ExitCode;

fn main() -> ExitCode {
    picket_tui::cli::main(std::env::args_os())
}
