//! Parsing of option payloads the server receives (pure functions over complete payloads).

use crate::proto::STRING_BYTES_MAX;
use crate::wire::{Reader, protocol_string};

/// Why an option payload was refused; maps to an option error reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PayloadError {
    /// Malformed: `NBD_REP_ERR_INVALID` with this message.
    Invalid(&'static str),
    /// Well-formed but beyond a configured limit: `NBD_REP_ERR_TOO_BIG` with this message.
    TooBig(&'static str),
}

/// The payload of `NBD_OPT_INFO` and `NBD_OPT_GO`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct InfoRequest<'a> {
    pub(crate) export_name: &'a str,
    /// Information types the client asked for, unknown ones included (they are ignored).
    pub(crate) info_types: Vec<u16>,
}

/// Parses: 32-bit name length, name, 16-bit count, count 16-bit information types.
pub(crate) fn parse_info_request(
    data: &[u8],
    export_name_bytes_max: usize,
) -> Result<InfoRequest<'_>, PayloadError> {
    let mut reader = Reader::new(data);
    let name_length = reader
        .u32()
        .ok_or(PayloadError::Invalid("option data too short"))?;
    // The spec bounds the name by the option length minus the 6 bytes of the other fields.
    if data.len() < 6 || name_length as usize > data.len() - 6 {
        return Err(PayloadError::Invalid(
            "export name length exceeds the option data",
        ));
    }
    let name_bytes = reader
        .bytes(name_length as usize)
        .expect("bounded by the check above");
    let count = reader.u16().expect("bounded by the check above");
    if reader.remaining() != usize::from(count) * 2 {
        return Err(PayloadError::Invalid(
            "information request count does not match the option length",
        ));
    }
    let mut info_types = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        info_types.push(reader.u16().expect("bounded by the check above"));
    }
    let export_name = export_name(name_bytes, export_name_bytes_max)?;
    Ok(InfoRequest {
        export_name,
        info_types,
    })
}

/// The payload of `NBD_OPT_LIST_META_CONTEXT` and `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MetaContextRequest<'a> {
    pub(crate) export_name: &'a str,
    pub(crate) queries: Vec<&'a str>,
}

/// Parses: 32-bit name length, name, 32-bit query count, then each query as 32-bit length and
/// string. Every query must have a namespace and a colon.
pub(crate) fn parse_meta_context_request(
    data: &[u8],
    export_name_bytes_max: usize,
    queries_max: u32,
) -> Result<MetaContextRequest<'_>, PayloadError> {
    let mut reader = Reader::new(data);
    let name_length = reader
        .u32()
        .ok_or(PayloadError::Invalid("option data too short"))?;
    let name_bytes = reader
        .bytes(name_length as usize)
        .ok_or(PayloadError::Invalid(
            "export name length exceeds the option data",
        ))?;
    let count = reader
        .u32()
        .ok_or(PayloadError::Invalid("option data too short"))?;
    if count > queries_max {
        return Err(PayloadError::TooBig("too many metadata context queries"));
    }
    let mut queries = Vec::new();
    for _ in 0..count {
        let query_length = reader
            .u32()
            .ok_or(PayloadError::Invalid("query count exceeds the option data"))?;
        let query_bytes = reader
            .bytes(query_length as usize)
            .ok_or(PayloadError::Invalid(
                "query length exceeds the option data",
            ))?;
        let query = protocol_string(query_bytes, STRING_BYTES_MAX)
            .ok_or(PayloadError::Invalid("query is not a valid string"))?;
        if !query.contains(':') {
            return Err(PayloadError::Invalid("query lacks a namespace and colon"));
        }
        queries.push(query);
    }
    if reader.remaining() != 0 {
        return Err(PayloadError::Invalid("trailing bytes after the last query"));
    }
    let export_name = export_name(name_bytes, export_name_bytes_max)?;
    Ok(MetaContextRequest {
        export_name,
        queries,
    })
}

/// An export name: a protocol string no longer than the configured limit.
pub(crate) fn export_name(
    bytes: &[u8],
    export_name_bytes_max: usize,
) -> Result<&str, PayloadError> {
    if bytes.len() > export_name_bytes_max.min(STRING_BYTES_MAX) {
        return Err(PayloadError::Invalid("export name too long"));
    }
    protocol_string(bytes, STRING_BYTES_MAX).ok_or(PayloadError::Invalid(
        "export name is not valid UTF-8 without NUL",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_request_decodes_name_and_types() {
        // name length 4, "disk", 2 requests: NBD_INFO_BLOCK_SIZE (3) and NBD_INFO_NAME (1).
        let data = [0, 0, 0, 4, b'd', b'i', b's', b'k', 0, 2, 0, 3, 0, 1];
        let request = parse_info_request(&data, 4096).unwrap();
        assert_eq!(
            request,
            InfoRequest {
                export_name: "disk",
                info_types: vec![3, 1]
            }
        );
    }

    #[test]
    fn info_request_rejects_inconsistent_lengths() {
        // Name length 9 with only 8 bytes after the length field.
        let long_name = [0, 0, 0, 9, b'd', b'i', b's', b'k', 0, 0, 0, 0];
        assert!(matches!(
            parse_info_request(&long_name, 4096),
            Err(PayloadError::Invalid(_))
        ));
        // Count says 2 requests, only one present.
        let short_list = [0, 0, 0, 0, 0, 2, 0, 3];
        assert!(matches!(
            parse_info_request(&short_list, 4096),
            Err(PayloadError::Invalid(_))
        ));
        // Trailing byte after the list.
        let trailing = [0, 0, 0, 0, 0, 1, 0, 3, 7];
        assert!(matches!(
            parse_info_request(&trailing, 4096),
            Err(PayloadError::Invalid(_))
        ));
        assert!(matches!(
            parse_info_request(&[0, 0, 0], 4096),
            Err(PayloadError::Invalid(_))
        ));
        // Empty name and empty list are fine: 6 bytes of zero.
        assert_eq!(parse_info_request(&[0; 6], 4096).unwrap().export_name, "");
    }

    #[test]
    fn info_request_enforces_the_name_limit() {
        let data = [0, 0, 0, 4, b'd', b'i', b's', b'k', 0, 0];
        assert!(matches!(
            parse_info_request(&data, 3),
            Err(PayloadError::Invalid(_))
        ));
        let nul = [0, 0, 0, 2, b'd', 0, 0, 0];
        assert!(matches!(
            parse_info_request(&nul, 4096),
            Err(PayloadError::Invalid(_))
        ));
    }

    #[test]
    fn meta_context_request_decodes_queries() {
        let mut data = vec![0, 0, 0, 1, b'x', 0, 0, 0, 2];
        data.extend_from_slice(&[0, 0, 0, 15]);
        data.extend_from_slice(b"base:allocation");
        data.extend_from_slice(&[0, 0, 0, 5]);
        data.extend_from_slice(b"qemu:");
        let request = parse_meta_context_request(&data, 4096, 16).unwrap();
        assert_eq!(
            request,
            MetaContextRequest {
                export_name: "x",
                queries: vec!["base:allocation", "qemu:"]
            }
        );
    }

    #[test]
    fn meta_context_request_rejects_bad_input() {
        // Query without a colon.
        let no_colon = [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, b'b', b'a', b's', b'e'];
        assert_eq!(
            parse_meta_context_request(&no_colon, 4096, 16),
            Err(PayloadError::Invalid("query lacks a namespace and colon"))
        );
        // Query length past the end.
        let overrun = [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, b'b', b':'];
        assert!(matches!(
            parse_meta_context_request(&overrun, 4096, 16),
            Err(PayloadError::Invalid(_))
        ));
        // Too many queries for the limit.
        let many = [0, 0, 0, 0, 0, 0, 0, 17];
        assert!(matches!(
            parse_meta_context_request(&many, 4096, 16),
            Err(PayloadError::TooBig(_))
        ));
        // Trailing bytes.
        let trailing = [0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert!(matches!(
            parse_meta_context_request(&trailing, 4096, 16),
            Err(PayloadError::Invalid(_))
        ));
    }
}
