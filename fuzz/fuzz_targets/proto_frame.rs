//! Arbitrary bytes into the frame decoder, as every message type of the
//! protocol. Decoding must never panic, and it must agree with the async
//! reader (`calvin_proto::io::read_frame`) and with the encoder.

#![no_main]

use std::fmt::Debug;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use calvin_proto::frame::{self, Frame, FrameError};
use calvin_proto::io::{ReadError, read_frame};
use calvin_proto::{AgentMessage, EdgeMessage, StreamAnswer, StreamHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check::<AgentMessage>(data);
    check::<EdgeMessage>(data);
    check::<StreamHeader>(data);
    check::<StreamAnswer>(data);
});

fn check<T: Frame + PartialEq + Debug>(data: &[u8]) {
    let decoded = frame::decode::<T>(data);
    let (read, unread) = read_frame_sync::<T>(data);

    match decoded {
        Ok(Some((msg, used))) => {
            assert!((frame::PREFIX_LEN..=data.len()).contains(&used));
            // The reader takes exactly the frame's bytes and the same message.
            match read {
                Ok(Some(ref m)) => assert_eq!(m, &msg),
                ref other => panic!("decode gave {msg:?}, read_frame {other:?}"),
            }
            assert_eq!(unread, data.len() - used);
            round_trip(&msg);
        }
        Ok(None) => {
            // Incomplete: a clean end before any byte, else a truncation.
            if data.is_empty() {
                assert!(matches!(read, Ok(None)), "{read:?}");
            } else {
                assert!(matches!(read, Err(ReadError::Truncated)), "{read:?}");
            }
        }
        Err(FrameError::TooLong { len }) => {
            assert!(len > calvin_proto::MAX_FRAME_LEN);
            assert!(
                matches!(read, Err(ReadError::Frame(FrameError::TooLong { len: l })) if l == len),
                "{read:?}"
            );
        }
        Err(FrameError::Malformed(_)) => {
            assert!(
                matches!(read, Err(ReadError::Frame(FrameError::Malformed(_)))),
                "{read:?}"
            );
        }
    }
}

/// A decoded message encodes to a frame that decodes to the same message.
fn round_trip<T: Frame + PartialEq + Debug>(msg: &T) {
    let mut out = vec![0xAA];
    match frame::encode(msg, &mut out) {
        Ok(()) => {
            let (back, used) = frame::decode::<T>(&out[1..])
                .expect("an encoded frame decodes")
                .expect("an encoded frame is complete");
            assert_eq!(used, out.len() - 1);
            assert_eq!(&back, msg);
        }
        // Re-encoding may spell the message differently (escapes, address
        // forms); near the limit that can cross it. The buffer is untouched.
        Err(FrameError::TooLong { .. }) => assert_eq!(out, [0xAA]),
        Err(e) => panic!("encoding a decoded {msg:?} failed: {e}"),
    }
}

/// `read_frame` over a byte slice. A slice never makes a read wait, so one
/// poll finishes it. Returns its result and the bytes it left unread.
fn read_frame_sync<T: Frame>(data: &[u8]) -> (Result<Option<T>, ReadError>, usize) {
    let mut reader = data;
    let result = {
        let mut fut = pin!(read_frame::<T, _>(&mut reader));
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => r,
            Poll::Pending => panic!("read_frame waited on a byte slice"),
        }
    };
    (result, reader.len())
}
