//! Object bodies over HTTP, shared by the S3 endpoint (`s3`) and the `/b/` routes
//! (`http_blob`): a request body as the chunk stream the object service consumes
//! ([`request_stream`]), each front end deciding what it decodes and checks ([`BodyCheck`]),
//! and an object's bytes as a response body ([`object_body`]).
//!
//! The object service only sees [`ObjectError::Body`] when a body fails; the precise error of
//! the front end's protocol is left in a [`Slot`], which the front end reads when it maps the
//! failed operation to its reply ([`recorded`]).

use crate::objects::{ByteStream, ObjResult, ObjectError, ObjectHead, Objects};
use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

/// Where a request body stream leaves the precise error of a body that failed.
pub(crate) type Slot<E> = Arc<Mutex<Option<E>>>;

/// The error a body stream recorded in `slot`, if any (taken: it is reported once).
pub(crate) fn recorded<E>(slot: Option<&Slot<E>>) -> Option<E> {
    slot.and_then(|s| s.lock().take())
}

/// What a front end does to a request body as it streams: decodes it (or passes it on) and
/// checks it, in the front end's own errors.
pub(crate) trait BodyCheck: Send + 'static {
    /// The front end's error of a body that failed.
    type Error: Send + 'static;

    /// Takes bytes received; appends the object's bytes they hold to `out`.
    fn take(&mut self, bytes: Bytes, out: &mut VecDeque<Bytes>) -> Result<(), Self::Error>;

    /// The body ended: the checks that need all of it.
    fn finish(&mut self) -> Result<(), Self::Error>;

    /// The error of a body that could not be read (the client went away, a transfer
    /// coding that broke).
    fn unreadable(&self, e: axum::Error) -> Self::Error;

    /// The message of the [`ObjectError::Body`] that stands for `e` in the object service.
    fn message(e: &Self::Error) -> String;
}

/// `body` as an object's bytes, through `check`. A failure (a body cut short, a check that
/// does not hold, at the end included) is recorded in `slot` and ends the stream with
/// [`ObjectError::Body`], so the object service commits nothing; after it the stream yields
/// no more.
pub(crate) fn request_stream<C: BodyCheck>(
    body: Body,
    check: C,
    slot: Slot<C::Error>,
) -> ByteStream {
    struct St<C: BodyCheck> {
        raw: axum::body::BodyDataStream,
        check: C,
        ready: VecDeque<Bytes>,
        slot: Slot<C::Error>,
        done: bool,
    }
    impl<C: BodyCheck> St<C> {
        fn fail(&mut self, e: C::Error) -> ObjectError {
            self.done = true;
            self.ready.clear();
            let message = C::message(&e);
            *self.slot.lock() = Some(e);
            ObjectError::Body(message)
        }
    }
    let st = St {
        raw: body.into_data_stream(),
        check,
        ready: VecDeque::new(),
        slot,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(b) = st.ready.pop_front() {
                return Some((Ok(b), st));
            }
            if st.done {
                return None;
            }
            let failed = match st.raw.next().await {
                Some(Ok(bytes)) => st.check.take(bytes, &mut st.ready).err(),
                Some(Err(e)) => Some(st.check.unreadable(e)),
                None => {
                    st.done = true;
                    st.check.finish().err()
                }
            };
            if let Some(e) = failed {
                return Some((Err(st.fail(e)), st));
            }
        }
    }))
}

/// The response body of bytes `first..=last` of the object `head` describes: empty when
/// `headers_only` (HEAD) or the object is empty, else streamed from the object service (a
/// failure mid-stream ends the response short of its `Content-Length`).
pub(crate) async fn object_body(
    objects: &Objects,
    bucket: &str,
    key: &[u8],
    head: &ObjectHead,
    (first, last): (u64, u64),
    headers_only: bool,
) -> ObjResult<Body> {
    if headers_only || head.manifest.size == 0 {
        return Ok(Body::empty());
    }
    let stream = objects.read(bucket, key, head, first, last).await?;
    Ok(Body::from_stream(
        stream.map(|r| r.map_err(std::io::Error::other)),
    ))
}

/// The length of the bytes `first..=last` of an object of `size` bytes (0 when it is empty).
pub(crate) fn span_len(size: u64, (first, last): (u64, u64)) -> u64 {
    if size == 0 { 0 } else { last - first + 1 }
}
