//! calvin-gateway: the MCP server "calvin" (see `../shared/spec/agent-tools.txt`).
//!
//! - [`tools`]: which tools each mode lists, their checks and what they do;
//!   [`server`]: the MCP handler over stdio and streamable HTTP, and the
//!   send-file API for scripts.
//! - [`chat`]: the chat backend trait; [`slack`]: Slack through slack-morphism.
//! - [`card`]: post_card's vocabulary, validation and Block Kit rendering;
//!   [`files`]: send_file's path and content checks; [`secrets`]: the
//!   encrypted secret store.
//! - [`git`]: running git: no shell, no prompts, a time limit.
//! - [`brief`]: spawn_thread's brief, checked to be pushed to its
//!   repository's default branch, and its link on the web.
//! - [`workspace`]: checkout_repo's repositories, their cache and the
//!   session worktrees, and their list in AGENTS.md.

pub mod brief;
pub mod card;
pub mod chat;
pub mod config;
pub mod files;
pub mod git;
pub mod secrets;
pub mod server;
pub mod session;
pub mod slack;
pub mod tools;
pub mod workspace;
