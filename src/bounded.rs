//! Every answer tagpin reads from a remote is bounded in size and in time.
//!
//! In operator mode each URL a tenant's `PinnedRepository` names (`forge.api_url`, a stage
//! kubeconfig's `server`) is hostile: a server that answers `200` with an endless body would
//! otherwise fill the operator's memory, and one that sends a byte every few seconds would
//! hold a call forever, since the HTTP clients' read timeouts count from the last byte, not
//! from the request. [`BoundedLayer`] wraps a client's `tower` service (octocrab's and kube's
//! both are one): the whole exchange, headers and body, must end within a deadline, and the
//! body is refused once it passes a size. Both failures are [`Exceeded`], which the adapters
//! find in their client's error chain ([`exceeded_in`]) and report in their own words,
//! naming the host.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

/// One mebibyte, for the caps' definitions.
pub const MIB: usize = 1024 * 1024;

/// Why an answer was given up: it grew past its cap, or did not end in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("answer larger than {}; refused", size_text(*.limit))]
    TooLarge { limit: usize },
    #[error("no complete answer within {}", duration_text(*.within))]
    Deadline { within: Duration },
}

/// `8 MiB`, `256 KiB`, or the bytes when the cap is not whole kibibytes (tests use small caps).
pub fn size_text(bytes: usize) -> String {
    match (bytes % MIB, bytes % 1024) {
        (0, _) if bytes > 0 => format!("{} MiB", bytes / MIB),
        (_, 0) if bytes > 0 => format!("{} KiB", bytes / 1024),
        _ => format!("{bytes} bytes"),
    }
}

/// `60s`, or milliseconds below a second.
pub fn duration_text(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{}s", d.as_secs()),
        _ => format!("{}ms", d.as_millis()),
    }
}

/// The [`Exceeded`] somewhere in an error's chain of causes, if that is why it failed.
pub fn exceeded_in(error: &(dyn std::error::Error + 'static)) -> Option<Exceeded> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<Exceeded>() {
            return Some(*found);
        }
        next = e.source();
    }
    None
}

/// Why an answer that was meant to be JSON could not be read, in tagpin's words with its
/// line and column. serde's own message may quote the answer ("invalid type: string \"…\""),
/// and an answer is never quoted back (see [`crate::forge::ForgeError`]).
pub fn json_problem(e: &serde_json::Error) -> String {
    let what = match e.classify() {
        serde_json::error::Category::Syntax => "not valid JSON",
        serde_json::error::Category::Eof => "JSON cut short",
        serde_json::error::Category::Data => "JSON, but not of the shape expected",
        serde_json::error::Category::Io => "unreadable",
    };
    format!("{what} (line {}, column {})", e.line(), e.column())
}

/// The bounds of every exchange through a [`BoundedLayer`].
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The largest body read; past it the body fails with [`Exceeded::TooLarge`].
    pub max_bytes: usize,
    /// How long the whole exchange may take, from the request to the body's last byte; `None`
    /// for watches, which are quiet by design and ended by their caller.
    pub deadline: Option<Duration>,
}

/// A `tower` layer bounding every exchange of the service it wraps (see [`Bounds`]).
#[derive(Debug, Clone, Copy)]
pub struct BoundedLayer(pub Bounds);

impl<S> Layer<S> for BoundedLayer {
    type Service = BoundedService<S>;

    fn layer(&self, inner: S) -> BoundedService<S> {
        BoundedService {
            inner,
            bounds: self.0,
        }
    }
}

/// The service of [`BoundedLayer`].
#[derive(Debug, Clone)]
pub struct BoundedService<S> {
    inner: S,
    bounds: Bounds,
}

impl<S, Request, B> Service<Request> for BoundedService<S>
where
    S: Service<Request, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<BoundedBody<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let bounds = self.bounds;
        // The clock starts when the request is handed to the client, before connecting.
        let deadline = bounds
            .deadline
            .map(|within| (Instant::now() + within, within));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = match deadline {
                Some((at, within)) => match tokio::time::timeout_at(at, answer).await {
                    Ok(response) => response.map_err(Into::into)?,
                    Err(_) => return Err(Box::new(Exceeded::Deadline { within }) as BoxError),
                },
                None => answer.await.map_err(Into::into)?,
            };
            Ok(response.map(|body| BoundedBody::new(body, bounds.max_bytes, deadline)))
        })
    }
}

/// A response body that fails once it passes `max_bytes`, or once its deadline passes.
pub struct BoundedBody<B> {
    inner: Pin<Box<B>>,
    read: usize,
    max_bytes: usize,
    deadline: Option<(Pin<Box<Sleep>>, Duration)>,
    /// A bound was passed: the body says so once and then ends.
    failed: bool,
}

impl<B> BoundedBody<B> {
    fn new(inner: B, max_bytes: usize, deadline: Option<(Instant, Duration)>) -> BoundedBody<B> {
        BoundedBody {
            inner: Box::pin(inner),
            read: 0,
            max_bytes,
            deadline: deadline.map(|(at, within)| (Box::pin(tokio::time::sleep_until(at)), within)),
            failed: false,
        }
    }

    fn fail(&mut self, why: Exceeded) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.failed = true;
        Poll::Ready(Some(Err(Box::new(why))))
    }
}

impl<B> Body for BoundedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        if let Some((sleep, within)) = &mut this.deadline {
            // Polled first, so its timer is registered whenever the body waits for more.
            if sleep.as_mut().poll(cx).is_ready() {
                let within = *within;
                return this.fail(Exceeded::Deadline { within });
            }
        }
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.read = this.read.saturating_add(data.len());
                    if this.read > this.max_bytes {
                        let limit = this.max_bytes;
                        return this.fail(Exceeded::TooLarge { limit });
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body of `chunks` chunks of `size` bytes, each after `pause`.
    fn dripping(
        chunks: usize,
        size: usize,
        pause: Duration,
    ) -> impl Body<Data = Bytes, Error = BoxError> {
        let stream = futures::stream::iter(0..chunks).then(move |_| async move {
            tokio::time::sleep(pause).await;
            Ok::<_, BoxError>(Frame::data(Bytes::from(vec![b'x'; size])))
        });
        http_body_util::StreamBody::new(stream)
    }

    use futures::StreamExt;

    #[tokio::test]
    async fn a_body_within_its_bounds_is_read_whole() {
        let body = BoundedBody::new(dripping(4, 10, Duration::ZERO), 40, None);
        assert_eq!(body.collect().await.unwrap().to_bytes().len(), 40);
    }

    #[tokio::test]
    async fn a_body_past_its_cap_fails_saying_so() {
        let body = BoundedBody::new(dripping(5, 10, Duration::ZERO), 40, None);
        let error = body.collect().await.err().unwrap();
        assert_eq!(
            exceeded_in(error.as_ref()),
            Some(Exceeded::TooLarge { limit: 40 })
        );
        assert_eq!(error.to_string(), "answer larger than 40 bytes; refused");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dripping_body_fails_at_the_deadline_not_at_its_end() {
        let within = Duration::from_secs(5);
        let start = Instant::now();
        let body = BoundedBody::new(
            dripping(100, 1, Duration::from_secs(1)),
            MIB,
            Some((start + within, within)),
        );
        let error = body.collect().await.err().unwrap();
        assert_eq!(error.to_string(), "no complete answer within 5s");
        assert_eq!(start.elapsed(), within);
    }

    #[test]
    fn a_json_problem_never_quotes_the_answer() {
        let wrong = serde_json::from_str::<Vec<u32>>(r#"["db_password=hunter2"]"#).unwrap_err();
        assert!(
            wrong.to_string().contains("hunter2"),
            "serde quotes it: {wrong}"
        );
        let said = json_problem(&wrong);
        assert_eq!(
            said,
            "JSON, but not of the shape expected (line 1, column 22)"
        );
        let not_json = serde_json::from_str::<Vec<u32>>("INTERNAL-ONLY").unwrap_err();
        assert_eq!(json_problem(&not_json), "not valid JSON (line 1, column 1)");
    }

    #[test]
    fn caps_and_deadlines_read_as_people_write_them() {
        assert_eq!(size_text(16 * MIB), "16 MiB");
        assert_eq!(size_text(1000), "1000 bytes");
        assert_eq!(duration_text(Duration::from_secs(60)), "60s");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
    }
}
