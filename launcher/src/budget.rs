//! [`Budget`]: when a command's rounds must stop. Every round loop (validate's and vet's
//! pairs, the rail waves) runs its steps until the budget's flag is set, and asks
//! [`Budget::may_start`] before each round; the flag is Ctrl-C's ([`runner::INTERRUPTED`])
//! for a command without a time budget, and vet's own for one with `--budget`, set by a
//! watcher thread at the deadline or on Ctrl-C ([`Budget::until`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::runner;

/// When rounds stop: a flag every running step watches, and perhaps a deadline.
#[derive(Debug)]
pub struct Budget {
    flag: &'static AtomicBool,
    deadline: Option<Instant>,
    /// How long the last round took: a round that would end past the deadline by that
    /// measure is not started.
    last_round: Mutex<Option<Duration>>,
}

impl Budget {
    /// No deadline: rounds stop on Ctrl-C only.
    pub fn unlimited() -> Budget {
        Budget {
            flag: &runner::INTERRUPTED,
            deadline: None,
            last_round: Mutex::new(None),
        }
    }

    /// Rounds stop at `deadline` or on Ctrl-C, whichever comes first: a thread sets `flag`
    /// then (and ends when it has, or when the process does). `flag` must be a flag of the
    /// caller's own, never [`runner::INTERRUPTED`], so that the calls after the rounds
    /// (scontrol) still run once the budget is spent.
    pub fn until(deadline: Instant, flag: &'static AtomicBool) -> Budget {
        flag.store(false, Ordering::SeqCst);
        std::thread::spawn(move || loop {
            if Instant::now() >= deadline || runner::INTERRUPTED.load(Ordering::SeqCst) {
                flag.store(true, Ordering::SeqCst);
                return;
            }
            if flag.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        });
        Budget {
            flag,
            deadline: Some(deadline),
            last_round: Mutex::new(None),
        }
    }

    /// The flag running steps watch (the runner stops them when it is set).
    pub fn flag(&self) -> &'static AtomicBool {
        self.flag
    }

    /// Whether rounds must stop now (the deadline passed, Ctrl-C, or a round not started).
    pub fn stopped(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Whether the deadline has passed (as opposed to Ctrl-C).
    pub fn spent(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// What is left of it; `None` without a deadline.
    pub fn left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// A step's time limit within the budget: `limit`, or what is left when that is less.
    pub fn limit(&self, limit: Duration) -> Duration {
        self.left().map_or(limit, |left| limit.min(left))
    }

    /// Before a round: whether to start it. Not when the flag is set, nor when the last
    /// round took longer than what is left (the flag is set then, so that every loop
    /// stops alike).
    pub fn may_start(&self) -> bool {
        if self.stopped() {
            return false;
        }
        let last = *self.last_round.lock().unwrap_or_else(|p| p.into_inner());
        match (self.left(), last) {
            (Some(left), Some(took)) if took > left => {
                self.flag.store(true, Ordering::SeqCst);
                false
            }
            _ => true,
        }
    }

    /// After a round: how long it took.
    pub fn round_took(&self, took: Duration) {
        *self.last_round.lock().unwrap_or_else(|p| p.into_inner()) = Some(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_longer_than_what_is_left_is_not_started_and_stops_the_rest() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let budget = Budget::until(Instant::now() + Duration::from_secs(30), &FLAG);
        assert!(budget.may_start());
        budget.round_took(Duration::from_secs(1));
        assert!(budget.may_start());
        budget.round_took(Duration::from_secs(60));
        assert!(!budget.may_start());
        assert!(budget.stopped());
        assert!(!budget.spent(), "stopped early, not spent");
        assert!(budget.limit(Duration::from_secs(600)) <= Duration::from_secs(30));
    }

    #[test]
    fn the_watcher_sets_the_flag_at_the_deadline() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let budget = Budget::until(Instant::now() + Duration::from_millis(100), &FLAG);
        let start = Instant::now();
        while !budget.stopped() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(budget.stopped());
        assert!(budget.spent());
        assert!(!budget.may_start());
    }

    #[test]
    fn without_a_deadline_only_ctrl_c_stops() {
        let budget = Budget::unlimited();
        budget.round_took(Duration::from_secs(3600));
        assert_eq!(budget.left(), None);
        assert_eq!(budget.limit(Duration::from_secs(5)), Duration::from_secs(5));
    }
}
