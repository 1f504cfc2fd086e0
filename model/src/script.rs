//! One recipe, not two: the model runs the recipes' own code
//! (`lockcheck_workloads::redis_lock`) over the simulator's own Redis
//! transport (`lockcheck_sim::modelled::redis_over`), through a caller
//! whose every reply is a choice the model made.
//!
//! An operation in flight is the replies it has had so far. To take its
//! next step, the model runs the recipe again from the start over those
//! replies (the recipe is deterministic given its replies): it either
//! finishes, or asks for one more command, which the model then answers
//! from its server state machine, its fault budget and its choices.

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use lockcheck_sim::modelled::{leases_over, redis_over, Caller, Failure, Request, Response};
use lockcheck_workloads::lease_table;
use lockcheck_workloads::redis_lock::{self, Variant};
use lockcheck_workloads::{Grant, Outcome};

/// The name of the one lock the models take.
pub const LOCK: &str = "lock-0";

/// One answer an operation in flight was given.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer {
    /// The reply to a command (a failure: lost, or never sent).
    Reply(Result<Response, Failure>),
    /// Between two commands: whether the client stalled there (for the
    /// recipe's crash point, a stall past its deadline is a crash).
    Stalled(bool),
}

/// What an operation asks for next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// To send this command.
    Call(Request),
    /// To pass the point between two commands.
    Between,
}

/// Which recipe, of those the model drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A single-Redis recipe of this variant.
    Redis(Variant),
    /// The SQL lease table; with `client_clock`, expiring leases by the
    /// caller's clock (the broken variant).
    LeaseTable { client_clock: bool },
}

/// A lock operation of the recipe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LockOp {
    /// Acquire with this value (unique to the attempt).
    Acquire(String),
    /// Release the lock held with this value and token.
    Release(String, Option<u64>),
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    Acquire(Outcome<Grant>),
    Unit(Outcome<()>),
}

/// Where an operation stands after the model replays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Asks(Ask),
    Done(Done),
}

/// A caller that answers from the script and stops at its end, saying
/// what the recipe asked for there.
struct Scripted<'a> {
    answers: &'a [Answer],
    next: usize,
    asked: Rc<RefCell<Option<Ask>>>,
}

impl Scripted<'_> {
    fn answer(&mut self) -> Option<&Answer> {
        let answer = self.answers.get(self.next)?;
        self.next += 1;
        Some(answer)
    }
}

impl Caller for Scripted<'_> {
    async fn call(&mut self, request: &Request) -> Result<Response, Failure> {
        match self.answer() {
            Some(Answer::Reply(reply)) => return reply.clone(),
            Some(Answer::Stalled(_)) => panic!("a stall answered a command: the script is off"),
            None => {}
        }
        *self.asked.borrow_mut() = Some(Ask::Call(request.clone()));
        std::future::pending().await
    }

    async fn between_commands(&mut self) -> bool {
        match self.answer() {
            Some(Answer::Stalled(stalled)) => return *stalled,
            Some(Answer::Reply(_)) => panic!("a reply answered a stall point: the script is off"),
            None => {}
        }
        *self.asked.borrow_mut() = Some(Ask::Between);
        std::future::pending().await
    }
}

/// What one operation is replayed with.
#[derive(Debug, Clone, Copy)]
pub struct Recipe {
    pub kind: Kind,
    /// The Redis recipe takes a token (`INCR`) with its grant.
    pub fencing: bool,
    pub ttl_ms: u64,
    /// The caller's clock, in ms, for a recipe that sends it.
    pub caller_now_ms: i64,
}

/// Replays `op` of `recipe` over `answers`.
pub fn replay(recipe: Recipe, op: &LockOp, answers: &[Answer]) -> Progress {
    let asked = Rc::new(RefCell::new(None));
    let mut caller = Scripted { answers, next: 0, asked: asked.clone() };
    let Recipe { kind, fencing, ttl_ms, caller_now_ms } = recipe;
    let run = async move {
        match (kind, op) {
            (Kind::Redis(variant), LockOp::Acquire(value)) => {
                let mut redis = redis_over(&mut caller);
                let value = value.clone();
                Done::Acquire(
                    redis_lock::acquire(&mut redis, variant, fencing, LOCK, value, ttl_ms).await,
                )
            }
            (Kind::Redis(variant), LockOp::Release(value, _)) => {
                let mut redis = redis_over(&mut caller);
                Done::Unit(redis_lock::release(&mut redis, variant, LOCK, value).await)
            }
            (Kind::LeaseTable { client_clock }, LockOp::Acquire(owner)) => {
                let mut leases = leases_over(&mut caller);
                let now_ms = client_clock.then_some(caller_now_ms);
                let taken = lease_table::acquire(&mut leases, LOCK, owner.clone(), ttl_ms, now_ms);
                Done::Acquire(taken.await.unwrap_or_else(Failure::outcome))
            }
            (Kind::LeaseTable { .. }, LockOp::Release(owner, fence)) => {
                let mut leases = leases_over(&mut caller);
                let grant = Grant { fence: *fence, lease: Some(owner.clone()) };
                let released = lease_table::release(&mut leases, LOCK, &grant).await;
                Done::Unit(released.unwrap_or_else(Failure::outcome))
            }
        }
    };
    let mut context = Context::from_waker(Waker::noop());
    match pin!(run).poll(&mut context) {
        Poll::Ready(done) => Progress::Done(done),
        Poll::Pending => Progress::Asks(
            asked.borrow_mut().take().expect("a recipe waits only on the script's commands"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(variant: Variant, fencing: bool) -> Recipe {
        Recipe { kind: Kind::Redis(variant), fencing, ttl_ms: 1000, caller_now_ms: 0 }
    }

    #[test]
    fn an_acquire_asks_set_nx_then_the_fence_and_ends_with_its_token() {
        let acquire = LockOp::Acquire("a".into());
        let first = replay(redis(Variant::Plain, true), &acquire, &[]);
        let set = Request::SetNxPx { key: LOCK.into(), value: "a".into(), ttl_ms: 1000 };
        assert_eq!(first, Progress::Asks(Ask::Call(set)));
        let granted = [Answer::Reply(Ok(Response::Ok))];
        assert_eq!(
            replay(redis(Variant::Plain, true), &acquire, &granted),
            Progress::Asks(Ask::Between)
        );
        let fenced = [granted[0].clone(), Answer::Stalled(false)];
        let incr = Request::Incr { key: format!("fence:{LOCK}") };
        assert_eq!(
            replay(redis(Variant::Plain, true), &acquire, &fenced),
            Progress::Asks(Ask::Call(incr))
        );
        let all = [fenced[0].clone(), fenced[1].clone(), Answer::Reply(Ok(Response::Int(7)))];
        let grant = Grant { fence: Some(7), lease: Some("a".into()) };
        assert_eq!(
            replay(redis(Variant::Plain, true), &acquire, &all),
            Progress::Done(Done::Acquire(Outcome::Ok(grant)))
        );
    }

    #[test]
    fn a_lost_reply_is_unknown_except_to_the_recipe_that_takes_it_for_busy() {
        let acquire = LockOp::Acquire("a".into());
        let lost = [Answer::Reply(Err(Failure::Unknown))];
        assert_eq!(
            replay(redis(Variant::Plain, false), &acquire, &lost),
            Progress::Done(Done::Acquire(Outcome::Info("timeout".into())))
        );
        assert_eq!(
            replay(redis(Variant::LostReply, false), &acquire, &lost),
            Progress::Done(Done::Acquire(Outcome::Fail("busy".into())))
        );
    }
}
