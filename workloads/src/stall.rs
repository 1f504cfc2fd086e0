//! Where a pause strikes a client, in either world. A real GC pause stops a
//! process at any instruction; the pause nemesis asks a client to stall at
//! one [`StallPoint`] of its life, and the client (its workload, its
//! recipe, its transport) stalls when it next passes that point.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// A point of a client's life where a pause may strike.
///
/// The order is the one the points are listed and drawn in; a new point
/// goes at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StallPoint {
    /// After a grant, before the holder's work and write: the classic GC
    /// pause.
    AfterGrant,
    /// Inside an operation in flight: the request is sent, its reply not
    /// yet read. The stall is the client's own, so it does not count
    /// against the reply's deadline: the call just takes longer.
    InFlight,
    /// Between two commands of a multi-command recipe: `SET NX PX` and the
    /// fence's `INCR`, `SETNX` and `PEXPIRE`, a `GET` and the `DEL` it
    /// decides, a lease's grant and the lock put on it, two Redlock
    /// instances.
    BetweenCommands,
    /// After the holder's write, before the rest of its hold.
    AfterWrite,
    /// Before a renewal: the watchdog resumes with the process and renews
    /// after the stall.
    BeforeRenew,
    /// Before a release.
    BeforeRelease,
}

impl StallPoint {
    pub const ALL: [StallPoint; 6] = [
        StallPoint::AfterGrant,
        StallPoint::InFlight,
        StallPoint::BetweenCommands,
        StallPoint::AfterWrite,
        StallPoint::BeforeRenew,
        StallPoint::BeforeRelease,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StallPoint::AfterGrant => "after-grant",
            StallPoint::InFlight => "in-flight",
            StallPoint::BetweenCommands => "between-commands",
            StallPoint::AfterWrite => "after-write",
            StallPoint::BeforeRenew => "before-renew",
            StallPoint::BeforeRelease => "before-release",
        }
    }

    pub fn parse(name: &str) -> Option<StallPoint> {
        StallPoint::ALL.into_iter().find(|point| point.name() == name)
    }

    /// A `--pause-at` comma list: its points sorted, each once; `all` is
    /// every point. An unknown name, or none, is an error that lists the
    /// known ones.
    pub fn parse_list(names: &str) -> Result<Vec<StallPoint>, String> {
        let mut points = Vec::new();
        for name in names.split(',').map(str::trim).filter(|name| !name.is_empty()) {
            if name == "all" {
                points.extend(StallPoint::ALL);
                continue;
            }
            match StallPoint::parse(name) {
                Some(point) => points.push(point),
                None => return Err(format!("unknown pause point {name:?}: {}", Self::known())),
            }
        }
        points.sort();
        points.dedup();
        if points.is_empty() {
            return Err(format!("--pause-at needs at least one point: {}", Self::known()));
        }
        Ok(points)
    }

    fn known() -> String {
        let known: Vec<&str> = StallPoint::ALL.iter().map(|point| point.name()).collect();
        format!("the points are {}, or all", known.join(", "))
    }

    /// This point's bit in a set of points.
    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    /// A list of points as `--pause-at` takes it.
    pub fn list(points: &[StallPoint]) -> String {
        if points == StallPoint::ALL {
            return "all".to_string();
        }
        points.iter().map(|point| point.name()).collect::<Vec<_>>().join(",")
    }
}

/// A set of points, as small as a point: what a stall may be moved to
/// ([`crate::Holders::point_ahead`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StallPoints(u8);

impl StallPoints {
    /// Every point.
    pub const ALL: StallPoints = StallPoints(0b11_1111);

    pub fn of(points: &[StallPoint]) -> StallPoints {
        StallPoints(points.iter().fold(0, |bits, point| bits | point.bit()))
    }

    pub fn contains(self, point: StallPoint) -> bool {
        self.0 & point.bit() != 0
    }

    pub fn insert(&mut self, point: StallPoint) {
        self.0 |= point.bit();
    }

    /// The points in the set, in [`StallPoint::ALL`]'s order.
    pub fn points(self) -> Vec<StallPoint> {
        StallPoint::ALL.into_iter().filter(|&point| self.contains(point)).collect()
    }
}

/// What else stops while a client stalls: a client whose lock lives in a
/// process of its own (`--backend exec`) has it stopped too, as a GC pause
/// stops the whole application, its watchdog threads with it.
pub trait Freezer: Send + Sync + std::fmt::Debug {
    /// The stall begins.
    fn freeze(&self);
    /// The stall is over.
    fn thaw(&self);
}

/// A lock a client holds now, as its workload says: what a nemesis that
/// aims at holders reads ([`crate::Holders`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// When the grant came back.
    pub since: Instant,
    /// When the holder's work is to end and its release come, once the
    /// workload has drawn how long it works (`None` before).
    pub until: Option<Instant>,
    /// The points this hold has passed, those of the acquire that granted
    /// it included.
    passed: StallPoints,
}

impl Hold {
    /// Whether this hold has passed `point` already.
    pub fn has_passed(&self, point: StallPoint) -> bool {
        self.passed.contains(point)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The stall asked for and not yet taken: its length and where.
    pending: Option<(u64, StallPoint)>,
    /// Where the last stall asked for struck, once it has.
    struck: Option<StallPoint>,
    freezer: Option<Arc<dyn Freezer>>,
    /// The lock the client holds now (from its grant to its release).
    hold: Option<Hold>,
    /// The points the client has passed in the run: a point its recipe or
    /// transport never passes is not among them.
    passed: StallPoints,
    /// The points passed since the client last held nothing: a hold
    /// starts with those of the acquire that granted it.
    turn: StallPoints,
    /// The history's process id the client runs as now.
    process: Option<i64>,
    /// The run's board of which lock each client holds, shared by every
    /// client's stall ([`Stall::share_board`]), and this client's place
    /// on it.
    board: Option<(Board, usize)>,
}

/// Which lock each client of a run holds now, and since when (`None`:
/// none, or not said).
type Board = Arc<Mutex<Vec<Option<(String, Instant)>>>>;

/// One client's pause point: the nemesis asks for a stall at a point, the
/// client takes it when it next passes that point; the nemesis clears what
/// was not taken when the fault ends, and learns where it struck.
#[derive(Debug, Clone, Default)]
pub struct Stall(Arc<Mutex<State>>);

impl Stall {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Asks the client to stall for `ms` after its next grant.
    pub fn request(&self, ms: u64) {
        self.request_at(ms, StallPoint::AfterGrant);
    }

    /// Asks the client to stall for `ms` when it next passes `point`.
    pub fn request_at(&self, ms: u64, point: StallPoint) {
        let mut state = self.state();
        state.pending = (ms > 0).then_some((ms, point));
        state.struck = None;
    }

    /// The workload says whether the client holds a lock now (a grant
    /// came back, from now on): a nemesis that aims at holders asks
    /// [`Stall::hold`].
    pub fn set_holding(&self, holding: bool) {
        let mut state = self.state();
        let passed = state.turn;
        state.hold = holding.then(|| Hold { since: Instant::now(), until: None, passed });
        if !holding {
            state.turn = StallPoints::default();
            if let Some((board, at)) = &state.board {
                board.lock().unwrap_or_else(|poisoned| poisoned.into_inner())[*at] = None;
            }
        }
    }

    /// Gives the stalls of one run a common board of which lock each
    /// client holds ([`Stall::holds_key`], [`Stall::held_by_another`]).
    pub fn share_board(stalls: &[Stall]) {
        let board: Board = Arc::new(Mutex::new(vec![None; stalls.len()]));
        for (at, stall) in stalls.iter().enumerate() {
            stall.state().board = Some((board.clone(), at));
        }
    }

    /// The workload says which lock the client holds now, after
    /// [`Stall::set_holding`]: a stall whose end waits for a lock to look
    /// free reads it on the run's board.
    pub fn holds_key(&self, key: &str) {
        if let Some((board, at)) = &self.state().board {
            board.lock().unwrap_or_else(|poisoned| poisoned.into_inner())[*at] =
                Some((key.into(), Instant::now()));
        }
    }

    /// A stall before a renewal is aimed at its end too, on a run with a
    /// board (against real servers): after its length it goes on until
    /// another client is granted the lock this one holds, at most `cap`
    /// more, so that the late renewal meets the next holder's lock, which
    /// is where a renewal without a compare shows. A grant from before
    /// the wait does not end it: that holder may release before the
    /// renewal gets there (a loaded machine), a fresh one has its whole
    /// hold ahead.
    async fn until_taken_by_another(&self, cap: Duration) {
        let key = {
            let state = self.state();
            let Some((board, at)) = &state.board else { return };
            let held = board.lock().unwrap_or_else(|poisoned| poisoned.into_inner())[*at].clone();
            held.map(|(key, _)| key)
        };
        let Some(key) = key else { return };
        let since = Instant::now();
        let until = since + cap;
        while !self.granted_to_another_since(&key, since) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Whether another client of the run says it holds `key` now (never,
    /// without a board).
    pub fn held_by_another(&self, key: &str) -> bool {
        self.another_holding(key, |_| true)
    }

    /// Whether another client holds `key` now by a grant of `since` or
    /// later.
    fn granted_to_another_since(&self, key: &str, since: Instant) -> bool {
        self.another_holding(key, |granted| granted >= since)
    }

    fn another_holding(&self, key: &str, granted: impl Fn(Instant) -> bool) -> bool {
        let Some((board, at)) = self.state().board.clone() else { return false };
        let board = board.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        board.iter().enumerate().any(|(other, held)| {
            other != at && held.as_ref().is_some_and(|(held, at)| held == key && granted(*at))
        })
    }

    /// The workload has drawn how long the holder works: its release comes
    /// at `until`.
    pub fn holds_until(&self, until: Instant) {
        if let Some(hold) = self.state().hold.as_mut() {
            hold.until = Some(until);
        }
    }

    /// The workload says which process of the history the client runs as
    /// now (a new one after an unknown outcome), so that a fault's record
    /// can name the process it struck.
    pub fn set_process(&self, process: i64) {
        self.state().process = Some(process);
    }

    /// The process the client runs as now, once the workload has said.
    pub fn process(&self) -> Option<i64> {
        self.state().process
    }

    /// The lock the client holds now, if any.
    pub fn hold(&self) -> Option<Hold> {
        self.state().hold
    }

    /// Whether the client has passed `point` at least once in the run: a
    /// point that its recipe or transport does not have never is.
    pub fn has_passed(&self, point: StallPoint) -> bool {
        self.state().passed.contains(point)
    }

    /// Stops `freezer` too whenever this client stalls.
    pub fn freezing(&self, freezer: Arc<dyn Freezer>) {
        self.state().freezer = Some(freezer);
    }

    /// Whether a stall waits at `point`.
    pub fn is_pending_at(&self, point: StallPoint) -> bool {
        self.pending_at(point) > 0
    }

    /// The length of the stall waiting at `point`, in ms (0: none), left
    /// waiting there.
    pub fn pending_at(&self, point: StallPoint) -> u64 {
        match self.state().pending {
            Some((ms, at)) if at == point => ms,
            _ => 0,
        }
    }

    /// The client can be struck at `point` in every operation (a program
    /// whose operations may each take two round trips): it counts as passed
    /// for the run, and never as behind a hold, so an aimed stall may wait
    /// for it there. Nothing is taken.
    pub fn reaches(&self, point: StallPoint) {
        self.state().passed.insert(point);
    }

    /// The client passes `point`: takes the stall waiting there, if any:
    /// its length (0: none).
    pub fn take_at(&self, point: StallPoint) -> u64 {
        let mut state = self.state();
        state.passed.insert(point);
        state.turn.insert(point);
        if let Some(hold) = state.hold.as_mut() {
            hold.passed.insert(point);
        }
        match state.pending {
            Some((ms, at)) if at == point => {
                state.pending = None;
                state.struck = Some(point);
                ms
            }
            _ => 0,
        }
    }

    /// Takes the stall waiting at `point`, if any, and sleeps it out (on
    /// the runtime's clock: simulated time in the simulator); how long it
    /// stalled (zero: it did not). A client whose deadline runs through the
    /// stall moves it on by as much: the stall is the client's own.
    pub async fn strike(&self, point: StallPoint) -> Duration {
        let ms = self.take_at(point);
        if ms > 0 {
            let freezer = self.state().freezer.clone();
            if let Some(freezer) = &freezer {
                freezer.freeze();
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            if point == StallPoint::BeforeRenew {
                self.until_taken_by_another(Duration::from_millis(ms)).await;
            }
            if let Some(freezer) = &freezer {
                freezer.thaw();
            }
        }
        Duration::from_millis(ms)
    }

    /// The fault is over: drops a stall not taken, and says where the last
    /// one struck (`None`: it found no chance).
    pub fn clear(&self) -> Option<StallPoint> {
        let mut state = self.state();
        state.pending = None;
        state.struck.take()
    }
}

#[cfg(test)]
mod tests {
    use super::{Stall, StallPoint};
    use std::time::Duration;

    #[test]
    fn a_point_reads_back_by_its_name_and_a_list_sorts() {
        for point in StallPoint::ALL {
            assert_eq!(StallPoint::parse(point.name()), Some(point));
        }
        assert_eq!(
            StallPoint::parse_list("before-release, in-flight,in-flight").unwrap(),
            [StallPoint::InFlight, StallPoint::BeforeRelease]
        );
        assert_eq!(StallPoint::parse_list("all").unwrap(), StallPoint::ALL);
        assert_eq!(StallPoint::list(&StallPoint::ALL), "all");
        assert_eq!(
            StallPoint::list(&[StallPoint::InFlight, StallPoint::AfterWrite]),
            "in-flight,after-write"
        );
        let unknown = StallPoint::parse_list("in-flight,gc").unwrap_err();
        assert!(
            unknown.starts_with("unknown pause point \"gc\": the points are after-grant"),
            "{unknown}"
        );
        assert!(StallPoint::parse_list(" ,").is_err());
    }

    #[test]
    fn a_stall_strikes_only_at_its_point_and_says_where() {
        let stall = Stall::default();
        stall.request_at(700, StallPoint::BeforeRelease);
        assert!(stall.is_pending_at(StallPoint::BeforeRelease));
        assert_eq!(stall.take_at(StallPoint::AfterGrant), 0, "not its point");
        assert_eq!(stall.take_at(StallPoint::BeforeRelease), 700);
        assert_eq!(stall.take_at(StallPoint::BeforeRelease), 0, "taken once");
        assert_eq!(stall.clear(), Some(StallPoint::BeforeRelease));
        stall.request(300);
        assert_eq!(stall.clear(), None, "never passed its point");
        assert_eq!(stall.take_at(StallPoint::AfterGrant), 0, "cleared");
    }

    #[test]
    fn the_board_says_which_lock_another_client_holds() {
        let stalls = [Stall::default(), Stall::default(), Stall::default()];
        assert!(!stalls[0].held_by_another("lock-0"), "no board: never");
        Stall::share_board(&stalls);
        stalls[1].set_holding(true);
        stalls[1].holds_key("lock-0");
        assert!(stalls[0].held_by_another("lock-0"));
        assert!(!stalls[0].held_by_another("lock-1"));
        assert!(!stalls[1].held_by_another("lock-0"), "its own hold is not another's");
        stalls[1].set_holding(false);
        assert!(!stalls[0].held_by_another("lock-0"), "released");
    }

    /// A stall before a renewal ends at a grant to another made after its
    /// length ran out, not at a hold that was already there.
    #[tokio::test(start_paused = true)]
    async fn a_stall_before_a_renewal_ends_at_a_fresh_grant_to_another() {
        let stalls = [Stall::default(), Stall::default()];
        Stall::share_board(&stalls);
        stalls[0].set_holding(true);
        stalls[0].holds_key("lock-0");
        stalls[1].set_holding(true);
        stalls[1].holds_key("lock-0"); // already held when the stall's length ends
        let other = stalls[1].clone();
        let regrant = async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            other.set_holding(false);
            tokio::time::sleep(Duration::from_millis(10)).await;
            other.set_holding(true);
            other.holds_key("lock-0");
        };
        stalls[0].request_at(100, StallPoint::BeforeRenew);
        let start = tokio::time::Instant::now();
        let strike = async {
            let stalled = stalls[0].strike(StallPoint::BeforeRenew).await;
            (stalled, start.elapsed())
        };
        let ((stalled, waited), ()) = tokio::join!(strike, regrant);
        assert_eq!(stalled, Duration::from_millis(100));
        assert!(waited >= Duration::from_millis(160), "{waited:?}: ended at the old hold");
        assert!(waited < Duration::from_millis(200), "{waited:?}: missed the fresh grant");
    }
}
