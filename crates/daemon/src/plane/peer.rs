//! Who is at the other end of an accepted NBD connection, for the export access rules.

use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use tessera_api::model::Peer;

/// The peer of a freshly accepted socket; `Unknown` (matching no rule) if it cannot be read.
pub(crate) fn identify(socket: OwnedFd, tcp: bool) -> (OwnedFd, Peer) {
    if tcp {
        let stream = TcpStream::from(socket);
        let peer = stream
            .peer_addr()
            .map(|address| Peer::Tcp(address.ip()))
            .unwrap_or(Peer::Unknown);
        return (OwnedFd::from(stream), peer);
    }
    let peer = match tessera_api::peer::credentials(socket.as_raw_fd()) {
        Some(credentials) => Peer::Unix {
            uid: credentials.uid,
            gid: credentials.gid,
        },
        None => Peer::Unknown,
    };
    (socket, peer)
}
