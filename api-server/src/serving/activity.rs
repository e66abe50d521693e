//! What the accept loop knows of one connection's traffic, so that the connection cap sheds
//! only connections that are idle between requests: its reader marks a request being
//! received, its service marks a request in flight until the response's last byte is handed
//! to hyper, and a connection asked to close answers what it is receiving first (with
//! `Connection: close`) and closes once idle.

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use http_body_util::BodyExt as _;
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// One connection's traffic, shared by its reader, its service, its task and the accept loop.
#[derive(Default)]
pub(super) struct Activity {
    /// Requests whose response has not been handed to hyper whole: the connection is busy.
    in_flight: AtomicUsize,
    /// Bytes arrived while no request was in flight and no request has started since: a
    /// request's headers being received.
    receiving: AtomicBool,
    /// Asked to close: every response from now on says `Connection: close`.
    closing: AtomicBool,
    /// Told whenever a response ends, so that a task waiting to close an idle connection
    /// looks again.
    response_ended: Notify,
}

impl Activity {
    /// Nothing in flight and nothing being received: closing it loses no request.
    pub(super) fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0 && !self.receiving.load(Ordering::Acquire)
    }

    /// Asks the connection to close: later responses say `Connection: close`.
    pub(super) fn mark_closing(&self) {
        self.closing.store(true, Ordering::Release);
    }

    /// As the reader does when a request's first bytes arrive.
    #[cfg(test)]
    pub(super) fn mark_receiving_for_test(&self) {
        self.receiving.store(true, Ordering::Release);
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.receiving.store(false, Ordering::Release);
        InFlight(self.clone())
    }

    /// Waits until the connection is idle with no byte waiting in its socket (`fd`), then
    /// returns; what arrives meanwhile is answered first. Never returns while a request is in
    /// flight, so a caller may then close the connection without losing one.
    pub(super) async fn until_idle(&self, fd: RawFd) {
        loop {
            let ended = self.response_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.idle() && !bytes_waiting(fd) {
                return;
            }
            ended.await;
        }
    }
}

/// Whether the socket holds bytes not yet read: a request arriving that hyper has not seen.
fn bytes_waiting(fd: RawFd) -> bool {
    use nix::sys::socket::{MsgFlags, recv};
    let mut byte = [0u8; 1];
    matches!(
        recv(fd, &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT),
        Ok(n) if n > 0
    )
}

/// A request in flight; dropped when its response body has been handed to hyper whole (or
/// dropped unsent).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.response_ended.notify_waiters();
    }
}

/// A connection's socket that notes when bytes start a request.
pub(super) struct Watched<S> {
    pub(super) inner: S,
    pub(super) activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        // Bytes while nothing is in flight begin a request; bytes of a body in flight do not.
        if buf.filled().len() > before && self.activity.in_flight.load(Ordering::Acquire) == 0 {
            self.activity.receiving.store(true, Ordering::Release);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The router as one connection's service: each request is in flight from its headers until
/// its response body is done, and a connection asked to close says so in its responses.
#[derive(Clone)]
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) activity: Arc<Activity>,
}

impl<S, B> tower::Service<Request<B>> for Tracked<S>
where
    S: tower::Service<Request<B>, Response = Response, Error = std::convert::Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let in_flight = self.activity.request_started();
        let activity = self.activity.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut response = response.await?;
            if activity.closing.load(Ordering::Acquire) {
                response.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
            }
            // The guard lives as long as the body: hyper drops it once written whole.
            Ok(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _ = &in_flight;
                    frame
                }))
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_in_flight_until_its_guard_drops_and_receiving_ends_when_it_starts() {
        let activity = Arc::new(Activity::default());
        assert!(activity.idle());
        activity.receiving.store(true, Ordering::Release);
        assert!(!activity.idle(), "headers being received");
        let first = activity.request_started();
        assert!(!activity.idle(), "in flight");
        let second = activity.request_started();
        drop(first);
        assert!(!activity.idle(), "one still in flight");
        drop(second);
        assert!(activity.idle());
    }
}
