//! Both drivers on sockets and wake-ups: gathered sends, receives, sends larger than the
//! socket buffer, accept, end of stream, an eventfd woken from another thread, busy polling,
//! a `URING_CMD` passed through.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use support::{Rng, collect, drivers};
use tessera_io::{AnyDriver, Driver, EventFd, Operation, SendParts};

/// Receives into `buffer` through the driver until it is full or the stream ends; returns the
/// bytes received. Tokens 1000.. are used.
fn receive_all(driver: &mut AnyDriver, fd: i32, buffer: &mut [u8]) -> usize {
    let mut received = 0;
    while received < buffer.len() {
        let rest = &mut buffer[received..];
        // SAFETY: `rest` is exclusively borrowed until the completion is collected below.
        unsafe {
            driver.submit(
                1000,
                Operation::Recv {
                    fd,
                    buffer: rest.as_mut_ptr(),
                    len_bytes: rest.len() as u32,
                },
            );
        }
        let completion = collect(driver, 1)[0];
        assert!(completion.result >= 0, "recv failed: {completion:?}");
        if completion.result == 0 {
            break;
        }
        received += completion.result as usize;
    }
    received
}

#[test]
fn gathered_send_arrives_in_order() {
    for (name, mut driver) in drivers() {
        let (left, mut right) = UnixStream::pair().unwrap();
        let header = *b"HEADER--";
        let data: Vec<u8> = (0..5000u32).map(|index| index as u8).collect();
        let trailer = *b"END";
        let mut parts = SendParts::new();
        parts.push(header.as_ptr(), 8);
        parts.push(data.as_ptr(), 5000);
        parts.push(trailer.as_ptr(), 3);
        // SAFETY: the three arrays outlive the completion.
        unsafe {
            driver.submit(
                1,
                Operation::Send {
                    fd: left.as_raw_fd(),
                    parts,
                },
            )
        };
        let completion = collect(&mut driver, 1)[0];
        assert_eq!(completion.result, 5011, "{name}");

        let mut received = vec![0u8; 5011];
        right.read_exact(&mut received).unwrap();
        let mut expected = header.to_vec();
        expected.extend_from_slice(&data);
        expected.extend_from_slice(&trailer);
        assert_eq!(received, expected, "{name}");

        // And the other way: a plain write read through the driver.
        right.write_all(b"reply bytes").unwrap();
        let mut buffer = [0u8; 11];
        assert_eq!(receive_all(&mut driver, left.as_raw_fd(), &mut buffer), 11);
        assert_eq!(&buffer, b"reply bytes", "{name}");
    }
}

/// A send of the most parts allowed, of uneven sizes and larger together than the socket
/// buffer, arrives as their concatenation: partial sends resume across part boundaries.
#[test]
fn send_of_every_part_resumes_across_parts() {
    for (name, mut driver) in drivers() {
        let (left, mut right) = UnixStream::pair().unwrap();
        let pieces: Vec<Vec<u8>> = (0..tessera_io::SEND_PARTS_MAX)
            .map(|index| {
                let mut piece = vec![0u8; 16 + index * 97_003 % 400_000];
                Rng::new(index as u64 + 1).fill(&mut piece);
                piece
            })
            .collect();
        let expected: Vec<u8> = pieces.concat();
        let reader = std::thread::spawn(move || {
            let mut received = Vec::new();
            right.read_to_end(&mut received).unwrap();
            received
        });
        let mut parts = SendParts::new();
        for piece in &pieces {
            parts.push(piece.as_ptr(), piece.len() as u32);
        }
        // SAFETY: `pieces` outlives the completion.
        unsafe {
            driver.submit(
                1,
                Operation::Send {
                    fd: left.as_raw_fd(),
                    parts,
                },
            )
        };
        let completion = collect(&mut driver, 1)[0];
        assert_eq!(completion.result as usize, expected.len(), "{name}");
        drop(left);
        assert!(reader.join().unwrap() == expected, "{name}: bytes differ");
    }
}

/// A send far larger than the socket buffer completes whole while the same driver receives
/// it on the other end: the driver resumes partial sends itself.
#[test]
fn send_larger_than_the_socket_buffer_completes_whole() {
    for (name, mut driver) in drivers() {
        let (left, right) = UnixStream::pair().unwrap();
        let total = 8 << 20;
        let mut data = vec![0u8; total];
        Rng::new(11).fill(&mut data);
        let mut parts = SendParts::new();
        parts.push(data.as_ptr(), 100);
        parts.push(data[100..].as_ptr(), (total - 100) as u32);
        // SAFETY: `data` outlives the completion.
        unsafe {
            driver.submit(
                1,
                Operation::Send {
                    fd: left.as_raw_fd(),
                    parts,
                },
            )
        };

        let mut received = vec![0u8; total];
        let mut got = 0;
        let mut send_result = None;
        while got < total || send_result.is_none() {
            if got < total {
                let rest = &mut received[got..];
                // SAFETY: `rest` is untouched until this receive completes below.
                unsafe {
                    driver.submit(
                        2,
                        Operation::Recv {
                            fd: right.as_raw_fd(),
                            buffer: rest.as_mut_ptr(),
                            len_bytes: rest.len().min(1 << 20) as u32,
                        },
                    );
                }
            }
            loop {
                let mut out = Vec::new();
                driver
                    .wait(&mut out, Some(Duration::from_secs(10)))
                    .unwrap();
                assert!(!out.is_empty(), "{name}: stalled at {got} bytes");
                let mut receive_done = false;
                for completion in out {
                    match completion.token {
                        1 => send_result = Some(completion.result),
                        2 => {
                            assert!(completion.result > 0, "{name}: {completion:?}");
                            got += completion.result as usize;
                            receive_done = true;
                        }
                        other => panic!("unexpected token {other}"),
                    }
                }
                if receive_done || got == total {
                    break;
                }
            }
        }
        assert_eq!(send_result, Some(total as i32), "{name}");
        assert!(received == data, "{name}: data differs");
    }
}

#[test]
fn receive_reports_end_of_stream_as_zero() {
    for (name, mut driver) in drivers() {
        let (left, right) = UnixStream::pair().unwrap();
        drop(right);
        let mut buffer = [0u8; 16];
        assert_eq!(
            receive_all(&mut driver, left.as_raw_fd(), &mut buffer),
            0,
            "{name}"
        );
    }
}

#[test]
fn accept_returns_a_connected_descriptor() {
    for (name, mut driver) in drivers() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        driver.submit_accept(5, listener.as_raw_fd());
        let client = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(address).unwrap();
            stream.write_all(b"hello").unwrap();
        });
        let completion = collect(&mut driver, 1)[0];
        assert_eq!(completion.token, 5);
        assert!(completion.result >= 0, "{name}: {completion:?}");
        // SAFETY: the completion hands the new descriptor to us.
        let accepted = unsafe { OwnedFd::from_raw_fd(completion.result) };
        let mut buffer = [0u8; 5];
        assert_eq!(
            receive_all(&mut driver, accepted.as_raw_fd(), &mut buffer),
            5,
            "{name}"
        );
        assert_eq!(&buffer, b"hello");
        client.join().unwrap();
    }
}

#[test]
fn eventfd_wakes_a_waiting_driver() {
    for (name, mut driver) in drivers() {
        wait_for_a_late_signal(&mut driver, name);
    }
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
        usage
    };
    let micros = |time: libc::timeval| time.tv_sec as u64 * 1_000_000 + time.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// Waits for an eventfd that another thread signals after 50 ms, which must wake the driver;
/// returns the CPU time the wait took.
fn wait_for_a_late_signal(driver: &mut AnyDriver, name: &str) -> Duration {
    let event = std::sync::Arc::new(EventFd::new().unwrap());
    driver.submit_poll_readable(9, event.as_raw_fd());
    let signaller = {
        let event = std::sync::Arc::clone(&event);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            event.signal();
        })
    };
    let before = thread_cpu_time();
    let mut out = Vec::new();
    assert_eq!(driver.wait(&mut out, None).unwrap(), 1, "{name}");
    let used = thread_cpu_time() - before;
    assert_eq!(out[0].token, 9, "{name}");
    assert!(
        out[0].result & i32::from(libc::POLLIN) != 0,
        "{name}: {:?}",
        out[0]
    );
    assert_eq!(event.drain(), 1);
    signaller.join().unwrap();
    used
}

fn busy_polls(driver: &AnyDriver) -> u64 {
    match driver {
        AnyDriver::Uring(driver) => driver.busy_polls(),
        AnyDriver::Poll(_) => 0,
    }
}

#[test]
fn busy_polling_keeps_looking_within_its_window_and_the_timeout() {
    for (name, mut driver) in drivers() {
        driver.set_busy_poll(Duration::from_secs(10));
        // A completion that comes while the driver looks is returned, found by looking again
        // and again on io_uring (the poll driver does not busy-poll). Counted in looks, not
        // CPU time: on a loaded machine every yield may hand the core away for milliseconds.
        let polls_before = busy_polls(&driver);
        wait_for_a_late_signal(&mut driver, name);
        if name == "io_uring" {
            let polls = busy_polls(&driver) - polls_before;
            assert!(polls >= 2, "{name}: {polls} looks in 50 ms");
        }
        // The window never outlasts the wait's timeout.
        let event = EventFd::new().unwrap();
        driver.submit_poll_readable(10, event.as_raw_fd());
        let start = std::time::Instant::now();
        let mut out = Vec::new();
        assert_eq!(
            driver
                .wait(&mut out, Some(Duration::from_millis(30)))
                .unwrap(),
            0,
            "{name}"
        );
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(30) && elapsed < Duration::from_secs(5),
            "{name}: {elapsed:?}"
        );
        event.signal();
        assert_eq!(collect(&mut driver, 1)[0].token, 10, "{name}");
        // Completions that come later than the window: one poll finds nothing, and the
        // driver sleeps from then on instead of polling in vain.
        driver.set_busy_poll(Duration::from_millis(20));
        wait_for_a_late_signal(&mut driver, name);
        let used = wait_for_a_late_signal(&mut driver, name);
        assert!(used < Duration::from_millis(10), "{name}: {used:?} of CPU");
        // Off again: a wait sleeps.
        driver.set_busy_poll(Duration::ZERO);
        let polls_before = busy_polls(&driver);
        let used = wait_for_a_late_signal(&mut driver, name);
        assert_eq!(
            busy_polls(&driver),
            polls_before,
            "{name}: slept without looking"
        );
        assert!(used < Duration::from_millis(10), "{name}: {used:?} of CPU");
    }
}

#[test]
fn a_uring_command_reaches_the_kernel_on_io_uring_only() {
    // SOCKET_URING_OP_SIOCINQ: the bytes waiting in a socket's receive queue (Linux 6.7),
    // here checked against what the test sent.
    const SIOCINQ: u32 = 0;
    for (name, mut driver) in drivers() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        client.write_all(b"hello").unwrap();
        let mut peeked = [0u8; 5];
        assert_eq!(server.peek(&mut peeked).unwrap(), 5, "the bytes arrived");
        // SAFETY: the command names no memory; `server` stays open until its completion.
        unsafe {
            driver.submit(
                9,
                Operation::UringCmd {
                    fd: server.as_raw_fd(),
                    cmd_op: SIOCINQ,
                    cmd: [0; 16],
                },
            )
        };
        let completion = collect(&mut driver, 1)[0];
        assert_eq!(completion.token, 9);
        match name {
            "poll" => assert_eq!(completion.result, -libc::EOPNOTSUPP, "{name}"),
            _ => assert_eq!(completion.result, 5, "{name}: {completion:?}"),
        }
    }
}
