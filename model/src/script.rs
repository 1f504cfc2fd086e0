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

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use lockcheck_sim::modelled::{
    consul_acquire, consul_release, consul_renew, etcd_over, leases_over, redis_over, redlock_over,
    semaphore_over, Caller, Failure, Request, Response,
};
use lockcheck_workloads::etcd_lock::{EtcdLock, Waiting};
use lockcheck_workloads::redis_lock::{self, Variant};
use lockcheck_workloads::{lease_table, redlock, semaphore};
use lockcheck_workloads::{Grant, Outcome, PERMITS};

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
    /// A reading of the client's clock, in ms: read once, when the
    /// recipe first asked, and the same at every replay.
    Clock(u64),
}

/// What an operation asks for next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// To send this command to this server (0 but for Redlock's instances).
    Call(usize, Request),
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
    /// Redlock over independent instances; with `delayed_restart`, a
    /// crashed instance stays down longer than any lease.
    Redlock { delayed_restart: bool },
    /// etcd's lock (a lease per acquisition, the key's revision the
    /// token, the lease's revocation the release), refused at once when
    /// taken (`TryLock`), against the cluster as one linearizable machine.
    Etcd,
    /// Consul's lock (a session per acquisition, the key's `LockIndex` the
    /// token); an invalidated session's key is held back for
    /// `lock_delay_ms`.
    Consul { lock_delay_ms: u64 },
    /// The Redis semaphore of [`PERMITS`] slots (a sorted set of holders
    /// scored by expiry); with `client_clock`, expiring them by the
    /// caller's clock (the broken variant). Its holders protect no
    /// resource: what it promises is at most that many at a time.
    Semaphore { client_clock: bool },
}

impl Kind {
    /// How many servers hold the lock.
    pub fn servers(self) -> usize {
        match self {
            Kind::Redlock { .. } => REDLOCK_INSTANCES,
            _ => 1,
        }
    }

    /// Whether the recipe's client keeps state from an acquire to its
    /// release (etcd's lease): a release is replayed after its acquire.
    pub fn keeps_state(self) -> bool {
        matches!(self, Kind::Etcd | Kind::Consul { .. })
    }

    /// Whether the servers' leases expire by their wall clocks, which a
    /// clock jump moves (etcd's go by the leader's monotonic clock).
    pub fn wall_clock_leases(self) -> bool {
        !matches!(self, Kind::Etcd | Kind::Consul { .. })
    }

    /// How many may hold the lock at once: a semaphore's permits.
    pub fn permits(self) -> Option<u32> {
        matches!(self, Kind::Semaphore { .. }).then_some(PERMITS)
    }
}

/// Redlock's instances in the model: the least that has a majority to
/// lose (the simulator runs five).
pub const REDLOCK_INSTANCES: usize = 3;

/// A lock operation of the recipe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LockOp {
    /// Acquire with this value (unique to the attempt).
    Acquire(String),
    /// Release the lock held with this value and token; `acquired`: the
    /// answers its acquire had, for a recipe whose client keeps state from
    /// one to the other ([`Kind::keeps_state`]; empty otherwise).
    Release { value: String, fence: Option<u64>, acquired: Vec<Answer> },
    /// Renew the lock held with this value and token (`acquired` as for a
    /// release).
    Renew { value: String, fence: Option<u64>, acquired: Vec<Answer> },
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

/// What the callers of one replay share: the script, how far it has been
/// read, what the recipe asked for at its end, and the clock readings made
/// past its end.
struct Script<'a> {
    answers: &'a [Answer],
    next: Cell<usize>,
    asked: RefCell<Option<Ask>>,
    /// Clock readings past the script's end, to be kept with it.
    read: RefCell<Vec<Answer>>,
    /// The client's clock now, for readings past the script's end.
    now_ms: u64,
    /// A request's deadline, in ms.
    deadline_ms: u64,
}

impl Script<'_> {
    fn answer(&self) -> Option<&Answer> {
        let answer = self.answers.get(self.next.get())?;
        self.next.set(self.next.get() + 1);
        Some(answer)
    }
}

/// A caller that answers from the script and stops at its end, saying
/// what the recipe asked for there; one per server.
struct Scripted<'a> {
    script: Rc<Script<'a>>,
    server: usize,
}

impl Caller for Scripted<'_> {
    async fn call(&mut self, request: &Request) -> Result<Response, Failure> {
        match self.script.answer() {
            Some(Answer::Reply(reply)) => return reply.clone(),
            Some(other) => panic!("{other:?} answered a command: the script is off"),
            None => {}
        }
        *self.script.asked.borrow_mut() = Some(Ask::Call(self.server, request.clone()));
        std::future::pending().await
    }

    async fn between_commands(&mut self) -> bool {
        match self.script.answer() {
            Some(Answer::Stalled(stalled)) => return *stalled,
            Some(other) => panic!("{other:?} answered a stall point: the script is off"),
            None => {}
        }
        *self.script.asked.borrow_mut() = Some(Ask::Between);
        std::future::pending().await
    }

    fn now_ms(&self) -> u64 {
        match self.script.answer() {
            Some(Answer::Clock(ms)) => *ms,
            Some(other) => panic!("{other:?} answered a clock reading: the script is off"),
            None => {
                self.script.read.borrow_mut().push(Answer::Clock(self.script.now_ms));
                self.script.now_ms
            }
        }
    }

    fn deadline_ms(&self) -> u64 {
        self.script.deadline_ms
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
    /// A request's deadline, in ms (commands run within a tick).
    pub deadline_ms: u64,
}

/// Replays `op` of `recipe` over `answers`: where it stands, and the
/// clock readings it made past their end (to be kept with them, so that
/// the next replay reads the same).
pub fn replay(recipe: Recipe, op: &LockOp, answers: &[Answer]) -> (Progress, Vec<Answer>) {
    let Recipe { kind, fencing, ttl_ms, caller_now_ms, deadline_ms } = recipe;
    // A release of a recipe that keeps state runs after its acquire.
    let whole;
    let answers = match op {
        LockOp::Release { acquired, .. } | LockOp::Renew { acquired, .. }
            if !acquired.is_empty() =>
        {
            whole = [acquired.as_slice(), answers].concat();
            whole.as_slice()
        }
        _ => answers,
    };
    let script = Rc::new(Script {
        answers,
        next: Cell::new(0),
        asked: RefCell::new(None),
        read: RefCell::new(Vec::new()),
        now_ms: caller_now_ms.max(0) as u64,
        deadline_ms,
    });
    let mut callers: Vec<Scripted<'_>> =
        (0..kind.servers()).map(|server| Scripted { script: script.clone(), server }).collect();
    let run = async {
        match (kind, op) {
            (Kind::Redis(variant), LockOp::Acquire(value)) => {
                let mut redis = redis_over(&mut callers[0]);
                let value = value.clone();
                Done::Acquire(
                    redis_lock::acquire(&mut redis, variant, fencing, LOCK, value, ttl_ms).await,
                )
            }
            (Kind::Redis(variant), LockOp::Release { value, .. }) => {
                let mut redis = redis_over(&mut callers[0]);
                Done::Unit(redis_lock::release(&mut redis, variant, LOCK, value).await)
            }
            (Kind::Redis(variant), LockOp::Renew { value, .. }) => {
                let mut redis = redis_over(&mut callers[0]);
                Done::Unit(redis_lock::renew(&mut redis, variant, LOCK, value, ttl_ms).await)
            }
            (Kind::LeaseTable { client_clock }, LockOp::Acquire(owner)) => {
                let mut leases = leases_over(&mut callers[0]);
                let now_ms = client_clock.then_some(caller_now_ms);
                let taken = lease_table::acquire(&mut leases, LOCK, owner.clone(), ttl_ms, now_ms);
                Done::Acquire(taken.await.unwrap_or_else(Failure::outcome))
            }
            (Kind::LeaseTable { .. }, LockOp::Release { value: owner, fence, .. }) => {
                let mut leases = leases_over(&mut callers[0]);
                let grant = Grant { fence: *fence, lease: Some(owner.clone()) };
                let released = lease_table::release(&mut leases, LOCK, &grant).await;
                Done::Unit(released.unwrap_or_else(Failure::outcome))
            }
            (Kind::LeaseTable { .. }, LockOp::Renew { value: owner, fence, .. }) => {
                let mut leases = leases_over(&mut callers[0]);
                let grant = Grant { fence: *fence, lease: Some(owner.clone()) };
                let renewed = lease_table::renew(&mut leases, LOCK, &grant, ttl_ms).await;
                Done::Unit(renewed.unwrap_or_else(Failure::outcome))
            }
            (Kind::Redlock { .. }, LockOp::Acquire(value)) => {
                let mut quorum = redlock_over(&mut callers);
                Done::Acquire(redlock::acquire(&mut quorum, LOCK, value.clone(), ttl_ms).await)
            }
            (Kind::Redlock { .. }, LockOp::Release { value, .. }) => {
                let mut quorum = redlock_over(&mut callers);
                Done::Unit(redlock::release(&mut quorum, LOCK, value).await)
            }
            (Kind::Redlock { .. }, LockOp::Renew { value, .. }) => {
                let mut quorum = redlock_over(&mut callers);
                Done::Unit(redlock::renew(&mut quorum, LOCK, value, ttl_ms).await)
            }
            (Kind::Semaphore { client_clock }, LockOp::Acquire(member)) => {
                let mut store = semaphore_over(&mut callers[0]);
                let now_ms = client_clock.then_some(caller_now_ms);
                let member = member.clone();
                Done::Acquire(
                    semaphore::acquire(&mut store, LOCK, member, ttl_ms, PERMITS, now_ms).await,
                )
            }
            (Kind::Semaphore { .. }, LockOp::Release { value, .. }) => {
                let mut store = semaphore_over(&mut callers[0]);
                Done::Unit(semaphore::release(&mut store, LOCK, value).await)
            }
            (Kind::Semaphore { client_clock }, LockOp::Renew { value, .. }) => {
                let mut store = semaphore_over(&mut callers[0]);
                let now_ms = client_clock.then_some(caller_now_ms);
                Done::Unit(semaphore::renew(&mut store, LOCK, value, ttl_ms, now_ms).await)
            }
            (Kind::Etcd, op) => {
                let mut etcd = EtcdLock::waiting(fencing, Waiting::TryOnce);
                let mut members = etcd_over(&mut callers, 0);
                let acquired = etcd.acquire(&mut members, LOCK, ttl_ms).await;
                match op {
                    LockOp::Acquire(_) => Done::Acquire(acquired),
                    LockOp::Release { .. } => Done::Unit(etcd.release(&mut members, LOCK).await),
                    LockOp::Renew { .. } => Done::Unit(etcd.renew(&mut members, LOCK).await),
                }
            }
            (Kind::Consul { lock_delay_ms }, op) => {
                let consul = &mut callers[0];
                let acquired = consul_acquire(consul, fencing, LOCK, ttl_ms, lock_delay_ms).await;
                match (op, acquired) {
                    (LockOp::Acquire(_), acquired) => Done::Acquire(acquired),
                    // The session the grant was made with.
                    (LockOp::Release { .. }, Outcome::Ok(grant)) => {
                        Done::Unit(consul_release(consul, LOCK, &grant).await)
                    }
                    (LockOp::Renew { .. }, Outcome::Ok(grant)) => {
                        Done::Unit(consul_renew(consul, &grant).await)
                    }
                    (_, _) => Done::Unit(Outcome::Fail("not-held".into())),
                }
            }
        }
    };
    let mut context = Context::from_waker(Waker::noop());
    let progress = match pin!(run).poll(&mut context) {
        Poll::Ready(done) => Progress::Done(done),
        Poll::Pending => Progress::Asks(
            script.asked.borrow_mut().take().expect("a recipe waits only on the script's commands"),
        ),
    };
    let read = script.read.take();
    (progress, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(variant: Variant, fencing: bool) -> Recipe {
        Recipe {
            kind: Kind::Redis(variant),
            fencing,
            ttl_ms: 1000,
            caller_now_ms: 0,
            deadline_ms: 250,
        }
    }

    #[test]
    fn an_acquire_asks_set_nx_then_the_fence_and_ends_with_its_token() {
        let acquire = LockOp::Acquire("a".into());
        let first = replay(redis(Variant::Plain, true), &acquire, &[]).0;
        let set = Request::SetNxPx { key: LOCK.into(), value: "a".into(), ttl_ms: 1000 };
        assert_eq!(first, Progress::Asks(Ask::Call(0, set)));
        let granted = [Answer::Reply(Ok(Response::Ok))];
        assert_eq!(
            replay(redis(Variant::Plain, true), &acquire, &granted).0,
            Progress::Asks(Ask::Between)
        );
        let fenced = [granted[0].clone(), Answer::Stalled(false)];
        let incr = Request::Incr { key: format!("fence:{LOCK}") };
        assert_eq!(
            replay(redis(Variant::Plain, true), &acquire, &fenced).0,
            Progress::Asks(Ask::Call(0, incr))
        );
        let all = [fenced[0].clone(), fenced[1].clone(), Answer::Reply(Ok(Response::Int(7)))];
        let grant = Grant { fence: Some(7), lease: Some("a".into()) };
        assert_eq!(
            replay(redis(Variant::Plain, true), &acquire, &all).0,
            Progress::Done(Done::Acquire(Outcome::Ok(grant)))
        );
    }

    #[test]
    fn a_lost_reply_is_unknown_except_to_the_recipe_that_takes_it_for_busy() {
        let acquire = LockOp::Acquire("a".into());
        let lost = [Answer::Reply(Err(Failure::Unknown))];
        assert_eq!(
            replay(redis(Variant::Plain, false), &acquire, &lost).0,
            Progress::Done(Done::Acquire(Outcome::Info("timeout".into())))
        );
        assert_eq!(
            replay(redis(Variant::LostReply, false), &acquire, &lost).0,
            Progress::Done(Done::Acquire(Outcome::Fail("busy".into())))
        );
    }
}
