//! calvin-gateway: the MCP server "calvin" (see `../shared/spec/agent-tools.txt`).

pub mod card;
pub mod chat;
pub mod files;
pub mod secrets;
pub mod slack;
