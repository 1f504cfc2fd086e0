//! The simulated S3 storage: the `storage` host of a run with an S3
//! `--storage` serves an in-memory object store (`object_store`'s
//! [`InMemory`]), and each client reaches it through the simulator's
//! connections ([`SimObjects`]), so latency, lost messages and a client's
//! stall in flight strike its GETs and PUTs as they strike the table's
//! writes. The recipe over it is `lockcheck_workloads::s3`, the real
//! world's too.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use lockcheck_workloads::s3::{Object, ObjectTransport, Put, PutIf};
use lockcheck_workloads::{Outcome, Stall};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};
use turmoil::net::TcpListener;

use crate::host::{serve_requests, Connection, Knobs, PORT};
use crate::protocol::{Request, Response};
use crate::storage::STORAGE_HOST;

/// The software of the storage host of an S3 run: serves `objects`, which
/// outlive a restart (S3 keeps what it acknowledged).
pub(crate) async fn serve(
    objects: Arc<InMemory>,
    knobs: Rc<Knobs>,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (objects, knobs) = (objects.clone(), knobs.clone());
        tokio::task::spawn_local(async move {
            serve_requests(stream, &knobs, |request| answer(objects.clone(), request)).await
        });
    }
}

/// The store's answer to one request; `None` (the connection closes, the
/// client's call is unknown) for an error S3 would answer with a 5xx, or a
/// request that is not S3's.
async fn answer(objects: Arc<InMemory>, request: Request) -> Option<Response> {
    match request {
        Request::ObjectGet { key } => match objects.get(&Path::from(key)).await {
            Ok(result) => {
                let e_tag = result.meta.e_tag.clone().unwrap_or_default();
                let bytes = result.bytes().await.ok()?;
                let body = String::from_utf8_lossy(&bytes).into_owned();
                Some(Response::Object(Some((e_tag, body))))
            }
            Err(object_store::Error::NotFound { .. }) => Some(Response::Object(None)),
            Err(_) => None,
        },
        Request::ObjectPut { key, body, if_match, absent } => {
            let mode = match (if_match, absent) {
                (Some(e_tag), _) => {
                    PutMode::Update(UpdateVersion { e_tag: Some(e_tag), version: None })
                }
                (None, true) => PutMode::Create,
                (None, false) => PutMode::Overwrite,
            };
            let options = PutOptions { mode, ..PutOptions::default() };
            match objects.put_opts(&Path::from(key), PutPayload::from(body), options).await {
                Ok(_) => Some(Response::Put { done: true }),
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. }
                    | object_store::Error::NotFound { .. },
                ) => Some(Response::Put { done: false }),
                Err(_) => None,
            }
        }
        _ => None,
    }
}

/// One client's connection to the simulated S3 storage.
#[derive(Debug)]
pub struct SimObjects {
    connection: Connection,
}

impl SimObjects {
    /// A connection whose every request ends within `deadline`, stalling
    /// in flight when the client's pause asks for it.
    pub(crate) fn new(deadline: Duration, stall: &Stall) -> SimObjects {
        SimObjects { connection: Connection::new(STORAGE_HOST, deadline).stalling(stall) }
    }
}

impl ObjectTransport for SimObjects {
    async fn get(&mut self, key: &str) -> Outcome<Option<Object>> {
        match self.connection.call(&Request::ObjectGet { key: key.into() }).await {
            Ok(Response::Object(object)) => {
                Outcome::Ok(object.map(|(e_tag, body)| Object { e_tag, body }))
            }
            Ok(_) => Outcome::Info("bad-reply".into()),
            Err(failure) => failure.outcome(),
        }
    }

    async fn put(&mut self, key: &str, body: &str, condition: PutIf) -> Outcome<Put> {
        let (if_match, absent) = match condition {
            PutIf::Any => (None, false),
            PutIf::Matches(e_tag) => (Some(e_tag), false),
            PutIf::Absent => (None, true),
        };
        let request = Request::ObjectPut { key: key.into(), body: body.into(), if_match, absent };
        match self.connection.call(&request).await {
            Ok(Response::Put { done: true }) => Outcome::Ok(Put::Done),
            Ok(Response::Put { done: false }) => Outcome::Ok(Put::Refused),
            Ok(_) => Outcome::Info("bad-reply".into()),
            Err(failure) => failure.outcome(),
        }
    }

    /// Drops the connection: the next request reconnects.
    async fn reset(&mut self) {
        self.connection.reset();
    }
}
