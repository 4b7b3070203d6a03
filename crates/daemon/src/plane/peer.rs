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
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `credentials`, a properly sized and
    // aligned ucred, for a socket descriptor we own.
    let result = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    let peer = if result == 0 && len as usize == std::mem::size_of::<libc::ucred>() {
        Peer::Unix {
            uid: credentials.uid,
            gid: credentials.gid,
        }
    } else {
        Peer::Unknown
    };
    (socket, peer)
}
