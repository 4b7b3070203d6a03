//! Who is at the other end of a Unix socket, from the kernel (`SO_PEERCRED`): shared by the
//! management API (to record who changed what) and the NBD server (access rules).

use std::os::fd::RawFd;

/// A Unix-socket peer's credentials at the time it connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// The credentials of the peer of Unix socket `fd`; `None` if the kernel does not say.
pub fn credentials(fd: RawFd) -> Option<Credentials> {
    let mut credentials = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `credentials`, a properly sized and
    // aligned ucred; an invalid descriptor only makes it fail.
    let result = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut credentials as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (result == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some(Credentials {
        pid: credentials.pid,
        uid: credentials.uid,
        gid: credentials.gid,
    })
}
