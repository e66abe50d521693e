//! A device child's gate: the pipe through which the worker lets the judge past its waiting
//! points (`standby`, `park`, `timing_gate`), whether the child is let through (its deadline
//! runs only then), and the events its supervision reports as they are read.

use crate::child::protocol::Stage;
use std::os::fd::OwnedFd;
use tokio::sync::watch;

/// What the child's supervision reports as it happens (for a gated child).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildEvent {
    /// A stage began (`stage` line on fd 3).
    Stage(Stage),
    /// The judge parked at its gate between two device steps (`park` line on fd 3), its
    /// runner stopped: it does nothing on the device until the gate opens.
    Park,
    /// The judge's footprint: the peak bytes its tensors will take on the device.
    Footprint(u64),
    /// The result (or `prepared`) line arrived: the child has nothing left to do but exit.
    Result,
}

/// The worker's end of a child's gate: each line lets the child past one of its waiting
/// points (`standby`, `park`, `timing_gate`); the first may carry data for the child.
pub struct Gate {
    tx: OwnedFd,
    /// Whether the child is let through (`true`) or blocked at its gate: the child's deadline
    /// runs only while it is let through, so time spent waiting for the device is never
    /// charged to the task.
    running: watch::Sender<bool>,
}

impl Gate {
    /// Notes that the child is blocked at its gate: its clock stops until the next opening.
    pub(crate) fn note_waiting(&self) {
        self.running.send_replace(false);
    }

    /// Lets the child past its next waiting point, with nothing to say.
    pub(crate) fn open(&self) -> std::io::Result<()> {
        self.open_with(&serde_json::json!({}))
    }

    /// Opens the gate with a JSON object for the harness (a pipe takes a line this short
    /// without blocking).
    pub fn open_with(&self, message: &serde_json::Value) -> std::io::Result<()> {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let mut rest = &line[..];
        while !rest.is_empty() {
            let n = nix::unistd::write(&self.tx, rest)?;
            rest = &rest[n..];
        }
        self.running.send_replace(true);
        Ok(())
    }
}

/// The child's end of a gate, with the feed of its events.
pub struct GateChild {
    pub(super) rx: OwnedFd,
    pub(super) events: Box<dyn Fn(ChildEvent) + Send + Sync>,
    pub(super) running: watch::Receiver<bool>,
}

#[cfg(test)]
impl GateChild {
    /// The end the child reads (fd 4 once placed).
    pub(crate) fn read_end(&self) -> &OwnedFd {
        &self.rx
    }
}

/// A gate for one child; `events` is called with each [`ChildEvent`] as it is read.
pub fn gate(
    events: impl Fn(ChildEvent) + Send + Sync + 'static,
) -> std::io::Result<(Gate, GateChild)> {
    let (rx, tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (running_tx, running_rx) = watch::channel(false);
    Ok((
        Gate {
            tx,
            running: running_tx,
        },
        GateChild {
            rx,
            events: Box::new(events),
            running: running_rx,
        },
    ))
}
