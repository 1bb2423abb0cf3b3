//! Opening a session stream to a store's manager, following redirects, within the
//! client's bounds.

use super::Conn;
use super::task::redirect_hint;
use super::{Ev, Rq};
use crate::proto;
use crate::{Client, Error, Result, normalize};
use futures::stream::{FuturesUnordered, StreamExt};
use std::time::Duration;
use tokio::sync::mpsc;

/// Why one connect attempt did not give a stream.
#[derive(Debug)]
pub(super) enum Refused {
    Redirect(Option<String>),
    Expired,
    Stuck(Error),
    Other(Error),
}

/// Race the endpoints for a started stream to the manager of `store` (see the module
/// docs): the first that starts one wins; redirects are followed at once; an endpoint
/// silent for `attempt_timeout` is passed over.
pub(crate) async fn connect(
    client: &Client,
    store: u32,
    resume: Option<u64>,
    hint: Option<String>,
    rotate: usize,
    start_id: u64,
) -> Result<(Conn, proto::StreamStarted)> {
    let o = client.inner.opts.clone();
    let mut candidates = client.candidates(store, hint, rotate);
    candidates.reverse();
    let mut tried: Vec<String> = Vec::new();
    let mut attempts = FuturesUnordered::new();
    let mut last = Error::NoEndpoints;
    let launch = |ep: String, attempts: &mut FuturesUnordered<_>, tried: &mut Vec<String>| {
        tried.push(ep.clone());
        let start = proto::SessionRequest {
            request_id: start_id,
            kind: Some(Rq::Start(proto::StreamStart {
                store,
                resume,
                client_name: o.client_name.clone(),
            })),
        };
        let channel = client.channel(&ep);
        let limit = o.attempt_timeout;
        attempts.push(async move {
            let r = match channel {
                Ok(c) => attempt(c, &ep, start, start_id, limit).await,
                Err(e) => Err(Refused::Other(e)),
            };
            (ep, r)
        });
    };
    let mut redirects = 0;
    let mut hedge = tokio::time::Instant::now() + o.hedge_after;
    if let Some(ep) = candidates.pop() {
        launch(ep, &mut attempts, &mut tried);
    }
    loop {
        if attempts.is_empty() {
            match candidates.pop() {
                Some(ep) => {
                    launch(ep, &mut attempts, &mut tried);
                    hedge = tokio::time::Instant::now() + o.hedge_after;
                }
                None => return Err(last),
            }
        }
        tokio::select! {
            Some((ep, r)) = attempts.next() => match r {
                Ok(x) => {
                    client.set_route(store, &ep);
                    return Ok(x);
                }
                Err(Refused::Expired) => return Err(Error::SessionExpired(resume.unwrap_or(0))),
                Err(Refused::Redirect(h)) => {
                    last = Error::NotManager { store, hint: h.clone() };
                    if let Some(h) = h.map(normalize)
                        && redirects < crate::MAX_REDIRECTS
                        && !tried.contains(&h)
                    {
                        redirects += 1;
                        candidates.retain(|c| *c != h);
                        launch(h, &mut attempts, &mut tried);
                        hedge = tokio::time::Instant::now() + o.hedge_after;
                    }
                }
                Err(Refused::Stuck(e)) => {
                    client.pass_over(&ep);
                    last = e;
                }
                Err(Refused::Other(e)) if !e.retryable() && !e.transient_rpc() => {
                    // The request itself is wrong (an unknown store): no device will take it.
                    return Err(e);
                }
                Err(Refused::Other(e)) => last = e,
            },
            _ = tokio::time::sleep_until(hedge), if !candidates.is_empty() => {
                if let Some(ep) = candidates.pop() {
                    launch(ep, &mut attempts, &mut tried);
                }
                hedge = tokio::time::Instant::now() + o.hedge_after;
            }
        }
    }
}

/// One attempt: open the stream on `channel`, send `start`, wait for its answer.
pub(super) async fn attempt(
    mut channel: crate::proto::tenure_client::TenureClient<crate::Chan>,
    endpoint: &str,
    start: proto::SessionRequest,
    start_id: u64,
    limit: Duration,
) -> std::result::Result<(Conn, proto::StreamStarted), Refused> {
    let run = async {
        let (tx, rx) = mpsc::channel(crate::stream::OUTBOX);
        tx.send(start).await.map_err(|_| {
            Refused::Other(Error::Rpc(Box::new(tonic::Status::cancelled(
                "stream closed",
            ))))
        })?;
        let mut events = channel
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .map_err(|s| Refused::Other(Error::from_status(s)))?
            .into_inner();
        loop {
            let ev = events
                .message()
                .await
                .map_err(|s| Refused::Other(Error::from_status(s)))?
                .ok_or_else(|| {
                    Refused::Other(Error::Rpc(Box::new(tonic::Status::unavailable(
                        "the stream ended before it started",
                    ))))
                })?;
            match ev.kind {
                Some(Ev::Started(s)) if ev.request_id == start_id => {
                    let conn = Conn {
                        endpoint: endpoint.to_string(),
                        tx,
                        rx: events,
                        max_in_flight: (s.max_in_flight as usize).max(1),
                        in_flight: 0,
                    };
                    return Ok((conn, s));
                }
                Some(Ev::Error(e)) if ev.request_id == start_id => {
                    return Err(match Error::from_proto(e) {
                        Error::NotManager { hint, .. } => Refused::Redirect(hint),
                        Error::SessionExpired(_) => Refused::Expired,
                        e => Refused::Other(e),
                    });
                }
                Some(Ev::Redirect(r)) => return Err(Refused::Redirect(redirect_hint(r))),
                Some(Ev::StreamClosed(c)) => {
                    return Err(Refused::Other(Error::Rpc(Box::new(
                        tonic::Status::unavailable(c.reason),
                    ))));
                }
                _ => {}
            }
        }
    };
    match tokio::time::timeout(limit, run).await {
        Ok(r) => r,
        Err(_) => Err(Refused::Stuck(Error::Rpc(Box::new(
            tonic::Status::deadline_exceeded(format!("{endpoint} did not answer within {limit:?}")),
        )))),
    }
}
