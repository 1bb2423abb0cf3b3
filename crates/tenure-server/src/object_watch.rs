//! `Objects.Watch`: an object watch as a plain server-streaming call (DESIGN §5, §8).
//!
//! The call registers a watch with this device (which serves it as the store's manager,
//! or carries it there by polls), answers `watching`, then relays the changes. When the
//! watch ends here with `NotManager` or `Unavailable` (the store's manager changed, or is
//! being replaced) it is registered again after the last revision sent, so the caller
//! sees one unbroken stream in revision order; only an end the caller must act on
//! (`Compacted`, an invalid prefix) reaches it, as the stream's last message. The watch
//! is removed when the caller goes away.

use crate::driver::routes::WatchMsg;
use crate::grpc::Api;
use std::pin::Pin;
use std::time::Duration;
use tenure_client::proto;
use tenure_core::error::ClientError;
use tenure_core::ids::{ClientId, StoreId};
use tenure_core::io::{ObjectRequest, Request, Response};
use tokio::sync::mpsc;
use tonic::Status;

/// The stream of a `Watch` call.
pub type WatchStream =
    Pin<Box<dyn futures::Stream<Item = Result<proto::WatchObjectsResponse, Status>> + Send>>;

/// Messages buffered for a slow caller before the relay waits for it.
const BUFFER: usize = 64;

/// The longest pause before registering a watch again while no manager serves it.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the call asked.
pub struct Ask {
    /// The store of the prefix.
    pub store: StoreId,
    /// The prefix.
    pub prefix: String,
    /// Changes after this revision (none: from now).
    pub after: Option<u64>,
    /// Carry values.
    pub values: bool,
}

/// Start relaying the watch `ask` for a caller; its stream.
pub fn start(api: Api, ask: Ask) -> WatchStream {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let client = api.watches().new_client();
        let mut relay = Relay {
            api,
            ask,
            client,
            tx,
            started: false,
        };
        let end = relay.run().await;
        if let Some(m) = end {
            let _ = relay.tx.send(m).await;
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

struct Relay {
    api: Api,
    ask: Ask,
    client: ClientId,
    tx: mpsc::Sender<Result<proto::WatchObjectsResponse, Status>>,
    started: bool,
}

/// Whether a watch that ended (or was refused) for `e` is registered again.
fn resumable(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::NotManager { .. } | ClientError::Unavailable { .. }
    )
}

fn message(kind: proto::watch_objects_response::Kind) -> proto::WatchObjectsResponse {
    proto::WatchObjectsResponse { kind: Some(kind) }
}

impl Relay {
    /// Relay until the caller goes away or the watch cannot go on; the last message to
    /// send, if any.
    async fn run(&mut self) -> Option<Result<proto::WatchObjectsResponse, Status>> {
        use proto::watch_objects_response::Kind;
        let mut attempt = 0u64;
        let mut backoff = Duration::from_millis(50);
        loop {
            attempt += 1;
            let (events_tx, mut events) = mpsc::unbounded_channel();
            let routes = self.api.watches();
            routes.register(self.client, attempt, self.ask.store, events_tx);
            let req = Request::Object {
                store: self.ask.store,
                req: ObjectRequest::Watch {
                    watch: attempt,
                    prefix: self.ask.prefix.clone(),
                    after: self.ask.after,
                    values: self.ask.values,
                },
            };
            let answer = tokio::select! {
                a = self.api.request_as(self.client, req) => a,
                _ = self.tx.closed() => return self.stop(attempt),
            };
            let end = match answer {
                Ok(Ok(Response::Watching { revision })) => {
                    backoff = Duration::from_millis(50);
                    if self.ask.after.is_none() {
                        self.ask.after = Some(revision);
                    }
                    if !self.started {
                        self.started = true;
                        let w = proto::Watching { watch: 0, revision };
                        if self.tx.send(Ok(message(Kind::Watching(w)))).await.is_err() {
                            return self.stop(attempt);
                        }
                    }
                    self.pump(attempt, &mut events).await
                }
                Ok(Ok(other)) => Err(Some(Err(crate::grpc::unexpected("a watch", &other)))),
                Ok(Err(e)) if resumable(&e) => Ok(()),
                Ok(Err(e)) => Err(Some(Ok(self.error(&e)))),
                // No answer in time (the store's manager is changing, or the device is
                // busy): the watch may be registered or not; it is removed and asked
                // again, after the last revision relayed, on the same stream.
                Err(status) if status.code() == tonic::Code::DeadlineExceeded => {
                    self.forget(attempt);
                    Ok(())
                }
                Err(status) => Err(Some(Err(status))),
            };
            self.api.watches().unregister(self.client, attempt);
            match end {
                Ok(()) => {
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = self.tx.closed() => return self.stop(attempt),
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(last) => {
                    self.stop(attempt);
                    return last;
                }
            }
        }
    }

    /// Relay the changes of watch `attempt`: `Ok` when it ended in a way that is
    /// resumed, `Err` with the last message (if any) when the relay stops.
    async fn pump(
        &mut self,
        attempt: u64,
        events: &mut mpsc::UnboundedReceiver<(u64, WatchMsg)>,
    ) -> Result<(), Option<Result<proto::WatchObjectsResponse, Status>>> {
        use proto::watch_objects_response::Kind;
        loop {
            let msg = tokio::select! {
                m = events.recv() => m,
                _ = self.tx.closed() => return Err(None),
            };
            let Some((watch, msg)) = msg else {
                return Err(Some(Err(Status::unavailable(
                    "the device is shutting down",
                ))));
            };
            if watch != attempt {
                continue;
            }
            match msg {
                WatchMsg::Events { changes, values } => {
                    let Some(last) = changes.last().map(|c| c.revision) else {
                        continue;
                    };
                    self.ask.after = Some(last);
                    let ev = proto::ObjectEvents {
                        watch: 0,
                        changes: crate::objects::changes_to_proto(&changes, values),
                    };
                    metrics::counter!("tenure_object_watch_events_total").increment(1);
                    if self.tx.send(Ok(message(Kind::Events(ev)))).await.is_err() {
                        return Err(None);
                    }
                }
                WatchMsg::Ended(reason) if resumable(&reason) => return Ok(()),
                WatchMsg::Ended(reason) => return Err(Some(Ok(self.error(&reason)))),
            }
        }
    }

    fn error(&self, e: &ClientError) -> proto::WatchObjectsResponse {
        use proto::watch_objects_response::Kind;
        let mut err = self.api.client_error(self.ask.store, e);
        if let Some(proto::error::Kind::InvalidName(n)) = &mut err.kind
            && n.name.is_empty()
        {
            n.name = self.ask.prefix.clone();
        }
        message(Kind::Error(err))
    }

    /// The caller went away or the relay ends: remove watch `attempt` from the device
    /// (in the background).
    fn stop(&self, attempt: u64) -> Option<Result<proto::WatchObjectsResponse, Status>> {
        self.forget(attempt);
        None
    }

    /// Remove watch `attempt` from the device (in the background).
    fn forget(&self, attempt: u64) {
        self.api.watches().unregister(self.client, attempt);
        let api = self.api.clone();
        let (client, store) = (self.client, self.ask.store);
        tokio::spawn(async move {
            let req = Request::Object {
                store,
                req: ObjectRequest::Unwatch { watch: attempt },
            };
            let _ = api.request_as(client, req).await;
        });
    }
}
