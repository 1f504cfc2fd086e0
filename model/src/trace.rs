//! A path the checker found, replayed step by step: the step list to
//! print and the lockcheck history that `analyze` reads.

use serde_json::{json, Value};

use crate::world::{Action, Entry, LockModel, State, Trace};

/// One step of a counterexample, as printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub tick: u8,
    pub action: String,
    /// The commands it sent and their replies, then the events it recorded.
    pub lines: Vec<String>,
}

/// Replays `actions` from the model's first state: the steps and the
/// history's JSON lines.
pub fn replay_path(model: &LockModel, actions: &[Action]) -> (Vec<Step>, Vec<String>) {
    use stateright::Model;
    let mut state: State = model.init_states().remove(0);
    let mut steps = Vec::new();
    let mut history = Vec::new();
    let (mut tick, mut in_tick) = (0u8, 0u64);
    for &action in actions {
        let mut trace = Trace::default();
        let at = state.tick();
        state = model.apply(&state, action, Some(&mut trace)).expect("a path's actions apply");
        let mut lines = Vec::new();
        for entry in trace.entries {
            let event = match entry {
                Entry::Command(command) => {
                    lines.push(command);
                    continue;
                }
                Entry::Event(event) => event,
            };
            if event.tick != tick {
                (tick, in_tick) = (event.tick, 0);
            }
            in_tick += 1;
            let time_ns = (u64::from(event.tick) * model.setup.tick_ms + in_tick) * 1_000_000;
            let mut line = json!({
                "index": history.len(),
                "time": time_ns,
                "process": event.process.map_or(json!("nemesis"), Value::from),
                "type": event.kind,
                "f": event.f,
                "key": event.key,
                "value": event.value,
            });
            if let Some(error) = &event.error {
                line["error"] = json!(error);
            }
            lines.push(format!("#{} {}", history.len(), describe(&line)));
            history.push(line.to_string());
        }
        steps.push(Step { tick: at, action: action_name(action), lines });
    }
    (steps, history)
}

fn describe(line: &Value) -> String {
    let process = match &line["process"] {
        Value::String(name) => name.clone(),
        other => other.to_string(),
    };
    let mut text = format!(
        "{process} {} {} {}",
        line["type"].as_str().unwrap_or(""),
        line["f"].as_str().unwrap_or(""),
        line["key"]
    );
    if !line["value"].is_null() {
        text.push_str(&format!(" {}", line["value"]));
    }
    if let Some(error) = line["error"].as_str() {
        text.push_str(&format!(" ({error})"));
    }
    text
}

fn action_name(action: Action) -> String {
    match action {
        Action::Step(client) => format!("client {client} steps"),
        Action::LoseReply(client) => format!("client {client} steps; the reply is lost"),
        Action::LoseRequest(client) => format!("client {client} steps; the command is lost"),
        Action::CrashClient(client) => format!("client {client} crashes between commands"),
        Action::Pause(client) => format!("client {client} pauses"),
        Action::Tick => "a tick passes".into(),
        Action::ClockJump(server) => {
            format!("lock server {server}'s clock jumps ahead by one lease")
        }
        Action::CrashServer(server) => format!("lock server {server} crashes and restarts"),
        Action::Skew(client) => format!("client {client}'s clock jumps ahead by one lease"),
    }
}
