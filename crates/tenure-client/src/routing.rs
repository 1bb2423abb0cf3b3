//! Routing a request to the manager of its store: candidate endpoints, redirects and
//! lookup hints, retries with backoff within the configured bounds.

use crate::client::{Client, Conns, normalize};
use crate::error::Error;
use crate::proto::tenure_client::TenureClient;
use crate::{Chan, Result, proto, stream};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::debug;

impl Client {
    /// The endpoints to try for `store`, best first: a redirect's hint, the remembered
    /// manager, then every endpoint starting at one picked by the store; endpoints that
    /// recently did not answer go last. `rotate` moves the starting endpoint on (after a
    /// redirect chain that led nowhere).
    pub(crate) fn candidates(
        &self,
        store: u32,
        hint: Option<String>,
        rotate: usize,
    ) -> Vec<String> {
        let eps = self.endpoints();
        let mut out: Vec<String> = Vec::with_capacity(eps.len() + 2);
        let route = self.inner.routes.lock().unwrap().get(&store).cloned();
        // With no manager remembered, the one the lookup service names comes next.
        let published = route.is_none().then(|| self.lookup_hint(store)).flatten();
        for e in hint.into_iter().chain(route).chain(published) {
            if !out.contains(&e) {
                out.push(e);
            }
        }
        let n = eps.len().max(1);
        for i in 0..eps.len() {
            let e = &eps[(store as usize + rotate + i) % n];
            if !out.contains(e) {
                out.push(e.clone());
            }
        }
        let now = Instant::now();
        let mut slow = self.inner.slow.lock().unwrap();
        slow.retain(|_, until| *until > now);
        // Stable: the order above is kept within each group.
        out.sort_by_key(|e| slow.contains_key(e));
        out
    }

    /// The manager endpoint of `store` as the lookup service publishes it
    /// (`/tenure/stores/<n>`, mapped to an endpoint through `/tenure/devices/<id>`), if
    /// known. A miss asks the lookup again in the background, at most once a second;
    /// until the answer arrives callers go on without it (redirects still work).
    pub fn published_manager(&self, store: u32) -> Option<String> {
        self.lookup_hint(store)
    }

    /// See [`Client::published_manager`].
    pub(crate) fn lookup_hint(&self, store: u32) -> Option<String> {
        let mut g = self.inner.lookup_hints.lock().unwrap();
        if let Some(e) = g.0.get(&store) {
            return Some(e.clone());
        }
        let now = Instant::now();
        if g.1
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return None;
        }
        g.1 = Some(now);
        drop(g);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&self.inner);
            rt.spawn(async move {
                let Some(inner) = weak.upgrade() else { return };
                let c = Client { inner };
                if let Ok(map) = c.published_managers().await {
                    c.inner.lookup_hints.lock().unwrap().0 = map;
                }
            });
        }
        None
    }

    /// `/tenure/stores/*` and `/tenure/devices/*` from the lookup leader, as store →
    /// endpoint.
    async fn published_managers(&self) -> Result<HashMap<u32, String>> {
        let entries = self.list("/tenure").await?;
        let mut addrs = HashMap::new();
        let mut managers = Vec::new();
        for e in &entries {
            let value = String::from_utf8_lossy(&e.value);
            if let Some(id) = e.key.strip_prefix("/tenure/devices/") {
                if let Ok(id) = id.parse::<u64>() {
                    addrs.insert(id, normalize(value.into_owned()));
                }
            } else if let Some(s) = e.key.strip_prefix("/tenure/stores/")
                && let Ok(s) = s.parse::<u32>()
                && let Some((mgr, _)) = tenure_core::device::parse_store_entry(&e.value)
            {
                managers.push((s, mgr.0));
            }
        }
        let known = self.endpoints();
        Ok(managers
            .into_iter()
            .filter_map(|(s, d)| Some((s, addrs.get(&d)?.clone())))
            .filter(|(_, e)| known.contains(e))
            .collect())
    }

    /// `endpoint` did not answer in time: try it last for a while.
    pub(crate) fn pass_over(&self, endpoint: &str) {
        if endpoint.is_empty() {
            return;
        }
        let until = Instant::now() + self.inner.opts.pass_over;
        debug!(%endpoint, "passed over: no answer in time");
        self.inner
            .slow
            .lock()
            .unwrap()
            .insert(endpoint.to_string(), until);
    }

    /// The session stream of `store` (started on first use).
    pub(crate) fn link(&self, store: u32) -> Arc<stream::Link> {
        let mut links = self.inner.links.lock().unwrap();
        links
            .entry(store)
            .or_insert_with(|| Arc::new(stream::Link::spawn(self, store)))
            .clone()
    }

    /// The deadline of a request that should be answered promptly.
    pub(crate) fn quick_deadline(&self) -> Instant {
        Instant::now() + self.inner.opts.retry_deadline
    }

    /// Run one request against the manager of `store`: `call` issues the RPC on a channel
    /// and returns the protocol outcome; gRPC failures and retryable protocol errors move
    /// to the hinted or next endpoint, with backoff, within the configured bounds.
    pub async fn routed<T, F, Fut>(&self, store: u32, call: F) -> Result<T>
    where
        F: FnMut(TenureClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        let o = &self.inner.opts;
        let bounds = Bounds {
            per_call: o.request_timeout,
            deadline: Some(Instant::now() + o.retry_deadline),
            max_attempts: Some(o.max_attempts),
        };
        self.routed_with(store, bounds, call).await
    }

    /// [`Client::routed`] with explicit bounds. A call cut by `per_call` is retried on
    /// the same endpoint at once (a long wait continues); other failures move on.
    pub(crate) async fn routed_with<T, F, Fut>(
        &self,
        store: u32,
        bounds: Bounds,
        call: F,
    ) -> Result<T>
    where
        F: FnMut(TenureClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        self.routed_on(store, bounds, |c| c.tenure.clone(), call)
            .await
    }

    /// [`Client::routed_with`] on the object service of each endpoint's connection.
    pub(crate) async fn routed_objects<T, F, Fut>(
        &self,
        store: u32,
        bounds: Bounds,
        call: F,
    ) -> Result<T>
    where
        F: FnMut(proto::objects_client::ObjectsClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        self.routed_on(store, bounds, |c| c.objects.clone(), call)
            .await
    }

    /// [`Client::routed_with`] on the election service of each endpoint's connection.
    pub(crate) async fn routed_elections<T, F, Fut>(
        &self,
        store: u32,
        bounds: Bounds,
        call: F,
    ) -> Result<T>
    where
        F: FnMut(proto::elections_client::ElectionsClient<Chan>) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        self.routed_on(store, bounds, |c| c.elections.clone(), call)
            .await
    }

    /// The election service's client on `endpoint`'s connection.
    pub(crate) fn elections_channel(
        &self,
        endpoint: &str,
    ) -> Result<proto::elections_client::ElectionsClient<Chan>> {
        self.conns(endpoint).map(|c| c.elections)
    }

    /// The routing loop of [`Client::routed_with`] over the service `pick` takes from an
    /// endpoint's connections.
    async fn routed_on<S, T, F, Fut>(
        &self,
        store: u32,
        bounds: Bounds,
        pick: impl Fn(&Conns) -> S,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut(S) -> Fut,
        Fut: Future<Output = Result<Result<T>, tonic::Status>>,
    {
        let started = Instant::now();
        let o = &self.inner.opts;
        let mut backoff = o.backoff_min;
        let mut attempts = 0u32;
        let mut target = self.route(store, 0);
        let mut rotate = 0usize;
        let mut redirects = Redirects::default();
        loop {
            attempts += 1;
            let client = pick(&self.conns(&target)?);
            let mut cut = false;
            let err = match tokio::time::timeout(bounds.per_call, call(client)).await {
                Ok(Ok(Ok(v))) => {
                    self.inner.routes.lock().unwrap().insert(store, target);
                    return Ok(v);
                }
                Ok(Ok(Err(e))) => e,
                Ok(Err(s)) => Error::from_status(s),
                Err(_) => {
                    cut = true;
                    Error::Rpc(Box::new(tonic::Status::deadline_exceeded(format!(
                        "no answer within {:?}",
                        bounds.per_call
                    ))))
                }
            };
            if !err.retryable() {
                return Err(err);
            }
            let out_of_time = bounds.deadline.is_some_and(|d| Instant::now() >= d);
            if bounds.max_attempts.is_some_and(|m| attempts >= m) || out_of_time {
                return Err(Error::GaveUp {
                    attempts,
                    elapsed: started.elapsed(),
                    last: Box::new(err),
                });
            }
            debug!(store, %target, "retrying: {err}");
            if let Error::NotManager { hint, .. } = &err
                && let Some(next) = redirects.follow(hint.as_deref(), &target)
            {
                // A redirect: follow it at once.
                target = next;
                continue;
            }
            match &err {
                // A long call cut by its own bound: the endpoint answered nothing wrong.
                _ if cut => continue,
                // The right device, busy: the same one again after the pause.
                Error::Overloaded(_) => {}
                _ => {
                    redirects.reset();
                    self.clear_route(store);
                    rotate += 1;
                    target = self.route(store, rotate);
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(o.backoff_max);
        }
    }

    /// The endpoint to try for `store`: the remembered manager, the one the lookup
    /// service names, or the endpoints in turn.
    pub(crate) fn route(&self, store: u32, rotate: usize) -> String {
        if rotate == 0 {
            let route = self.inner.routes.lock().unwrap().get(&store).cloned();
            if let Some(e) = route.or_else(|| self.lookup_hint(store)) {
                return e;
            }
        }
        let eps = self.inner.endpoints.lock().unwrap();
        eps[(store as usize + rotate) % eps.len()].clone()
    }

    /// Remember that `endpoint` answered for `store` as its manager.
    pub(crate) fn set_route(&self, store: u32, endpoint: &str) {
        self.inner
            .routes
            .lock()
            .unwrap()
            .insert(store, endpoint.to_string());
    }

    /// Forget the manager of `store` (and the lookup's word on it, which may be as old).
    pub(crate) fn clear_route(&self, store: u32) {
        self.inner.routes.lock().unwrap().remove(&store);
        self.inner.lookup_hints.lock().unwrap().0.remove(&store);
    }
}

/// One RPC bounded by `limit`: its answer, its error, or "no answer to `what` in time".
pub(crate) async fn within<T>(
    limit: Duration,
    what: &str,
    rpc: impl Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(limit, rpc).await {
        Ok(r) => r.map(|r| r.into_inner()).map_err(Error::from_status),
        Err(_) => Err(Error::Rpc(Box::new(tonic::Status::deadline_exceeded(
            format!("no answer to {what} in time"),
        )))),
    }
}

/// Redirect hints followed in a row before the endpoints are tried in turn instead.
pub(crate) const MAX_REDIRECTS: u32 = 3;

/// The redirects a routing loop (a request's, or a keep-alive task's) has followed in a
/// row: stale hints can point at each other, so a chain longer than [`MAX_REDIRECTS`] is
/// left for the endpoints in turn.
#[derive(Debug, Default)]
pub(crate) struct Redirects(u32);

impl Redirects {
    /// Where to go after `target` answered `NotManager` with `hint`: the hint, unless
    /// there is none, it names `target` itself, or the chain is already as long as allowed
    /// (then `None`: try the endpoints in turn, and the count starts over).
    pub(crate) fn follow(&mut self, hint: Option<&str>, target: &str) -> Option<String> {
        match hint.map(|h| normalize(h.to_string())) {
            Some(h) if h != target && self.0 < MAX_REDIRECTS => {
                self.0 += 1;
                Some(h)
            }
            _ => {
                self.0 = 0;
                None
            }
        }
    }

    /// An answer or another failure ends the chain.
    pub(crate) fn reset(&mut self) {
        self.0 = 0;
    }
}

/// Retry bounds of one routed request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// One attempt.
    pub per_call: Duration,
    /// No new attempt after this.
    pub deadline: Option<Instant>,
    /// Most attempts.
    pub max_attempts: Option<u32>,
}
