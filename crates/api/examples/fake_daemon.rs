//! Serves the in-memory `FakeController` on a Unix socket, to try the CLI without drives:
//! `cargo run -p tessera-api --example fake_daemon -- /tmp/tessera-api.sock`, then
//! `tessera --api-socket /tmp/tessera-api.sock pd add /x /y /z`. Stops on Enter or end of input.

use std::path::PathBuf;
use std::sync::Arc;

use tessera_api::testing::FakeController;
use tessera_api::{ApiServer, Router, ServerConfig};

fn main() {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "/tmp/tessera-api.sock".to_string()),
    );
    let router = Router::new(Arc::new(FakeController::new()));
    let server = match ApiServer::bind_unix(&path, ServerConfig::default(), router) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("fake_daemon: {error}");
            std::process::exit(1);
        }
    };
    eprintln!(
        "fake daemon serving on {}; press Enter to stop",
        server.local_address()
    );
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    server.shutdown();
}
