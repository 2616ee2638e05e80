//! Reading and writing one frame on a tokio stream (feature `tokio`).
//!
//! Reads take exactly the frame's bytes, never more, so the stream can carry
//! raw bytes after it.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::frame::{self, Frame, FrameError, PREFIX_LEN};

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the stream ended in the middle of a frame")]
    Truncated,
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Io(std::io::Error),
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ReadError::Truncated
        } else {
            ReadError::Io(e)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads one frame. `Ok(None)` when the stream ends cleanly before it.
pub async fn read_frame<T: Frame, R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Option<T>, ReadError> {
    let mut prefix = [0u8; PREFIX_LEN];
    let first = reader.read(&mut prefix).await?;
    if first == 0 {
        return Ok(None);
    }
    reader.read_exact(&mut prefix[first..]).await?;
    let len = frame::payload_len(prefix)?;
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload).await?;
    Ok(Some(frame::decode_payload(&payload)?))
}

/// Writes one frame and flushes it.
pub async fn write_frame<T: Frame, W: AsyncWrite + Unpin>(
    writer: &mut W,
    msg: &T,
) -> Result<(), WriteError> {
    let mut buf = Vec::new();
    frame::encode(msg, &mut buf)?;
    writer.write_all(&buf).await?;
    writer.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{StreamAnswer, StreamRefusal};

    #[tokio::test]
    async fn frames_cross_a_tiny_pipe_and_leave_what_follows() {
        // An 8-byte pipe makes every read and write partial.
        let (mut a, mut b) = tokio::io::duplex(8);
        let writer = tokio::spawn(async move {
            write_frame(&mut a, &StreamAnswer::Accepted).await.unwrap();
            let refused = StreamAnswer::Refused {
                reason: StreamRefusal::NotPreviewed,
                message: "port 9 is not previewed".into(),
            };
            write_frame(&mut a, &refused).await.unwrap();
            a.write_all(b"raw bytes").await.unwrap();
        });
        let first: StreamAnswer = read_frame(&mut b).await.unwrap().unwrap();
        assert_eq!(first, StreamAnswer::Accepted);
        let second: StreamAnswer = read_frame(&mut b).await.unwrap().unwrap();
        assert!(matches!(second, StreamAnswer::Refused { .. }));
        let mut rest = Vec::new();
        b.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"raw bytes");
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn clean_end_truncation_and_oversize() {
        let mut empty: &[u8] = &[];
        assert!(
            read_frame::<StreamAnswer, _>(&mut empty)
                .await
                .unwrap()
                .is_none()
        );

        let mut cut: &[u8] = &[0, 0, 0, 10, b'{'];
        assert!(matches!(
            read_frame::<StreamAnswer, _>(&mut cut).await,
            Err(ReadError::Truncated)
        ));
        let mut cut_prefix: &[u8] = &[0, 0];
        assert!(matches!(
            read_frame::<StreamAnswer, _>(&mut cut_prefix).await,
            Err(ReadError::Truncated)
        ));

        let huge = ((crate::MAX_FRAME_LEN + 1) as u32).to_be_bytes();
        let mut r: &[u8] = &huge;
        assert!(matches!(
            read_frame::<StreamAnswer, _>(&mut r).await,
            Err(ReadError::Frame(FrameError::TooLong { .. }))
        ));
    }
}
