//! Serve: ctld's doors. The client socket ([`rpc`], one handler per operation), the node port
//! ([`nodes`]) and the remote clients on it ([`remote`]), and the HTTP endpoint ([`http`]) with
//! `/metrics` and the status page ([`status_page`]); a following replica's answer on its
//! client socket and node port ([`follower`]); the doors a supervisor bound and handed over
//! ([`activation`]). Everything here turns bytes into events for
//! the core and answers back; it may import every layer below it.

pub(crate) mod activation;
pub(crate) mod error;
pub(crate) mod follower;
pub(crate) mod http;
pub(crate) mod limits;
pub(crate) mod nodes;
pub(crate) mod remote;
pub(crate) mod rpc;
pub(crate) mod status_page;
