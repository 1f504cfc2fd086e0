//! The real S3 storage: an `object_store` [`AmazonS3`] client against an S3
//! server (moto's, which lockcheck starts: `servers/moto.rs`), the transport
//! ([`S3Objects`]) of the recipe both worlds share
//! (`lockcheck_workloads::s3`). A run with an S3 `--storage` gives each
//! client a storage URL that names its kind, the endpoint and the bucket,
//! `s3-cas+http://127.0.0.1:PORT/BUCKET` ([`storage_url`]); any other
//! storage URL is PostgreSQL's table ([`Storage`]). [`Resources`] is
//! whichever of the two a client's URL names.
//!
//! The client retries nothing itself: a conditional PUT retried after a
//! lost reply could be refused by its own first attempt, and the recipe
//! must see each attempt's outcome. No fencing token reaches S3.

use std::time::Duration;

use lockcheck_workloads::s3::{Object, ObjectTransport, Put, PutIf, S3Store};
use lockcheck_workloads::{Outcome, ResourceStore, StorageKind};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{
    ClientOptions, ObjectStore, PutMode, PutOptions, PutPayload, RetryConfig, UpdateVersion,
};

use crate::storage::Storage;
use crate::{ClientConfig, RealError};

/// The bucket of a run's resources.
pub const BUCKET: &str = "lockcheck-resources";

/// How long setting up (the bucket, clearing objects) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The storage URL of `kind` on the S3 server at `endpoint`:
/// `s3-cas+http://127.0.0.1:PORT/BUCKET`.
pub fn storage_url(kind: StorageKind, endpoint: &str, bucket: &str) -> String {
    format!("{}+{endpoint}/{bucket}", kind.name())
}

/// The S3 kind, endpoint and bucket of a storage URL, if it names one.
fn parse_url(url: &str) -> Option<(StorageKind, &str, &str)> {
    let (kind, rest) = url.split_once('+')?;
    let kind = StorageKind::parse(kind).filter(|kind| kind.is_s3())?;
    let scheme_end = rest.find("://")? + 3;
    let (endpoint, bucket) = rest[scheme_end..]
        .split_once('/')
        .map(|(host, bucket)| (&rest[..scheme_end + host.len()], bucket))?;
    (!bucket.is_empty()).then_some((kind, endpoint, bucket))
}

fn setup_error(reason: impl ToString) -> RealError {
    RealError::Setup {
        what: "the S3 bucket of the protected resources",
        reason: reason.to_string(),
    }
}

/// A client of `bucket` at `endpoint` whose requests each end within
/// `deadline`, and are never retried.
fn client(endpoint: &str, bucket: &str, deadline: Duration) -> Result<AmazonS3, RealError> {
    let retry = RetryConfig { max_retries: 0, retry_timeout: deadline, ..RetryConfig::default() };
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        // moto takes any key; the signature is computed but not checked.
        .with_access_key_id("lockcheck")
        .with_secret_access_key("lockcheck")
        .with_retry(retry)
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(deadline)
                .with_connect_timeout(deadline),
        )
        .build()
        .map_err(|error| RealError::Connect {
            what: "S3",
            url: format!("{endpoint}/{bucket}"),
            reason: error.to_string(),
        })
}

/// Deletes the objects of `resources`, and of their per-unit resources
/// (`report:day-3` of `report`), so a test starts from empty resources.
/// The bucket must exist (on moto's server: [`crate::moto::create_bucket`]).
pub async fn prepare(endpoint: &str, bucket: &str, resources: &[String]) -> Result<(), RealError> {
    use futures_util::StreamExt;
    let store = client(endpoint, bucket, SETUP_TIMEOUT)?;
    let work = async {
        let listed: Vec<_> = store.list(None).collect().await;
        for meta in listed {
            let meta = meta.map_err(setup_error)?;
            let name = meta.location.to_string();
            let ours = resources.iter().any(|resource| {
                name == *resource
                    || name
                        .strip_prefix(resource.as_str())
                        .is_some_and(|rest| rest.starts_with(':'))
            });
            if ours {
                store.delete(&meta.location).await.map_err(setup_error)?;
            }
        }
        Ok(())
    };
    tokio::time::timeout(SETUP_TIMEOUT, work)
        .await
        .map_err(|_| setup_error(format!("no answer within {SETUP_TIMEOUT:?}")))?
}

/// One client's GETs and PUTs against an S3 server.
#[derive(Debug)]
pub struct S3Objects {
    store: AmazonS3,
    deadline: Duration,
}

impl S3Objects {
    pub fn connect(
        endpoint: &str,
        bucket: &str,
        deadline: Duration,
    ) -> Result<S3Objects, RealError> {
        Ok(S3Objects { store: client(endpoint, bucket, deadline)?, deadline })
    }
}

impl ObjectTransport for S3Objects {
    async fn get(&mut self, key: &str) -> Outcome<Option<Object>> {
        let read = async {
            let result = self.store.get(&Path::from(key)).await?;
            let e_tag = result.meta.e_tag.clone().unwrap_or_default();
            let bytes = result.bytes().await?;
            Ok::<_, object_store::Error>(Object {
                e_tag,
                body: String::from_utf8_lossy(&bytes).into_owned(),
            })
        };
        match tokio::time::timeout(self.deadline, read).await {
            Ok(Ok(object)) => Outcome::Ok(Some(object)),
            Ok(Err(object_store::Error::NotFound { .. })) => Outcome::Ok(None),
            Ok(Err(_)) => Outcome::Info("s3-error".into()),
            Err(_) => Outcome::Info("timeout".into()),
        }
    }

    async fn put(&mut self, key: &str, body: &str, condition: PutIf) -> Outcome<Put> {
        let mode = match condition {
            PutIf::Any => PutMode::Overwrite,
            PutIf::Matches(e_tag) => {
                PutMode::Update(UpdateVersion { e_tag: Some(e_tag), version: None })
            }
            PutIf::Absent => PutMode::Create,
        };
        let options = PutOptions { mode, ..PutOptions::default() };
        let payload = PutPayload::from(body.to_string());
        let path = Path::from(key);
        let put = self.store.put_opts(&path, payload, options);
        match tokio::time::timeout(self.deadline, put).await {
            Ok(Ok(_)) => Outcome::Ok(Put::Done),
            // 412, or a 409 for a concurrent conditional PUT: not written.
            Ok(Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            )) => Outcome::Ok(Put::Refused),
            // Anything else (a reset connection, a 5xx) leaves it unknown.
            Ok(Err(_)) => Outcome::Info("s3-error".into()),
            Err(_) => Outcome::Info("timeout".into()),
        }
    }
}

/// A client's protected resources: PostgreSQL's table, or S3 objects, as
/// its storage URL says.
#[derive(Debug)]
pub enum Resources {
    Table(Box<Storage>),
    S3(S3Store<S3Objects>),
}

impl Resources {
    /// Opens the storage `config.storage_url` names.
    pub async fn connect(config: &ClientConfig) -> Result<Resources, RealError> {
        match parse_url(&config.storage_url) {
            Some((kind, endpoint, bucket)) => {
                let objects = S3Objects::connect(endpoint, bucket, config.deadline)?;
                Ok(Resources::S3(S3Store::new(kind, objects)))
            }
            None => Ok(Resources::Table(Box::new(Storage::connect(config).await?))),
        }
    }
}

impl ResourceStore for Resources {
    async fn write(&mut self, resource: &str, fence: Option<u64>, data: &str) -> Outcome<()> {
        match self {
            Resources::Table(table) => table.write(resource, fence, data).await,
            Resources::S3(objects) => objects.write(resource, fence, data).await,
        }
    }

    async fn write_versioned(
        &mut self,
        resource: &str,
        fence: Option<u64>,
        data: &str,
    ) -> Outcome<Option<u64>> {
        match self {
            Resources::Table(table) => {
                ResourceStore::write_versioned(&mut **table, resource, fence, data).await
            }
            Resources::S3(objects) => objects.write_versioned(resource, fence, data).await,
        }
    }

    async fn read(&mut self, resource: &str) -> Outcome<(Option<u64>, Option<String>)> {
        match self {
            Resources::Table(table) => table.read(resource).await,
            Resources::S3(objects) => objects.read(resource).await,
        }
    }

    async fn reset(&mut self) {
        match self {
            Resources::Table(table) => table.reset().await,
            Resources::S3(objects) => objects.reset().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_url_names_its_kind_endpoint_and_bucket() {
        let url = storage_url(StorageKind::S3Cas, "http://127.0.0.1:5000", BUCKET);
        assert_eq!(url, "s3-cas+http://127.0.0.1:5000/lockcheck-resources");
        assert_eq!(parse_url(&url), Some((StorageKind::S3Cas, "http://127.0.0.1:5000", BUCKET)));
        assert_eq!(parse_url("postgres://postgres@127.0.0.1:5432/postgres"), None);
        assert_eq!(parse_url("table+http://127.0.0.1:5000/b"), None);
        assert_eq!(parse_url("s3-put+http://127.0.0.1:5000/"), None);
    }
}
