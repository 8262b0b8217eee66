//! Admission control for memory: the work a request will hold memory for —
//! its body, the replay it brings up to date, the delta it prepares — is
//! counted against one budget for the whole server (`--max-memory`) before
//! it starts. Past the budget a request is answered 503 with `retry-after`
//! at once, instead of every request slowing the machine into swap or the
//! process into the OOM killer. A request estimated above half the budget
//! reserves half (so it can still run, beside little else).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::server::errors::ApiError;

/// The budget's grain.
const UNIT: u64 = 64 << 10;

/// Bytes a request body costs while it is parsed, per byte of body (the
/// body, its parsed records, the lines rendered, the answer).
pub(crate) const BODY_FACTOR: u64 = 16;

/// Bytes bringing a replay up to date costs, per byte of log read (the
/// records' index and the rendered messages kept, and the chunks in flight).
pub(crate) const REPLAY_FACTOR: u64 = 3;

/// Bytes a session delta costs, per byte of log it may cover (the replay
/// of that span, the messages rendered, the answer's JSON).
pub(crate) const PREPARE_FACTOR: u64 = 4;

/// The server's memory budget.
pub(crate) struct Budget {
    units: u32,
    free: Arc<Semaphore>,
}

/// Memory reserved for a request's work; given back when dropped.
pub(crate) struct Reserved {
    _permit: Option<OwnedSemaphorePermit>,
}

impl Budget {
    /// A budget of `bytes`.
    pub(crate) fn new(bytes: u64) -> Budget {
        let units = u32::try_from(bytes.div_ceil(UNIT))
            .unwrap_or(u32::MAX >> 4)
            .max(1);
        Budget {
            units,
            free: Arc::new(Semaphore::new(units as usize)),
        }
    }

    /// Reserves `bytes` for `what`, or answers 503 with `retry-after` when
    /// the budget is spent. A reservation larger than half the budget takes
    /// half.
    pub(crate) fn admit(&self, bytes: u64, what: &str) -> Result<Reserved, ApiError> {
        if bytes == 0 {
            return Ok(Reserved { _permit: None });
        }
        let units = u32::try_from(bytes.div_ceil(UNIT))
            .unwrap_or(u32::MAX)
            .min(self.units.div_ceil(2));
        match self.free.clone().try_acquire_many_owned(units) {
            Ok(p) => Ok(Reserved { _permit: Some(p) }),
            Err(_) => {
                tracing::info!(what, bytes, "over the memory budget; answered 503");
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "over_memory_budget",
                    format!(
                        "the server's memory budget (--max-memory) is in use by other \
                         requests; {what} needs about {} MB; retry shortly",
                        bytes.div_ceil(1 << 20)
                    ),
                );
                e.retry_after = Some(Duration::from_secs(1));
                Err(e)
            }
        }
    }

    /// Bytes reserved now.
    pub(crate) fn in_use(&self) -> u64 {
        (self.units as u64 - self.free.available_permits() as u64) * UNIT
    }

    /// The whole budget, in bytes.
    pub(crate) fn total(&self) -> u64 {
        self.units as u64 * UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_past_the_budget_are_refused_until_one_is_given_back() {
        let b = Budget::new(10 * UNIT);
        let a = b.admit(4 * UNIT, "a").unwrap();
        let c = b.admit(5 * UNIT, "c").unwrap();
        assert_eq!(b.in_use(), 9 * UNIT);
        let e = b.admit(2 * UNIT, "d").err().expect("over the budget");
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.retry_after, Some(Duration::from_secs(1)));
        drop(c);
        // Larger than the whole budget: half of it, when that is free.
        let huge = b.admit(100 * UNIT, "huge").unwrap();
        assert_eq!(b.in_use(), 9 * UNIT);
        assert!(b.admit(2 * UNIT, "more").is_err());
        drop(a);
        drop(huge);
        assert_eq!(b.in_use(), 0);
        assert_eq!(b.total(), 10 * UNIT);
    }
}
