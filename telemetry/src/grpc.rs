//! gRPC server metrics in the names the ecosystem's dashboards read
//! (`grpc_server_handled_total`, `grpc_server_handling_seconds`), recorded at the edge of the
//! server: the call's path when it arrives, its `grpc-status` from the response's headers (a
//! refusal) or trailers (an answer), its time until then.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::{Buckets, Known, LATENCY_BUCKETS, histograms};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Method {
    grpc_service: String,
    grpc_method: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Handled {
    grpc_service: String,
    grpc_method: String,
    grpc_code: &'static str,
}

/// The server's calls by method and status code, and their handling time.
#[derive(Debug, Clone)]
pub struct GrpcMetrics {
    started: Family<Method, Counter>,
    handled: Family<Handled, Counter>,
    handling: Family<Method, Histogram, Buckets>,
    /// The method paths this server serves (`/package.Service/Method`); any other is `other`.
    known: Known,
}

impl GrpcMetrics {
    /// Registers the families in `registry`; `paths` are the methods served.
    pub fn new(registry: &mut Registry, paths: impl IntoIterator<Item = String>) -> Self {
        let m = Self {
            started: Family::default(),
            handled: Family::default(),
            handling: histograms(&LATENCY_BUCKETS),
            known: Known::new(paths),
        };
        registry.register("grpc_server_started", "Calls the server started, by method", m.started.clone());
        registry.register(
            "grpc_server_handled",
            "Calls the server completed, by method and status code",
            m.handled.clone(),
        );
        registry.register(
            "grpc_server_handling_seconds",
            "Time from a call's arrival to its status, by method",
            m.handling.clone(),
        );
        m
    }

    /// A call to `path` has arrived.
    pub fn start(&self, path: &str) -> Started {
        let (service, method) = match self.known.label(path).as_str() {
            "other" => ("other".to_owned(), "other".to_owned()),
            known => {
                let (s, m) = known.trim_start_matches('/').split_once('/').unwrap_or((known, ""));
                (s.to_owned(), m.to_owned())
            }
        };
        let method = Method { grpc_service: service, grpc_method: method };
        self.started.get_or_create(&method).inc();
        Started { call: Some((self.clone(), method, Instant::now())) }
    }
}

/// A call in flight, recorded once when its status is known, or as cancelled when it is dropped
/// before (the client went away, or the server's timeout dropped the call).
#[derive(Debug)]
pub struct Started {
    call: Option<(GrpcMetrics, Method, Instant)>,
}

impl Started {
    fn finish(&mut self, code: &'static str) {
        let Some((metrics, method, at)) = self.call.take() else { return };
        metrics.handling.get_or_create(&method).observe(at.elapsed().as_secs_f64());
        let handled = Handled { grpc_service: method.grpc_service, grpc_method: method.grpc_method, grpc_code: code };
        metrics.handled.get_or_create(&handled).inc();
    }

    /// The method's label, `service/method` or `other`: what a log line may carry of the path.
    pub fn method(&self) -> String {
        self.call.as_ref().map_or_else(String::new, |(_, m, _)| format!("{}/{}", m.grpc_service, m.grpc_method))
    }

    /// Records the call from `response`: now, when its headers carry the status (a refusal or
    /// an error), otherwise when its body's trailers do.
    pub fn observe<B>(mut self, response: http::Response<B>) -> http::Response<Metered<B>> {
        if let Some(code) = status_of(response.headers()) {
            self.finish(code);
        }
        response.map(|body| Metered { body, call: self })
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.finish("Canceled");
    }
}

fn status_of(headers: &http::HeaderMap) -> Option<&'static str> {
    let value = headers.get("grpc-status")?;
    let code = value.to_str().ok().and_then(|s| s.parse::<i32>().ok());
    Some(code.map_or("Unknown", code_name))
}

/// The name of gRPC status `code` as the ecosystem's metrics spell it.
pub fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "Canceled",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        16 => "Unauthenticated",
        _ => "Unknown",
    }
}

pin_project_lite::pin_project! {
    /// A response body that records its call when the trailers pass (dropped before they do,
    /// the call is recorded as cancelled).
    pub struct Metered<B> {
        #[pin]
        body: B,
        call: Started,
    }
}

impl<B: Body> Body for Metered<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(status_of) {
                    this.call.finish(code);
                }
            }
            Poll::Ready(Some(Err(_))) => this.call.finish("Internal"),
            // Ended with no status: gRPC's own reading of that is Unknown.
            Poll::Ready(None) => this.call.finish("Unknown"),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    fn exposition(registry: &Registry) -> String {
        crate::encode(registry)
    }

    #[tokio::test]
    async fn a_call_is_counted_once_by_its_status_from_headers_or_trailers() {
        let mut registry = Registry::default();
        let m = GrpcMetrics::new(&mut registry, ["/pkg.Svc/Do".to_owned()]);
        // A refusal: the status in the headers.
        let refused =
            http::Response::builder().header("grpc-status", "16").body(Full::new(hyper::body::Bytes::new())).unwrap();
        drop(m.start("/pkg.Svc/Do").observe(refused));
        // An answer: the status in the trailers.
        let answered = http::Response::new(Trailing(Some(7)));
        let body = m.start("/pkg.Svc/Do").observe(answered).into_body();
        body.collect().await.unwrap();
        // A call dropped before any response (a timeout, a client gone).
        drop(m.start("/pkg.Svc/Do"));
        // A path nobody serves, dropped before its trailers.
        drop(m.start("/made.Up/Name").observe(http::Response::new(Trailing(Some(0)))));
        let text = exposition(&registry);
        for line in [
            r#"grpc_server_handled_total{grpc_service="pkg.Svc",grpc_method="Do",grpc_code="Unauthenticated"} 1"#,
            r#"grpc_server_handled_total{grpc_service="pkg.Svc",grpc_method="Do",grpc_code="PermissionDenied"} 1"#,
            r#"grpc_server_handled_total{grpc_service="other",grpc_method="other",grpc_code="Canceled"} 1"#,
            r#"grpc_server_handled_total{grpc_service="pkg.Svc",grpc_method="Do",grpc_code="Canceled"} 1"#,
            r#"grpc_server_handling_seconds_count{grpc_service="pkg.Svc",grpc_method="Do"} 3"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    /// A body of one trailers frame carrying `grpc-status`.
    struct Trailing(Option<i32>);

    impl Body for Trailing {
        type Data = hyper::body::Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
            Poll::Ready(self.0.take().map(|code| {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", code.to_string().parse().unwrap());
                Ok(Frame::trailers(trailers))
            }))
        }
    }
}
