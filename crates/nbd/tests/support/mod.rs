//! Hand-written client pieces for the tests: options and replies laid out from the spec.
#![allow(dead_code)]

use tessera_nbd::ExportCatalog;
use tessera_nbd::ExportInfo;

/// `IHAVEOPT`, option, length, data.
pub fn option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut bytes = b"IHAVEOPT".to_vec();
    bytes.extend_from_slice(&option.to_be_bytes());
    bytes.extend_from_slice(&(data.len() as u32).to_be_bytes());
    bytes.extend_from_slice(data);
    bytes
}

/// The data of NBD_OPT_INFO / NBD_OPT_GO.
pub fn info_data(name: &str, requests: &[u16]) -> Vec<u8> {
    let mut bytes = (name.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(name.as_bytes());
    bytes.extend_from_slice(&(requests.len() as u16).to_be_bytes());
    for request in requests {
        bytes.extend_from_slice(&request.to_be_bytes());
    }
    bytes
}

/// The data of NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT.
pub fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut bytes = (name.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(name.as_bytes());
    bytes.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for query in queries {
        bytes.extend_from_slice(&(query.len() as u32).to_be_bytes());
        bytes.extend_from_slice(query.as_bytes());
    }
    bytes
}

/// One option reply: (option, reply type, data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionReply {
    pub option: u32,
    pub reply_type: u32,
    pub data: Vec<u8>,
}

/// Splits server output into option replies (checking the magic); panics on a partial one.
pub fn option_replies(mut bytes: &[u8]) -> Vec<OptionReply> {
    let mut replies = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 20, "partial reply header");
        assert_eq!(
            &bytes[..8],
            &[0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9],
            "reply magic"
        );
        let option = u32::from_be_bytes(bytes[8..12].try_into().unwrap());
        let reply_type = u32::from_be_bytes(bytes[12..16].try_into().unwrap());
        let length = u32::from_be_bytes(bytes[16..20].try_into().unwrap()) as usize;
        replies.push(OptionReply {
            option,
            reply_type,
            data: bytes[20..20 + length].to_vec(),
        });
        bytes = &bytes[20 + length..];
    }
    replies
}

pub const ACK: u32 = 1;
pub const SERVER: u32 = 2;
pub const INFO: u32 = 3;
pub const META_CONTEXT: u32 = 4;
pub const ERR_UNSUP: u32 = 0x8000_0001;
pub const ERR_POLICY: u32 = 0x8000_0002;
pub const ERR_INVALID: u32 = 0x8000_0003;
pub const ERR_TLS_REQD: u32 = 0x8000_0005;
pub const ERR_UNKNOWN: u32 = 0x8000_0006;
pub const ERR_SHUTDOWN: u32 = 0x8000_0007;
pub const ERR_TOO_BIG: u32 = 0x8000_0009;

pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// A 28-byte request header.
pub fn request(flags: u16, command: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    let mut bytes = vec![0x25, 0x60, 0x95, 0x13];
    bytes.extend_from_slice(&flags.to_be_bytes());
    bytes.extend_from_slice(&command.to_be_bytes());
    bytes.extend_from_slice(&cookie.to_be_bytes());
    bytes.extend_from_slice(&offset.to_be_bytes());
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes
}

/// A catalog with a few fixed exports, the first being the default.
pub struct TestCatalog {
    pub exports: Vec<ExportInfo>,
}

impl ExportCatalog for TestCatalog {
    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        if name.is_empty() {
            return self.exports.first().cloned();
        }
        self.exports
            .iter()
            .find(|export| export.name == name)
            .cloned()
    }

    fn list(&self) -> Vec<String> {
        self.exports
            .iter()
            .map(|export| export.name.clone())
            .collect()
    }
}
