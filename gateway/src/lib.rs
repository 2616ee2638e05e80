//! calvin-gateway: the MCP server "calvin" (see `../shared/spec/agent-tools.txt`).
//!
//! - [`tools`]: which tools each mode lists and the calls' dispatch;
//!   [`tool_defs`]: their schemas; [`args`]: argument checks;
//!   [`server`]: the MCP handler over stdio and streamable HTTP, the
//!   daemon's session, event and secret-request endpoints, and the
//!   send-file API for scripts; [`mcp_endpoint`]: a registered session's
//!   MCP endpoint (rmcp's, with its sessions' ends answered 204 or 404).
//! - [`previews`]: preview, unpreview and preview_log through the local
//!   agent, with [`preview_log`]: the request log as text, and
//!   [`session_previews`]: the previews that end with their session.
//! - [`chat`]: the chat backend trait and each platform's id syntax;
//!   [`slack`]: Slack through slack-morphism; [`socket_mode`]: Slack's
//!   events in the daemon; [`mattermost`]: Mattermost's REST API v4, its
//!   WebSocket and its integration callbacks;
//!   [`events`]: events in the gateway's terms and the hub routing them to
//!   sessions; [`daemon_client`]: a stdio gateway's line to the daemon.
//! - [`card`]: post_card; [`files`]: send_file's checks; [`threads`]:
//!   read_thread and post_thread; [`chat_tools`]: the chat-thread family,
//!   with [`thread_window`]: which messages of a long thread it shows;
//!   [`permalink`]: ids and Slack's links; [`spawn`] and [`brief`]: spawn_thread, with [`markdown_anchor`]: a
//!   brief's headings and anchors, and [`web_link`]: its link on the web
//!   host; [`checkout`], [`workspace`], [`repo_cache`] and [`git`]:
//!   checkout_repo; [`secret_request`]: request_secret's button and form;
//!   [`secrets`]: the encrypted secret store; [`session_env`]: the env file
//!   a session's shells source.
//! - [`config`]: gateway.toml; [`check_config`]: its every problem, with
//!   its key and line (`check-config`, and before every start).
//! - [`metrics`]: what the daemon counts (tool calls, Slack's answers and
//!   rate limits, sessions, Socket Mode), on `[serve] metrics`.

pub mod args;
pub mod atomic_file;
pub mod brief;
pub mod card;
pub mod chat;
pub mod chat_tools;
pub mod check_config;
pub mod checkout;
pub mod child_env;
pub mod config;
pub mod daemon_client;
pub mod decisions;
pub mod events;
pub mod files;
pub mod git;
pub mod markdown_anchor;
pub mod mattermost;
pub mod mcp_endpoint;
pub mod metrics;
pub mod permalink;
pub mod permission;
pub mod preview_log;
pub mod previews;
pub mod process;
pub mod random_id;
pub mod repo_cache;
pub mod secret_request;
pub mod secrets;
pub mod server;
pub mod session;
pub mod session_env;
pub mod session_previews;
pub mod slack;
pub mod socket_mode;
pub mod spawn;
pub mod thread_window;
pub mod threads;
pub mod tool_defs;
pub mod tools;
pub mod web_link;
pub mod workspace;
