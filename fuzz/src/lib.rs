//! Shared pieces of the fuzz targets: splitting one input into pieces (to check that
//! incremental decoders do not depend on how the bytes arrive), and an in-process HTTP
//! driver that runs a node's axum router on arbitrary requests without a network.

use arbitrary::Arbitrary;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use meridian_server::NodeConfig;
use meridian_server::state::NodeState;
use std::cell::RefCell;
use std::sync::Arc;
use tower::ServiceExt;

/// Splits `data` at the (sorted, clamped) `cuts`: the pieces a stream might arrive in.
pub fn pieces<'a>(data: &'a [u8], cuts: &[u16]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|&c| usize::from(c) % (data.len() + 1))
        .collect();
    at.sort_unstable();
    let mut out = Vec::with_capacity(at.len() + 1);
    let mut prev = 0;
    for c in at {
        out.push(&data[prev..c]);
        prev = c;
    }
    out.push(&data[prev..]);
    out
}

/// Header names and values, as a fuzz input or a driver adds them.
pub type Headers = Vec<(String, Vec<u8>)>;

/// An HTTP method: mostly the ones the APIs route, sometimes anything.
#[derive(Debug, Arbitrary)]
pub enum FuzzMethod {
    /// GET
    Get,
    /// HEAD
    Head,
    /// PUT
    Put,
    /// POST
    Post,
    /// DELETE
    Delete,
    /// A method by name (possibly invalid, then the request is skipped).
    Other(String),
}

impl FuzzMethod {
    /// The method's name.
    pub fn as_str(&self) -> &str {
        match self {
            FuzzMethod::Get => "GET",
            FuzzMethod::Head => "HEAD",
            FuzzMethod::Put => "PUT",
            FuzzMethod::Post => "POST",
            FuzzMethod::Delete => "DELETE",
            FuzzMethod::Other(m) => m,
        }
    }
}

/// One arbitrary request, as the HTTP layer would hand it to the router.
#[derive(Debug, Arbitrary)]
pub struct FuzzRequest {
    /// The method.
    pub method: FuzzMethod,
    /// The raw path (a `/` is put in front when missing).
    pub path: String,
    /// The raw query, without its `?`.
    pub query: Option<String>,
    /// Header names and values (invalid ones are left out, as hyper would refuse them).
    pub headers: Headers,
    /// The body.
    pub body: Vec<u8>,
}

impl FuzzRequest {
    /// The path and query as they would appear in the request line.
    pub fn path_and_query(&self) -> String {
        let mut uri = String::new();
        if !self.path.starts_with('/') {
            uri.push('/');
        }
        uri.push_str(&self.path);
        if let Some(q) = &self.query {
            uri.push('?');
            uri.push_str(q);
        }
        uri
    }

    /// The request, or `None` when its method or URI could not be sent over HTTP/1.1 at
    /// all (hyper refuses those before any router sees them).
    pub fn build(&self, extra: &[(String, Vec<u8>)], body: Vec<u8>) -> Option<Request<Body>> {
        let mut b = Request::builder()
            .method(self.method.as_str())
            .uri(self.path_and_query());
        for (n, v) in self.headers.iter().chain(extra) {
            if axum::http::HeaderName::try_from(n.as_str()).is_ok()
                && axum::http::HeaderValue::from_bytes(v).is_ok()
            {
                b = b.header(n.as_str(), v.as_slice());
            }
        }
        b.body(Body::from(body)).ok()
    }
}

/// A node in memory and a router over it, run on a current-thread runtime.
pub struct Driver {
    rt: tokio::runtime::Runtime,
    /// The node the router serves.
    pub node: Arc<NodeState>,
    router: Router,
}

/// The bearer token (`resp.requirepass`) of the driver's node.
pub const PASSWORD: &str = "fuzz-password";
/// The S3 access key of the driver's node.
pub const ACCESS_KEY: &str = "fuzzkey";
/// The S3 secret of the driver's node.
pub const SECRET: &str = "fuzz-secret";

impl Driver {
    /// A fresh in-memory node (password, an S3 key, S3 open to anonymous requests too), and
    /// the router `make` builds over it.
    pub fn new(make: impl FnOnce(Arc<NodeState>) -> Router) -> Driver {
        let mut config = NodeConfig::default();
        config.resp.requirepass = Some(PASSWORD.into());
        config.s3.keys = vec![format!("{ACCESS_KEY}:{SECRET}")];
        config.s3.open = true;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let node = rt.block_on(async { NodeState::open(config).expect("node") });
        let router = rt.block_on(async { make(node.clone()) });
        Driver { rt, node, router }
    }

    /// Runs `req` through the router and reads the whole response.
    pub fn send(&self, req: Request<Body>) -> (StatusCode, axum::body::Bytes) {
        self.rt.block_on(async {
            let resp = self.router.clone().oneshot(req).await.expect("infallible");
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap_or_default();
            (status, body)
        })
    }
}

/// Requests one node serves before the next input gets a fresh one: what the fuzzer stores
/// (keys, objects, buckets) would otherwise pile up over a long run, and a finding should
/// depend on as little earlier input as possible.
const REQUESTS_PER_NODE: usize = 1000;

thread_local! {
    static DRIVER: RefCell<Option<(Driver, usize)>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's driver over a router `make` builds (a fresh node every
/// [`REQUESTS_PER_NODE`] calls).
pub fn with_driver<T>(make: fn(Arc<NodeState>) -> Router, f: impl FnOnce(&Driver) -> T) -> T {
    DRIVER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot
            .as_ref()
            .is_none_or(|(_, uses)| *uses >= REQUESTS_PER_NODE)
        {
            *slot = Some((Driver::new(make), 0));
        }
        let (driver, uses) = slot.as_mut().expect("just set");
        *uses += 1;
        f(driver)
    })
}
