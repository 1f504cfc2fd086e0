//! The SQL lease table, written once for both worlds
//! (docs/guide.md#postgresql): one row per lock with its owner, its expiry
//! by the database's clock and a fence column. Acquire takes the row if it
//! is free or expired, raising the fence, which is the token; release and
//! renew match the owner and the fence, so that a holder whose lease was
//! taken over changes nothing. The broken variant expires leases by the
//! client's clock, which it sends along. A world supplies the transport
//! ([`LeaseStore`]) and keeps its own errors: the recipe hands them back.

use crate::{Grant, Outcome};

/// What taking a lease's row came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Taken, with the row's new fence (none if it could not be read as a
    /// token).
    Granted(Option<u64>),
    /// Held by another owner whose lease has not expired.
    Held,
}

/// A database with the lease table, as the recipe speaks to it.
#[allow(async_fn_in_trait)]
pub trait LeaseStore {
    /// Why a statement has no answer; the world's own.
    type Error;
    /// Takes `name`'s row for `owner` until `ttl_ms` from now, if free or
    /// expired (by the database's clock, or at `now_ms`: the caller's).
    async fn take(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        now_ms: Option<i64>,
    ) -> Result<Taken, Self::Error>;
    /// Frees `name`'s row if `owner` holds it with `fence`: `true` if so.
    async fn give_back(
        &mut self,
        name: &str,
        owner: &str,
        fence: Option<u64>,
    ) -> Result<bool, Self::Error>;
    /// Extends `owner`'s unexpired lease of `name` with `fence` to `ttl_ms`
    /// from now: `true` if it was still held.
    async fn extend(
        &mut self,
        name: &str,
        owner: &str,
        fence: Option<u64>,
        ttl_ms: u64,
    ) -> Result<bool, Self::Error>;
}

/// Acquires `name` for `owner` (unique to this attempt).
pub async fn acquire<S: LeaseStore>(
    store: &mut S,
    name: &str,
    owner: String,
    ttl_ms: u64,
    now_ms: Option<i64>,
) -> Result<Outcome<Grant>, S::Error> {
    Ok(match store.take(name, &owner, ttl_ms, now_ms).await? {
        Taken::Granted(fence) => Outcome::Ok(Grant { fence, lease: Some(owner) }),
        Taken::Held => Outcome::Fail("busy".into()),
    })
}

/// Releases `name` held under `grant`.
pub async fn release<S: LeaseStore>(
    store: &mut S,
    name: &str,
    grant: &Grant,
) -> Result<Outcome<()>, S::Error> {
    let owner = grant.lease.as_deref().unwrap_or_default();
    Ok(held(store.give_back(name, owner, grant.fence).await?))
}

/// Extends `name` held under `grant` to `ttl_ms` from now.
pub async fn renew<S: LeaseStore>(
    store: &mut S,
    name: &str,
    grant: &Grant,
    ttl_ms: u64,
) -> Result<Outcome<()>, S::Error> {
    let owner = grant.lease.as_deref().unwrap_or_default();
    Ok(held(store.extend(name, owner, grant.fence, ttl_ms).await?))
}

fn held(matched: bool) -> Outcome<()> {
    if matched {
        Outcome::Ok(())
    } else {
        Outcome::Fail("not-held".into())
    }
}

#[cfg(test)]
mod tests {
    use super::{acquire, release, renew, LeaseStore, Taken};
    use crate::{Grant, Outcome};

    /// One row, by the rules of the table: taken if free or expired (the
    /// test moves `now`), released and renewed only by its owner and fence.
    #[derive(Default)]
    struct Row {
        owner: Option<String>,
        expires_at: u64,
        fence: u64,
        now: u64,
    }

    impl LeaseStore for Row {
        type Error = &'static str;

        async fn take(
            &mut self,
            _: &str,
            owner: &str,
            ttl: u64,
            _: Option<i64>,
        ) -> Result<Taken, &'static str> {
            if self.owner.is_some() && self.expires_at >= self.now {
                return Ok(Taken::Held);
            }
            self.fence += 1;
            (self.owner, self.expires_at) = (Some(owner.into()), self.now + ttl);
            Ok(Taken::Granted(Some(self.fence)))
        }

        async fn give_back(
            &mut self,
            _: &str,
            owner: &str,
            fence: Option<u64>,
        ) -> Result<bool, &'static str> {
            let ours = self.owner.as_deref() == Some(owner) && fence == Some(self.fence);
            if ours {
                self.owner = None;
            }
            Ok(ours)
        }

        async fn extend(
            &mut self,
            _: &str,
            owner: &str,
            fence: Option<u64>,
            ttl: u64,
        ) -> Result<bool, &'static str> {
            let ours = self.owner.as_deref() == Some(owner)
                && fence == Some(self.fence)
                && self.expires_at >= self.now;
            if ours {
                self.expires_at = self.now + ttl;
            }
            Ok(ours)
        }
    }

    #[tokio::test]
    async fn a_lease_taken_over_leaves_its_old_holder_nothing_to_change() {
        let mut row = Row::default();
        let first = acquire(&mut row, "l", "a:1".into(), 100, None).await.unwrap();
        assert_eq!(first, Outcome::Ok(Grant { fence: Some(1), lease: Some("a:1".into()) }));
        assert_eq!(
            acquire(&mut row, "l", "b:1".into(), 100, None).await,
            Ok(Outcome::Fail("busy".into()))
        );
        row.now = 150;
        let Outcome::Ok(second) = acquire(&mut row, "l", "b:2".into(), 100, None).await.unwrap()
        else {
            panic!("an expired lease is free");
        };
        assert_eq!(second.fence, Some(2));
        let Outcome::Ok(stale) = first else { unreachable!() };
        assert_eq!(renew(&mut row, "l", &stale, 100).await, Ok(Outcome::Fail("not-held".into())));
        assert_eq!(release(&mut row, "l", &stale).await, Ok(Outcome::Fail("not-held".into())));
        assert_eq!(renew(&mut row, "l", &second, 100).await, Ok(Outcome::Ok(())));
        assert_eq!(release(&mut row, "l", &second).await, Ok(Outcome::Ok(())));
    }
}
