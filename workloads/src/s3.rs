//! The S3 storages' recipe, written once for both worlds over a transport
//! of GETs and PUTs ([`ObjectTransport`]): the simulator's reaches an
//! in-memory object store on a simulated host, the real world's an S3
//! server. [`S3Store`] is the [`ResourceStore`] of every S3
//! [`StorageKind`] (docs/storage.md):
//!
//! * `s3-put` and `s3-cas` keep one object per resource whose body is
//!   `VERSION DATA`: a write reads the object and writes it back one
//!   version up, with its own data. `s3-put` writes back with a plain PUT,
//!   `s3-cas` only if the ETag is still the one it read (`If-Match`; or,
//!   for an object not there yet, `If-None-Match: *`), reading again on a
//!   refusal. Two writes that made the same version are a lost update.
//! * `s3-create` creates the resource's object with the write's data, only
//!   if it is absent: a unit of work's effect happens once.

use crate::{Outcome, ResourceStore, StorageKind};

/// How many times an `s3-cas` write reads and tries again after a refused
/// PUT before it gives up (`Fail("contended")`).
pub const CAS_ATTEMPTS: u32 = 8;

/// An object as a GET returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub e_tag: String,
    pub body: String,
}

/// What a PUT asks of the object it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutIf {
    /// Nothing: the last writer wins.
    Any,
    /// `If-Match`: the object still has this ETag.
    Matches(String),
    /// `If-None-Match: *`: there is no object yet.
    Absent,
}

/// How a PUT the storage answered ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    Done,
    /// 412: its condition did not hold, and nothing was written.
    Refused,
}

/// GETs and PUTs of objects, each ending within the transport's deadline:
/// `Fail` if the request certainly did nothing, `Info` if unknown.
#[allow(async_fn_in_trait)]
pub trait ObjectTransport {
    /// The object, or `None` if there is none (404).
    async fn get(&mut self, key: &str) -> Outcome<Option<Object>>;
    async fn put(&mut self, key: &str, body: &str, condition: PutIf) -> Outcome<Put>;
    /// Starts a new session after an `Info`.
    async fn reset(&mut self) {}
}

/// One client's S3 storage of one kind.
#[derive(Debug)]
pub struct S3Store<T> {
    kind: StorageKind,
    transport: T,
}

impl<T: ObjectTransport> S3Store<T> {
    /// `kind` is one of the S3 kinds.
    pub fn new(kind: StorageKind, transport: T) -> S3Store<T> {
        debug_assert!(kind.is_s3());
        S3Store { kind, transport }
    }
}

/// A versioned body: `VERSION DATA`.
fn body(version: u64, data: &str) -> String {
    format!("{version} {data}")
}

/// The version and data of a versioned body; a body of another form is
/// version 0, all data.
fn parse(body: &str) -> (u64, &str) {
    match body.split_once(' ').map(|(version, data)| (version.parse::<u64>(), data)) {
        Some((Ok(version), data)) => (version, data),
        _ => (0, body),
    }
}

/// A GET that did not answer: nothing was written.
fn unread<T>(error: String) -> Outcome<T> {
    Outcome::Fail(format!("read-{error}"))
}

impl<T: ObjectTransport> S3Store<T> {
    /// Reads the object and writes it back one version up, with `data`:
    /// on the ETag read when `conditional`, else whatever is there.
    async fn update(&mut self, resource: &str, data: &str, conditional: bool) -> Outcome<u64> {
        let attempts = if conditional { CAS_ATTEMPTS } else { 1 };
        for _ in 0..attempts {
            let (version, condition) = match self.transport.get(resource).await {
                Outcome::Ok(Some(object)) => (parse(&object.body).0, PutIf::Matches(object.e_tag)),
                Outcome::Ok(None) => (0, PutIf::Absent),
                Outcome::Fail(error) | Outcome::Info(error) => return unread(error),
            };
            let condition = if conditional { condition } else { PutIf::Any };
            let next = version + 1;
            match self.transport.put(resource, &body(next, data), condition).await {
                Outcome::Ok(Put::Done) => return Outcome::Ok(next),
                // Someone wrote in between: read again.
                Outcome::Ok(Put::Refused) if conditional => continue,
                Outcome::Ok(Put::Refused) => return Outcome::Fail("refused".into()),
                Outcome::Fail(error) => return Outcome::Fail(error),
                Outcome::Info(error) => return Outcome::Info(error),
            }
        }
        Outcome::Fail("contended".into())
    }
}

/// S3 takes no fencing token: a write's token, if any, is not sent.
impl<T: ObjectTransport> ResourceStore for S3Store<T> {
    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()> {
        self.write_versioned(resource, fence, data).await.map_unit()
    }

    async fn write_versioned(
        &mut self,
        resource: &str,
        _fence: Option<u64>,
        data: &str,
    ) -> Outcome<Option<u64>> {
        let outcome = match self.kind {
            StorageKind::S3Create => {
                return match self.transport.put(resource, data, PutIf::Absent).await {
                    Outcome::Ok(Put::Done) => Outcome::Ok(None),
                    Outcome::Ok(Put::Refused) => Outcome::Fail("exists".into()),
                    Outcome::Fail(error) => Outcome::Fail(error),
                    Outcome::Info(error) => Outcome::Info(error),
                };
            }
            StorageKind::S3Cas => self.update(resource, data, true).await,
            StorageKind::S3Put | StorageKind::Table => self.update(resource, data, false).await,
        };
        outcome.map(Some)
    }

    /// The object's data: no token (S3 keeps none).
    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)> {
        match self.transport.get(resource).await {
            Outcome::Ok(None) => Outcome::Ok((None, None)),
            Outcome::Ok(Some(object)) => {
                let data = match self.kind {
                    StorageKind::S3Create => object.body,
                    _ => parse(&object.body).1.to_string(),
                };
                Outcome::Ok((None, Some(data)))
            }
            Outcome::Fail(error) => Outcome::Fail(error),
            Outcome::Info(error) => Outcome::Info(error),
        }
    }

    async fn reset(&mut self) {
        self.transport.reset().await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Objects in a map, ETags from a counter; `writes_between` writes
    /// land between each GET and the PUT after it (another client).
    #[derive(Debug, Default)]
    struct Objects {
        objects: BTreeMap<String, Object>,
        next_tag: u64,
        writes_between: u32,
    }

    impl Objects {
        fn store(&mut self, key: &str, body: String) {
            self.next_tag += 1;
            self.objects.insert(key.into(), Object { e_tag: self.next_tag.to_string(), body });
        }
    }

    impl ObjectTransport for Objects {
        async fn get(&mut self, key: &str) -> Outcome<Option<Object>> {
            let object = self.objects.get(key).cloned();
            if self.writes_between > 0 {
                self.writes_between -= 1;
                let (version, _) = object.as_ref().map_or((0, ""), |object| parse(&object.body));
                self.store(key, body(version + 1, "other"));
            }
            Outcome::Ok(object)
        }

        async fn put(&mut self, key: &str, new: &str, condition: PutIf) -> Outcome<Put> {
            let holds = match (&condition, self.objects.get(key)) {
                (PutIf::Any, _) | (PutIf::Absent, None) => true,
                (PutIf::Matches(tag), Some(object)) => *tag == object.e_tag,
                _ => false,
            };
            if !holds {
                return Outcome::Ok(Put::Refused);
            }
            self.store(key, new.to_string());
            Outcome::Ok(Put::Done)
        }
    }

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
    }

    #[test]
    fn a_plain_put_overwrites_the_update_it_did_not_read() {
        let transport = Objects { writes_between: 1, ..Objects::default() };
        let mut store = S3Store::new(StorageKind::S3Put, transport);
        // The other write made version 1; this one read nothing and made
        // version 1 again: the other's update is lost.
        assert_eq!(run(store.write_versioned("r", None, "mine")), Outcome::Ok(Some(1)));
        assert_eq!(run(store.read("r")), Outcome::Ok((None, Some("mine".into()))));
    }

    #[test]
    fn a_conditional_put_reads_again_and_loses_nothing() {
        let transport = Objects { writes_between: 2, ..Objects::default() };
        let mut store = S3Store::new(StorageKind::S3Cas, transport);
        // Two writes landed in between: the third try made version 3.
        assert_eq!(run(store.write_versioned("r", None, "mine")), Outcome::Ok(Some(3)));
        let transport = Objects { writes_between: CAS_ATTEMPTS, ..Objects::default() };
        let mut store = S3Store::new(StorageKind::S3Cas, transport);
        assert_eq!(run(store.write("r", None, "mine")), Outcome::Fail("contended".into()));
    }

    #[test]
    fn a_create_happens_once() {
        let mut store = S3Store::new(StorageKind::S3Create, Objects::default());
        assert_eq!(run(store.write("r:day-1", Some(3), "a")), Outcome::Ok(()));
        assert_eq!(run(store.write("r:day-1", Some(4), "b")), Outcome::Fail("exists".into()));
        assert_eq!(run(store.read("r:day-1")), Outcome::Ok((None, Some("a".into()))));
    }
}
