//! The keyed turns running over every log ([`Turns`]): a key claimed by
//! the attempt that runs it, and its outcome announced to the repeats that
//! wait on it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::watch;

use crate::server::errors::ApiError;

/// How a keyed turn ended: the answer's JSON, or the error answered.
pub(crate) type Outcome = Result<Value, ApiError>;

/// Where a running turn's outcome is announced.
type OutcomeSender = watch::Sender<Option<Outcome>>;

/// The turns the server runs, over every log: the keyed ones by log and
/// key (a repeat waits on them, whichever log state it finds: the map
/// outlives an evicted one), and the signal that cuts them all at shutdown.
pub(crate) struct Turns {
    keyed: Mutex<HashMap<(PathBuf, String), OutcomeSender>>,
    cut: watch::Sender<bool>,
}

impl Default for Turns {
    fn default() -> Turns {
        Turns {
            keyed: Mutex::default(),
            cut: watch::channel(false).0,
        }
    }
}

impl Turns {
    /// Claims `key` on `log` for a turn about to run, unless one runs: then
    /// what to wait on. `decide` runs while the claim is held (it looks the
    /// key up in the state store), and says whether to keep it. The map of
    /// every log's turns is locked only to look and to claim, never while
    /// `decide` runs: one log's slow store holds up no other log's turns.
    /// A repeat that came while `decide` ran and found the claim let go
    /// learns nothing from it ([`Claimed::Running`] closes without an
    /// outcome) and asks again.
    pub(crate) fn claim<T>(
        self: &Arc<Self>,
        log: &std::path::Path,
        key: &str,
        decide: impl FnOnce() -> Result<(T, bool), crate::Error>,
    ) -> Result<Claimed<T>, crate::Error> {
        let k = (log.to_path_buf(), key.to_string());
        {
            let mut keyed = self.keyed.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(tx) = keyed.get(&k) {
                return Ok(Claimed::Running(tx.subscribe()));
            }
            keyed.insert(k.clone(), watch::channel(None).0);
        }
        // Let go, without an outcome, unless kept.
        let claim = Claim {
            turns: self.clone(),
            key: Some(k),
        };
        let (t, keep) = decide()?;
        if !keep {
            return Ok(Claimed::Not(t));
        }
        Ok(Claimed::Mine(t, claim))
    }

    /// Cuts every running turn: each closes itself with what it has.
    pub(crate) fn cut_all(&self) {
        self.cut.send_replace(true);
    }

    /// Resolves once the turns are to be cut.
    pub(crate) fn cut_signal(&self) -> watch::Receiver<bool> {
        self.cut.subscribe()
    }
}

/// What [`Turns::claim`] found.
pub(crate) enum Claimed<T> {
    /// The key is this caller's until its claim is released.
    Mine(T, Claim),
    /// Another attempt with the key runs: wait for it.
    Running(watch::Receiver<Option<Outcome>>),
    /// Not claimed (the store had the answer).
    Not(T),
}

/// A key claimed for a running turn. Released with the turn's outcome;
/// dropped unreleased (the task panicked), its waiters learn the attempt
/// stopped.
pub(crate) struct Claim {
    turns: Arc<Turns>,
    key: Option<(PathBuf, String)>,
}

impl Claim {
    /// Wakes whoever waits on the key with `outcome`, and frees the key.
    pub(crate) fn release(mut self, outcome: &Outcome) {
        self.finish(Some(outcome.clone()));
    }

    fn finish(&mut self, outcome: Option<Outcome>) {
        if let Some(k) = self.key.take() {
            let tx = {
                let mut keyed = self.turns.keyed.lock().unwrap_or_else(|p| p.into_inner());
                keyed.remove(&k)
            };
            if let (Some(tx), Some(o)) = (tx, outcome) {
                tx.send_replace(Some(o));
            }
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.finish(None);
    }
}
