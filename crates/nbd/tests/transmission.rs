//! Request validation and READ replies, against the rules of the spec written out by hand.

use tessera_nbd::export::ExportFeatures;
use tessera_nbd::server::handshake::BASE_ALLOCATION_CONTEXT_ID;
use tessera_nbd::{
    Command, CommandFlags, DisconnectReason, Errno, ExportInfo, MetaContext, Negotiated,
    ReadErrorOutcome, ReadReply, Rejection, Request, validate,
};

const SIZE_BYTES: u64 = 1 << 20;

fn negotiated(structured_replies: bool, read_only: bool) -> Negotiated {
    let mut export = ExportInfo::new("disk", SIZE_BYTES);
    export.read_only = read_only;
    export.features = ExportFeatures {
        block_status: true,
        ..ExportFeatures::TYPICAL
    };
    let meta_contexts = if structured_replies {
        vec![MetaContext {
            id: BASE_ALLOCATION_CONTEXT_ID,
            name: "base:allocation".into(),
        }]
    } else {
        Vec::new()
    };
    Negotiated {
        transmission_flags: export.transmission_flags(structured_replies),
        export,
        structured_replies,
        meta_contexts,
        no_zeroes: true,
        block_size_requested: true,
        tls: false,
    }
}

fn request(command: Command, flags: CommandFlags, offset_bytes: u64, length_bytes: u32) -> Request {
    Request {
        flags,
        command,
        cookie: 9,
        offset_bytes,
        length_bytes,
    }
}

fn errno(result: Result<(), Rejection>) -> Option<Errno> {
    match result {
        Ok(()) => None,
        Err(Rejection::Error { errno, .. }) => Some(errno),
        Err(Rejection::Disconnect(reason)) => panic!("unexpected disconnect: {reason}"),
    }
}

#[test]
fn valid_requests_pass() {
    let plain = negotiated(false, false);
    let structured = negotiated(true, false);
    let none = CommandFlags::NONE;
    for (command, flags, offset, length, on) in [
        (Command::Read, none, 0, 4096, &plain),
        (Command::Read, CommandFlags::FUA, 0, 4096, &plain),
        (Command::Read, CommandFlags::DF, 512, 512, &structured),
        (
            Command::Write,
            CommandFlags::FUA,
            SIZE_BYTES - 512,
            512,
            &plain,
        ),
        (Command::Flush, none, 0, 0, &plain),
        (Command::Trim, none, 0, SIZE_BYTES as u32, &plain),
        (
            Command::WriteZeroes,
            CommandFlags::NO_HOLE | CommandFlags::FAST_ZERO,
            4096,
            8192,
            &plain,
        ),
        (
            Command::BlockStatus,
            CommandFlags::REQ_ONE,
            0,
            4096,
            &structured,
        ),
        (Command::Disc, CommandFlags(0xffff), 1, 1, &plain),
        // Zero-length requests are legal, even at the very end.
        (Command::Read, none, SIZE_BYTES, 0, &plain),
        (Command::Write, none, 0, 0, &plain),
        (Command::Trim, none, 0, 0, &plain),
    ] {
        let request = request(command, flags, offset, length);
        assert_eq!(validate(&request, on), Ok(()), "{request:?}");
    }
}

#[test]
fn unknown_commands_and_flags_are_einval() {
    let plain = negotiated(false, false);
    let structured = negotiated(true, false);
    for (command, flags, on) in [
        (Command::Unknown(8), CommandFlags::NONE, &plain),
        (Command::Unknown(0xffff), CommandFlags::NONE, &plain),
        // Flags documented for another command.
        (Command::Read, CommandFlags::NO_HOLE, &plain),
        (Command::Write, CommandFlags::REQ_ONE, &plain),
        (Command::Trim, CommandFlags::FAST_ZERO, &plain),
        (Command::Flush, CommandFlags::DF, &plain),
        // DF needs structured replies (SEND_DF is only advertised with them).
        (Command::Read, CommandFlags::DF, &plain),
        // Undefined bits, including the extended-headers PAYLOAD_LEN bit.
        (Command::Read, CommandFlags(1 << 5), &structured),
        (Command::Write, CommandFlags(1 << 15), &plain),
        // BLOCK_STATUS without a negotiated context.
        (Command::BlockStatus, CommandFlags::NONE, &plain),
    ] {
        let request = request(command, flags, 0, 512);
        assert_eq!(
            errno(validate(&request, on)),
            Some(Errno::Inval),
            "{request:?}"
        );
    }
}

#[test]
fn commands_and_flags_need_their_transmission_flag() {
    let mut negotiated = negotiated(false, false);
    negotiated.export.features = ExportFeatures {
        flush: false,
        fua: false,
        trim: false,
        write_zeroes: false,
        fast_zero: false,
        ..ExportFeatures::TYPICAL
    };
    negotiated.transmission_flags = negotiated.export.transmission_flags(false);
    for (command, flags) in [
        (Command::Flush, CommandFlags::NONE),
        (Command::Trim, CommandFlags::NONE),
        (Command::WriteZeroes, CommandFlags::NONE),
        (Command::Cache, CommandFlags::NONE),
        (Command::Write, CommandFlags::FUA),
    ] {
        let offset_and_length = if command == Command::Flush { 0 } else { 512 };
        let request = request(command, flags, 0, offset_and_length);
        assert_eq!(
            errno(validate(&request, &negotiated)),
            Some(Errno::Inval),
            "{request:?}"
        );
    }
}

#[test]
fn out_of_range_and_misaligned_requests() {
    let plain = negotiated(false, false);
    let none = CommandFlags::NONE;
    for (command, offset, length, expected) in [
        (Command::Read, SIZE_BYTES - 512, 1024, Errno::Inval),
        (Command::Read, SIZE_BYTES + 512, 0, Errno::Inval),
        (Command::Read, u64::MAX - 511, 1024, Errno::Inval),
        (Command::Trim, SIZE_BYTES, 512, Errno::Inval),
        (Command::Cache, SIZE_BYTES, 512, Errno::Inval),
        (Command::Write, SIZE_BYTES, 512, Errno::NoSpc),
        (Command::Write, u64::MAX - 511, 512, Errno::NoSpc),
        // The spec's WRITE_ZEROES section: ENOSPC beyond the end of the device.
        (Command::WriteZeroes, SIZE_BYTES - 512, 1024, Errno::NoSpc),
        // Minimum block size 512.
        (Command::Read, 1, 512, Errno::Inval),
        (Command::Read, 0, 100, Errno::Inval),
        (Command::Write, 256, 512, Errno::Inval),
        (Command::Trim, 0, 513, Errno::Inval),
        (Command::WriteZeroes, 4000, 512, Errno::Inval),
        // Flush offset and length are reserved.
        (Command::Flush, 512, 0, Errno::Inval),
    ] {
        let request = request(command, none, offset, length);
        assert_eq!(
            errno(validate(&request, &plain)),
            Some(expected),
            "{request:?}"
        );
    }
    let structured = negotiated(true, false);
    let block_status = request(Command::BlockStatus, none, SIZE_BYTES, 512);
    assert_eq!(
        errno(validate(&block_status, &structured)),
        Some(Errno::Inval)
    );
}

#[test]
fn read_only_exports_refuse_writes_trims_and_zeroes() {
    let read_only = negotiated(false, true);
    for command in [Command::Write, Command::Trim, Command::WriteZeroes] {
        let request = request(command, CommandFlags::NONE, 0, 512);
        assert_eq!(
            errno(validate(&request, &read_only)),
            Some(Errno::Perm),
            "{command:?}"
        );
    }
    assert_eq!(
        validate(
            &request(Command::Read, CommandFlags::NONE, 0, 512),
            &read_only
        ),
        Ok(())
    );
    assert_eq!(
        validate(
            &request(Command::Flush, CommandFlags::NONE, 0, 0),
            &read_only
        ),
        Ok(())
    );
}

#[test]
fn oversize_payloads_disconnect_and_oversize_reads_fail() {
    let mut plain = negotiated(false, false);
    plain.export.size_bytes = 1 << 40;
    let huge_write = request(Command::Write, CommandFlags::NONE, 0, (32 << 20) + 512);
    assert_eq!(
        validate(&huge_write, &plain),
        Err(Rejection::Disconnect(DisconnectReason::PayloadTooLarge {
            length_bytes: (32 << 20) + 512,
            limit_bytes: 32 << 20
        }))
    );
    // Even a write that is also past the end or misaligned: its payload cannot be skipped.
    let mut small = negotiated(false, false);
    small.export.size_bytes = 4096;
    let bad = request(Command::Write, CommandFlags(0x8000), 1 << 30, u32::MAX);
    assert!(matches!(
        validate(&bad, &small),
        Err(Rejection::Disconnect(_))
    ));
    // Exactly 32 MiB is fine.
    assert_eq!(
        validate(
            &request(Command::Write, CommandFlags::NONE, 0, 32 << 20),
            &plain
        ),
        Ok(())
    );
    // Reads above the maximum: EINVAL with simple replies, EOVERFLOW with structured ones.
    let big_read = request(Command::Read, CommandFlags::NONE, 0, 64 << 20);
    assert_eq!(errno(validate(&big_read, &plain)), Some(Errno::Inval));
    let mut structured = negotiated(true, false);
    structured.export.size_bytes = 1 << 40;
    assert_eq!(
        errno(validate(&big_read, &structured)),
        Some(Errno::Overflow)
    );
    // Trim and zeroes have no payload: no maximum applies.
    let big_trim = request(Command::Trim, CommandFlags::NONE, 0, 1 << 31);
    assert_eq!(validate(&big_trim, &plain), Ok(()));
}

#[test]
fn smaller_advertised_maximum_still_reads_payloads_up_to_32_mib() {
    let mut plain = negotiated(false, false);
    plain.export.block_size.maximum_payload_bytes = 1 << 20;
    plain.export.size_bytes = 1 << 30;
    // Above the advertised 1 MiB but within 32 MiB: refused with EINVAL, payload discarded.
    let write = request(Command::Write, CommandFlags::NONE, 0, 2 << 20);
    assert_eq!(errno(validate(&write, &plain)), Some(Errno::Inval));
}

fn header_magic(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().unwrap())
}

#[test]
fn simple_read_reply_is_one_header() {
    let plain = negotiated(false, false);
    let read = request(Command::Read, CommandFlags::NONE, 4096, 1024);
    let mut reply = ReadReply::new(&read, &plain);
    let mut out = Vec::new();
    reply.data(&mut out, 4096, 1024);
    reply.finish(&mut out);
    assert_eq!(
        out,
        [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]
    );
}

#[test]
fn simple_read_error_after_the_header_means_disconnect() {
    let plain = negotiated(false, false);
    let read = request(Command::Read, CommandFlags::NONE, 0, 1024);
    let mut out = Vec::new();
    let mut before = ReadReply::new(&read, &plain);
    assert_eq!(
        before.error(&mut out, Errno::Io, "media error"),
        ReadErrorOutcome::Reported
    );
    assert_eq!(
        out,
        [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 9]
    );
    let mut after = ReadReply::new(&read, &plain);
    out.clear();
    after.data(&mut out, 0, 1024);
    out.clear();
    assert_eq!(
        after.error(&mut out, Errno::Io, "media error"),
        ReadErrorOutcome::Disconnect
    );
    assert!(out.is_empty());
}

#[test]
fn structured_read_reply_is_chunks_then_none() {
    let structured = negotiated(true, false);
    let read = request(Command::Read, CommandFlags::NONE, 0, 8192);
    let mut reply = ReadReply::new(&read, &structured);
    let mut out = Vec::new();
    reply.hole(&mut out, 0, 4096);
    reply.data(&mut out, 4096, 4096);
    reply.finish(&mut out);
    // hole chunk (20 + 12), data header (20 + 8), none (20).
    assert_eq!(out.len(), 32 + 28 + 20);
    assert_eq!(header_magic(&out), 0x668e_33ef);
    assert_eq!(&out[6..8], &[0, 2]);
    assert_eq!(&out[38..40], &[0, 1]);
    assert_eq!(
        &out[60..],
        &[
            0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0
        ]
    );
}

#[test]
fn structured_read_errors_are_chunks_even_early() {
    let structured = negotiated(true, false);
    let read = request(Command::Read, CommandFlags::NONE, 0, 8192);
    // An early EINVAL still uses a structured error chunk, never a simple reply.
    let mut out = Vec::new();
    let mut reply = ReadReply::new(&read, &structured);
    assert_eq!(
        reply.error(&mut out, Errno::Inval, "x"),
        ReadErrorOutcome::Reported
    );
    assert_eq!(header_magic(&out), 0x668e_33ef);
    assert_eq!(&out[4..8], &[0, 1, 0x80, 0x01]);
    // After data, an error chunk still reports it.
    let mut reply = ReadReply::new(&read, &structured);
    out.clear();
    reply.data(&mut out, 0, 4096);
    assert_eq!(
        reply.error_at(&mut out, Errno::Io, "bad sector", 4096),
        ReadErrorOutcome::Reported
    );
    reply.finish(&mut out);
    assert_eq!(&out[28 + 4..28 + 8], &[0, 0, 0x80, 0x02]);
}

#[test]
fn zero_length_reads() {
    let read = request(Command::Read, CommandFlags::NONE, 0, 0);
    let mut out = Vec::new();
    ReadReply::new(&read, &negotiated(false, false)).finish(&mut out);
    assert_eq!(out.len(), 16);
    out.clear();
    ReadReply::new(&read, &negotiated(true, false)).finish(&mut out);
    assert_eq!(out.len(), 20);
    assert_eq!(&out[4..8], &[0, 1, 0, 0]);
}

#[test]
#[should_panic(expected = "covers the whole request")]
fn a_structured_read_cannot_claim_success_with_missing_data() {
    let read = request(Command::Read, CommandFlags::NONE, 0, 8192);
    let mut reply = ReadReply::new(&read, &negotiated(true, false));
    let mut out = Vec::new();
    reply.data(&mut out, 0, 4096);
    reply.finish(&mut out);
}
