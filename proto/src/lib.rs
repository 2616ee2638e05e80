//! calvin-proto: the wire protocol between a calvin agent and an edge, sans-IO.
//!
//! - [`PreviewName`]: a preview's name, one DNS label, parsed and case-folded
//!   at the boundary; [`PreviewName::random`] makes readable ones.
//! - [`AgentMessage`] / [`EdgeMessage`]: the control stream (Hello, Welcome,
//!   open and close a preview, errors as [`Failure`] with an [`ErrorCode`]).
//! - [`StreamHeader`] / [`StreamAnswer`]: the start of each data stream.
//! - [`frame`]: length-prefixed framing with a [`MAX_FRAME_LEN`]; decoding
//!   tells "need more bytes" apart from "malformed".
//! - [`control`]: the JSON of the agent's local control API, which the
//!   agent serves and its commands and the gateway call.
//!
//! No sockets and no runtime here; the `tokio` feature adds [`io`], two
//! helpers that read and write one frame on an async stream.

pub mod control;
pub mod frame;
#[cfg(feature = "tokio")]
pub mod io;
mod message;
mod name;

pub use frame::{FrameError, MAX_FRAME_LEN};
pub use message::*;
pub use name::{MAX_NAME_LEN, NameError, PreviewName};
