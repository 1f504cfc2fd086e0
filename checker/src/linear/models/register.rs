//! Registers: `register` (read, write) and `cas-register` (read, write,
//! compare-and-set), over integer values; a register starts out empty.

use crate::linear::model::Model;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegisterInput {
    Read,
    Write(i64),
    /// Set to the second value if the register holds the first.
    Cas(i64, i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegisterOutput {
    /// What a read returned; `None`: the register was empty.
    Read(Option<i64>),
    Written,
    /// Whether a compare-and-set took effect.
    Cas(bool),
}

/// A read/write register. A compare-and-set operation is illegal in it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Register;

/// A register with compare-and-set, as etcd is used in Jepsen's etcd test.
#[derive(Debug, Clone, Copy, Default)]
pub struct CasRegister;

fn step(
    state: &Option<i64>,
    input: &RegisterInput,
    output: Option<&RegisterOutput>,
) -> Option<Option<i64>> {
    match (input, output) {
        (RegisterInput::Read, None) => Some(*state),
        (RegisterInput::Read, Some(RegisterOutput::Read(value))) => {
            (value == state).then_some(*state)
        }
        (RegisterInput::Write(value), None | Some(RegisterOutput::Written)) => Some(Some(*value)),
        (RegisterInput::Cas(old, new), None) => {
            Some(if *state == Some(*old) { Some(*new) } else { *state })
        }
        (RegisterInput::Cas(old, new), Some(RegisterOutput::Cas(true))) => {
            (*state == Some(*old)).then_some(Some(*new))
        }
        (RegisterInput::Cas(old, _), Some(RegisterOutput::Cas(false))) => {
            (*state != Some(*old)).then_some(*state)
        }
        _ => None,
    }
}

fn describe(input: &RegisterInput, output: Option<&RegisterOutput>) -> String {
    let value = |value: &Option<i64>| value.map_or("nil".to_string(), |value| value.to_string());
    match (input, output) {
        (RegisterInput::Read, Some(RegisterOutput::Read(read))) => {
            format!("read -> {}", value(read))
        }
        (RegisterInput::Read, _) => "read -> ?".to_string(),
        (RegisterInput::Write(written), _) => format!("write {written}"),
        (RegisterInput::Cas(old, new), Some(RegisterOutput::Cas(done))) => {
            format!("cas {old} -> {new}: {}", if *done { "ok" } else { "failed" })
        }
        (RegisterInput::Cas(old, new), _) => format!("cas {old} -> {new}: ?"),
    }
}

/// The two registers differ in their name and whether compare-and-set is legal.
macro_rules! register_model {
    ($model:ty, $name:literal, cas: $cas:literal) => {
        impl Model for $model {
            type State = Option<i64>;
            type Input = RegisterInput;
            type Output = RegisterOutput;

            fn name(&self) -> &'static str {
                $name
            }

            fn init(&self) -> Option<i64> {
                None
            }

            fn step(
                &self,
                state: &Option<i64>,
                input: &RegisterInput,
                output: Option<&RegisterOutput>,
            ) -> Option<Option<i64>> {
                match input {
                    RegisterInput::Cas(..) if !$cas => None,
                    _ => step(state, input, output),
                }
            }

            fn read_only(&self, input: &RegisterInput, output: Option<&RegisterOutput>) -> bool {
                matches!(
                    (input, output),
                    (RegisterInput::Read, _)
                        | (RegisterInput::Cas(..), Some(RegisterOutput::Cas(false)))
                )
            }

            fn describe_operation(
                &self,
                input: &RegisterInput,
                output: Option<&RegisterOutput>,
            ) -> String {
                describe(input, output)
            }

            fn describe_state(&self, state: &Option<i64>) -> String {
                state.map_or("empty".to_string(), |value| format!("holds {value}"))
            }
        }
    };
}

register_model!(Register, "register", cas: false);
register_model!(CasRegister, "cas-register", cas: true);
