//! Faults against the servers lockcheck manages: SIGSTOP of a lock server
//! (`sigstop`), SIGKILL then restart (`kill`), the lock sessions ended by
//! the server (`conn-kill`) and a server's wall clock jumping forward
//! (`clock`) or running fast (`clock-drift`): Redis then expires keys early,
//! docs/guide.md#redis; the servers must run under libfaketime,
//! [`super::servers::ServerOptions::faketime`]. The faults are the server
//! part of the run's one schedule ([`super::schedule`]), each start and stop
//! recorded as a nemesis operation (a jump's value also says `jump_ms`, a
//! drift's `gain_ms` and `rate`).
//!
//! Server operations block (a restart waits until the server answers), so
//! they run on tokio's blocking pool while the clients go on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockcheck_checker::Function;
use serde_json::json;
use tokio::time::Instant;

use super::servers::ManagedServer;
use super::RealError;
use lockcheck_workloads::{Aim, Holders, SharedRecorder};

/// What a server fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerAction {
    /// SIGSTOP until the fault ends, then SIGCONT.
    Pause,
    /// SIGKILL at the start, restarted (same port, same data) at the end.
    Kill,
    /// The server ends every lock session at the start (no server process
    /// is touched: it works on servers given by URL too).
    ConnKill,
    /// The servers' wall clocks jump forward by the fault's `jump_ms` at
    /// the start and back to real time at the end
    /// ([`ManagedServer::set_clock`]); their monotonic clocks stay real.
    ClockJump,
    /// The servers' wall clocks run fast: over the fault they gain its
    /// `jump_ms`, a step every [`DRIFT_STEP`] (libfaketime cannot change a
    /// running process' rate without a jump of its own), and go back to
    /// real time at the end, as NTP would step them.
    ClockDrift,
}

/// How often a drifting clock is moved on.
pub const DRIFT_STEP: Duration = Duration::from_millis(50);

impl ServerAction {
    /// The fault's name in the history (and on the command line).
    pub fn name(self) -> &'static str {
        match self {
            ServerAction::Pause => "sigstop",
            ServerAction::Kill => "kill",
            ServerAction::ConnKill => "conn-kill",
            ServerAction::ClockJump => "clock",
            ServerAction::ClockDrift => "clock-drift",
        }
    }
}

/// One server fault: `servers` (indices into the lock servers) from `start`
/// to `end` after the test began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFault {
    pub start: Duration,
    pub end: Duration,
    pub action: ServerAction,
    pub servers: Vec<usize>,
    /// How far a clock fault moves the servers' clocks forward (a drift:
    /// by its end); 0 for the other actions.
    pub jump_ms: u64,
    /// How long the fault may wait for a client in the middle of a long
    /// hold ([`Holders::aim`]); it is moved on by as long as it waited.
    pub slack: Duration,
}

impl ServerFault {
    /// How fast a drift runs the struck clocks, in hundredths of real time:
    /// it gains `jump_ms` over its length.
    pub fn pace_percent(&self) -> u32 {
        let length_ms = (self.end - self.start).as_millis().max(1) as f64;
        ((length_ms + self.jump_ms as f64) / length_ms * 100.0).round() as u32
    }

    /// The holder this fault waits for: a drift, one whose lease it runs
    /// out while the holder still works, with time for the clock to catch
    /// up (it moves a step at a time) and for another client to take the
    /// lock; any other fault, one in the middle of a long hold.
    fn aim(&self) -> Aim {
        match self.action {
            ServerAction::ClockDrift => {
                Aim::LeaseRunsOut { pace_percent: self.pace_percent(), margin: DRIFT_STEP * 2 }
            }
            _ => Aim::LongHold,
        }
    }
}

/// The lock servers a nemesis may strike, shared with whoever stops them at
/// the end.
pub type SharedServer = Arc<Mutex<ManagedServer>>;

fn record(
    recorder: &SharedRecorder,
    fault: &ServerFault,
    names: &[String],
    f: Function,
    sessions: Option<u64>,
    servers: &[SharedServer],
) {
    let targets: Vec<&str> = fault.servers.iter().map(|&at| names[at].as_str()).collect();
    let mut value = json!({ "fault": fault.action.name(), "targets": targets });
    if fault.action == ServerAction::Kill {
        // Whether the keys held survive the crash.
        let persistent = fault.servers.iter().all(|&at| {
            servers[at].lock().unwrap_or_else(|poisoned| poisoned.into_inner()).keeps_data()
        });
        value["persistent"] = json!(persistent);
    }
    if fault.action == ServerAction::ClockJump {
        value["jump_ms"] = json!(fault.jump_ms);
    }
    if fault.action == ServerAction::ClockDrift {
        value["gain_ms"] = json!(fault.jump_ms);
        value["rate"] = json!(f64::from(fault.pace_percent()) / 100.0);
    }
    if let Some(sessions) = sessions {
        value["sessions"] = json!(sessions);
    }
    recorder.lock().expect("the recorder is never poisoned").record_nemesis(f, value);
}

/// Moves the struck servers' clocks on, step by step, until the fault's
/// end: the gain grows in proportion to the time gone.
async fn drift(
    fault: &ServerFault,
    servers: &[SharedServer],
    start: Instant,
) -> Result<(), RealError> {
    let length = (fault.end - fault.start).as_secs_f64().max(1e-3);
    let mut next = start + fault.start + DRIFT_STEP;
    while next < start + fault.end {
        tokio::time::sleep_until(next).await;
        // The gain is that of the time gone now, not at the step's planned
        // moment: a step that runs late (a loaded machine) catches up at
        // once instead of leaving the clock behind.
        let gone = Instant::now().saturating_duration_since(start + fault.start).as_secs_f64();
        let offset = (fault.jump_ms as f64 * gone.min(length) / length).round() as i64;
        for &at in &fault.servers {
            let server = servers[at].clone();
            let set = tokio::task::spawn_blocking(move || {
                server.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).set_clock(offset)
            })
            .await;
            set.unwrap_or_else(|error| {
                Err(RealError::Server {
                    what: "nemesis",
                    reason: format!("the drift's task failed: {error}"),
                })
            })?;
        }
        next += DRIFT_STEP;
    }
    Ok(())
}

/// Does `fault`'s start or stop to one server, off the runtime's thread.
async fn strike(
    server: SharedServer,
    fault: &ServerFault,
    starting: bool,
) -> Result<(), RealError> {
    let (action, jump_ms) = (fault.action, i64::try_from(fault.jump_ms).unwrap_or(i64::MAX));
    let done = tokio::task::spawn_blocking(move || {
        let mut server = server.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match (action, starting) {
            (ServerAction::Pause, true) => server.pause(),
            (ServerAction::Pause, false) => server.resume(),
            (ServerAction::Kill, true) => {
                server.crash();
                Ok(())
            }
            (ServerAction::Kill, false) => server.restart(),
            (ServerAction::ConnKill, _) => Ok(()),
            (ServerAction::ClockJump, true) => server.set_clock(jump_ms),
            (ServerAction::ClockJump | ServerAction::ClockDrift, false) => server.set_clock(0),
            // A drift starts from real time; `drift` moves it on.
            (ServerAction::ClockDrift, true) => server.set_clock(0),
        }
    })
    .await;
    done.unwrap_or_else(|error| {
        Err(RealError::Server {
            what: "nemesis",
            reason: format!("the fault's task failed: {error}"),
        })
    })
}

/// Where the conn-kill fault ends sessions: a SQL server's URL, and whether
/// it is MySQL/MariaDB.
pub type Sessions<'a> = Option<(&'a str, bool)>;

/// Carries out `faults` against `servers` (named `names` in the history),
/// and conn-kill against `sessions`, from `start`. Each fault is aimed: it
/// waits, within its slack, until one of `holders` is in the middle of a
/// long hold (a clock jump, a crash or a killed session then breaks a lock
/// that is still being worked under), or, for a drift, holds a lock whose
/// lease the drift runs out before the holder's work is done, and is moved
/// on by as long as it waited. A server that cannot be resumed or restarted
/// ends the test with an error: the history would no longer say what
/// happened.
pub async fn run(
    faults: &[ServerFault],
    servers: &[SharedServer],
    names: &[String],
    sessions: Sessions<'_>,
    recorder: &SharedRecorder,
    start: Instant,
    holders: &Holders,
) -> Result<(), RealError> {
    for fault in faults {
        tokio::time::sleep_until(start + fault.start).await;
        let waited = holders.aim(fault.aim(), 0, fault.slack).await.waited;
        let fault =
            &ServerFault { start: fault.start + waited, end: fault.end + waited, ..fault.clone() };
        let mut killed = None;
        if fault.action == ServerAction::ConnKill {
            if let Some((url, mysql)) = sessions {
                killed = Some(super::sql::kill_lock_sessions(url, mysql).await?);
            }
        }
        for &at in &fault.servers {
            strike(servers[at].clone(), fault, true).await?;
        }
        record(recorder, fault, names, Function::Start, killed, servers);
        if fault.action == ServerAction::ClockDrift {
            drift(fault, servers, start).await?;
        }
        tokio::time::sleep_until(start + fault.end).await;
        for &at in &fault.servers {
            strike(servers[at].clone(), fault, false).await?;
        }
        record(recorder, fault, names, Function::Stop, None, servers);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lockcheck_workloads::{Recorder, Stall};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_server_fault_waits_within_its_slack_for_a_holder_with_a_long_hold_ahead() {
        // conn-kill against no server: nothing is struck, only recorded.
        let fault = |start_ms, slack_ms| ServerFault {
            start: Duration::from_millis(start_ms),
            end: Duration::from_millis(start_ms + 100),
            action: ServerAction::ConnKill,
            servers: Vec::new(),
            jump_ms: 0,
            slack: Duration::from_millis(slack_ms),
        };
        let stalls: Vec<Stall> = (0..2).map(|_| Stall::default()).collect();
        // Holds of up to 400 ms: a long one has 300 ms ahead.
        let holders =
            Holders::new(&stalls, Duration::from_millis(400), Duration::from_millis(1000));
        let recorder = Recorder::new().shared();
        let start = Instant::now();
        // Client 1 holds from 130 ms with 350 ms of work ahead; before that,
        // client 0 holds with 100 ms ahead, which is not a long hold.
        let grants = async {
            stalls[0].set_holding(true);
            stalls[0].holds_until(start + Duration::from_millis(100));
            tokio::time::sleep_until(start + Duration::from_millis(130)).await;
            stalls[1].set_holding(true);
            stalls[1].holds_until(start + Duration::from_millis(480));
        };
        // Due at 50 ms: waits for client 1's grant. Due at 1 s with 40 ms
        // of slack and nobody in a long hold: strikes 40 ms late.
        let faults = [fault(50, 200), fault(1_000, 40)];
        let (ran, ()) =
            tokio::join!(run(&faults, &[], &[], None, &recorder, start, &holders), grants);
        ran.expect("no server to fail");
        let times: Vec<u64> = recorder
            .lock()
            .unwrap()
            .events()
            .iter()
            .map(|event| event.time_ns / 1_000_000)
            .collect();
        assert_eq!(times.len(), 4, "{times:?}");
        assert!((130..=133).contains(&times[0]), "struck at the long hold: {times:?}");
        assert!((230..=233).contains(&times[1]), "moved on as a whole: {times:?}");
        assert_eq!(&times[2..], [1_040, 1_140], "{times:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_drift_waits_for_a_holder_whose_lease_it_runs_out_before_the_work_ends() {
        let ms = Duration::from_millis;
        // Against no server: nothing is struck, only recorded. It gains
        // 600 ms over 200: four times fast.
        let drift = ServerFault {
            start: ms(10),
            end: ms(210),
            action: ServerAction::ClockDrift,
            servers: Vec::new(),
            jump_ms: 600,
            slack: ms(200),
        };
        assert_eq!(drift.pace_percent(), 400);
        let stalls: Vec<Stall> = (0..2).map(|_| Stall::default()).collect();
        let holders = Holders::new(&stalls, ms(333), ms(500));
        let recorder = Recorder::new().shared();
        let start = Instant::now();
        // Client 0's lease runs out 125 ms into the drift, but its work
        // ends at 150 ms: the next holder has no time. Client 1, granted
        // at 60 ms, works 300 ms: its lease runs out at 185 ms.
        let grants = async {
            stalls[0].set_holding(true);
            stalls[0].holds_until(start + ms(150));
            tokio::time::sleep_until(start + ms(60)).await;
            stalls[1].set_holding(true);
            stalls[1].holds_until(start + ms(360));
        };
        let faults = [drift];
        let (ran, ()) =
            tokio::join!(run(&faults, &[], &[], None, &recorder, start, &holders), grants);
        ran.expect("no server to fail");
        let recorder = recorder.lock().unwrap();
        let events = recorder.events();
        let times: Vec<u64> = events.iter().map(|event| event.time_ns / 1_000_000).collect();
        assert!((60..=63).contains(&times[0]), "struck at client 1's grant: {times:?}");
        assert!((260..=263).contains(&times[1]), "moved on as a whole: {times:?}");
        let value: serde_json::Value =
            serde_json::from_str(events[0].value.as_ref().expect("a value").get()).unwrap();
        assert_eq!(value["rate"], 4.0, "{value}");
    }
}
