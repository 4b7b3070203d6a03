//! The management API of the Tessera daemon (docs/api.md): its JSON objects (`model`), an
//! HTTP/1.1 server that routes requests to a `Controller` the daemon implements (`server`,
//! `router`), and a blocking client (`client`) that the `tessera` CLI uses.
//!
//! **Architecture invariant:** this crate knows nothing about RAID; it moves typed requests and
//! answers between a terminal (or a script) and the daemon.

pub mod client;
pub mod controller;
pub mod http;
pub mod model;
pub mod peer;
pub mod router;
pub mod server;
pub mod testing;
pub mod tls;

pub use client::{Client, ClientError};
pub use controller::Controller;
pub use model::*;
pub use router::{Router, Scope};
pub use server::{ApiServer, ServerConfig, ServerError, serve_connection, serve_connection_as};
