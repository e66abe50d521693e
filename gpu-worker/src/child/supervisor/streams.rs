//! The child's two streams as the supervisor reads them: its combined output, counted and
//! capped to a tail, and its result pipe, cut into lines no longer than the protocol allows
//! and fed to the transcript, each stage, park, footprint and result passed on as it comes.

use super::ChildEvent;
use crate::child::protocol::{MAX_LINE_BYTES, Transcript};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Notify;

/// Bytes of combined stdout/stderr kept for the result's `output_tail`.
const TAIL_BYTES: usize = 8 * 1024;

#[derive(Default)]
pub(super) struct OutputCapture {
    pub(super) total: u64,
    pub(super) tail: Vec<u8>,
}

impl OutputCapture {
    fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > TAIL_BYTES {
            let cut = self.tail.len() - TAIL_BYTES;
            self.tail.drain(..cut);
        }
    }
}

pub(super) async fn read_output(
    mut stream: impl AsyncRead + Unpin,
    capture: Arc<Mutex<OutputCapture>>,
    flooded: Arc<Notify>,
    max_bytes: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let total = {
                    let mut c = capture.lock().expect("output capture lock");
                    c.push(&buf[..n]);
                    c.total
                };
                if total > max_bytes {
                    flooded.notify_one();
                }
            }
        }
    }
}

pub(super) type EventFeed = Box<dyn Fn(ChildEvent) + Send + Sync>;

pub(super) async fn read_transcript(
    fd: OwnedFd,
    events: Option<EventFeed>,
    entered: tokio::sync::oneshot::Sender<()>,
) -> Transcript {
    let mut entered = Some(entered);
    let mut transcript = Transcript::default();
    let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        transcript.violation = Some("cannot read the result pipe".to_owned());
        return transcript;
    };
    let mut line = Vec::new();
    let mut overlong = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                if overlong {
                    transcript.violate(format!("protocol line over {MAX_LINE_BYTES} bytes"));
                } else {
                    let stages = transcript.stages.len();
                    let parks = transcript.parks;
                    let footprint = transcript.footprint;
                    let ended = transcript.ended();
                    transcript.push_line(&line);
                    if transcript.sandbox.is_some()
                        && let Some(tx) = entered.take()
                    {
                        let _ = tx.send(());
                    }
                    if let Some(feed) = &events {
                        if transcript.stages.len() > stages
                            && let Some(stage) = transcript.last_stage()
                        {
                            feed(ChildEvent::Stage(stage));
                        }
                        if transcript.parks > parks {
                            feed(ChildEvent::Park);
                        }
                        if footprint.is_none()
                            && let Some(bytes) = transcript.footprint
                        {
                            feed(ChildEvent::Footprint(bytes));
                        }
                        if !ended && transcript.ended() {
                            feed(ChildEvent::Result);
                        }
                    }
                }
                line.clear();
                overlong = false;
            } else if line.len() < MAX_LINE_BYTES {
                line.push(b);
            } else {
                overlong = true;
            }
        }
    }
    if !line.is_empty() {
        transcript.push_line(&line);
    }
    transcript
}
