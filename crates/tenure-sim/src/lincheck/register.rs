//! A read/write/CAS register ([`RegisterModel`]), a second model to check the checker
//! on.

use super::Model;

/// A register operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegisterInput {
    /// Read the value.
    Read,
    /// Write a value.
    Write(i64),
    /// Compare-and-set.
    Cas {
        /// Expected value.
        expect: i64,
        /// New value.
        new: i64,
    },
}

/// A register answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOutput {
    /// A read's value.
    Value(i64),
    /// A write, or a successful CAS.
    Ok,
    /// A CAS whose expectation did not hold.
    CasFailed,
}

/// A single read/write/CAS register.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RegisterModel(pub i64);

impl Model for RegisterModel {
    type Input = RegisterInput;
    type Output = RegisterOutput;

    fn step(&self, input: &RegisterInput, output: &RegisterOutput) -> Option<Self> {
        match (input, output) {
            (RegisterInput::Read, RegisterOutput::Value(v)) => (*v == self.0).then_some(*self),
            (RegisterInput::Write(v), RegisterOutput::Ok) => Some(RegisterModel(*v)),
            (RegisterInput::Cas { expect, new }, RegisterOutput::Ok) => {
                (*expect == self.0).then_some(RegisterModel(*new))
            }
            (RegisterInput::Cas { expect, .. }, RegisterOutput::CasFailed) => {
                (*expect != self.0).then_some(*self)
            }
            _ => None,
        }
    }

    fn step_unknown(&self, input: &RegisterInput) -> Vec<Self> {
        match input {
            RegisterInput::Read => vec![],
            RegisterInput::Write(v) => vec![RegisterModel(*v)],
            RegisterInput::Cas { expect, new } if *expect == self.0 => vec![RegisterModel(*new)],
            RegisterInput::Cas { .. } => vec![],
        }
    }
}
